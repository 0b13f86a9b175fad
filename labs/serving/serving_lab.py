"""Decode-speed experiments on the serving benchmark's model shapes (not part of the library):

    python labs/serving/serving_lab.py [variant,...]     # writes $OUT/serving_lab.json (all variants)
                                                  # or $OUT/serving_lab_<variants>.json

Each row is StaticEngine W4A16 decode tokens/s (fused projections, compiled, CUDA graph) under one change:
"default" (the benchmark's configuration), "lm_head_w4a16" (the output head quantized too, which the
default policy keeps fp16), "coordinate_descent" (Inductor's coordinate-descent tuning of its kernels).
"""
import json
import os
import sys

import torch

from t4lib.benchmarks.serving import QWEN05, QWEN7B, build_random_model
from t4lib.quant import default_policy, quantize_model
from t4lib.core.results import lab_record
from t4lib.serving import StaticEngine, fuse_projections

OUT = os.environ.get("OUT", "/tmp/out")
VARIANTS = ("default", "lm_head_w4a16", "coordinate_descent")
chosen = sys.argv[1].split(",") if len(sys.argv) > 1 else list(VARIANTS)
if set(chosen) - set(VARIANTS):
    raise SystemExit(f"variants must be among {VARIANTS}, got {chosen}")
rows = {}
for label, cfg in (("qwen2.5-0.5b-shape", QWEN05), ("qwen2.5-7b-shape", QWEN7B)):
    for variant in chosen:
        torch._dynamo.reset()
        torch._inductor.config.coordinate_descent_tuning = variant == "coordinate_descent"
        m = build_random_model(cfg)
        quantize_model(m, default_policy(m, keep_fp16=() if variant == "lm_head_w4a16" else ("lm_head",)))
        fuse_projections(m)
        ids = torch.randint(0, cfg["vocab_size"], (1, 16), device="cuda")
        eng = StaticEngine(m, max_len=16 + 128 + 8)
        eng.generate_with_stats(ids, 8)
        r = sorted((eng.generate_with_stats(ids, 128) for _ in range(3)), key=lambda r: r.decode_tokens_per_s)[1]  # median
        rows[f"{label}/{variant}"] = dict(decode_tokens_per_s=r.decode_tokens_per_s, frac_copy_bw=r.frac_copy_bw,
                                          bytes_per_step=r.bytes_per_step, compiled=r.compiled, graph=r.graph)
        print(label, variant, rows[f"{label}/{variant}"], flush=True)
        del eng, m
        torch.cuda.empty_cache()
name = "serving_lab" if len(sys.argv) == 1 else "serving_lab_" + "_".join(chosen)
json.dump({**lab_record(" ".join(["python", *sys.argv])), "torch": torch.__version__, "rows": rows},
          open(f"{OUT}/{name}.json", "w"), indent=1)
