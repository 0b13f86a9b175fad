"""How much better than prompt lookup a drafter that copies from the context could do on the held-out copy prompts.

    python labs/pld/pld_oracle_lab.py --out labs/pld/pld_oracle_lab.json

Replays tiny-gpu's greedy outputs (fp32, CPU, ``StaticEngine``, as ``labs/pld/pld_ceiling_lab.py`` does) with drafts of
up to k tokens taken from the context (prompt and output so far) three ways, counting tokens per target forward:

- ``prompt_lookup``: the library's drafter (the longest n-gram match, at most 3 tokens, its latest occurrence);
- ``oracle_occurrence``: the same longest n-gram, but whichever of its occurrences the output continues furthest
  (a drafter that always picked the right occurrence);
- ``oracle_any_span``: whichever span of the context the output continues furthest, matched or not (the most any
  drafter that copies from the context could carry);
- ``tree_ngram``: up to ``--candidates`` distinct copies, those after every occurrence of the matched n-grams
  (3 tokens down to 1, latest first), all verified at once, as a tree verify would (one target forward over all
  candidates, keeping the longest that holds);
- ``tree_resume``: the first 4 of those plus resume points: for each of the last 8 context positions, the copy
  that continues where the n-gram ending there was copied from, skipping 0..11 tokens (an edit replaced some
  tokens and the output goes back to copying), up to ``--candidates`` in all.

The oracles read the output ahead, so no drafter reaches them; they bound what choosing among copies can add.
The tree drafters read nothing ahead: only which candidate the target keeps, which a tree verify reports.
"""
from __future__ import annotations

import json

import torch

from pld_ceiling_lab import greedy_outputs, lab_arguments, replay
from t4lib import models
from t4lib.core import results


def _agree(draft: list[int], out: list[int]) -> int:
    n = 0
    while n < len(draft) and n < len(out) and draft[n] == out[n]:
        n += 1
    return n


def _after(ctx: list[int], end: int, n: int) -> list[int]:
    """The positions right after each earlier occurrence of ``ctx[end - n:end]``, latest first."""
    return [s + n for s in range(end - n - 1, -1, -1) if ctx[s:s + n] == ctx[end - n:end]]


def best_copy(max_ngram: int | None):
    """An oracle drafter for :func:`replay`: the copy the output continues furthest, among the occurrences of the
    longest matched n-gram (up to ``max_ngram`` tokens) or, with ``None``, among all spans of the context."""
    def propose(ctx: list[int], ahead: list[int]) -> list[int]:
        L = len(ctx)
        starts = range(L)
        if max_ngram is not None:
            starts = next((p for p in (_after(ctx, L, n) for n in range(min(max_ngram, L - 1), 0, -1)) if p), [])
        return max((ctx[s:s + len(ahead)] for s in starts), key=lambda d: _agree(d, ahead), default=[])
    return propose


def _add(out: list, seen: set, copy: list[int]) -> None:
    if copy and tuple(copy) not in seen:
        seen.add(tuple(copy))
        out.append(copy)


def _ngram_copies(ctx: list[int], k: int, limit: int, seen: set, out: list, max_ngram: int = 3) -> None:
    """Append to ``out`` the distinct k-token copies after each occurrence of ctx's last n tokens, n = max_ngram
    down to 1, latest occurrence first, until ``out`` holds ``limit``."""
    L = len(ctx)
    for n in range(min(max_ngram, L - 1), 0, -1):
        for p in _after(ctx, L, n):
            if len(out) >= limit:
                return
            _add(out, seen, ctx[p:p + k])


def _resume_copies(ctx: list[int], k: int, limit: int, seen: set, out: list, back: int = 8, skip: int = 12) -> None:
    """Append copies that resume copying after an edit: for the context cut j = 2..back + 1 tokens short, where
    its last 3 (else 2) tokens were copied from, then 0..skip - 1 tokens further on."""
    L = len(ctx)
    for j in range(2, back + 2):
        e = L - j
        src = next((p for n in (3, 2) if e >= n for p in _after(ctx, e, n)), None)
        if src is None:
            continue
        for d in range(skip):
            _add(out, seen, ctx[src + d:src + d + k])
        if len(out) >= limit:
            return


def tree(limit: int, resume: bool):
    """A candidate-tree drafter for :func:`replay`: the candidate (of at most ``limit``) the output continues
    furthest, which is what verifying all of them in one forward keeps."""
    def propose(ctx: list[int], ahead: list[int]) -> list[int]:
        cands, seen = [], set()
        _ngram_copies(ctx, len(ahead), 4 if resume else limit, seen, cands)
        if resume:
            _resume_copies(ctx, len(ahead), limit, seen, cands)
        return max(cands[:limit], key=lambda d: _agree(d, ahead), default=[])
    return propose


def main() -> None:
    a = lab_arguments(__doc__, candidates=16)
    model, tok = models.load("tiny-gpu", dtype=torch.float32, device="cpu")
    budgets = {"copy": a.max_new, "copy_long": 4 * a.max_new}
    sets = {}
    for kind, (prompts, refs) in greedy_outputs(model, tok, budgets, a.prompts).items():
        def tpf(k, propose=None):
            return replay(prompts, refs, k, propose=propose)["tokens_per_forward"]
        sets[kind] = {"prompts": len(prompts), "max_new": budgets[kind],
                      "output_tokens_mean": sum(map(len, refs)) / len(refs),
                      "tokens_per_forward": {f"k{k}": {"prompt_lookup": tpf(k),
                                                       "oracle_occurrence": tpf(k, propose=best_copy(3)),
                                                       "oracle_any_span": tpf(k, propose=best_copy(None)),
                                                       "tree_ngram": tpf(k, propose=tree(a.candidates, False)),
                                                       "tree_resume": tpf(k, propose=tree(a.candidates, True))}
                                             for k in (8, 16)}}
        print(kind, json.dumps(sets[kind]["tokens_per_forward"]), flush=True)
    rec = results.lab_record(f"python labs/pld/pld_oracle_lab.py --out {a.out} --prompts {a.prompts} "
                             f"--max-new {a.max_new} --candidates {a.candidates}")
    rec.update(device="cpu", note=__doc__.split("\n\n", 2)[2].strip(), candidates=a.candidates, sets=sets)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
