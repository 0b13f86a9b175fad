"""Int8 activations and DP4A (dp4a_lab.cu) at M = 1: the library's INT4-g128 weights (int4) or GGUF Q8_0 in
the library's GEMV layout (q8_0) against activations quantized to int8 per block of 32, beside the library's
GEMV of the same weights, cuBLAS fp16 and a same-size copy, on a GPU (not part of the library):

    python labs/gemv/dp4a_lab.py [int4|q8_0]     # writes $OUT/dp4a_lab.json or $OUT/dp4a_q8_0_lab.json

Checks before timing: each variant against the fp32 product of the exact weights q * s and the int8
activations as the lab quantizes them (must agree to 1e-4 of the largest output: the kernel is right);
then the error the int8 activations add against the fp32 product with the fp16 activations (reported, with
the fraction of outputs inside the library's tolerance 2.5e-3 * (|x| @ |W|^T)). Timed: each variant on
pre-quantized activations, the quantization alone, and (int4) quantization + variant 0 in one replay.
"""
import ctypes
import json
import os
import sys

import torch

from labcases import baseline_cases, time_cases, variant_case
from labbuild import load
from t4lib.benchmarks.gguf import FFN, HIDDEN
from t4lib.ops.gguf import gguf_dequant, gguf_gemv_packed, pack_for_gemv, reference as gref
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
lib = load("dp4a_lab.cu")
lib.dp4a_lab_quantize.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
lib.dp4a_lab_gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 5 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
lib.dp4a_lab_q8_0.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
MODE = sys.argv[1] if len(sys.argv) > 1 else "int4"
V = {0: "R2U2pipeMB4", 1: "R2U4MB8", 2: "R4U2MB8", 3: "R2U2pipeMB6", 4: "R4U2pipeMB4", 5: "R2U4pipeMB4",
     6: "R4U4MB4", 7: "R2U2MB8"}
shapes = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896), (3584, 37888), (18944, 3584)]
out = {"note": "labs/gemv/dp4a_lab.py; medians in us over CUDA-graph replay with cold L2; frac = fraction of "
               "the 1 GiB copy bandwidth on the W4A16 byte count (fp16 x); x_cublas = cuBLAS fp16 time / case time",
       "device": torch.cuda.get_device_name(), "variants": V, "gemv": {}, "check": {}}


def stream():
    return torch.cuda.current_stream().cuda_stream


def quantize(x, xq, ds, K, permute=1):
    return lib.dp4a_lab_quantize(x.data_ptr(), xq.data_ptr(), ds.data_ptr(), K, permute, stream())


def gemv(v, q, s, xq, ds, y, N, K):
    return lib.dp4a_lab_gemv(v, q.data_ptr(), s.data_ptr(), xq.data_ptr(), ds.data_ptr(), y.data_ptr(), N, K, stream())


