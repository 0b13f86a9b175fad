"""W4A16 GEMV/GEMM: fp16 activations times INT4 per-group-scaled weights.

``gemv(x, w)``: ``x [M, K] fp16`` with ``M = 1..8`` (decode), ``w`` a
:class:`.format.QuantizedWeight` ``[N, K]`` -> ``y [M, N] fp16``,
``y = x @ W_deq^T`` accumulated in fp32. One templated kernel
(kernels/gemv.cuh) reads each weight byte once with 16-byte loads and
dequantizes in registers.

``gemm(x, w)``: any M (prefill), WMMA m16n16k16 tensor cores on weight tiles
dequantized into shared memory, fp32 accumulation.

``activations="int8"`` (GEMV only, opt-in): W4A8. ``x`` is first quantized
to int8 per block of 32 values (:mod:`t4lib.ops.int8_activations`, one small
kernel), then the dot products run as DP4A integer sums, about a fifth of the
instructions of dequantizing to fp16: on an H200 it takes the M = 1 GEMV at the
27B shapes from about 0.5 to about 0.6 of copy bandwidth, quantization included
(results/nvidia-h200/w4a16_gemv.json). The result is
the product of the *quantized* activations, so it differs from the fp16 one by
up to :func:`t4lib.ops.int8_activations.error_bound`; against its own reference
(:func:`.reference.gemv_int8`) it is exact to fp32 summation.

``max_ctas`` caps the CUDA grid (occupancy pacing); every kernel is
grid-stride, so the result is bit-identical for any cap. The reference path
ignores it. Semantics and the kernels' error bound: :mod:`.reference`.
"""
from __future__ import annotations

import torch

from .._dispatch import check, check_grid_cap, use_cuda
from ..int8_activations import check_activations, empty_blocks
from . import binding, reference
from .format import QuantizedWeight

__all__ = ["gemv", "gemm", "matmul", "QuantizedWeight", "GEMV_MAX_M", "MATMUL_GEMV_MAX_M"]

GEMV_MAX_M = 8
# matmul's switch to the GEMM. The GEMV's arithmetic grows with M (each row is
# dequantized once but multiplied M times) while the GEMM's 16-row tile costs the
# same for M = 1..16. On the H200 (results/nvidia-h200/w4a16_gemv.json, _gemm.json):
# M = 4 is a near tie (5120x17408: GEMV 55 us, GEMM 50 us; 896x4864: 5.5 against
# 6.6 us); at M = 8 the GEMM wins (51 against 100 us; 6.8 against 8.7 us).
MATMUL_GEMV_MAX_M = 4


def _validate(x, w, max_ctas, gemv_range: bool) -> None:
    if not isinstance(w, QuantizedWeight):
        raise TypeError(f"w must be a t4lib.quant.w4a16.QuantizedWeight, got {type(w).__name__}")
    w.validate()
    check("x", x, dtype=torch.float16, ndim=2, contiguous=False)
    M, K = x.shape
    if K != w.K:
        raise ValueError(f"x has K={K} columns but w was quantized with K={w.K} (in_features)")
    if gemv_range and not 1 <= M <= GEMV_MAX_M:
        raise ValueError(f"gemv takes M = 1..{GEMV_MAX_M} rows of x, got M={M}; use gemm for larger M")
    if x.device != w.device:
        raise ValueError(f"x is on {x.device} but w is on {w.device}")
    check_grid_cap("max_ctas", max_ctas)


def _aligned(x: torch.Tensor) -> torch.Tensor:
    """x contiguous, copied when its address is not 16-byte aligned (the kernels read x with 16-byte loads)."""
    x = x.contiguous()
    return x.clone() if x.data_ptr() % 16 else x


def _check_cuda_weight(qweight: torch.Tensor, scales: torch.Tensor) -> None:
    check("w.qweight", qweight, contiguous=True, align=16)
    check("w.scales", scales, contiguous=True)


@torch.library.custom_op("t4lib::w4a16_gemv", mutates_args=())
def _gemv_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
               max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)  # in the op's body: under torch.compile only it sees real addresses
    out = torch.empty(x.shape[0], qweight.shape[0], dtype=torch.float16, device=x.device)
    binding.gemv(x, qweight, scales, group_size, out, max_ctas)
    return out


@_gemv_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_gemv_int8", mutates_args=())
def _gemv_int8_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
                    max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)
    M, K = x.shape
    q, s = empty_blocks(M, K, x.device)  # K % 32 == 0: 16-byte aligned rows of q
    out = torch.empty(M, qweight.shape[0], dtype=torch.float16, device=x.device)
    binding.quantize_x8(x, q, s, max_ctas)
    binding.gemv_x8(q, s, qweight, scales, group_size, out, max_ctas)
    return out


@_gemv_int8_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_gemm", mutates_args=())
def _gemm_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
               max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)
    out = torch.empty(x.shape[0], qweight.shape[0], dtype=torch.float16, device=x.device)
    if x.shape[0] > 0:
        binding.gemm(x, qweight, scales, group_size, out, max_ctas)
    return out


@_gemm_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


def gemv(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto",
         activations: str = "fp16") -> torch.Tensor:
    """[M, K] fp16 (M = 1..8) @ W_deq[N, K]^T -> [M, N] fp16 (see module docstring)."""
    _validate(x, w, max_ctas, gemv_range=True)
    if check_activations(activations) == "int8":
        if use_cuda(backend, binding.FAMILY, x.device):
            return _gemv_int8_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
        return reference.gemv_int8(x, w)
    if use_cuda(backend, binding.FAMILY, x.device):
        return _gemv_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
    return reference.gemv(x, w)


def gemm(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto") -> torch.Tensor:
    """[M, K] fp16 (any M) @ W_deq[N, K]^T -> [M, N] fp16 on tensor cores (see module docstring)."""
    _validate(x, w, max_ctas, gemv_range=False)
    if use_cuda(backend, binding.FAMILY, x.device):
        return _gemm_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
    return reference.gemm(x, w)


def matmul(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto",
           activations: str = "fp16") -> torch.Tensor:
    """GEMV for M <= MATMUL_GEMV_MAX_M, GEMM above: what QuantLinear calls.

    ``activations="int8"`` applies to the GEMV (decode) only; the GEMM (prefill) keeps fp16 activations."""
    check_activations(activations)
    if isinstance(x, torch.Tensor) and x.dim() == 2 and 1 <= x.shape[0] <= MATMUL_GEMV_MAX_M:
        return gemv(x, w, max_ctas=max_ctas, backend=backend, activations=activations)
    return gemm(x, w, max_ctas=max_ctas, backend=backend)
