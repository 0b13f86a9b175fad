"""Int8 activations for the GEMVs (opt-in ``activations="int8"``): the quantization and its error.

The decode GEMVs can take their activations quantized to int8 instead of fp16,
as llama.cpp's mmvq does (its ``q8_1`` blocks): each block of 32 consecutive
values of a row of ``x`` gets

* ``d = max |x| / 127`` (fp32, IEEE division; 0 for an all-zero block),
* ``q = rint(x / d)`` in int8 (round half to even; 0 where ``d == 0``),
* the exact integer ``sum(q)`` (formats whose quants carry an offset subtract
  ``offset * sum`` once per block).

The dot products then run on integers (DP4A: four int8 products and their sum
in one instruction), about 5 instructions per 8 weights instead of about 28 for
dequantizing to fp16. This is other numerics than W4A16: ``x`` is replaced by
``x~ = q * d``, so each output moves by at most

``|y(x) - y(x~)| <= sum_k |W[n, k]| * d_block(k) / 2``   (:func:`error_bound`),

the rounding of each activation to its block's grid. An outlier in a block
coarsens the grid for the small values beside it; the bound says by how much.
The CUDA kernels then compute the product of ``x~`` with the weights to fp32
accuracy (integer block sums are exact).

This module is the PyTorch twin of the quantization kernel in
``kernels/gemv.cuh`` (bit-exact: same fp32 operations in the same order).
"""
from __future__ import annotations

import torch

__all__ = ["BLOCK", "ACTIVATIONS", "check_activations", "quantize", "dequantize", "error_bound",
           "NIBBLE_ORDER", "nibble_order", "empty_blocks"]

BLOCK = 32
ACTIVATIONS = ("fp16", "int8")
# Byte p of each group of 8 int8 activations holds value NIBBLE_ORDER[p] in the layout the INT4 kernel
# reads (the packed INT4 word's low nibbles are values 0, 4, 1, 5 and its high nibbles 2, 6, 3, 7).
NIBBLE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def check_activations(activations) -> str:
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
    return activations


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] (K % 32 == 0) -> (q [M, K] int8, d [M, K/32] fp32, sums [M, K/32] int32), values in order."""
    if x.dim() != 2 or x.shape[1] % BLOCK:
        raise ValueError(f"x must be [M, K] with K a multiple of {BLOCK}, got shape {tuple(x.shape)}")
    M, K = x.shape
    xb = x.to(torch.float32).reshape(M, K // BLOCK, BLOCK)
    amax = xb.abs().amax(dim=-1)
    d = amax / 127.0
    safe = torch.where(amax == 0, torch.ones_like(d), d)
    q = torch.where(amax[..., None] == 0, torch.zeros_like(xb), torch.round(xb / safe[..., None]))
    q = q.to(torch.int8)
    return q.reshape(M, K), d, q.to(torch.int32).sum(dim=-1, dtype=torch.int32)


def dequantize(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """x~ [M, K] fp32 = q * d (per block of 32)."""
    M, K = q.shape
    return (q.to(torch.float32).reshape(M, K // BLOCK, BLOCK) * d[..., None]).reshape(M, K)


def error_bound(x: torch.Tensor, w_abs: torch.Tensor) -> torch.Tensor:
    """[M, N] bound on |x @ W^T - x~ @ W^T| given |W| [N, K] (fp32): half a grid step per activation."""
    _, d, _ = quantize(x)
    half_step = (d / 2).repeat_interleave(BLOCK, dim=1)
    return half_step.to(w_abs.dtype).to(w_abs.device) @ w_abs.t()


def nibble_order(q: torch.Tensor) -> torch.Tensor:
    """q [M, K] in value order -> the byte order the INT4 kernel reads (see NIBBLE_ORDER)."""
    M, K = q.shape
    return q.reshape(M, K // 8, 8)[..., list(NIBBLE_ORDER)].reshape(M, K)


def empty_blocks(M: int, K: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The buffers the quantization kernels fill: q [M, K] int8 and s [M, K/32, 2] int32 holding, per block,
    d as fp32 bits and the integer sum (kernels/gemv.cuh's XBlock). ``s[..., 0].view(torch.float32)`` is d."""
    return (torch.empty(M, K, dtype=torch.int8, device=device),
            torch.empty(M, K // BLOCK, 2, dtype=torch.int32, device=device))
