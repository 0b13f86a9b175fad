"""Benchmark of the GGUF dequant-GEMV (M = 1) at the 27B model's FFN shapes, each
format against cuBLAS on the same weights in fp16, fp16 and (where the format has
the GEMV layout) int8 activations. :func:`dequant_gemv` returns figures and
metadata; the run that writes them is :mod:`t4lib.models.qwen35.components_bench`.
"""
from __future__ import annotations

import torch

from ... import bench
from . import FORMATS, gguf_dequant, gguf_gemv, packing, reference as gref, type_id

SOURCE = "t4lib.ops.gguf.bench"
HIDDEN, FFN = 5120, 17408   # the 27B model's hidden and FFN widths
GEMV_FORMATS = ("Q4_K", "Q6_K", "IQ4_XS", "Q8_0", "Q5_K", "Q3_K")  # read in the GEMV layout
RAW_GEMV_FORMATS = ("IQ4_NL", "IQ3_S")  # no GEMV layout: read as GGUF stores them



def dequant_gemv(quick: bool = False) -> tuple[list[dict], dict]:
    dev = "cuda"
    figs, meta = [], {}
    for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
        for fmt in GEMV_FORMATS + RAW_GEMV_FORMATS:
            t = type_id(fmt)
            nv, nb = FORMATS[t][1], FORMATS[t][2]
            base_raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).to(dev)
            w16 = gguf_dequant(base_raw, t, (N, K), out_dtype=torch.float16)
            def make():  # distinct weight copies so each call reads cold weights
                return (base_raw.clone(), torch.randn(1, K, device=dev, dtype=torch.float16))

            def make16():
                return (w16.clone(), torch.randn(1, K, device=dev, dtype=torch.float16))

            cases = {"gguf_gemv": (lambda raw, x: gguf_gemv(raw, t, x, N, K, backend="cuda"), make),
                     "cublas_fp16": (lambda w, x: x @ w.t(), make16)}
            if packing.supports(t, K):  # int8 activations (other numerics): quantize x, then the DP4A GEMV
                cases["gguf_gemv_int8"] = (lambda raw, x: gguf_gemv(raw, t, x, N, K, backend="cuda",
                                                                    activations="int8"), make)
            nbytes = N * K // nv * nb + 2 * K + 2 * N
            res = bench.compare(cases, baseline="cublas_fp16", bytes_moved=nbytes, rounds=3,
                                iters=10 if quick else 20, max_sets=16)
            prefix = f"gguf_gemv/{fmt}/N{N}_K{K}"
            figs += bench.to_figures(res, prefix, SOURCE)
            meta[prefix] = {"weight_bytes": N * K // nv * nb,
                            "layout": "gemv" if packing.supports(t, K) else "gguf",  # as gguf_gemv chooses
                            "note": "cublas_fp16 reads 2 bytes per weight; its frac_copy_bw uses the GGUF bytes"}
            del base_raw, w16
            torch.cuda.empty_cache()
    return figs, meta
