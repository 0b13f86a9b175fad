"""M = 1 INT4-g128 GEMV variants against the library, cuBLAS fp16 and a same-size copy, on a GPU (not
part of the library):

    python labs/gemv/m1_lab.py xs|stages [VARIANTS]     # writes $OUT/<lab>_lab.json

xs (xs_lab.cu): 0 = the library's row-group kernel, 1.. = an x-stationary kernel (x held in registers,
K cut into one slice per warp) with R rows per task, W warps per CTA at most, MB CTAs per SM minimum
(the register cap).
stages (stage_lab.cu): the library's kernel with R rows per warp, U chunks per stage, ST register stages,
MB CTAs per SM minimum, "/S<n>" the intra-CTA K split forced to n = 1 or 4 (else chosen from the shape);
variant 0 is the library's own tuning.
Every variant must match the fp32 product of the dequantized weights to 1e-3 of its largest value
before it is timed; a variant that does not take a shape (returns -1) is left out of that shape.
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

LABS = {
    "xs": ("xs_lab.cu", "xs_lab_gemv",
           {0: "rowgroup", 1: "R4W16MB1", 2: "R2W16MB1", 3: "R8W16MB1", 4: "R4W8MB2", 5: "R4W8MB3", 6: "R2W8MB3",
            7: "R2W16MB2", 8: "R1W16MB1", 9: "R8W8MB2", 10: "R4W4MB4"}),
    "stages": ("stage_lab.cu", "stage_lab_gemv",
               {0: "R2U2ST2MB4", 1: "R2U1ST4MB4", 2: "R2U1ST3MB4", 3: "R2U2ST3MB4", 4: "R4U1ST3MB4",
                5: "R4U1ST4MB4", 6: "R2U1ST6MB4", 7: "R1U2ST4MB4", 8: "R2U1ST4MB5", 9: "R2U1ST3MB5",
                10: "R1U1ST8MB4", 11: "R2U1ST5MB4", 12: "R1U2ST3MB5", 13: "R4U1ST2MB4", 14: "R1U1ST6MB6",
                15: "R2U1ST4MB6", 16: "R2U2ST2MB4/S1", 18: "R2U2ST2MB4/S4",
                20: "R4U1ST3MB4/S4", 22: "R2U1ST3MB4/S4"}),
}
LAB = sys.argv[1]
cu, sym, V = LABS[LAB]
OUT = os.environ.get("OUT", "/tmp/out")
fn_lab = getattr(load(cu), sym)
fn_lab.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
if len(sys.argv) > 2:
    V = {v: n for v, n in V.items() if v == 0 or str(v) in sys.argv[2].split(",")}
shapes = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896), (896, 896), (3584, 4608),
          (3584, 3584), (3584, 37888), (18944, 3584), (1536, 8960), (8960, 1536)]
out = {"note": f"labs/gemv/m1_lab.py {LAB}; medians in us over CUDA-graph replay with cold L2; frac = fraction of "
               "the 1 GiB copy bandwidth; x_cublas = cuBLAS fp16 time / variant time; check = max |y - fp32 "
               "product of the dequantized weights| / max |that product|",
       "device": torch.cuda.get_device_name(), "variants": V, "gemv": {}, "check": {}}


def run(v, q, s, x, y, N, K):
    return fn_lab(v, q.data_ptr(), s.data_ptr(), x.data_ptr(), y.data_ptr(), N, K,
                  torch.cuda.current_stream().cuda_stream)


for K, N in shapes:
    key = f"{K}x{N}"
    q, s = _rand_qw(N, K)
    x = torch.randn(1, K, device="cuda").half()
    w = QuantizedWeight(q, s, N, K, 128).dequantize().float()
    ref = x.float() @ w.t()
    lib_y = gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda")
    chk, live = {"library": float((lib_y.float() - ref).abs().max() / ref.abs().max())}, []
    for v in V:
        y = torch.full((1, N), float("nan"), device="cuda", dtype=torch.float16)
        st = run(v, q, s, x, y, N, K)
        torch.cuda.synchronize()
        if st == -1:
            chk[V[v]] = "n/a"
            continue
        err = float((y.float() - ref).abs().max() / ref.abs().max())
        chk[V[v]] = err
        if st != 0 or not err < 1e-3:
            raise SystemExit(f"{key} {V[v]}: status {st}, error {err}")
        live.append(v)
    out["check"][key] = chk
    if not chk["library"] < 1e-3:
        raise SystemExit(f"{key} library: error {chk['library']}")

    nb = _qbytes(1, K, N)
    cases = baseline_cases(K, N)
    for v in live:
        cases[V[v]] = variant_case(lambda q, s, x, y, v=v: run(v, q, s, x, y, N, K), K, N)
    time_cases(cases, "cublas_fp16", nb, key, out["gemv"])
    json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/{LAB}_lab.json", "w"), indent=1)
