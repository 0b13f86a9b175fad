"""Pure-PyTorch reference for the W4A16 GEMV/GEMM (defines the semantics, runs on CPU).

``y[m, n] = fp16( sum_k x[m, k] * W_deq[n, k] )`` with ``W_deq`` the fp16
dequantized weight of :class:`t4lib.ops.w4a16.format.QuantizedWeight` and the sum
taken in fp32.

Tolerance of the CUDA kernels against this reference (:func:`tolerance`):

* GEMV: the kernel multiplies fp16 weights by fp16 activations with four
  chained half2 FMAs per 8 values, then accumulates in fp32. Each of the 4
  roundings is at most 2^-11 of the running |partial| <= sum of |x w| over the
  8 values, so ``|y - y_ref| <= 4 * 2^-11 * sum_k |x_k w_nk|`` plus the final
  fp16 rounding of ``y`` (2^-11 |y|) and fp32 summation noise.
* GEMM (WMMA) and MMA GEMM (mma.sync m16n8k8): products of fp16 inputs are
  exact in fp32 and accumulate in fp32, so only the summation order and the
  final rounding differ: well inside the same bound.

``tolerance`` returns ``2.5e-3 * (|x| @ |W_deq|^T) + 1e-3 * |y_ref| + 1e-5`` elementwise.

Int8 activations (``activations="int8"``, GEMV only, see
:mod:`t4lib.ops.int8_activations`): ``y = fp16( x~ @ (q * s)^T )`` with ``x~``
the int8-quantized activations and ``q * s`` the exact fp32 product (not
rounded to fp16). The kernel sums each 32-value chunk exactly in integers and
applies ``s * d`` in fp32, so only fp32 rounding and the final fp16 rounding
differ: :func:`tolerance_int8` is ``1e-4 * (|x~| @ |q * s|^T) + 1e-3 * |y_ref| + 1e-5``.
"""
from __future__ import annotations

import torch


def matmul(x: torch.Tensor, w) -> torch.Tensor:
    """x [M, K] (any float dtype) @ W_deq^T -> [M, N] in x.dtype (fp32 accumulation)."""
    wd = w.dequantize(torch.float32).to(x.device)
    return (x.to(torch.float32) @ wd.t()).to(x.dtype)


gemv = matmul
gemm = matmul
mma = matmul  # the MMA GEMM (any weight with ``dequantize``: QuantizedWeight or layout.MmaWeight)


def exact_weight(w) -> torch.Tensor:
    """[N, K] fp32 q * s (exact: 4-bit times 11-bit significands)."""
    s = w.scales.to(torch.float32).repeat_interleave(w.group_size, dim=1)
    return w.unpack().to(torch.float32).to(s.device) * s


def gemv_int8(x: torch.Tensor, w) -> torch.Tensor:
    """W4A8: fp16( x~ @ (q * s)^T ) in fp32, x~ the int8 activations of x [M, K] fp16 -> [M, N] fp16."""
    from ..int8_activations import dequantize, quantize

    q, d, _ = quantize(x)
    wq = exact_weight(w).to(x.device)
    return (dequantize(q, d) @ wq.t()).to(torch.float16)


def tolerance_int8(x: torch.Tensor, w, y_ref: torch.Tensor) -> torch.Tensor:
    """Elementwise absolute tolerance [M, N] of the W4A8 kernel against :func:`gemv_int8`."""
    from ..int8_activations import dequantize, quantize

    q, d, _ = quantize(x)
    bound = dequantize(q, d).abs() @ exact_weight(w).abs().to(x.device).t()
    return 1e-4 * bound + 1e-3 * y_ref.to(torch.float32).abs() + 1e-5


def tolerance(x: torch.Tensor, w, y_ref: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise absolute tolerance [M, N] of the CUDA paths (see module docstring)."""
    wd = w.dequantize(torch.float32).to(x.device)
    x32 = x.to(torch.float32)
    bound = x32.abs() @ wd.abs().t()
    if y_ref is None:
        y_ref = x32 @ wd.t()
    return 2.5e-3 * bound + 1e-3 * y_ref.to(torch.float32).abs() + 1e-5
