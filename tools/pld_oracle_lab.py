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

import argparse
import json

import torch

from pld_ceiling_lab import replay
from t4lib import models, results
from t4lib.speculative.bench import greedy_references, load_prompts


def _agree(draft: list[int], out: list[int]) -> int:
    n = 0
    while n < len(draft) and n < len(out) and draft[n] == out[n]:
        n += 1
    return n


def oracle_replay(prompts, refs, k: int, max_ngram: int | None) -> float:
    """Tokens per forward when each step's draft is the best copy: among the occurrences of the longest matched
    n-gram (``max_ngram``), or among all spans of the context (``None``)."""
    forwards = tokens = 0
    for p, r in zip(prompts, refs):
        ctx, i = list(p) + r[:1], 1
        while i < len(r):
            ahead, L = r[i:i + k], len(ctx)
            if max_ngram is None:
                starts = range(L)
            else:
                starts = []
                for n in range(min(max_ngram, L - 1), 0, -1):
                    starts = [s + n for s in range(L - n) if ctx[s:s + n] == ctx[L - n:]]
                    if starts:
                        break
            best = max((_agree(ctx[s:s + k], ahead) for s in starts), default=0)
            step = min(best + 1, len(r) - i)
            ctx += r[i:i + step]
            i, forwards, tokens = i + step, forwards + 1, tokens + step
    return tokens / forwards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--max-new", type=int, default=64)
    a = ap.parse_args()
    model, tok = models.load("tiny-gpu", dtype=torch.float32, device="cpu")
    sets = {}
    for kind, max_new in (("copy", a.max_new), ("copy_long", 4 * a.max_new)):
        prompts = load_prompts(tok, kind, a.prompts)
        refs, _ = greedy_references(model, prompts, max_new, max_len=max(map(len, prompts)) + max_new + 8)
        sets[kind] = {"prompts": len(prompts), "max_new": max_new,
                      "output_tokens_mean": sum(map(len, refs)) / len(refs),
                      "tokens_per_forward": {f"k{k}": {
                          "prompt_lookup": replay(prompts, refs, k, 3, 1)["tokens_per_forward"],
                          "oracle_occurrence": oracle_replay(prompts, refs, k, 3),
                          "oracle_any_span": oracle_replay(prompts, refs, k, None)} for k in (8, 16)}}
        print(kind, json.dumps(sets[kind]["tokens_per_forward"]), flush=True)
    rec = results.lab_record(f"python tools/pld_oracle_lab.py --out {a.out} --prompts {a.prompts} "
                             f"--max-new {a.max_new}")
    rec.update(device="cpu", note=__doc__.split("\n\n", 2)[2].strip(), sets=sets)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
