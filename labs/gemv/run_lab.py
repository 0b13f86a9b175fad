"""M = 1 INT4 GEMV launch variants against the library kernel, cuBLAS fp16 and a
same-size copy, on a GPU (not part of the library; it chose the library's
M = 1 tuning in kernels/w4a16.cu):

    python labs/gemv/run_lab.py [quick]      # writes $OUT/lab.json

Variants (gemv_lab.cu): R rows per warp, U chunks per load stage, "pipe" = two
register stages, "mb4" = 4 CTAs/SM minimum (128 registers) instead of 8,
"RO" = the same loads with no arithmetic (the read floor), p1/p0 = persistent
or full grid, "xsmem" = x staged in shared memory; "_ABL" variants leave a
stage out or read x in the wrong order, to place the time by difference.
Outputs of every other variant must equal the library's bit for bit.
"""
import ctypes
import json
import os
import sys

import torch

from labcases import baseline_cases, time_cases, variant_case
from labbuild import load
from t4lib.ops.w4a16 import gemv
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
lib = load("gemv_lab.cu")
lib.lab_gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
V = {0: "R2U4", 1: "R4U2", 2: "R1U8", 3: "R2U2pipe", 4: "R4U1pipe", 5: "R1U4pipe", 6: "R2U4_RO", 7: "R2U2pipe_RO",
     8: "R2U8mb4", 9: "R2U2pipe_mb4", 10: "R4U2pipe_mb4", 11: "R2U4mb4", 12: "R4U4mb4",
     13: "R2U2pipe_mb4_xcoalesced_ABL", 14: "R2U2pipe_mb4_noxload_ABL", 15: "R2U2pipe_mb4_xsmem",
     16: "R2U2pipe_mb4_noscale_ABL", 17: "R4U2pipe_mb4_xsmem", 18: "R2U4mb4_xsmem"}
RO = {6, 7}
ABLATION = RO | {13, 14, 16}  # leave work out or read the wrong x: timed, not checked
out = {"gemv": {}, "check": {}}
shapes = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896)]
if len(sys.argv) > 2:  # variant numbers to time (the library and baselines always run)
    V = {v: n for v, n in V.items() if str(v) in sys.argv[2].split(",")}
if len(sys.argv) > 1 and sys.argv[1] == "quick":
    shapes = shapes[:1]
for K, N in shapes:
    key = f"{K}x{N}"
    q, s = _rand_qw(N, K)
    x = torch.randn(1, K, device="cuda").half()
    ref = gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda")
    chk = {}
    for v in V:
        if v in ABLATION:
            continue
        for persist in (1, 0):
            y = torch.full((1, N), float("nan"), device="cuda", dtype=torch.float16)
            st = lib.lab_gemv(v, q.data_ptr(), s.data_ptr(), x.data_ptr(), y.data_ptr(), N, K, persist,
                              torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            chk[f"{V[v]}/p{persist}"] = [st, float((y.float() - ref.float()).abs().max())]
    out["check"][key] = chk
    bad = {n: c for n, c in chk.items() if c != [0, 0.0]}
    if bad:
        raise SystemExit(f"{key}: variants that fail or differ from the library: {bad}")

    def lab_case(v, persist):
        return variant_case(lambda q, s, x, y: lib.lab_gemv(v, q.data_ptr(), s.data_ptr(), x.data_ptr(), y.data_ptr(),
                                                            N, K, persist, torch.cuda.current_stream().cuda_stream),
                            K, N)

    nb = _qbytes(1, K, N)
    cases = baseline_cases(K, N, "lib")
    for v in V:
        for persist in (1, 0):
            cases[f"{V[v]}/p{persist}"] = lab_case(v, persist)
    time_cases(cases, "cublas_fp16", nb, key, out["gemv"])

json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/lab.json", "w"), indent=1)
