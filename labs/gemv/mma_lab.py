"""M = 1 INT4-g128 GEMV on the tensor cores (mma_lab.cu) against the library's
GEMV and cuBLAS fp16, on a GPU (not part of the library):

    python labs/gemv/mma_lab.py [variants]     # writes $OUT/mma_lab.json

Variants (mma_lab.cu): U stages of loads in flight, W warps per CTA, S of them
splitting K, MB minimum CTAs per SM. Each output is checked against the fp32
product of the dequantized weights (the same fp16 weight values), beside the
library's error against the same reference, before anything is timed.
Measured (labs/gemv/mma_lab.json): correct, not faster than the
library's GEMV (0.7-1.07x), so it stays a lab.
"""
import ctypes
import json
import os
import sys

import torch
import torch.nn.functional as F

from labbuild import load
from t4lib.core import timing as bench
from t4lib.ops.w4a16 import gemv
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
lib = load("mma_lab.cu")
lib.lab_mma_gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
V = {0: "U2W4S4mb4", 1: "U4W4S4mb2", 2: "U4W8S8mb1", 3: "U2W8S8mb2", 4: "U4W4S1mb2", 5: "U2W4S2mb4"}
if len(sys.argv) > 1:
    V = {v: n for v, n in V.items() if str(v) in sys.argv[1].split(",")}
# (K, N): the 27B shapes, the 0.5B shapes, the 7B decode shapes (fused qkv, o, fused gate/up, down)
shapes = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896),
          (3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584)]
out = {"device": torch.cuda.get_device_name(), "variants": V, "check": {}, "gemv": {}}


def run(v, q, s, x, y, N, K):
    return lib.lab_mma_gemv(v, q.data_ptr(), s.data_ptr(), x.data_ptr(), y.data_ptr(), N, K, 128,
                            torch.cuda.current_stream().cuda_stream)


for K, N in shapes:
    key = f"{K}x{N}"
    q, s = _rand_qw(N, K)
    w = QuantizedWeight(q, s, N, K, 128)
    x = torch.randn(1, K, device="cuda").half()
    ref = (x.float() @ w.dequantize(torch.float16).float().t())
    scale = float(ref.abs().max())
    chk = {"library": float((gemv(x, w, backend="cuda").float() - ref).abs().max()) / scale}
    for v, name in V.items():
        y = torch.full((1, N), float("nan"), device="cuda", dtype=torch.float16)
        st = run(v, q, s, x, y, N, K)
        torch.cuda.synchronize()
        chk[name] = float((y.float() - ref).abs().max()) / scale if st == 0 else f"launch status {st}"
    out["check"][key] = chk
    print(key, "max |y - fp32 ref| / max |ref|:", {n: (round(e, 6) if isinstance(e, float) else e) for n, e in chk.items()},
          flush=True)
    # a wrong fragment layout gives errors of order 1; rounding, of order 1e-4
    bad = {n: e for n, e in chk.items() if n != "library" and not (isinstance(e, float) and e <= 1e-2)}
    if bad:
        json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/mma_lab.json", "w"), indent=1)
        raise SystemExit(f"{key}: wrong results {bad}")

    def case(v):
        return (lambda q, s, x, y: run(v, q, s, x, y, N, K),
                lambda: (*_rand_qw(N, K), torch.randn(1, K, device="cuda").half(),
                         torch.empty(1, N, device="cuda", dtype=torch.float16)))

    cases = {"cublas_fp16": (lambda x, w: F.linear(x, w), lambda: (torch.randn(1, K, device="cuda").half(),
                                                                  torch.randn(N, K, device="cuda").half())),
             "lib": (lambda x, q, s: gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda"),
                     lambda: (torch.randn(1, K, device="cuda").half(), *_rand_qw(N, K)))}
    cases.update({name: case(v) for v, name in V.items()})
    res = bench.compare(cases, "lib", bytes_moved=_qbytes(1, K, N), rounds=3, iters=20)
    out["gemv"][key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"),
                            "x_lib": st["speedup_vs_baseline"]} for n, st in res["cases"].items()}
    for n, st in sorted(out["gemv"][key].items(), key=lambda kv: kv[1]["us"]):
        print(f"  {key:12s} {n:12s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_lib']:.2f} of lib", flush=True)
json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/mma_lab.json", "w"), indent=1)
