"""StaticEngine prefill: a captured graph per prompt bucket against the eager forward, on a GPU.

    python labs/static_prefill/static_prefill_lab.py --out labs/static_prefill/static_prefill_lab.json

Both engines pad the prompt the same way and capture the same decode step, so they must choose the same tokens
from the same logits; the lab checks that (tiny-gpu on the 40 held-out copy prompts, batch 1; a random
Qwen2.5-1.5B-shape model at batch 8 and 64 with 64-token prompts, sampling with one seed) and times the first
token (prefill + first choice, mean over calls after a warm pass over every prompt).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import time

import torch

from t4lib.core import hw, results
from t4lib import models
from t4lib.serving import StaticEngine
from t4lib.benchmarks.serving import QWEN15, build_random_model
from t4lib.benchmarks.speculative import load_prompts


def compare(model, prompts, new: int, **gen_kw) -> dict:
    """Graph prefill against eager prefill on the same prompts: tokens, first-choice logits, time to first token."""
    out = {}
    runs = {}
    for graph in (True, False):
        eng = StaticEngine(model, max_len=max(p.shape[1] for p in prompts) + new + 8, prefill_graph=graph,
                           compile=False)   # the decode step uncompiled: the prefill is what differs
        for p in prompts:   # warm pass: compiles, captures every bucket's graph
            eng.generate_with_stats(p, new, output_logits=True, **gen_kw)
        rs = [eng.generate_with_stats(p, new, output_logits=True, **gen_kw) for p in prompts]
        runs[graph] = rs
        out["graph" if graph else "eager"] = {
            "ttft_ms_mean": 1e3 * sum(r.ttft_s for r in rs) / len(rs),
            "prefill_graph": all(r.prefill_graph for r in rs), "graph_error": eng.prefill_graph_error}
        del eng
        torch.cuda.empty_cache()
    g, e = runs[True], runs[False]
    out["identical_tokens"] = sum(torch.equal(a.new_tokens, b.new_tokens) for a, b in zip(g, e)) / len(g)
    out["first_logits_max_abs_diff"] = max(float((a.logits[:, 0] - b.logits[:, 0]).abs().max()) for a, b in zip(g, e))
    out["ttft_speedup"] = out["eager"]["ttft_ms_mean"] / out["graph"]["ttft_ms_mean"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = {}
    model, tok = models.load("tiny-gpu", dtype=torch.float16, device="cuda")
    prompts = [torch.tensor([p]) for p in load_prompts(tok, "copy", 40)]
    cases["tiny-gpu/copy/b1"] = compare(model, prompts, 32)
    print("tiny-gpu", cases["tiny-gpu/copy/b1"], flush=True)
    # one engine, its setup changing between calls (new cache, new graphs): every prefill still a graph replay
    eng = StaticEngine(model, max_len=128, compile=False)
    flags = [eng.generate_with_stats(p, 8, output_logits=o).prefill_graph for o in (True, False, True) for p in prompts[:4]]
    cases["tiny-gpu/setup_changes"] = {"prefill_graph_every_call": all(flags), "error": eng.prefill_graph_error}
    print("setup changes", cases["tiny-gpu/setup_changes"], flush=True)
    del eng
    del model
    m = build_random_model(QWEN15)
    gen = torch.Generator().manual_seed(0)
    for B in (8, 64):
        ps = [torch.randint(0, QWEN15["vocab_size"], (B, 64), generator=gen) for _ in range(3)]
        cases[f"qwen2.5-1.5b-shape/b{B}/T64"] = compare(m, ps, 16, do_sample=True, temperature=1.0, top_k=50, seed=0)
        print(B, cases[f"qwen2.5-1.5b-shape/b{B}/T64"], flush=True)
    env = results.environment()
    rec = {"device": env["device"], "driver": env["driver"], "torch": env["torch"],
           "commit": os.environ.get("T4LIB_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"],
                                                                      capture_output=True, text=True).stdout.strip(),
           "command": "python labs/static_prefill/static_prefill_lab.py --out " + a.out,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "note": __doc__.split("\n\n", 2)[2].strip(), "copy_bw_GBps": hw.copy_bandwidth() / 1e9, "cases": cases}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", a.out, time.strftime("%X"))


if __name__ == "__main__":
    main()
