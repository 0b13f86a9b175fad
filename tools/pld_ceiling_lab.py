"""How many tokens prompt lookup can carry per target forward on the held-out copy prompts, whatever the engine.

    python tools/pld_ceiling_lab.py --out results/cpu/labs/pld_ceiling_lab.json

Greedy decoding is deterministic, so the tokens a verify accepts follow from the greedy output alone: a draft is
kept up to its first token that differs from the output. This lab decodes tiny-gpu greedily (fp32, CPU,
``StaticEngine``, up to EOS or ``--max-new`` tokens) on the first ``--prompts`` prompts of each held-out set, then
replays prompt lookup over each output with a fixed draft length k and n-gram sizes (max, min), counting target
forwards (one per verify or plain step), tokens per forward and the share of steps where the drafter had
nothing to propose. No timing: a fixed k that always verifies k + 1 positions is the most a drafter of this kind
can carry per forward; the engine's adaptive k trades some of it for cheaper verifies.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess

import torch

from t4lib import models
from t4lib.speculative.bench import greedy_references, load_prompts
from t4lib.speculative.drafters import PromptLookupDrafter


def replay(prompts, refs, k: int, max_ngram: int, min_ngram: int) -> dict:
    """Target forwards and drafts when every step drafts (up to) k tokens by prompt lookup over ``refs``."""
    drafter = PromptLookupDrafter(max_ngram=max_ngram, min_ngram=min_ngram, eos_token_id=0)
    forwards = tokens = no_draft = 0
    for p, r in zip(prompts, refs):
        ctx, i = list(p) + r[:1], 1   # the prefill chose r[0]
        while i < len(r):
            draft = drafter.lookup(ctx, min(k, len(r) - i))
            n = 0
            while n < len(draft) and draft[n] == r[i + n]:
                n += 1
            step = min(n + 1, len(r) - i)   # the accepted drafts and the target's own next token
            ctx += r[i:i + step]
            i, forwards, tokens, no_draft = i + step, forwards + 1, tokens + step, no_draft + (not draft)
    return {"tokens_per_forward": tokens / forwards, "no_draft_fraction": no_draft / forwards,
            "forwards": forwards, "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--max-new", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, tok = models.load("tiny-gpu", dtype=torch.float32, device="cpu")
    sets = {}
    for kind, max_new in (("copy", a.max_new), ("copy_long", 4 * a.max_new)):
        prompts = load_prompts(tok, kind, a.prompts)
        refs, _ = greedy_references(model, prompts, max_new, max_len=max(map(len, prompts)) + max_new + 8)
        lens = [len(r) for r in refs]
        rows = {f"k{k}/ngram{mx}-{mn}": replay(prompts, refs, k, mx, mn)
                for k in (1, 2, 4, 8, 16) for mx, mn in ((3, 1), (4, 2), (1, 1))}
        sets[kind] = {"prompts": len(prompts), "max_new": max_new, "output_tokens_mean": sum(lens) / len(lens),
                      "output_tokens_max": max(lens), "replays": rows}
        print(kind, sets[kind]["output_tokens_mean"], {k: round(v["tokens_per_forward"], 2) for k, v in rows.items()},
              flush=True)
    rec = {"device": "cpu", "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                     text=True).stdout.strip(),
           "command": f"python tools/pld_ceiling_lab.py --out {a.out} --prompts {a.prompts} --max-new {a.max_new}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "note": __doc__.split("\n\n", 2)[2].strip(), "sets": sets}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
