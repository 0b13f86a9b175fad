"""The public W4A16 quantizers: :mod:`.w4a16`'s RTN and GPTQ behind the checks that keep them from
returning wrong numbers without a word.

The format dequantizes to fp16 (the kernels multiply in fp16): code ``-8`` times a group's scale
``absmax / 7.5`` must stay within fp16's largest finite value, so a weight needs
``|w| <= 65504 * 7.5 / 8`` (about 61,410); beyond it the scales or the dequantized weights overflow to
inf and every product with them is inf or NaN. Such a weight is refused, naming where it breaks.

At the other end, fp16 resolves nothing finer than its smallest subnormal, ``2**-24`` (about 6e-8): a
group whose scale ``absmax / 7.5`` would fall below it takes that subnormal as its scale (never 0), and a
subnormal scale rounds to a multiple of it, so a weight's error is at most ``absmax(group) / 15`` plus
``1.25 * 2**-22`` (about 3e-7). That is no loss in a row whose largest weight is much larger (a tiny group
beside ordinary ones), but a row whose weights are all tiny would come back as zeros or coarse multiples
of 6e-8 (a row of 1e-8 dequantizes to zeros: relative error 1). A row whose largest ``|w|`` is non-zero
and under :data:`MIN_ABS_ROW` (``75 * 2**-24``, about 4.5e-6, where that extra term reaches the row's own
RTN bound) is therefore refused too, naming the row: every weight the quantizers return is within
``2 * absmax(row) / 15`` of the original (all-zero rows are exact).
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
MIN_ABS_ROW = 75 * 2.0 ** -24         # a row's largest |w| below which fp16 scales cannot resolve it


def check_weight_range(weight: torch.Tensor, name: str = "weight") -> None:
    """Raise if some ``|weight|`` exceeds :data:`MAX_ABS_WEIGHT` (its group's fp16 scale would overflow), or
    some row's largest ``|weight|`` is non-zero and under :data:`MIN_ABS_ROW` (fp16 scales cannot resolve it:
    see the module docstring)."""
    amax = weight.detach().abs().amax(dim=1).float()
    worst = int(amax.argmax())
    if float(amax[worst]) > MAX_ABS_WEIGHT:
        raise ValueError(f"{name}: |w| reaches {float(amax[worst]):.4g} (row {worst}); W4A16 dequantizes to fp16, "
                         f"so |w| must stay <= {MAX_ABS_WEIGHT:.0f} (8 x scale <= {FP16_MAX:.0f}); rescale the "
                         f"layer or keep it fp16/fp32")
    tiny = (amax > 0) & (amax < MIN_ABS_ROW)
    if bool(tiny.any()):
        row = int(torch.nonzero(tiny)[0])
        raise ValueError(f"{name}: row {row}'s largest |w| is {float(amax[row]):.3g} ({int(tiny.sum())} such "
                         f"rows); W4A16's fp16 scales resolve no step finer than 2**-24 (6e-8), so a row whose "
                         f"largest |w| is under {MIN_ABS_ROW:.2g} cannot keep RTN's precision (a row of 1e-8 "
                         f"dequantizes to zeros); scale the layer's weights up (and its output down) or "
                         f"keep it fp32")


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
