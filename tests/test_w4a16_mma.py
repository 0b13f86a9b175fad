"""W4A16 small-M tensor-core GEMM (mma.sync m16n8k8): its weight layout on CPU (bit-exact round trip,
a lane-by-lane model of what the kernel reads), bad input, matmul's dispatch; the kernel against
dequantize-then-matmul on GPU (tolerance: t4lib.ops.w4a16.reference.tolerance).
"""
import numpy as np
import pytest
import torch

from t4lib.ops import w4a16 as ops
from t4lib.ops.int4 import reference as int4_ref
from t4lib.ops.w4a16 import binding, layout, reference
from t4lib.quant.w4a16 import quantize_rtn

HAS_CUDA = torch.cuda.is_available()


def _w(N, K, g=128, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return quantize_rtn(torch.randn(N, K, generator=gen) * 0.05, g).to(device)


def _x(M, K, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).half().to(device)


# ---------------------------------------------------------------- CPU: layout

@pytest.mark.parametrize("N,K,g", [(24, 256, 128), (131, 96, 32), (40, 192, 64), (1, 32, 32), (33, 4864 // 8, 32),
                                   (97, 1152, 128)])
def test_layout_round_trip_is_bit_exact(N, K, g):
    w = _w(N, K, g)
    lw = layout.pack(w)
    NT, KT, G = layout.tile_counts(N, K, g)
    assert tuple(lw.tiles.shape) == (NT, KT, 32, 4) and NT % 2 == 0 and NT * 16 >= N and KT * 64 >= K
    q, s = layout.unpack(lw)
    assert torch.equal(q, w.unpack()) and torch.equal(s, w.scales)
    assert torch.equal(lw.dequantize(), w.dequantize())
    # the padding is zero codes and zero scales
    full = int4_ref.unpack_int4(lw.tiles.reshape(-1))
    assert int((full != 0).sum()) == int((w.unpack() != 0).sum())
    assert int((lw.scales != 0).sum()) == int((w.scales != 0).sum())


def _f16(u):
    return np.array([u & 0xFFFF, u >> 16], dtype=np.uint16).view(np.float16)


def _dequant_like_kernel(q: int) -> list:
    """dequant_int4x8_mma of kernels/w4a16.cu on one 32-bit word, in numpy fp16 arithmetic."""
    lop = lambda a, m, c: (a & m) ^ c  # noqa: E731  (LUT 0x6A)
    q8 = q >> 8
    sub, mul, add = np.float16(1032), np.float16(1 / 16), np.float16(-72)
    lo = lambda u: _f16(lop(u, 0x000F000F, 0x64086408)) - sub  # noqa: E731
    hi = lambda u: (_f16(lop(u, 0x00F000F0, 0x64806480)).astype(np.float32) * np.float32(mul)  # noqa: E731
                    + np.float32(add)).astype(np.float16)  # one fma: exact, so fp32 then round == fp16 fma
    return [lo(q), hi(q), lo(q8), hi(q8)]


def test_kernel_dequant_constants_give_every_value_pair():
    vals = torch.arange(-8, 8, dtype=torch.int8)
    for a in range(16):
        for b in range(0, 16, 5):
            v = torch.stack([vals[a], vals[b], vals[(a + 3) % 16], vals[(b + 7) % 16], vals[b], vals[a],
                             vals[(a + 9) % 16], vals[15 - b]])
            word = int(int4_ref.pack_int4(v)[0]) & 0xFFFFFFFF
            got = np.concatenate(_dequant_like_kernel(word)).astype(np.float32)
            assert got.tolist() == v.float().tolist(), (a, b)


def test_lane_model_of_the_kernel_reproduces_the_product():
    """Walk the layout as the kernel does (lane g, t; word j; k-step 2j + e; rows g and g + 8) and
    accumulate the MMA's products: equal (to fp32 rounding) to x @ W_deq^T."""
    N, K, g_size, M = 40, 192, 32, 11
    w, x = _w(N, K, g_size), _x(M, K)
    lw = layout.pack(w)
    NT, KT, _ = layout.tile_counts(N, K, g_size)
    tiles = lw.tiles.numpy().view(np.uint32)
    scales = lw.scales.numpy()
    xp = np.zeros((8 * ((M + 7) // 8), KT * 64), np.float32)
    xp[:M, :K] = x.float().numpy()
    y = np.zeros((NT * 16, xp.shape[0]), np.float32)
    for nt in range(NT):
        for kt in range(KT):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                k = kt * 64 + 16 * t
                s_lo, s_hi = scales[nt, k // g_size, g]
                for j in range(4):
                    h = _dequant_like_kernel(int(tiles[nt, kt, lane, j]))
                    for e in range(2):
                        a0 = (h[2 * e] * s_lo).astype(np.float32)      # row g, k pair (k + 4j + 2e + p)
                        a1 = (h[2 * e + 1] * s_hi).astype(np.float32)  # row g + 8
                        kk = k + 4 * j + 2 * e
                        y[nt * 16 + g] += a0 @ xp[:, kk:kk + 2].T
                        y[nt * 16 + 8 + g] += a1 @ xp[:, kk:kk + 2].T
    ref = x.float() @ w.dequantize(torch.float32).t()
    torch.testing.assert_close(torch.from_numpy(y[:N, :M].T.copy()), ref, rtol=1e-5, atol=1e-5)


def test_mma_reference_and_matmul_dispatch(monkeypatch):
    w, x = _w(24, 256), _x(5, 256)
    want = (x.float() @ w.dequantize(torch.float32).t()).half()
    assert torch.equal(ops.mma(x, w), want) and torch.equal(ops.mma(x, layout.pack(w)), want)
    assert torch.equal(ops.dequant_matmul(x, w), want)
    called = []
    for name in ("gemv", "mma", "gemm", "dequant_matmul"):
        monkeypatch.setattr(ops, name, lambda x, w, name=name, **kw: called.append((name, x.shape[0])) or x[:, :8])
    lo, hi = ops.MATMUL_MMA_M
    wide = _w(ops.MATMUL_GEMV_M2_MAX_N + 16, 128)
    for M in (1, lo, hi, hi + 1):
        ops.matmul(_x(M, 128), wide)
    assert called == [("gemv", 1), ("mma", lo), ("mma", hi), ("dequant_matmul", hi + 1)]
    assert [ops.matmul_kernel(M) for M in (1, lo, hi, hi + 1)] == ["gemv", "mma", "mma", "dequant_cublas"]
    few = _w(ops.MATMUL_GEMV_M2_MAX_N, 128)  # at M = 2 a layer with few outputs keeps the GEMV
    called.clear()
    ops.matmul(_x(2, 128), few), ops.matmul(_x(3, 128), few)
    assert called == [("gemv", 2), ("mma", 3)]
    called.clear()
    ops.matmul(_x(2, 128), wide, activations="int8")  # int8 activations: the W4A8 GEMV rows stay the GEMV's
    assert called == [("gemv", 2)]


@pytest.mark.parametrize("bad,err,match", [
    (lambda x, w: ops.mma(_x(65, 256), w, backend="cuda"), ValueError, "M = 1..64"),
    (lambda x, w: ops.mma(_x(65, 256), layout.pack(w)), ValueError, "M = 1..64"),
    (lambda x, w: ops.mma(x[:0], w), ValueError, "M = 1..64"),
    (lambda x, w: ops.mma(x[:, :128], layout.pack(w)), ValueError, "K=128"),
    (lambda x, w: ops.mma(x.float(), w), TypeError, "x must have dtype"),
    (lambda x, w: ops.mma(x, w.qweight), TypeError, "QuantizedWeight"),
    (lambda x, w: ops.mma(x, w, max_ctas=0), ValueError, "max_ctas"),
    (lambda x, w: ops.mma(x, w, backend="cuda"), ValueError, "CUDA tensors"),
    (lambda x, w: layout.pack(w.qweight), TypeError, "QuantizedWeight"),
])
def test_bad_input(bad, err, match):
    with pytest.raises(err, match=match):
        bad(_x(2, 256), _w(16, 256))


def test_mismatched_layout_is_an_error():
    w = _w(40, 256, 64)
    lw = layout.pack(w)
    with pytest.raises(ValueError, match="tiles must have shape"):
        layout.MmaWeight(lw.tiles, lw.scales, 40, 512, 64)       # K of another weight
    with pytest.raises(ValueError, match="tiles must have shape"):
        layout.MmaWeight(lw.tiles[:, :2].contiguous(), lw.scales, 40, 256, 64)
    with pytest.raises(ValueError, match="scales must have shape"):
        layout.MmaWeight(lw.tiles, lw.scales, 40, 256, 128)     # group size of another weight
    with pytest.raises(TypeError, match="tiles must be an int32"):
        layout.MmaWeight(lw.tiles.to(torch.int64), lw.scales, 40, 256, 64)
    with pytest.raises(TypeError, match="scales must be a float16"):
        layout.MmaWeight(lw.tiles, lw.scales.float(), 40, 256, 64)
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        layout.MmaWeight(lw.tiles, lw.scales, 40, 96, 64)


def test_layout_cache_follows_the_tensors():
    w = _w(32, 128)
    a = ops._mma_layout(w.qweight, w.scales, 32, 128, 128)
    assert ops._mma_layout(w.qweight, w.scales, 32, 128, 128) is a   # cached
    w.qweight.view(-1)[0] ^= 0x11                                    # in place (through a view): rebuilt
    b = ops._mma_layout(w.qweight, w.scales, 32, 128, 128)
    assert b is not a and torch.equal(layout.unpack(b)[0], w.unpack())
    w.scales.mul_(2)
    c = ops._mma_layout(w.qweight, w.scales, 32, 128, 128)
    assert c is not b and torch.equal(layout.unpack(c)[1], w.scales)
    ops.clear_mma_cache()
    assert ops._mma_layout(w.qweight, w.scales, 32, 128, 128) is not c


# ---------------------------------------------------------------- GPU

def _check(y, x, w):
    ref = reference.matmul(x.float(), w)
    tol = reference.tolerance(x, w, ref)
    err = (y.float() - ref).abs()
    assert torch.isfinite(y).all(), "kernel left unwritten (NaN) outputs"
    bad = err > tol
    assert not bad.any(), f"{int(bad.sum())} entries over tolerance; worst err {err.max().item():.3g}"


# (N, K, g) cycled over M = 1..64: odd N, N below one tile, K not a multiple of the 64-column tile
# (96, 160, 1120 with g = 32), long K with few rows (split-K), many rows.
FUZZ = [(131, 96, 32), (896, 896, 128), (33, 4864, 64), (1000, 160, 32), (4864, 896, 128), (7, 1120, 32),
        (257, 2048, 64), (1536, 512, 128), (17, 8960, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("M", range(1, 65))
def test_mma_matches_reference(M, nan_empty):
    N, K, g = FUZZ[M % len(FUZZ)]
    w, x = _w(N, K, g, seed=M, device="cuda"), _x(M, K, seed=M + 1, device="cuda")
    lw = layout.pack(w)
    out = nan_empty(M, N)
    binding.mma(x, lw.tiles, lw.scales, N, g, out)
    torch.cuda.synchronize()
    _check(out, x, w)
    assert torch.equal(ops.mma(x, w, backend="cuda"), out)


@pytest.mark.gpu
@pytest.mark.parametrize("r,splits", [(1, 1), (2, 1), (1, 3), (2, 5), (2, 16)])
@pytest.mark.parametrize("M,N,K,g", [(3, 896, 4864, 128), (16, 200, 2080, 32), (40, 96, 4864, 64),
                                     (64, 1000, 1024, 128)])
def test_mma_every_launch_configuration(M, N, K, g, r, splits, nan_empty):
    w, x = _w(N, K, g, device="cuda"), _x(M, K, device="cuda")
    lw = layout.pack(w)
    out = nan_empty(M, N)
    binding.mma(x, lw.tiles, lw.scales, N, g, out, r=r, splits=splits)
    torch.cuda.synchronize()
    _check(out, x, w)


@pytest.mark.gpu
def test_layout_packs_the_same_on_gpu():
    w = _w(131, 1120, 32)
    a, b = layout.pack(w), layout.pack(w.to("cuda"))
    assert torch.equal(a.tiles, b.tiles.cpu()) and torch.equal(a.scales, b.scales.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("M", [2, 8, 13, 64])
@pytest.mark.parametrize("N,K", [(896, 4864), (4864, 896), (300, 17408 // 128 * 128)])
def test_mma_bit_identical_for_any_grid_cap(M, N, K):
    w, x = _w(N, K, device="cuda"), _x(M, K, device="cuda")
    full = ops.mma(x, w, backend="cuda")
    for cap in (1, 3, 40, 132, 1000):
        assert torch.equal(ops.mma(x, w, max_ctas=cap, backend="cuda"), full), f"max_ctas={cap} changed the result"


@pytest.mark.gpu
def test_mma_in_cuda_graph_and_through_matmul():
    w, x = _w(512, 1024, device="cuda"), _x(8, 1024, device="cuda")
    y0 = ops.matmul(x, w)  # first use outside the capture makes the layout
    assert torch.equal(y0, ops.mma(x, w, backend="cuda"))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.matmul(x, w)
    x.copy_(_x(8, 1024, seed=5, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ops.mma(x, w))
    _check(y, x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [65, 130])
def test_matmul_above_the_mma_range_dequantizes_then_cublas(M):
    w, x = _w(1000, 2080, 32, device="cuda"), _x(M, 2080, device="cuda")
    y = ops.matmul(x, w)
    _check(y, x, w)
    assert torch.equal(y, torch.nn.functional.linear(x, w.dequantize()))


@pytest.mark.gpu
def test_mma_unaligned_x_view_and_quantlinear():
    from t4lib.quant import QuantLinear

    w = _w(64, 256, device="cuda")
    buf = _x(4, 257, device="cuda")
    x = buf[:, 1:]  # 2-byte offset: copied to an aligned buffer by the op
    _check(ops.mma(x, w, backend="cuda"), x, w)
    lin = QuantLinear.from_quantized(w)
    assert torch.equal(lin(x.contiguous()), ops.mma(x.contiguous(), w))


