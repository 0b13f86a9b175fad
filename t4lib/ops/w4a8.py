"""W4A8: INT4 weights times int8 activations, the decode GEMV under its own name.

The weights are the W4A16 format (:class:`t4lib.ops.w4a16.QuantizedWeight`: signed
INT4, fp16 scales per group of 32/64/128 along K); the activations are quantized
to int8 per block of 32 values (:mod:`t4lib.ops.int8_activations`, llama.cpp's
q8_1) and the dot products run as DP4A integer sums. It is other numerics than
W4A16: the result is the product of the quantized activations ``x~``, off the
fp16 one by at most :func:`error_bound`, and exact to fp32 summation against
its own reference (:func:`reference`). The kernels live with the W4A16 family
(one packing, one library); this module is the name a user looks for, the same
op as ``t4lib.ops.w4a16.gemv(x, w, activations="int8")``.
"""
from __future__ import annotations

import torch

from .int8_activations import error_bound, quantize
from .w4a16 import GEMV_MAX_M, QuantizedWeight
from .w4a16 import gemv as _w4a16_gemv
from .w4a16 import reference as _reference

__all__ = ["gemv", "reference", "error_bound", "quantize", "QuantizedWeight", "GEMV_MAX_M"]


def gemv(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto") -> torch.Tensor:
    """[M, K] fp16 (M = 1..8) @ W_deq[N, K]^T with x quantized to int8 per block of 32 -> [M, N] fp16."""
    return _w4a16_gemv(x, w, max_ctas=max_ctas, backend=backend, activations="int8")


def reference(x: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    """The PyTorch twin of :func:`gemv` (same quantization of x, fp32 sums)."""
    return _reference.gemv_int8(x, w)
