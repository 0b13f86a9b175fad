"""Launch knobs of the library's int8-activation GGUF GEMVs at M = 1 (gguf_x8_lab.cu), on a GPU (not part of the
library): for each GEMV-layout format at N x K = 17408 x 5120 and 5120 x 17408, 9 (rows per warp, chunks per
stage, register stages, CTAs per SM) variants of the GEMV kernel on x quantized beforehand, beside the library's
int8 op (quantization included), its kernel alone and its fp16-activation GEMV:

    python labs/gemv/gguf_x8_lab.py          # writes $OUT/gguf_x8_lab.json

Check before timing: every variant's output equal, bit for bit, to the library's int8 kernel where it takes the
same K split (rows per warp change the number of row groups, which can change the split and so the order of
the fp32 sums): else within 1e-3 of its largest output.
"""
import ctypes
import json
import os
import sys

import torch

from labbuild import load
from labcases import time_cases
from t4lib.benchmarks.gguf import FFN, HIDDEN
from t4lib.ops.int8_activations import empty_blocks
from t4lib.ops.gguf import binding, gguf_gemv_packed, pack_for_gemv, reference as gref, type_id
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
lib = load("gguf_x8_lab.cu")
lib.gx8_lab_gemv.argtypes = [ctypes.c_int] * 2 + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
V = {0: "R4U1MB4", 1: "R2U1MB8", 2: "R2U2MB6", 3: "R4U1pipeMB3", 4: "R2U1pipeMB6", 5: "R4U2MB3", 6: "R1U2MB8",
     7: "R2U2MB8", 8: "R4U1MB3"}
FORMATS = ("Q4_K", "Q6_K", "IQ4_XS", "Q8_0", "Q5_K", "Q3_K")
out = {"note": "labs/gemv/gguf_x8_lab.py; medians in us over CUDA-graph replay with cold L2; frac = fraction "
               "of the 1 GiB copy bandwidth on the GGUF bytes + fp16 x and y; x_lib_int8_kernel = the library's int8 "
               "kernel time / case time (same process)",
       "device": torch.cuda.get_device_name(), "variants": V, "gemv": {}}


def stream():
    return torch.cuda.current_stream().cuda_stream


def x8(K):
    x = torch.randn(1, K, device="cuda").half()
    q, s = empty_blocks(1, K, "cuda")
    binding.quantize_x8(x, q, s)
    return q, s


for fmt in FORMATS:
    t = type_id(fmt)
    for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
        key = f"{fmt}/N{N}_K{K}"
        raw = gref.random_blocks(t, N * K // gref.FORMATS[t][1], seed=7, scale=0.01).reshape(-1).cuda()
        packed = pack_for_gemv(raw, t, N, K)
        del raw
        q, s = x8(K)
        want = torch.empty(1, N, dtype=torch.float16, device="cuda")
        binding.gemv_packed_x8(t, packed, q, s, want, 1, N, K)
        for v, name in V.items():
            y = torch.full((1, N), float("nan"), dtype=torch.float16, device="cuda")
            st = lib.gx8_lab_gemv(t, v, packed.data_ptr(), q.data_ptr(), s.data_ptr(), y.data_ptr(), N, K, stream())
            torch.cuda.synchronize()
            close = (y.float() - want.float()).abs().max() <= 1e-3 * want.float().abs().max()
            if st != 0 or not close:
                raise SystemExit(f"{key} {name}: status {st}, does not match the library's int8 kernel")

        def mk_pre(packed=packed, K=K, N=N):
            return (packed.clone(), *x8(K), torch.empty(1, N, device="cuda", dtype=torch.float16))

        def mk_x(packed=packed, K=K, N=N):
            return (packed.clone(), torch.randn(1, K, device="cuda").half(),
                    torch.empty(1, N, device="cuda", dtype=torch.float16))
        cases = {
            "lib_int8_kernel": (lambda p_, q_, s_, y_, t=t, N=N, K=K: binding.gemv_packed_x8(t, p_, q_, s_, y_, 1, N, K),
                                mk_pre),
            "lib_int8_op": (lambda p_, x_, y_, t=t, N=N, K=K: gguf_gemv_packed(p_, t, x_, N, K, backend="cuda", out=y_,
                                                                              activations="int8"), mk_x),
            "lib_fp16_op": (lambda p_, x_, y_, t=t, N=N, K=K: gguf_gemv_packed(p_, t, x_, N, K, backend="cuda", out=y_),
                            mk_x),
        }
        for v, name in V.items():
            cases[name] = (lambda p_, q_, s_, y_, v=v, t=t, N=N, K=K: lib.gx8_lab_gemv(
                t, v, p_.data_ptr(), q_.data_ptr(), s_.data_ptr(), y_.data_ptr(), N, K, stream()), mk_pre)
        nbytes = packed.numel() + 2 * (K + N)
        time_cases(cases, "lib_int8_kernel", nbytes, key, out["gemv"], max_sets=8)
        json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/gguf_x8_lab.json", "w"), indent=1)
        del packed
        torch.cuda.empty_cache()
