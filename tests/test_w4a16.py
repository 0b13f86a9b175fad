"""W4A16 GEMV/GEMM: reference semantics on CPU, kernels against the reference on GPU.

Tolerance (t4lib.ops.w4a16.reference.tolerance): |y - y_ref| <= 2.5e-3 * (|x| @ |W_deq|^T)
+ 1e-3 |y_ref| + 1e-5 elementwise, y_ref = fp32 x @ W_deq^T of the exact fp16 dequantized weight.
"""
import pytest
import torch

from t4lib.ops import int8_activations as a8
from t4lib.ops import w4a16 as ops
from t4lib.ops.w4a16 import binding, reference
from t4lib.quant.w4a16 import QuantizedWeight, quantize_rtn

HAS_CUDA = torch.cuda.is_available()


def _w(N, K, g=128, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return quantize_rtn(torch.randn(N, K, generator=gen) * 0.05, g).to(device)


def _x(M, K, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).half().to(device)


# ---------------------------------------------------------------- CPU

def test_reference_equals_dequantized_matmul():
    w, x = _w(24, 256), _x(3, 256)
    want = (x.float() @ w.dequantize(torch.float32).t()).half()
    assert torch.equal(ops.gemv(x, w), want)
    assert torch.equal(ops.gemm(x, w), want)


def test_noncontiguous_x_is_accepted():
    w = _w(16, 128)
    x = _x(128, 4).t()  # [4, 128] non-contiguous
    torch.testing.assert_close(ops.gemv(x, w), ops.gemv(x.contiguous(), w), rtol=0, atol=0)


def test_tolerance_is_tight():
    w, x = _w(32, 512), _x(2, 512)
    tol = reference.tolerance(x, w)
    y = reference.matmul(x.float(), w)
    assert (tol < 0.05 * y.abs().max() + 1e-3).all()


@pytest.mark.parametrize("bad,err,match", [
    (lambda x, w: ops.gemv(x.float(), w), TypeError, "x must have dtype"),
    (lambda x, w: ops.gemv(x[:, :64], w), ValueError, "K=64"),
    (lambda x, w: ops.gemv(torch.cat([x] * 5), w), ValueError, "M = 1..8"),
    (lambda x, w: ops.gemv(x, w.qweight), TypeError, "QuantizedWeight"),
    (lambda x, w: ops.gemv(x[0], w), ValueError, "2-D"),
    (lambda x, w: ops.gemv(x, w, max_ctas=0), ValueError, "max_ctas"),
    (lambda x, w: ops.gemv(x, w, backend="fast"), ValueError, "backend"),
    (lambda x, w: ops.gemv(x, w, backend="cuda"), ValueError, "CUDA tensors"),
])
def test_bad_input(bad, err, match):
    with pytest.raises(err, match=match):
        bad(_x(2, 256), _w(16, 256))


def test_bad_weight_objects():
    w = _w(16, 256)
    with pytest.raises(ValueError, match="scales must have shape"):
        QuantizedWeight(w.qweight, w.scales[:, :1].contiguous(), 16, 256, 128)
    with pytest.raises(TypeError, match="scales must be a float16"):
        QuantizedWeight(w.qweight, w.scales.float(), 16, 256, 128)
    with pytest.raises(ValueError, match="group_size must be one of"):
        QuantizedWeight(w.qweight, w.scales, 16, 256, 256)
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        quantize_rtn(torch.randn(4, 96), 64)
    with pytest.raises(TypeError, match="int32"):
        QuantizedWeight(w.qweight.to(torch.int64), w.scales, 16, 256, 128)


def test_int8_activation_quantization_reference():
    x = _x(3, 128).float() * torch.tensor([1.0] * 96 + [0.0] * 32)  # the last block of each row all zero
    x[1, :32] *= 3000.0  # a large block: fp16 range
    q, d, sums = a8.quantize(x.half())
    assert q.dtype == torch.int8 and d.shape == (3, 4) and sums.dtype == torch.int32
    assert q.abs().max() == 127 and (q[:, 96:] == 0).all() and (d[:, 3] == 0).all()
    assert torch.equal(sums, q.reshape(3, 4, 32).to(torch.int32).sum(-1))
    err = (a8.dequantize(q, d) - x.half().float()).abs()
    assert (err <= d.repeat_interleave(32, dim=1) / 2 * (1 + 1e-6)).all()
    # the INT4 kernel's byte order: value j of each 8 at NIBBLE_ORDER.index(j)
    perm = a8.nibble_order(torch.arange(16, dtype=torch.int8)[None])
    assert perm.tolist() == [[0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]]
    with pytest.raises(ValueError, match="multiple of 32"):
        a8.quantize(torch.zeros(1, 48).half())
    q8, s8 = a8.empty_blocks(3, 128, "cpu")  # the kernels' buffers: q [M, K] int8, s [M, K/32, (d bits, sum)]
    assert (q8.dtype, tuple(q8.shape), s8.dtype, tuple(s8.shape)) == (torch.int8, (3, 128), torch.int32, (3, 4, 2))


def test_int8_gemv_reference_is_the_product_of_quantized_activations():
    w, x = _w(40, 512), _x(3, 512)
    y8 = ops.gemv(x, w, activations="int8")
    q, d, _ = a8.quantize(x)
    exact = reference.exact_weight(w)
    assert torch.equal(y8, (a8.dequantize(q, d) @ exact.t()).half())
    # against the fp16-activation product: inside the quantization bound (plus fp16 output rounding)
    y16 = x.float() @ exact.t()
    bound = a8.error_bound(x, exact.abs()) + 1e-3 * y16.abs() + 1e-5
    assert ((y8.float() - y16).abs() <= bound).all()
    assert (y8.float() - y16).abs().max() > 0  # int8 is not the same numerics
    # matmul: int8 on the GEMV rows only; the GEMM rows keep fp16 activations
    x9 = _x(9, 512)
    assert torch.equal(ops.matmul(x9, w, activations="int8"), ops.gemm(x9, w))
    assert torch.equal(ops.matmul(x[:1], w, activations="int8"), ops.gemv(x[:1], w, activations="int8"))


@pytest.mark.parametrize("bad", ["int4", "fp8", None, 8])
def test_bad_activations(bad):
    with pytest.raises(ValueError, match="activations must be one of"):
        ops.gemv(_x(1, 256), _w(8, 256), activations=bad)
    with pytest.raises(ValueError, match="activations must be one of"):
        ops.matmul(_x(1, 256), _w(8, 256), activations=bad)


def test_quantlinear_int8_activations_and_set_activations():
    from torch import nn

    from t4lib.quant import QuantLinear, set_activations

    lin = QuantLinear.from_quantized(_w(24, 256))
    model = nn.Sequential(lin, nn.ReLU())
    x = _x(2, 256)
    y16 = lin(x)
    assert set_activations(model, "int8") == 1 and lin.activations == "int8" and "activations=int8" in repr(lin)
    assert torch.equal(lin(x), ops.gemv(x, lin.weight_q, activations="int8"))
    assert not torch.equal(lin(x), y16)
    # fp32 input on the CPU: quantized from its fp16 rounding, like on CUDA (not silently fp16-activation)
    assert torch.equal(lin(x.float()), ops.gemv(x, lin.weight_q, activations="int8").float())
    with pytest.raises(ValueError, match="activations must be one of"):
        set_activations(model, "int4")
    with pytest.raises(ValueError, match="no QuantLinear"):
        set_activations(nn.Sequential(nn.Linear(4, 4)), "int8")


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_device_mismatch_is_an_error():
    with pytest.raises(ValueError, match="on"):
        ops.gemv(_x(1, 256).cuda(), _w(8, 256))


# ---------------------------------------------------------------- GPU

def _check(y, x, w):
    ref = reference.matmul(x.float(), w)
    tol = reference.tolerance(x, w, ref)
    err = (y.float() - ref).abs()
    assert torch.isfinite(y).all(), "kernel left unwritten (NaN) outputs"
    bad = err > tol
    assert not bad.any(), f"{int(bad.sum())} entries over tolerance; worst err {err.max().item():.3g}"


# (1, 4300, 4224): enough rows for no split-K even on 132 SMs and an odd number (3) of
# load stages per lane, the M = 1 register pipeline's tail.
SHAPES = [(1, 896, 896), (1, 4864, 896), (3, 896, 4864), (8, 1536, 8960), (5, 257, 512), (2, 1, 128),
          (7, 33, 96), (4, 1023, 1152), (1, 5, 17408 // 8 * 8), (1, 4300, 4224)]


@pytest.mark.gpu
@pytest.mark.parametrize("g", [32, 64, 128])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemv_matches_reference(M, N, K, g, nan_empty):
    if K % g:
        pytest.skip("K not a multiple of the group")
    w, x = _w(N, K, g, device="cuda"), _x(M, K, device="cuda")
    out = nan_empty(M, N)
    binding.gemv(x, w.qweight, w.scales, g, out)
    torch.cuda.synchronize()
    _check(out, x, w)
    torch.testing.assert_close(ops.gemv(x, w, backend="cuda"), out, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 3, 8, 9, 16, 17, 33, 64, 100, 257])
@pytest.mark.parametrize("N,K,g", [(896, 896, 128), (4864, 896, 64), (896, 4864, 128), (131, 96, 32),
                                   (1000, 2080, 32)])
def test_gemm_matches_reference(M, N, K, g, nan_empty):
    w, x = _w(N, K, g, device="cuda"), _x(M, K, device="cuda")
    out = nan_empty(M, N)
    binding.gemm(x, w.qweight, w.scales, g, out)
    torch.cuda.synchronize()
    _check(out, x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("fn,M", [(ops.gemv, 1), (ops.gemv, 4), (ops.gemv, 8), (ops.gemm, 16), (ops.gemm, 70)])
@pytest.mark.parametrize("N,K", [(896, 4864), (4864, 896), (300, 17408 // 128 * 128)])
def test_bit_identical_for_any_grid_cap(fn, M, N, K):
    w, x = _w(N, K, device="cuda"), _x(M, K, device="cuda")
    full = fn(x, w, backend="cuda")
    for cap in (1, 3, 40, 132, 1000):
        assert torch.equal(fn(x, w, max_ctas=cap, backend="cuda"), full), f"max_ctas={cap} changed the result"


@pytest.mark.gpu
def test_kernels_capture_in_cuda_graph():
    w, x = _w(512, 1024, device="cuda"), _x(1, 1024, device="cuda")
    x16 = _x(16, 1024, device="cuda")
    ops.gemv(x, w), ops.gemm(x16, w)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y1 = ops.gemv(x, w)
        y2 = ops.gemm(x16, w)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y1, ops.gemv(x, w)) and torch.equal(y2, ops.gemm(x16, w))


@pytest.mark.gpu
def test_gemv_unaligned_x_view():
    w = _w(64, 256, device="cuda")
    buf = _x(1, 257, device="cuda")
    x = buf[:, 1:]  # 2-byte offset: copied to an aligned buffer by the op
    _check(ops.gemv(x, w, backend="cuda"), x, w)


def _check_int8(y, x, w):
    ref = reference.gemv_int8(x, w).float()
    tol = reference.tolerance_int8(x, w, ref)
    err = (y.float() - ref).abs()
    assert torch.isfinite(y).all(), "kernel left unwritten (NaN) outputs"
    bad = err > tol
    assert not bad.any(), f"{int(bad.sum())} entries over the int8 tolerance; worst err {err.max().item():.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("M,K", [(1, 128), (1, 17408), (3, 896), (8, 4864), (5, 96)])
def test_quantize_x8_kernel_bit_exact(M, K):
    x = _x(M, K, seed=M + K, device="cuda").float()
    x[0, :32] = 0.0                          # an all-zero block
    x[-1, 32:64] *= 20000.0 / x[-1, 32:64].abs().max()  # near the top of fp16
    if K >= 128:
        x[0, 64:96] *= 1e-4                  # fp16 subnormals
    x = x.half()
    q = torch.full((M, K), 99, dtype=torch.int8, device="cuda")
    s = torch.full((M, K // 32, 2), -7, dtype=torch.int32, device="cuda")
    binding.quantize_x8(x, q, s)
    torch.cuda.synchronize()
    rq, rd, rs = a8.quantize(x.cpu())
    assert torch.equal(q.cpu(), a8.nibble_order(rq))
    assert torch.equal(s[..., 0].cpu().view(torch.float32), rd)
    assert torch.equal(s[..., 1].cpu(), rs)


# (1, 4300, 8448): long rows that neither split K nor fill the warp slots of a large GPU.
@pytest.mark.gpu
@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("M,N,K", SHAPES + [(1, 4300, 8448)])
def test_gemv_int8_matches_its_reference(M, N, K, g):
    if K % g:
        pytest.skip("K not a multiple of the group")
    w, x = _w(N, K, g, device="cuda"), _x(M, K, device="cuda")
    y = ops.gemv(x, w, backend="cuda", activations="int8")
    _check_int8(y, x, w)
    # and inside the quantization bound of the fp16-activation product
    exact = reference.exact_weight(w)
    y16 = x.float() @ exact.t()
    bound = a8.error_bound(x, exact.abs()) + reference.tolerance_int8(x, w, y16)
    assert ((y.float() - y16).abs() <= bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 4, 8])
@pytest.mark.parametrize("N,K", [(896, 4864), (4864, 896), (300, 17408 // 128 * 128), (4300, 8448)])
def test_gemv_int8_bit_identical_for_any_grid_cap_and_in_a_graph(M, N, K):
    w, x = _w(N, K, device="cuda"), _x(M, K, device="cuda")
    full = ops.gemv(x, w, backend="cuda", activations="int8")
    for cap in (1, 3, 132, 1000):
        assert torch.equal(ops.gemv(x, w, max_ctas=cap, backend="cuda", activations="int8"), full), cap
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.gemv(x, w, activations="int8")
    x.copy_(_x(M, K, seed=9, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ops.gemv(x, w, activations="int8"))
