"""The public W4A16 quantizers: :mod:`.w4a16`'s RTN and GPTQ behind the checks that keep them from
returning wrong numbers without a word.

The format dequantizes to fp16 (the kernels multiply in fp16): code ``-8`` times a group's scale
``absmax / 7.5`` must stay within fp16's largest finite value, so a weight needs
``|w| <= 65504 * 7.5 / 8`` (about 61,410); beyond it the scales or the dequantized weights overflow to
inf and every product with them is inf or NaN. Such a weight is refused, naming where it breaks. Tiny
weights are no error: a group whose scale would fall below fp16's smallest subnormal (``absmax`` under
about 4.5e-7) takes that subnormal as its scale, so each weight stays within half a step of it.
"""
from __future__ import annotations

import math
import numbers

import torch

from t4lib.quant.w4a16 import QuantizedWeight, _check_weight
from t4lib.quant.w4a16 import quantize_gptq as _gptq
from t4lib.quant.w4a16 import quantize_rtn as _rtn

FP16_MAX = 65504.0
MAX_ABS_WEIGHT = FP16_MAX * 7.5 / 8   # |w| whose code -8 times its scale still fits fp16


def check_weight_range(weight: torch.Tensor, name: str = "weight") -> None:
    """Raise if some ``|weight|`` exceeds :data:`MAX_ABS_WEIGHT` (its group's fp16 scale would overflow)."""
    amax = weight.detach().abs().amax(dim=1)
    worst = int(amax.argmax())
    if float(amax[worst]) > MAX_ABS_WEIGHT:
        raise ValueError(f"{name}: |w| reaches {float(amax[worst]):.4g} (row {worst}); W4A16 dequantizes to fp16, "
                         f"so |w| must stay <= {MAX_ABS_WEIGHT:.0f} (8 x scale <= {FP16_MAX:.0f}); rescale the "
                         f"layer or keep it fp16/fp32")


def _check_scales(qw: QuantizedWeight, name: str) -> QuantizedWeight:
    s = qw.scales.float()
    if not torch.isfinite(s).all() or float(s.abs().max()) * 8 > FP16_MAX:
        raise ValueError(f"{name}: a group scale overflows fp16 after GPTQ's error updates "
                         f"(max {float(s.abs().max()):.4g}); the layer's weights are too large for W4A16")
    return qw


def quantize_rtn(weight: torch.Tensor, group_size: int = 128) -> QuantizedWeight:
    """Round-to-nearest (:func:`.w4a16.quantize_rtn`) of ``weight [N, K]`` after the range check above."""
    _check_weight(weight, group_size)
    check_weight_range(weight)
    return _rtn(weight, group_size)


def quantize_gptq(weight: torch.Tensor, hessian: torch.Tensor, group_size: int = 128, *, damp: float = 0.01,
                  block: int = 128) -> QuantizedWeight:
    """GPTQ (:func:`.w4a16.quantize_gptq`) after checking ``block`` (a positive multiple of ``group_size``),
    ``damp`` (finite, >= 0), a finite ``hessian`` and the weight's range; the scales are checked after."""
    N, K = _check_weight(weight, group_size)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1 or block % group_size:
        raise ValueError(f"block must be a positive multiple of group_size={group_size}, got {block!r}")
    if isinstance(damp, bool) or not isinstance(damp, numbers.Real) or not math.isfinite(damp) or damp < 0:
        raise ValueError(f"damp must be a finite number >= 0, got {damp!r}")
    if isinstance(hessian, torch.Tensor) and tuple(hessian.shape) == (K, K) and not torch.isfinite(hessian).all():
        raise ValueError("hessian contains NaN or Inf")
    check_weight_range(weight)
    return _check_scales(_gptq(weight, hessian, group_size, damp=damp, block=block), "weight")
