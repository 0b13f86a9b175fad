"""M = 1, 2, 3, 4 launch-tuning sweep of the GEMV-layout GGUF formats (not part of the
library; it chose the Tuning of kernels/gguf.cu):

    python labs/gemv/gguf_lab.py [variants] [M]    # writes $OUT/gguf_lab_m{M}.json

Variants (gguf_lab.cu; M = 3, 4 are the rows of an MTP verify): R rows per warp, U chunks per load stage, "pipe" = two register stages,
"mbN" = at least N CTAs per SM (register cap 65536 / 128 / N). Variants 0 (M = 1),
17 (M = 2) and 0 (M = 3, 4) are the library's tunings before each sweep; the
sweep (labs/gemv/gguf_lab_m*.json) chose 4 rows x 1 chunk for M = 1, 2.
`python labs/gemv/labbuild.py --ptxas gguf_lab.cu` records which variants spill on
sm_75 (no GPU needed).
Outputs must match the library's within fp32 reassociation, relative to the
largest output (a different R can change the split-K of the shape).
"""
import ctypes
import json
import os
import sys

import torch

from labbuild import load
from t4lib.core import timing as bench
from t4lib.benchmarks.gguf import FFN, GEMV_FORMATS, HIDDEN
from t4lib.ops.gguf import FORMATS, gguf_gemv_packed, pack_for_gemv, reference as gref, type_id
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
M = int(sys.argv[2]) if len(sys.argv) > 2 else 1
lib = load("gguf_lab.cu")
lab_gemv = lib.lab_gguf_gemv
lab_gemv.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
if M >= 3:   # the rows of an MTP verify: M = 3, 4
    V = {0: "R2U1mb4", 1: "R4U1mb2", 2: "R4U1mb3", 3: "R4U1mb4", 4: "R8U1mb2", 5: "R1U1mb4", 6: "R2U1mb3",
         7: "R2U1mb2"}
    BASE = 0
else:
    V = {0: "R2U2mb4", 1: "R2U1pipe_mb4", 2: "R1U2pipe_mb4", 3: "R1U4mb4", 4: "R4U1mb4", 5: "R2U1mb8", 6: "R1U2mb6",
         7: "R1U1pipe_mb6", 8: "R2U2mb3", 9: "R1U1mb8", 10: "R4U1mb3", 11: "R4U1mb2", 12: "R8U1mb2", 13: "R8U1mb3",
         14: "R4U2mb2", 15: "R4U1pipe_mb2", 16: "R8U1mb4", 17: "R2U1mb4"}
    BASE = 0 if M == 1 else 17
if len(sys.argv) > 1:
    V = {v: n for v, n in V.items() if str(v) in sys.argv[1].split(",") or v == BASE}
out = {"gemv": {}, "check": {}}
for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
    for fmt in GEMV_FORMATS:
        t = type_id(fmt)
        nv, nb = FORMATS[t][1], FORMATS[t][2]
        key = f"{fmt}/N{N}_K{K}"
        raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).cuda()
        packed = pack_for_gemv(raw, t, N, K)
        x = torch.randn(M, K, device="cuda").half()
        ref = gguf_gemv_packed(packed, t, x, N, K, backend="cuda").float()
        chk = {}
        for v, name in V.items():
            y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
            st = lab_gemv(t, v, M, packed.data_ptr(), x.data_ptr(), y.data_ptr(), N, K,
                                   torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            err = float((y.float() - ref).abs().max() / ref.abs().max())  # fp32 reassociation: split-K follows R
            chk[name] = [st, err]
        out["check"][key] = chk
        bad = {n: c for n, c in chk.items() if c[0] != 0 or not c[1] <= 2e-3}
        if bad:
            raise SystemExit(f"{key}: variants that fail or differ from the library: {bad}")

        def case(v):
            def fn(w, x, y):
                lab_gemv(t, v, M, w.data_ptr(), x.data_ptr(), y.data_ptr(), N, K,
                                  torch.cuda.current_stream().cuda_stream)
            return fn, lambda: (packed.clone(), torch.randn(M, K, device="cuda").half(),
                                torch.empty(M, N, device="cuda", dtype=torch.float16))

        nbytes = N * K // nv * nb + 2 * M * (K + N)
        cases = {f"{n}": case(v) for v, n in V.items()}
        cases["copy_same_bytes"] = (lambda d, s_: d.copy_(s_),
                                    lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                             torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")))
        res = bench.compare(cases, V[BASE], bytes_moved=nbytes, rounds=3, iters=20, max_sets=8)
        out["gemv"][key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"),
                                "x_lib": st["speedup_vs_baseline"]} for n, st in res["cases"].items()}
        for n, st in sorted(out["gemv"][key].items(), key=lambda kv: kv[1]["us"]):
            print(f"  {key:22s} {n:16s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_lib']:.3f}", flush=True)
        del raw, packed
        torch.cuda.empty_cache()
json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/gguf_lab_m{M}.json", "w"), indent=1)
