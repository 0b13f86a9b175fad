"""Fused weight-gradient GEMM + AdamW: reference == torch.optim.AdamW on CPU; kernels on GPU.

Tolerances (GPU):
* optimizer: inputs are multiples of 1/8 in [-1/2, 1/2], so every product and every partial sum of
  dW is exact in fp32 in any order; the kernel and autograd + torch.optim.AdamW then see the same
  gradient, and after 10 steps master, exp_avg and exp_avg_sq agree within rtol 1e-5, atol 1e-6
  (one rounding per operation in both; torch may contract to FMA, the kernel never does).
* GEMM core on N(0, 1) data: |dW - dW_fp32| <= 1e-4 * (|dy|^T |x|) + 1e-6 (fp32 accumulation in
  another order).
* fused against unfused (a): bit-identical (same core, same update function, no contraction).
"""
import pytest
import torch

from t4lib.ops import fused_adamw as ops
from t4lib.ops.fused_adamw import reference
from t4lib.train.fused_adamw import FusedAdamWLinear, replace_linears

HP = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
HP_VARIANTS = [HP, dict(lr=3e-3, betas=(0.7, 0.95), eps=1e-6, weight_decay=0.0),
               dict(lr=1e-3, betas=(0.3, 0.5), eps=1e-8, weight_decay=0.1)]  # beta1 < 0.5: lerp's other branch


