"""M = 1, 2 launch-tuning sweep of the GGUF GEMV on W as GGUF lays it out
(IQ4_NL, IQ3_S, which have no GEMV layout; Q3_K, Q5_K, Q4_K as read with
layout="gguf"). Not part of the library.

    python labs/gemv/labbuild.py --before COMMIT gguf_raw_lab.cu   # optional, where nvcc runs
    python labs/gemv/gguf_raw_lab.py [M ...] [FMT,...]   # writes $OUT/gguf_raw_lab.json

Variants (gguf_raw_lab.cu): R rows per warp, U chunks per load stage, "mbN" =
at least N CTAs per SM. Variant 0 is 1 row x 1 chunk (the tuning before the
first sweep); "lib" is the library's GEMV as it stands. "before" (when
build/gguf_raw_lab_before.so exists: this lab built against the kernels/ of
an earlier commit) is that build's variant 8, the trait under that commit's
own Tuning, i.e. the library of that commit, timed in the same process.
Outputs must match the library's within fp32 reassociation, relative to the
largest output (a different R can change the split-K of the shape).
"""
import ctypes
import json
import os
import sys
from pathlib import Path

import torch

from labbuild import load
from t4lib.core import timing as bench
from t4lib.benchmarks.gguf import FFN, HIDDEN
from t4lib.ops.gguf import FORMATS, gguf_gemv, reference as gref, type_id
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
ARGS = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
lib = load("gguf_raw_lab.cu")
lib.lab_gguf_raw_gemv.argtypes = ARGS
BEFORE = Path(__file__).with_name("build") / "gguf_raw_lab_before.so"
before = ctypes.CDLL(str(BEFORE)) if BEFORE.exists() else None
if before is not None:
    before.lab_gguf_raw_gemv.argtypes = ARGS
LIB_TUNING = 8  # variant: the library's own Tuning (used only for "before")
V = {0: "R1U1mb6", 1: "R2U1mb4", 2: "R4U1mb4", 3: "R4U1mb3", 4: "R2U2mb3", 5: "R4U1mb2", 6: "R2U1mb6", 7: "R8U1mb2"}
MS = [int(a) for a in sys.argv[1:] if a.isdigit()] or [1, 2]
FMTS = next((a.split(",") for a in sys.argv[1:] if not a.isdigit()), ["Q3_K", "Q5_K", "IQ4_NL", "IQ3_S", "Q4_K"])
out = {"variants": V, "gemv": {}, "check": {}}


def lab(t, v, M, w, x, y, N, K, so=lib):
    return so.lab_gguf_raw_gemv(t, v, M, w.data_ptr(), x.data_ptr(), y.data_ptr(), N, K,
                                torch.cuda.current_stream().cuda_stream)


for M in MS:
    for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
        for fmt in FMTS:
            t = type_id(fmt)
            nv, nb = FORMATS[t][1], FORMATS[t][2]
            key = f"M{M}/{fmt}/N{N}_K{K}"
            raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).cuda()
            x = torch.randn(M, K, device="cuda").half()
            ref = gguf_gemv(raw, t, x, N, K, backend="cuda", layout="gguf").float()
            chk = {}
            for v, name in V.items():
                y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
                st = lab(t, v, M, raw, x, y, N, K)
                torch.cuda.synchronize()
                chk[name] = [st, float((y.float() - ref).abs().max() / ref.abs().max())]
            if before is not None:
                y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
                st = lab(t, LIB_TUNING, M, raw, x, y, N, K, so=before)
                torch.cuda.synchronize()
                chk["before"] = [st, float((y.float() - ref).abs().max() / ref.abs().max())]
            out["check"][key] = chk
            bad = {n: c for n, c in chk.items() if c[0] != 0 or not c[1] <= 2e-3}
            if bad:
                raise SystemExit(f"{key}: variants that fail or differ from the library: {bad}")

            def make():
                return (raw.clone(), torch.randn(M, K, device="cuda").half(),
                        torch.empty(M, N, device="cuda", dtype=torch.float16))

            def case(v):
                return (lambda w, x, y: lab(t, v, M, w, x, y, N, K), make)

            nbytes = N * K // nv * nb + 2 * M * (K + N)

            cases = {n: case(v) for v, n in V.items()}
            cases["lib"] = (lambda w, x, y: gguf_gemv(w, t, x, N, K, backend="cuda", layout="gguf", out=y), make)
            if before is not None:
                cases["before"] = (lambda w, x, y: lab(t, LIB_TUNING, M, w, x, y, N, K, so=before), make)
            cases["copy_same_bytes"] = (lambda d, s_: d.copy_(s_),
                                        lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                                 torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")))
            res = bench.compare(cases, "before" if before is not None else V[0], bytes_moved=nbytes, rounds=3,
                                iters=20, max_sets=8)
            out["gemv"][key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"),
                                    "x_base": st["speedup_vs_baseline"]} for n, st in res["cases"].items()}
            for n, st in sorted(out["gemv"][key].items(), key=lambda kv: kv[1]["us"]):
                print(f"  {key:24s} {n:16s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_base']:.3f}", flush=True)
            del raw
            torch.cuda.empty_cache()
            json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/gguf_raw_lab.json", "w"), indent=1)
