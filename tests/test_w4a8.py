"""t4lib.ops.w4a8: the W4A8 GEMV under its own name (CPU: the reference path)."""
import pytest
import torch

from t4lib.ops import int8_activations, w4a8, w4a16
from t4lib.quant.w4a16 import quantize_rtn


def test_w4a8_is_the_int8_activation_gemv_and_stays_within_its_bound():
    g = torch.Generator().manual_seed(0)
    w = quantize_rtn(torch.randn(40, 256, generator=g), 64)
    x = torch.randn(3, 256, generator=g).half()
    y = w4a8.gemv(x, w)
    assert torch.equal(y, w4a16.gemv(x, w, activations="int8")) and torch.equal(y, w4a8.reference(x, w))
    wd = w4a16.reference.exact_weight(w)
    exact = x.float() @ wd.t()
    bound = int8_activations.error_bound(x, wd.abs())
    assert ((y.float() - exact).abs() <= bound + 1e-2 * exact.abs().max()).all()   # + fp16 rounding of y


def test_w4a8_bad_input_names_the_argument():
    w = quantize_rtn(torch.randn(16, 64), 32)
    with pytest.raises(ValueError, match="M=9"):
        w4a8.gemv(torch.randn(9, 64).half(), w)
    with pytest.raises(TypeError, match="w must be"):
        w4a8.gemv(torch.randn(1, 64).half(), torch.randn(16, 64))
