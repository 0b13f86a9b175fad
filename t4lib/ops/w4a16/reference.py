"""Pure-PyTorch reference for the W4A16 GEMV/GEMM (defines the semantics, runs on CPU).

``y[m, n] = fp16( sum_k x[m, k] * W_deq[n, k] )`` with ``W_deq`` the fp16
dequantized weight of :class:`t4lib.quant.w4a16.QuantizedWeight` and the sum
taken in fp32.

Tolerance of the CUDA kernels against this reference (:func:`tolerance`):

* GEMV: the kernel multiplies fp16 weights by fp16 activations with four
  chained half2 FMAs per 8 values, then accumulates in fp32. Each of the 4
  roundings is at most 2^-11 of the running |partial| <= sum of |x w| over the
  8 values, so ``|y - y_ref| <= 4 * 2^-11 * sum_k |x_k w_nk|`` plus the final
  fp16 rounding of ``y`` (2^-11 |y|) and fp32 summation noise.
* GEMM: WMMA products of fp16 inputs are exact in fp32 and accumulate in
  fp32, so only the summation order and the final rounding differ: well
  inside the same bound.

``tolerance`` returns ``2.5e-3 * (|x| @ |W_deq|^T) + 1e-3 * |y_ref| + 1e-5`` elementwise.
"""
from __future__ import annotations

import torch


def matmul(x: torch.Tensor, w) -> torch.Tensor:
    """x [M, K] (any float dtype) @ W_deq^T -> [M, N] in x.dtype (fp32 accumulation)."""
    wd = w.dequantize(torch.float32).to(x.device)
    return (x.to(torch.float32) @ wd.t()).to(x.dtype)


gemv = matmul
gemm = matmul


def tolerance(x: torch.Tensor, w, y_ref: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise absolute tolerance [M, N] of the CUDA paths (see module docstring)."""
    wd = w.dequantize(torch.float32).to(x.device)
    x32 = x.to(torch.float32)
    bound = x32.abs() @ wd.abs().t()
    if y_ref is None:
        y_ref = x32 @ wd.t()
    return 2.5e-3 * bound + 1e-3 * y_ref.to(torch.float32).abs() + 1e-5
