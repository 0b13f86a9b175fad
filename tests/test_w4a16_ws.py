"""The warp-specialized W4A16 GEMM (``gemm(..., warp_specialized=True)``): producer warps load and
dequantize, consumer warps run the WMMAs. Against the reference within its tolerance, and bit for bit
against the plain WMMA kernel wherever that one runs with one split (both accumulate every 16 x 16
output fragment's k16 products in the same order)."""
import functools

import pytest
import torch

from t4lib.ops import w4a16 as ops
from t4lib.ops.w4a16 import binding, reference
from t4lib.quant.w4a16 import quantize_rtn


def _w(N, K, g=128, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return quantize_rtn(torch.randn(N, K, generator=gen) * 0.05, g).to(device)


def _x(M, K, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).half().to(device)


def test_warp_specialized_must_be_a_bool():
    w, x = _w(24, 256), _x(3, 256)
    with pytest.raises(TypeError, match="warp_specialized"):
        ops.gemm(x, w, warp_specialized="yes")
    torch.testing.assert_close(ops.gemm(x, w, warp_specialized=True), ops.gemm(x, w), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 17, 64, 65, 100, 257])
@pytest.mark.parametrize("N,K,g", [(896, 896, 128), (4864, 896, 64), (896, 4864, 128), (131, 96, 32),
                                   (1000, 2080, 32), (70, 32, 32)])
def test_matches_reference_and_plain_kernel(M, N, K, g, nan_empty):
    # 64 k per stage: K = 96 and 2080 end on a half stage, K = 32 is one half stage.
    w, x = _w(N, K, g, device="cuda"), _x(M, K, device="cuda")
    out = nan_empty(M, N)
    binding.gemm_ws(x, w.qweight, w.scales, g, out)
    torch.cuda.synchronize()
    ref = reference.matmul(x.float(), w)
    err = (out.float() - ref).abs()
    assert torch.isfinite(out).all(), "kernel left unwritten (NaN) outputs"
    assert (err <= reference.tolerance(x, w, ref)).all(), f"worst err {err.max().item():.3g}"
    if binding.gemm_splits(M, N, K, torch.cuda.current_device()) == 1:
        assert torch.equal(out, ops.gemm(x, w, backend="cuda")), "bits differ from the plain kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("M", [16, 200])
@pytest.mark.parametrize("N,K", [(896, 4864), (4864, 896), (300, 17408 // 128 * 128)])
def test_bit_identical_for_any_grid_cap(M, N, K):
    w, x = _w(N, K, device="cuda"), _x(M, K, device="cuda")
    fn = functools.partial(ops.gemm, warp_specialized=True, backend="cuda")
    full = fn(x, w)
    for cap in (1, 3, 40, 132, 1000):
        assert torch.equal(fn(x, w, max_ctas=cap), full), f"max_ctas={cap} changed the result"


@pytest.mark.gpu
def test_captures_in_cuda_graph():
    w, x = _w(512, 1024, device="cuda"), _x(80, 1024, device="cuda")
    ops.gemm(x, w, warp_specialized=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.gemm(x, w, warp_specialized=True)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ops.gemm(x, w, warp_specialized=True))


