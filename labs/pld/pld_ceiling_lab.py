"""How many tokens prompt lookup can carry per target forward on the held-out copy prompts, whatever the engine.

    python labs/pld/pld_ceiling_lab.py --out labs/pld/pld_ceiling_lab.json

Greedy decoding is deterministic, so the tokens a verify accepts follow from the greedy output alone: a draft is
kept up to its first token that differs from the output. This lab decodes tiny-gpu greedily (fp32, CPU,
``StaticEngine``, up to EOS or ``--max-new`` tokens) on the first ``--prompts`` prompts of each held-out set, then
replays prompt lookup over each output with a fixed draft length k and n-gram sizes (max, min), counting target
forwards (one per verify or plain step), tokens per forward and the share of steps where the drafter had
nothing to propose. No timing: a fixed k that always verifies k + 1 positions is the most a drafter of this kind
can carry per forward; the engine's adaptive k trades some of it for cheaper verifies.
Then the engine itself (``SpeculativeEngine`` on the CPU, batch 1, the verify costs of the recorded H200 run
when there is one) decodes the copy prompts with its default rule and with variants, counting target
forwards, verifies, plain steps and host round trips (one per verify, one per chunk of plain steps).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess

import torch

from t4lib import models
from t4lib.benchmarks.speculative import greedy_references, load_prompts
from t4lib.speculative.drafters import PromptLookupDrafter


def replay(prompts, refs, k: int, max_ngram: int = 3, min_ngram: int = 1, propose=None) -> dict:
    """Target forwards and drafts when every step drafts (up to) k tokens by prompt lookup over ``refs``, or by
    ``propose(context, ahead)`` (another drafter; an oracle may read ``ahead``, the output's next tokens)."""
    drafter = PromptLookupDrafter(max_ngram=max_ngram, min_ngram=min_ngram, eos_token_id=0)
    propose = propose or (lambda ctx, ahead: drafter.lookup(ctx, len(ahead)))
    forwards = tokens = no_draft = 0
    for p, r in zip(prompts, refs):
        ctx, i = list(p) + r[:1], 1   # the prefill chose r[0]
        while i < len(r):
            ahead = r[i:i + k]
            draft = propose(ctx, ahead)
            n = 0
            while n < len(draft) and draft[n] == ahead[n]:
                n += 1
            step = min(n + 1, len(r) - i)   # the accepted drafts and the target's own next token
            ctx += r[i:i + step]
            i, forwards, tokens, no_draft = i + step, forwards + 1, tokens + step, no_draft + (not draft)
    return {"tokens_per_forward": tokens / forwards, "no_draft_fraction": no_draft / forwards,
            "forwards": forwards, "tokens": tokens}


def lab_arguments(doc: str, candidates: int | None = None) -> argparse.Namespace:
    """``--out``, ``--prompts`` (held-out prompts per set) and ``--max-new``, shared by the prompt-lookup labs;
    ``--candidates`` (drafts verified at once) when a default is given."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--max-new", type=int, default=64)
    if candidates is not None:
        ap.add_argument("--candidates", type=int, default=candidates)
    return ap.parse_args()


def greedy_outputs(model, tok, budgets: dict[str, int], n_prompts: int) -> dict[str, tuple[list, list]]:
    """``{kind: (prompts, greedy outputs)}``: the first ``n_prompts`` held-out prompts of each kind decoded
    greedily (``StaticEngine``, up to EOS or the kind's budget of new tokens)."""
    out = {}
    for kind, max_new in budgets.items():
        prompts = load_prompts(tok, kind, n_prompts)
        refs, _ = greedy_references(model, prompts, max_new, max_len=max(map(len, prompts)) + max_new + 8)
        out[kind] = (prompts, refs)
    return out


def engine_counts(model, prompts, refs, max_new: int) -> dict:
    """Forwards and host round trips of the speculative engine (greedy, batch 1) per rule variant."""
    from t4lib.core import results
    from t4lib.speculative import SpeculativeEngine

    cost, where = None, "the engine's default curve"
    path = results.results_dir() / "nvidia-h200" / "speculative.json"
    if path.exists():
        ms = json.loads(path.read_text())["details"]["verify_graph_ms"]["1"]
        cost, where = {int(q): v / ms["1"] for q, v in ms.items()}, f"{path.name} (H200, batch 1)"
    variants = {"default (adaptive k, plain chunks of 4)": {},
                "adaptive k, plain chunks of 1": {"plain_chunk": 1},
                "k = 8 always, plain chunks of 1": {"adaptive": False, "ks": (8,), "plain_chunk": 1}}
    out = {"verify_cost": cost, "verify_cost_from": where, "variants": {}}
    for name, kw in variants.items():
        kw = {"ks": (1, 2, 4, 8), **kw}
        eng = SpeculativeEngine(model, PromptLookupDrafter(max_ngram=3, min_ngram=1, eos_token_id=0),
                                max_len=max(map(len, prompts)) + max_new + 8, max_batch_size=1, verify_cost=cost,
                                **kw)
        c = dict(forwards=0, tokens=0, plain_steps=0, round_trips=0, identical=0)
        for p, r in zip(prompts, refs):
            res = eng.generate_with_stats([p], max_new, eos_token_id=0)
            st = res.stats
            verifies = st.target_forwards - st.plain_steps
            c["forwards"] += st.target_forwards
            c["tokens"] += st.decode_tokens
            c["plain_steps"] += st.plain_steps
            c["round_trips"] += verifies + sum(1 for k in st.k_trace if k == 0)
            c["identical"] += res.new_tokens[0] == r
        c["tokens_per_forward"] = c["tokens"] / c["forwards"]
        out["variants"][name] = c
    return out


def main() -> None:
    a = lab_arguments(__doc__)
    model, tok = models.load("tiny-gpu", dtype=torch.float32, device="cpu")
    sets = {}
    budgets = {"copy": a.max_new, "copy_long": 4 * a.max_new}
    for kind, (prompts, refs) in greedy_outputs(model, tok, budgets, a.prompts).items():
        max_new = budgets[kind]
        lens = [len(r) for r in refs]
        rows = {f"k{k}/ngram{mx}-{mn}": replay(prompts, refs, k, mx, mn)
                for k in (1, 2, 4, 8, 16) for mx, mn in ((3, 1), (4, 2), (1, 1))}
        sets[kind] = {"prompts": len(prompts), "max_new": max_new, "output_tokens_mean": sum(lens) / len(lens),
                      "output_tokens_max": max(lens), "replays": rows}
        if kind == "copy":
            sets[kind]["engine"] = engine_counts(model, prompts, refs, max_new)
            print({k: round(v["tokens_per_forward"], 2) for k, v in sets[kind]["engine"]["variants"].items()})
        print(kind, sets[kind]["output_tokens_mean"], {k: round(v["tokens_per_forward"], 2) for k, v in rows.items()},
              flush=True)
    rec = {"device": "cpu", "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                     text=True).stdout.strip(),
           "command": f"python labs/pld/pld_ceiling_lab.py --out {a.out} --prompts {a.prompts} --max-new {a.max_new}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "note": __doc__.split("\n\n", 2)[2].strip(), "sets": sets}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