def bufs(K):
    return torch.empty(K, dtype=torch.int8, device="cuda"), torch.empty(K // 16, device="cuda")


def int8_x(x, K):
    """The activations the kernels see: x rounded to int8 per block of 32 (d = max |x| / 127), in fp32."""
    blocks = x.float().view(-1, 32)
    d = blocks.abs().amax(dim=1, keepdim=True) / 127
    return (torch.where(d > 0, torch.round(blocks / d), torch.zeros_like(blocks)) * d).view(1, K)


def check_variants(run, names, ref8, ref, tol, N, key):
    """Run each variant into a NaN-filled y; it must match the int8-activation product (the kernel is right).
    Returns per variant the errors against both products and the share of outputs inside ``tol``."""
    chk = {}
    for v, name in names.items():
        y = torch.full((1, N), float("nan"), device="cuda", dtype=torch.float16)
        st = run(v, y)
        torch.cuda.synchronize()
        kern_err = float((y.float() - ref8).abs().max() / ref8.abs().max())
        if st != 0 or not kern_err < 1e-3:
            raise SystemExit(f"{key} {name}: status {st}, error against the int8-activation product {kern_err}")
        chk[name] = {"vs_int8_product": kern_err,
                     "vs_fp16_product": float((y.float() - ref).abs().max() / ref.abs().max()),
                     "frac_within_w4a16_tolerance": float(((y.float() - ref).abs() <= tol).float().mean())}
    return chk


def q8_0_lab():
    V8 = {0: "R4U1MB4", 1: "R2U1MB6", 2: "R2U2MB4", 3: "R2U1pipeMB4", 4: "R4U1MB3", 5: "R1U2MB6"}
    res_out = {"note": "labs/gemv/dp4a_lab.py q8_0; GGUF Q8_0 in the library's GEMV layout; medians in us over "
                       "CUDA-graph replay with cold L2; frac = fraction of the 1 GiB copy bandwidth on the Q8_0 "
                       "bytes + fp16 x and y; check as in dp4a_lab.json",
               "device": torch.cuda.get_device_name(), "variants": V8, "gemv": {}, "check": {}}
    for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
        key = f"N{N}_K{K}"
        raw = gref.random_blocks(8, N * K // 32, seed=7, scale=0.01).reshape(-1).cuda()
        packed = pack_for_gemv(raw, 8, N, K)
        w = gguf_dequant(raw, 8, (N, K)).float()
        x = torch.randn(1, K, device="cuda").half()
        ref8, ref = int8_x(x, K) @ w.t(), x.float() @ w.t()
        tol = 2.5e-3 * (x.float().abs() @ w.abs().t())
        xq, ds = bufs(K)
        assert quantize(x, xq, ds, K, 0) == 0
        chk = check_variants(lambda v, y: lib.dp4a_lab_q8_0(v, packed.data_ptr(), xq.data_ptr(), ds.data_ptr(),
                                                            y.data_ptr(), N, K, stream()), V8, ref8, ref, tol, N, key)
        res_out["check"][key] = chk
        w16 = w.half()

        def mk(t):
            return lambda: (t.clone(), torch.randn(1, K, device="cuda").half(),
                            torch.empty(1, N, device="cuda", dtype=torch.float16))

        def mk_pre():
            xq_, ds_ = bufs(K)
            quantize(torch.randn(1, K, device="cuda").half(), xq_, ds_, K, 0)
            return packed.clone(), xq_, ds_, torch.empty(1, N, device="cuda", dtype=torch.float16)
        nbytes = N * K // 32 * 34 + 2 * (K + N)
        cases = {
            "lib_gemv_layout": (lambda p_, x_, y_: gguf_gemv_packed(p_, 8, x_, N, K, backend="cuda", out=y_), mk(packed)),
            "cublas_fp16": (lambda w_, x_, y_: torch.matmul(x_, w_.t(), out=y_), mk(w16)),
            "copy_same_bytes": (lambda d, s_: d.copy_(s_), lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                                                    torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"))),
            "quantize_x_only": (lambda x_, xq_, ds_: quantize(x_, xq_, ds_, K, 0),
                                lambda: (torch.randn(1, K, device="cuda").half(), *bufs(K))),
        }
        for v in V8:
            cases[V8[v]] = (lambda p_, xq_, ds_, y_, v=v: lib.dp4a_lab_q8_0(
                v, p_.data_ptr(), xq_.data_ptr(), ds_.data_ptr(), y_.data_ptr(), N, K, stream()), mk_pre)
        time_cases(cases, "cublas_fp16", nbytes, key, res_out["gemv"], max_sets=8)
        print("  check", json.dumps(chk[V8[0]]), flush=True)
        json.dump({**lab_record(" ".join(["python", *sys.argv])), **res_out}, open(f"{OUT}/dp4a_q8_0_lab.json", "w"), indent=1)


if MODE == "q8_0":
    q8_0_lab()
    sys.exit(0)
for K, N in shapes:
    key = f"{K}x{N}"
    q, s = _rand_qw(N, K)
    x = torch.randn(1, K, device="cuda").half()
    qw = QuantizedWeight(q, s, N, K, 128)
    w32 = qw.unpack().float() * s.float().repeat_interleave(128, dim=1)       # exact q * s
    ref8, ref = int8_x(x, K) @ w32.t(), x.float() @ qw.dequantize().float().t()
    tol = 2.5e-3 * (x.float().abs() @ qw.dequantize().float().abs().t())
    xq, ds = bufs(K)
    assert quantize(x, xq, ds, K) == 0
    chk = check_variants(lambda v, y: gemv(v, q, s, xq, ds, y, N, K), V, ref8, ref, tol, N, key)
    out["check"][key] = chk

    cases = baseline_cases(K, N)

    def mk_pre():
        q_, s_ = _rand_qw(N, K)
        xq_, ds_ = bufs(K)
        quantize(torch.randn(1, K, device="cuda").half(), xq_, ds_, K)
        return q_, s_, xq_, ds_, torch.empty(1, N, device="cuda", dtype=torch.float16)
    for v in V:
        cases[V[v]] = (lambda q_, s_, xq_, ds_, y_, v=v: gemv(v, q_, s_, xq_, ds_, y_, N, K), mk_pre)
    cases["quantize_x_only"] = (lambda x_, xq_, ds_: quantize(x_, xq_, ds_, K),
                                lambda: (torch.randn(1, K, device="cuda").half(), *bufs(K)))

    xq_b, ds_b = bufs(K)  # scratch of the chained case

    def both(q_, s_, x_, y_):
        quantize(x_, xq_b, ds_b, K)
        gemv(0, q_, s_, xq_b, ds_b, y_, N, K)
    cases["quantize_x+R2U2pipeMB4"] = variant_case(both, K, N)
    time_cases(cases, "cublas_fp16", _qbytes(1, K, N), key, out["gemv"])
    print("  check", json.dumps(chk["R2U2pipeMB4"]), flush=True)
    json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/dp4a_lab.json", "w"), indent=1)
