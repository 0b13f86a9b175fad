"""Q5_K and Q3_K: the library's GEMV layout against the same blocks read as GGUF stores them (not part of the
library). The layouts began here as lab traits (their record left with their source); the library now holds them
(kernels/gguf_gemv_fp16.cuh PK45 / PQ3_K, t4lib/ops/gguf/packing.py), checked on the CPU by tests/test_gguf.py.

    python labs/gemv/layout_lab.py [Q5_K,Q3_K]   # GPU: check, then time (writes $OUT/layout_lab.json)

Per format, M = 1, 2, at the 27B FFN shapes: the GEMV layout (gguf_gemv_packed on weights packed once) is first
checked against the raw read (layout="gguf"), then both are timed in one process beside cuBLAS on the fp16
weights and a copy of the same bytes; x_raw = speedup over the raw read.
"""
import json
import os
import sys

import torch

from t4lib.core import timing as bench
from t4lib.benchmarks.gguf import FFN, HIDDEN
from t4lib.ops.gguf import (
    FORMATS, gguf_dequant, gguf_gemv, gguf_gemv_packed, pack_for_gemv, reference as ref,
)
from t4lib.ops.gguf import type_id
from t4lib.core.results import lab_record


def run(names):
    out = {"device": torch.cuda.get_device_name(), "gemv": {}, "check": {}}
    for name in names:
        t = type_id(name)
        for M in (1, 2):
            for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
                key = f"{name}/M{M}/N{N}_K{K}"
                raw = ref.random_blocks(t, N * K // 256, seed=7, scale=0.01).reshape(-1).cuda()
                packed = pack_for_gemv(raw, t, N, K)
                x = torch.randn(M, K, device="cuda").half()
                want = gguf_gemv(raw, t, x, N, K, backend="cuda", layout="gguf").float()
                got = gguf_gemv_packed(packed, t, x, N, K, backend="cuda",
                                       out=torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16))
                err = float((got.float() - want).abs().max() / want.abs().max())
                out["check"][key] = err
                if not err <= 2e-3:  # fp16 partials of the raw path, relative to the largest output
                    raise SystemExit(f"{key}: the GEMV layout differs from the raw read: {err:.2e}")
                w16 = gguf_dequant(raw, t, (N, K), out_dtype=torch.float16)

                def mk(w):
                    return lambda: (w.clone(), torch.randn(M, K, device="cuda").half(),
                                    torch.empty(M, N, device="cuda", dtype=torch.float16))

                nbytes = N * K // 256 * FORMATS[t][2] + 2 * M * (K + N)
                cases = {
                    "lib_gguf_layout": (lambda w, x, y: gguf_gemv(w, t, x, N, K, backend="cuda", layout="gguf", out=y),
                                        mk(raw)),
                    "lib_gemv_layout": (lambda w, x, y: gguf_gemv_packed(w, t, x, N, K, backend="cuda", out=y),
                                        mk(packed)),
                    "cublas_fp16": (lambda w, x, y: torch.matmul(x, w.t(), out=y), mk(w16)),
                    "copy_same_bytes": (lambda d, s_: d.copy_(s_),
                                        lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                                 torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"))),
                }
                res = bench.compare(cases, "lib_gguf_layout", bytes_moved=nbytes, rounds=3, iters=20, max_sets=8)
                out["gemv"][key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"),
                                        "x_raw": st["speedup_vs_baseline"]} for n, st in res["cases"].items()}
                for n, st in sorted(out["gemv"][key].items(), key=lambda kv: kv[1]["us"]):
                    print(f"  {key:24s} {n:16s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_raw']:.3f}",
                          flush=True)
                del raw, packed, w16
                torch.cuda.empty_cache()
    json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{os.environ.get('OUT', '/tmp/out')}/layout_lab.json", "w"), indent=1)


if __name__ == "__main__":
    run(sys.argv[1].split(",") if len(sys.argv) > 1 else ["Q5_K", "Q3_K"])
