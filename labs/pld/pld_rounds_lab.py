"""The adaptive rule of the speculative engine's device rounds, replayed on the CPU and priced with the
round costs of the recorded H200 run.

    python labs/pld/pld_rounds_lab.py --out labs/pld/pld_rounds_lab.json

Greedy decoding is deterministic, so which rounds the engine runs (drafting k = 8, or plain) follows from the
tokens alone: this lab runs ``SpeculativeEngine`` with device rounds on the CPU (tiny-gpu, fp32, batch 1) over
the held-out copy and open-ended prompts, once per rule variant, and counts drafting rounds, plain rounds and
host reads. Each variant's decode time is then modelled as the sum of its rounds' GPU times from
``results/nvidia-h200/speculative.json`` (``details.round_graph_ms``, batch 1), against plain greedy as that
many plain rounds; host reads are counted, not priced. The modelled ratios are an estimate of what the rule
chooses, not a measurement of speed.
"""
from __future__ import annotations

import json

import torch

from pld_ceiling_lab import greedy_outputs, lab_arguments
from t4lib import models
from t4lib.core import results
from t4lib.speculative import PromptLookupDrafter, SpeculativeEngine

VARIANTS = {"adaptive, round_margin 0.2": dict(round_margin=0.2), "adaptive, round_margin 0.1": dict(round_margin=0.1),
            "adaptive, round_margin 0 (the default)": dict(round_margin=0.0), "k = 8 always": dict(adaptive=False)}


def main() -> None:
    a = lab_arguments(__doc__)
    torch.set_num_threads(1)
    ms = json.loads((results.results_dir() / "nvidia-h200" / "speculative.json").read_text())
    ms = {int(k): v for k, v in ms["details"]["round_graph_ms"]["1"].items()}   # k -> ms of one round, batch 1
    model, tok = models.load("tiny-gpu", dtype=torch.float32, device="cpu")
    sets = {}
    for kind, (prompts, refs) in greedy_outputs(model, tok, {"copy": a.max_new, "open": a.max_new}, a.prompts).items():
        max_len = max(map(len, prompts)) + a.max_new + 8
        plain_ms = sum(len(r) - 1 for r in refs) * ms[0]
        rows = {}
        for name, kw in VARIANTS.items():
            eng = SpeculativeEngine(model, PromptLookupDrafter(eos_token_id=0), max_len=max_len, max_batch_size=1,
                                    ks=(8,), device_rounds=True, verify_cost={1: 1.0, 9: ms[8] / ms[0]}, **kw)
            c = dict(draft_rounds=0, plain_rounds=0, reads=0, tokens=0, identical=0)
            for p, r in zip(prompts, refs):
                res = eng.generate_with_stats([p], a.max_new, eos_token_id=0)
                s = res.stats
                c["plain_rounds"] += s.plain_steps
                c["draft_rounds"] += s.target_forwards - s.plain_steps
                c["reads"] += len(s.k_trace)
                c["tokens"] += s.decode_tokens
                c["identical"] += res.new_tokens[0] == r
            c["tokens_per_round"] = c["tokens"] / (c["draft_rounds"] + c["plain_rounds"])
            c["modelled_ms"] = c["draft_rounds"] * ms[8] + c["plain_rounds"] * ms[0]
            c["modelled_speedup_vs_plain_rounds"] = plain_ms / c["modelled_ms"]
            rows[name] = c
            print(kind, name, {k: round(v, 3) for k, v in c.items()}, flush=True)
        sets[kind] = dict(prompts=len(prompts), plain_rounds_ms=plain_ms, variants=rows)
    rec = results.lab_record(f"python labs/pld/pld_rounds_lab.py --out {a.out} --prompts {a.prompts} "
                             f"--max-new {a.max_new}")
    rec.update(round_ms_batch1=ms, note=__doc__.split("\n\n", 2)[2].strip(), sets=sets)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
