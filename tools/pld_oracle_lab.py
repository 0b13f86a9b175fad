"""How much better than prompt lookup a drafter that copies from the context could do on the held-out copy prompts.

    python tools/pld_oracle_lab.py --out results/cpu/labs/pld_oracle_lab.json

Replays tiny-gpu's greedy outputs (fp32, CPU, ``StaticEngine``, as ``tools/pld_ceiling_lab.py`` does) with drafts of
up to k tokens taken from the context (prompt and output so far) three ways, counting tokens per target forward:

- ``prompt_lookup``: the library's drafter (the longest n-gram match, at most 3 tokens, its latest occurrence);
- ``oracle_occurrence``: the same longest n-gram, but whichever of its occurrences the output continues furthest
  (a drafter that always picked the right occurrence);
- ``oracle_any_span``: whichever span of the context the output continues furthest, matched or not (the most any
  drafter that copies from the context could carry).

The oracles read the output ahead, so no drafter reaches them; they bound what choosing among copies can add.
"""
from __future__ import annotations

import json

import torch

from pld_ceiling_lab import greedy_outputs, lab_arguments, replay
from t4lib import models, results


def _agree(draft: list[int], out: list[int]) -> int:
    n = 0
    while n < len(draft) and n < len(out) and draft[n] == out[n]:
        n += 1
    return n


def best_copy(max_ngram: int | None):
    """An oracle drafter for :func:`replay`: the copy the output continues furthest, among the occurrences of the
    longest matched n-gram (up to ``max_ngram`` tokens) or, with ``None``, among all spans of the context."""
    def propose(ctx: list[int], ahead: list[int]) -> list[int]:
        L = len(ctx)
        starts = range(L)
        if max_ngram is not None:
            starts = []
            for n in range(min(max_ngram, L - 1), 0, -1):
                starts = [s + n for s in range(L - n) if ctx[s:s + n] == ctx[L - n:]]
                if starts:
                    break
        return max((ctx[s:s + len(ahead)] for s in starts), key=lambda d: _agree(d, ahead), default=[])
    return propose


def main() -> None:
    a = lab_arguments(__doc__)
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
                                                       "oracle_any_span": tpf(k, propose=best_copy(None))}
                                             for k in (8, 16)}}
        print(kind, json.dumps(sets[kind]["tokens_per_forward"]), flush=True)
    rec = results.lab_record(f"python tools/pld_oracle_lab.py --out {a.out} --prompts {a.prompts} "
                             f"--max-new {a.max_new}")
    rec.update(device="cpu", note=__doc__.split("\n\n", 2)[2].strip(), sets=sets)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