def _exact(*shape, seed=0, device="cpu"):
    """fp16 multiples of 1/8 in [-1/2, 1/2]: products and sums of dW are exact in fp32."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-4, 5, shape, generator=g).half() / 8).to(device)


def _normal(*shape, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).half().to(device)


def _state(N, K, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    master = (torch.randn(N, K, generator=g) * 0.1).to(device)
    return master, torch.zeros_like(master), torch.zeros_like(master), master.half()


def _torch_adamw_run(master0, batches, hp, device):
    """autograd + torch.optim.AdamW in fp32: the loss sum(dy * (x @ p^T)) has dp = dy^T x."""
    p = torch.nn.Parameter(master0.clone())
    opt = torch.optim.AdamW([p], foreach=False, **hp)
    for dy, x in batches:
        opt.zero_grad()
        (dy.float() * (x.float() @ p.t())).sum().backward()
        opt.step()
    st = opt.state[p]
    return p.detach(), st["exp_avg"], st["exp_avg_sq"]


# ---------------------------------------------------------------- CPU: reference semantics

@pytest.mark.parametrize("hp", HP_VARIANTS, ids=["default", "wd0", "beta1_0.3"])
@pytest.mark.parametrize("T,N,K", [(37, 19, 23), (1, 5, 3), (64, 16, 48)])
def test_reference_equals_torch_adamw_over_10_steps(T, N, K, hp):
    master, m, v, w16 = _state(N, K)
    batches = [(_normal(T, N, seed=2 * s + 1), _normal(T, K, seed=2 * s + 2)) for s in range(10)]
    p_ref, m_ref, v_ref = _torch_adamw_run(master, batches, hp, "cpu")
    for s, (dy, x) in enumerate(batches, start=1):
        ops.fused_adamw_(dy, x, master, m, v, w16, step=s, **hp)
    assert torch.equal(master, p_ref) and torch.equal(m, m_ref) and torch.equal(v, v_ref)
    assert torch.equal(w16, p_ref.half())


def test_unfused_reference_equals_fused_reference():
    T, N, K = 29, 11, 13
    a, b = _state(N, K), _state(N, K)
    for s in range(1, 4):
        dy, x = _normal(T, N, seed=s), _normal(T, K, seed=10 + s)
        ops.fused_adamw_(dy, x, *a, step=s, **HP)
        g = ops.unfused_adamw_(dy, x, *b, step=s, **HP)
        assert torch.equal(g, reference.weight_grad(dy, x))
    for u, w in zip(a, b):
        assert torch.equal(u, w)


def test_zero_tokens_is_a_zero_gradient_step():
    master, m, v, w16 = _state(4, 6)
    want = master * (1 - HP["lr"] * HP["weight_decay"])
    ops.fused_adamw_(torch.zeros(0, 4).half(), torch.zeros(0, 6).half(), master, m, v, w16, step=1, **HP)
    assert torch.equal(master, want) and not m.any() and not v.any()


def _bad_cases():
    N, K, T = 8, 12, 5

    def args(**over):
        master, m, v, w16 = _state(N, K)
        a = dict(dy=_normal(T, N), x=_normal(T, K), master=master, exp_avg=m, exp_avg_sq=v, w16=w16)
        a.update(over)
        return a

    def call(over=None, **hp):
        a = args(**(over or {}))
        kw = dict(step=1, **HP)
        kw.update(hp)
        return lambda: ops.fused_adamw_(a["dy"], a["x"], a["master"], a["exp_avg"], a["exp_avg_sq"], a["w16"], **kw)

    return [
        ("tokens", call({"x": _normal(T + 1, K)}), ValueError, "same number of tokens"),
        ("dy_cols", call({"dy": _normal(T, N + 1)}), ValueError, "dy has 9 columns"),
        ("x_cols", call({"x": _normal(T, K - 1)}), ValueError, "x has 11 columns"),
        ("master_fp16", call({"master": torch.zeros(N, K).half()}), TypeError, "master must have dtype"),
        ("exp_avg_shape", call({"exp_avg": torch.zeros(N, K + 1)}), ValueError, "exp_avg must have the shape"),
        ("exp_avg_sq_dtype", call({"exp_avg_sq": torch.zeros(N, K, dtype=torch.float64)}), TypeError, "exp_avg_sq"),
        ("w16_dtype", call({"w16": torch.zeros(N, K)}), TypeError, "w16 must have dtype"),
        ("dy_fp32", call({"dy": torch.zeros(T, N)}), TypeError, "dy must have dtype"),
        ("x_1d", call({"x": torch.zeros(T).half()}), ValueError, "x must be 2-D"),
        ("master_noncontig", call({"master": torch.zeros(K, N).t()}), ValueError, "master must be contiguous"),
        ("device", call({"x": _normal(T, K).to("meta")}), ValueError, "one device"),
        ("lr0", call(lr=0.0), ValueError, "lr must be > 0"),
        ("lr_neg", call(lr=-1e-3), ValueError, "lr must be > 0"),
        ("lr_str", call(lr="1e-3"), TypeError, "lr must be a finite"),
        ("beta1_1", call(betas=(1.0, 0.999)), ValueError, r"betas\[0\] must be in \[0, 1\)"),
        ("beta2_neg", call(betas=(0.9, -0.1)), ValueError, r"betas\[1\] must be in \[0, 1\)"),
        ("betas_len", call(betas=(0.9,)), TypeError, "betas must be a pair"),
        ("eps0", call(eps=0.0), ValueError, "eps must be > 0"),
        ("wd_neg", call(weight_decay=-0.1), ValueError, "weight_decay must be >= 0"),
        ("step0", call(step=0), ValueError, "step must be an int >= 1"),
        ("warp_specialized", call(warp_specialized=1), TypeError, "warp_specialized must be a bool"),
        ("max_ctas", lambda: ops.fused_adamw_(*args().values(), step=1, max_ctas=0, **HP), ValueError, "max_ctas"),
        ("backend", lambda: ops.fused_adamw_(*args().values(), step=1, backend="fast", **HP), ValueError, "backend"),
        ("cuda_on_cpu", lambda: ops.fused_adamw_(*args().values(), step=1, backend="cuda", **HP), ValueError,
         "CUDA tensors"),
        ("grad_shape", lambda: ops.adamw_(torch.zeros(N, K + 1), *_state(N, K), step=1, **HP), ValueError,
         "grad must have the shape"),
        ("wgrad_out", lambda: ops.weight_grad(_normal(T, N), _normal(T, K), out=torch.zeros(N, K).half()),
         TypeError, "out must have dtype"),
    ]


@pytest.mark.parametrize("name,fn,err,match", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_input(name, fn, err, match):
    with pytest.raises(err, match=match):
        fn()


# ---------------------------------------------------------------- CPU: the layer

def _layer_pair(N, K, bias, device, **kw):
    torch.manual_seed(0)
    lin = torch.nn.Linear(K, N, bias=bias, device=device)
    return lin, FusedAdamWLinear.from_linear(lin, **kw)


def _train_layer_vs_autograd(layer, lin, T, steps, device, backend_exact=True):
    """10 steps of the layer against an fp32 nn.Linear + torch.optim.AdamW on the same dy."""
    p = torch.nn.Parameter(lin.weight.detach().float().clone())
    opt = torch.optim.AdamW([p], foreach=False, **HP)
    for s in range(steps):
        x = _exact(T, layer.in_features, seed=3 * s + 1, device=device).requires_grad_(True)
        dy = _exact(T, layer.out_features, seed=3 * s + 2, device=device)
        y = layer(x)
        assert y.dtype == torch.float16 and y.shape == (T, layer.out_features)
        y.backward(dy)
        assert layer.master.grad is None
        if not layer.fused:
            layer.step()
        opt.zero_grad()
        (dy.float() * (x.detach().float() @ p.t())).sum().backward()
        want_dx = (dy.float() @ p.detach().half().float()) if s == 0 else None
        opt.step()
        if want_dx is not None:  # dx uses the weight before the update
            torch.testing.assert_close(x.grad.float(), want_dx, rtol=1e-3, atol=1e-3)
    st = opt.state[p]
    return p.detach(), st["exp_avg"], st["exp_avg_sq"]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_layer_matches_autograd_adamw_on_cpu(fused):
    lin, layer = _layer_pair(7, 12, True, "cpu", backend="reference", fused=fused, **HP)
    p, m, v = _train_layer_vs_autograd(layer, lin, 9, 10, "cpu")
    assert torch.equal(layer.master.detach(), p) and torch.equal(layer.exp_avg, m)
    assert torch.equal(layer.exp_avg_sq, v) and torch.equal(layer.weight, p.half())
    assert layer.step_count == 10


def test_layer_bias_gets_an_ordinary_gradient():
    lin, layer = _layer_pair(5, 8, True, "cpu", backend="reference")
    x, dy = _exact(6, 8), _exact(6, 5, seed=1)
    layer(x).backward(dy)
    torch.testing.assert_close(layer.bias.grad, dy.float().sum(0))
    assert layer.bias.grad.dtype == torch.float32


def test_layer_second_forward_before_backward_is_an_error():
    _, layer = _layer_pair(4, 8, False, "cpu", backend="reference")
    layer(_exact(3, 8))
    with pytest.raises(RuntimeError, match="fused=False"):
        layer(_exact(3, 8))
    with torch.no_grad():  # evaluation is not a training forward
        layer(_exact(3, 8))


def test_layer_fused_has_no_step_or_clip():
    _, layer = _layer_pair(4, 8, False, "cpu")
    for fn in (layer.step, layer.grad_norm_sq):
        with pytest.raises(RuntimeError, match="fused=False"):
            fn()


def test_unfused_layer_accumulates_micro_batches_and_clips():
    """Two micro-batches then one clipped step == AdamW on the scaled sum of the two gradients."""
    _, layer = _layer_pair(6, 10, False, "cpu", backend="reference", fused=False, **HP)
    master, m, v, w16 = layer.master.detach().clone(), torch.zeros(6, 10), torch.zeros(6, 10), torch.empty(6, 10).half()
    batches = [(_exact(5, 10, seed=1), _exact(5, 6, seed=2)), (_exact(7, 10, seed=3), _exact(7, 6, seed=4))]
    for x, dy in batches:
        layer(x).backward(dy)
    g = sum(reference.weight_grad(dy, x) for x, dy in batches)
    assert torch.equal(layer.grad_buffer, g)
    norm = layer.grad_norm_sq().sqrt()
    scale = float(0.5 / norm)
    layer.step(grad_scale=scale)
    reference.adamw_(g * scale, master, m, v, w16, step=1, **HP)
    assert torch.equal(layer.master.detach(), master) and torch.equal(layer.exp_avg_sq, v)
    assert not layer.grad_buffer.any()


def test_layer_bad_input():
    with pytest.raises(ValueError, match="lr must be > 0"):
        FusedAdamWLinear(4, 4, lr=0)
    with pytest.raises(ValueError, match="in_features"):
        FusedAdamWLinear(0, 4)
    _, layer = _layer_pair(4, 8, False, "cpu")
    with pytest.raises(TypeError, match="x must be a float16"):
        layer(torch.zeros(2, 8))
    with pytest.raises(ValueError, match="in_features=8"):
        layer(torch.zeros(2, 7).half())
    layer.half()
    with pytest.raises(TypeError, match="master must stay float32"):
        layer(torch.zeros(2, 8).half())
    with pytest.raises(TypeError, match="torch.nn.Linear"):
        FusedAdamWLinear.from_linear(torch.nn.Conv1d(2, 2, 1))


def test_replace_linears():
    import t4lib.train as train

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    assert replace_linears(model, names=["2"], lr=1e-3) == ["2"]
    assert isinstance(model[2], FusedAdamWLinear) and isinstance(model[0], torch.nn.Linear)
    assert train.FusedAdamWLinear is FusedAdamWLinear


# ---------------------------------------------------------------- GPU

GPU_SHAPES = [(37, 19, 23), (200, 64, 72), (130, 136, 96), (1, 8, 8), (300, 100, 70)]  # T, N, K


def _run_fused(T, N, K, steps, hp, make, fn, **kw):
    master, m, v, w16 = _state(N, K, device="cuda")
    w16.fill_(float("nan"))  # every element must be written
    batches = [(make(T, N, seed=2 * s + 1, device="cuda"), make(T, K, seed=2 * s + 2, device="cuda"))
               for s in range(steps)]
    master0 = master.clone()
    for s, (dy, x) in enumerate(batches, start=1):
        fn(dy, x, master, m, v, w16, step=s, backend="cuda", **hp, **kw)
    return master0, batches, (master, m, v, w16)


@pytest.mark.gpu
@pytest.mark.parametrize("hp", HP_VARIANTS, ids=["default", "wd0", "beta1_0.3"])
@pytest.mark.parametrize("T,N,K", GPU_SHAPES)
def test_fused_10_steps_match_autograd_adamw(T, N, K, hp):
    master0, batches, (master, m, v, w16) = _run_fused(T, N, K, 10, hp, _exact, ops.fused_adamw_)
    p_ref, m_ref, v_ref = _torch_adamw_run(master0, batches, hp, "cuda")
    torch.testing.assert_close(master, p_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m, m_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v, v_ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(w16, master.half())


@pytest.mark.gpu
@pytest.mark.parametrize("T,N,K", GPU_SHAPES + [(1000, 128, 896)])
def test_weight_grad_matches_fp32_matmul(T, N, K):
    dy, x = _normal(T, N, seed=1, device="cuda"), _normal(T, K, seed=2, device="cuda")
    out = torch.full((N, K), float("nan"), device="cuda")
    ops.weight_grad(dy, x, out=out, backend="cuda")
    want = reference.weight_grad(dy, x)
    bound = 1e-4 * (dy.float().abs().t() @ x.float().abs()) + 1e-6
    assert ((out - want).abs() <= bound).all(), (out - want).abs().max()


@pytest.mark.gpu
@pytest.mark.parametrize("T,N,K", GPU_SHAPES)
def test_fused_bit_identical_to_unfused(T, N, K):
    _, _, fused = _run_fused(T, N, K, 3, HP, _normal, ops.fused_adamw_)
    _, _, unfused = _run_fused(T, N, K, 3, HP, _normal, ops.unfused_adamw_)
    for a, b in zip(fused, unfused):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("T,N,K", GPU_SHAPES + [(33, 64, 64), (96, 64, 64), (97, 130, 70)])
def test_warp_specialized_bit_identical_to_plain(T, N, K):
    """Stage counts below, at and above the ring depth (3 stages of 32 tokens), tails in T, N, K."""
    _, _, plain = _run_fused(T, N, K, 2, HP, _normal, ops.fused_adamw_)
    _, _, ws = _run_fused(T, N, K, 2, HP, _normal, ops.fused_adamw_, warp_specialized=True)
    for a, b in zip(plain, ws):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_warp_specialized_any_grid_cap():
    _, _, full = _run_fused(150, 136, 200, 1, HP, _normal, ops.fused_adamw_, warp_specialized=True)
    _, _, capped = _run_fused(150, 136, 200, 1, HP, _normal, ops.fused_adamw_, warp_specialized=True, max_ctas=2)
    for a, b in zip(full, capped):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_adamw_kernel_matches_reference_on_odd_and_vector_paths():
    for N, K in ((7, 9), (16, 32)):  # n % 4 != 0 (scalar path), n % 4 == 0 (float4 path)
        a, b = _state(N, K, device="cuda"), _state(N, K, device="cuda")
        a[3].fill_(float("nan"))
        for s in range(1, 4):
            g = torch.randn(N, K, device="cuda")
            ops.adamw_(g, *a, step=s, backend="cuda", **HP)
            reference.adamw_(g, *b, step=s, **HP)
        for u, w in zip(a[:3], b[:3]):
            torch.testing.assert_close(u, w, rtol=1e-5, atol=1e-6)
        assert torch.equal(a[3], a[0].half())


@pytest.mark.gpu
@pytest.mark.parametrize("warp_specialized", [False, True])
def test_epilogue_vector_and_scalar_paths_agree(warp_specialized):
    """State 4 bytes off 16-byte alignment takes the one-parameter epilogue, aligned state the
    4-wide one (K % 4 == 0): the same bits either way, on a shape with tails in N and K."""
    T, N, K = 96, 70, 68
    dy, x = _normal(T, N, seed=1, device="cuda"), _normal(T, K, seed=2, device="cuda")
    aligned = _state(N, K, device="cuda")
    flat = [torch.empty(N * K + 1, dtype=t.dtype, device="cuda") for t in aligned]
    shifted = [f[1:].view(N, K) for f in flat]
    for dst, src in zip(shifted, aligned):
        dst.copy_(src)
    assert shifted[0].data_ptr() % 16 != 0
    for s in (1, 2):
        for state in (aligned, shifted):
            ops.fused_adamw_(dy, x, *state, step=s, backend="cuda", warp_specialized=warp_specialized, **HP)
    for a, b in zip(aligned, shifted):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("max_ctas", [1, 3])
def test_bit_identical_for_any_grid_cap(max_ctas):
    T, N, K = 150, 136, 200
    _, _, full = _run_fused(T, N, K, 2, HP, _normal, ops.fused_adamw_)
    _, _, capped = _run_fused(T, N, K, 2, HP, _normal, ops.fused_adamw_, max_ctas=max_ctas)
    for a, b in zip(full, capped):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_zero_tokens_on_gpu_and_noncontiguous_inputs():
    master, m, v, w16 = _state(9, 16, device="cuda")
    ref = [t.cpu().clone() for t in (master, m, v, w16)]
    ops.fused_adamw_(torch.zeros(0, 9, device="cuda").half(), torch.zeros(0, 16, device="cuda").half(),
                     master, m, v, w16, step=1, backend="cuda", **HP)
    reference.fused_adamw_(torch.zeros(0, 9).half(), torch.zeros(0, 16).half(), *ref, step=1, **HP)
    torch.testing.assert_close(master.cpu(), ref[0], rtol=1e-6, atol=0)
    dy = _exact(9, 33, device="cuda").t()  # [33, 9] non-contiguous
    x = _exact(16, 33, seed=1, device="cuda").t()
    a, b = _state(9, 16, device="cuda"), _state(9, 16, device="cuda")
    ops.fused_adamw_(dy, x, *a, step=1, backend="cuda", **HP)
    ops.fused_adamw_(dy.contiguous(), x.contiguous(), *b, step=1, backend="cuda", **HP)
    assert all(torch.equal(u, w) for u, w in zip(a, b))


@pytest.mark.gpu
def test_fused_step_captures_in_cuda_graph():
    T, N, K = 64, 32, 48
    dy, x = _normal(T, N, device="cuda"), _normal(T, K, seed=1, device="cuda")
    a, b = _state(N, K, device="cuda"), _state(N, K, device="cuda")
    ops.fused_adamw_(dy, x, *_state(N, K, device="cuda"), step=1, backend="cuda", **HP)  # load before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ops.fused_adamw_(dy, x, *a, step=1, backend="cuda", **HP)
    g.replay()
    torch.cuda.synchronize()
    ops.fused_adamw_(dy, x, *b, step=1, backend="cuda", **HP)
    assert all(torch.equal(u, w) for u, w in zip(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_layer_10_steps_match_autograd_adamw_on_gpu(fused):
    lin, layer = _layer_pair(40, 72, True, "cuda", backend="cuda", fused=fused, **HP)
    p, m, v = _train_layer_vs_autograd(layer, lin, 50, 10, "cuda")
    torch.testing.assert_close(layer.master.detach(), p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.exp_avg, m, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.exp_avg_sq, v, rtol=1e-5, atol=1e-6)
    assert torch.equal(layer.weight, layer.master.detach().half())


def test_fp16_autocast_casts_fp32_input():
    _, layer = _layer_pair(4, 8, True, "cpu", backend="reference")
    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.float16):
        y = layer(x)
    assert y.dtype == torch.float16
    with torch.no_grad():
        torch.testing.assert_close(y, layer(x.half()))


def test_step_time_comparison_runs_and_trains_alike_on_cpu():
    from t4lib.train.fused_adamw import compare_step_time

    r = compare_step_time("tiny-cpu", batch=2, seq=16, warmup=1, steps=2, device="cpu", backend="reference")
    assert r["replaced"] > 0 and r["fused_s"] > 0 and r["torch_amp_s"] > 0
    assert abs(r["loss_fused"] - r["loss_torch_amp"]) < 1e-2 * r["loss_torch_amp"]


