"""Gated DeltaNet decode step: reference semantics, transformers cross-check,
head orders, bad input (CPU); kernel against reference over 64 steps (GPU)."""
import math

import pytest
import torch
import torch.nn.functional as F

from t4lib.ops import deltanet as dn
from t4lib.ops.deltanet import reference as ref

# tiny CPU shape: 6 value heads over 2 key heads, head dim 16
B, H, HK, D = 2, 6, 2, 16


def _inputs(seed=0, dtype=torch.float32, B=B, H=H, HK=HK, D=D, device="cpu"):
    L = ref.random_layer(H, HK, D, D, seed=seed, device=device)
    S = ref.random_state(B, H, HK, D, D, seed=seed + 1, dtype=dtype, device=device)
    X = ref.random_step(B, H, HK, D, D, seed=seed + 2, dtype=dtype, device=device)
    return X, S, L


def _rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


# ----------------------------------------------------------------------------- reference semantics

def test_gate_formula_known_answer():
    # ssm_a = -1, alpha + dt_bias = 0: g = -softplus(0) = -ln 2, decay = 1/2; beta = sigmoid(0) = 1/2
    decay, b = ref.gates(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([-1.0]), torch.zeros(1))
    assert decay.item() == pytest.approx(0.5, rel=1e-7) and b.item() == 0.5
    # large argument: softplus(x) = x, decay = exp(-2 * 30)
    decay, _ = ref.gates(torch.full((1, 1), 25.0), torch.zeros(1, 1), torch.tensor([-2.0]), torch.tensor([5.0]))
    assert decay.item() == pytest.approx(math.exp(-60.0), rel=1e-5)


def test_conv_is_causal_correlation_without_flip():
    C = 3
    cs = torch.tensor([[[1.0, 0, 0], [0, 1, 0], [0, 0, 1]]])  # x_{t-3}, x_{t-2}, x_{t-1}
    x = torch.tensor([[2.0, 2.0, 2.0]])
    w = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 0, 1.0]])  # channel 2 reads the current token
    y, new = ref.conv_update(x, cs, w)
    assert torch.allclose(y, F.silu(torch.tensor([[1.0, 1.0, 2.0]])))
    assert torch.equal(new, torch.tensor([[[0.0, 1, 0], [0, 0, 1], [2, 2, 2]]]))
    assert C == new.shape[-1]


def test_single_pass_shortcut_matches_definition():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 4, D, generator=g, dtype=torch.float64), torch.randn(2, 4, D, generator=g, dtype=torch.float64)
    v, S = torch.randn(2, 4, D, generator=g, dtype=torch.float64), torch.randn(2, 4, D, D, generator=g, dtype=torch.float64)
    decay, b = torch.rand(2, 4, generator=g, dtype=torch.float64), torch.rand(2, 4, generator=g, dtype=torch.float64)
    o, s_new = ref.delta_rule_step(q, k, v, decay, b, S)
    stq = torch.einsum("bhkv,bhk->bhv", S, q)
    stk = torch.einsum("bhkv,bhk->bhv", S, k)
    delta = b[..., None] * (v - decay[..., None] * stk)
    o_short = decay[..., None] * stq + delta * (k * q).sum(-1, keepdim=True)
    assert torch.allclose(o, o_short, rtol=1e-12, atol=1e-12)
    assert torch.allclose(s_new, decay[..., None, None] * S + k[..., :, None] * delta[..., None, :], atol=1e-12)


def _gguf_to_hf_perm(H, HK):
    """perm[h_gguf] = the HF-order head with the same key head and same position in its group."""
    ratio = H // HK
    return torch.tensor([(h % HK) * ratio + h // HK for h in range(H)])


def _permute_value_heads(X, S, L, perm, HK=HK, D=D):
    """Inputs for the HF order whose value head perm[h] is the GGUF-order head h."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm))
    Hh = len(perm)
    nqk = 2 * HK * D

    def vch(t, dim):  # permute the value-head channel blocks of a [.., C] tensor
        head = t.narrow(dim, nqk, Hh * D).unflatten(dim, (Hh, D)).index_select(dim, inv).flatten(dim, dim + 1)
        return torch.cat([t.narrow(dim, 0, nqk), head], dim=dim)

    X2 = {"qkv": vch(X["qkv"], 1), "z": X["z"].unflatten(1, (Hh, D))[:, inv].flatten(1),
          "alpha": X["alpha"][:, inv], "beta": X["beta"][:, inv]}
    S2 = {"conv_state": vch(S["conv_state"], 2), "state": S["state"][:, inv]}
    L2 = {"conv_w": vch(L["conv_w"], 0), "ssm_a": L["ssm_a"][inv], "dt_bias": L["dt_bias"][inv],
          "ssm_norm": L["ssm_norm"]}
    return X2, S2, L2, inv


def test_head_orders_are_a_permutation_of_each_other_and_differ():
    X, S, L = _inputs()
    out_g, _, st_g = ref.gated_deltanet_decode(**X, **S, **L, num_k_heads=HK, head_order="gguf",
                                               out_dtype=torch.float32)
    out_h, _, st_h = ref.gated_deltanet_decode(**X, **S, **L, num_k_heads=HK, head_order="hf",
                                               out_dtype=torch.float32)
    assert _rel(out_g, out_h) > 1e-2  # mixing the orders up is visible
    perm = _gguf_to_hf_perm(H, HK)
    X2, S2, L2, inv = _permute_value_heads(X, S, L, perm)
    out_p, _, st_p = ref.gated_deltanet_decode(**X2, **S2, **L2, num_k_heads=HK, head_order="hf",
                                               out_dtype=torch.float32)
    assert torch.allclose(out_p.unflatten(1, (H, D))[:, perm].flatten(1), out_g, rtol=1e-6, atol=1e-6)
    assert torch.allclose(st_p[:, perm], st_g, rtol=1e-6, atol=1e-7)


def test_key_head_index():
    assert ref.key_head_index(48, 16, "hf").tolist() == [h // 3 for h in range(48)]
    assert ref.key_head_index(48, 16, "gguf").tolist() == [h % 16 for h in range(48)]


def _transformers_fns():
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    except Exception:
        try:
            from transformers.models.qwen3_next import modeling_qwen3_next as m
        except Exception:
            return None
    names = ("torch_recurrent_gated_delta_rule", "causal_conv1d_update")
    if not all(hasattr(m, n) for n in names):
        return None
    norm = getattr(m, "Qwen3_5RMSNormGated", None) or getattr(m, "Qwen3NextRMSNormGated", None)
    return (m, norm) if norm is not None else None


def test_reference_matches_transformers_over_steps():
    fns = _transformers_fns()
    if fns is None:
        pytest.skip("installed transformers has no Qwen3.5/Qwen3-Next reference functions "
                    "(torch_recurrent_gated_delta_rule, causal_conv1d_update, RMSNormGated)")
    m, Norm = fns
    X, S, L = _inputs(seed=5)
    a_log = torch.log(-L["ssm_a"])
    norm = Norm(D, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(L["ssm_norm"])
    conv_hf = S["conv_state"].transpose(1, 2).contiguous()  # [B, C, 3]
    state_hf = S["state"].clone()
    state, conv = S["state"].clone(), S["conv_state"].clone()
    for step in range(4):
        X = ref.random_step(B, H, HK, D, D, seed=100 + step, dtype=torch.float32)
        out, conv, state = ref.gated_deltanet_decode(X["qkv"], X["z"], X["alpha"], X["beta"], conv, state,
                                                     **L, num_k_heads=HK, head_order="hf",
                                                     out_dtype=torch.float32)
        with torch.no_grad():
            y = m.causal_conv1d_update(X["qkv"][:, :, None], conv_hf, L["conv_w"], None, "silu")[:, :, 0]
            q, k, v = torch.split(y, [HK * D, HK * D, H * D], dim=-1)
            g = -a_log.float().exp() * F.softplus(X["alpha"].float() + L["dt_bias"])
            o, state_hf = m.torch_recurrent_gated_delta_rule(
                q.reshape(B, 1, HK, D), k.reshape(B, 1, HK, D), v.reshape(B, 1, H, D), g=g[:, None],
                beta=X["beta"].sigmoid()[:, None], initial_state=state_hf, output_final_state=True,
                use_qk_l2norm_in_kernel=True)
            out_hf = norm(o.reshape(-1, D), X["z"].reshape(-1, D)).reshape(B, H * D)
        assert _rel(out, out_hf) < 1e-5, step
        assert _rel(state, state_hf) < 1e-5, step
        assert torch.equal(conv, conv_hf.transpose(1, 2))


def test_public_op_updates_state_and_conv_state_in_place():
    X, S, L = _inputs(seed=7)
    out_r, conv_r, st_r = ref.gated_deltanet_decode(**X, **S, **L, num_k_heads=HK, head_order="gguf")
    state, conv = S["state"].clone(), S["conv_state"].clone()
    out = dn.gated_deltanet_decode(**X, conv_state=conv, state=state, **L, num_k_heads=HK, head_order="gguf")
    assert torch.equal(out, out_r) and torch.equal(state, st_r) and torch.equal(conv, conv_r)
    conv_out = torch.empty_like(conv)
    dn.gated_deltanet_decode(**X, conv_state=S["conv_state"], state=S["state"].clone(), **L, num_k_heads=HK,
                             head_order="gguf", conv_state_out=conv_out)
    assert torch.equal(conv_out, conv_r)


# ----------------------------------------------------------------------------- bad input

def _call(**over):
    X, S, L = _inputs()
    kw = {**X, **S, **L, "num_k_heads": HK}
    kw.update(over)
    return dn.gated_deltanet_decode(**kw)


def test_auto_variant_follows_batch_size():
    assert [dn._split_of("auto", B) for B in (1, 2, 4, 16)] == [2, 2, 2, 2]
    assert dn._split_of("head", 4) == 1 and dn._split_of("split", 1) == dn.VARIANTS["split"]
    assert all(dn.auto_split(B) in dn.SPLITS for B in range(1, 9))


def test_bad_input_names_the_problem():
    X, S, L = _inputs()
    with pytest.raises(TypeError, match="state must have dtype torch.float32"):
        _call(state=S["state"].half())
    with pytest.raises(ValueError, match="state must be 4-D"):
        _call(state=S["state"][0])
    with pytest.raises(ValueError, match="state must have batch 2"):
        _call(state=S["state"][:1].contiguous())
    with pytest.raises(ValueError, match="mismatched head counts: state has 6 value heads, not a multiple"):
        _call(num_k_heads=4)
    with pytest.raises(ValueError, match="mismatched head counts: qkv has"):
        _call(num_k_heads=3)
    with pytest.raises(ValueError, match="num_k_heads must be a positive int"):
        _call(num_k_heads=0)
    with pytest.raises(TypeError, match="z must have dtype"):
        _call(z=X["z"].half())
    with pytest.raises(ValueError, match=r"conv_state must have shape \(2, 3, 160\)"):
        _call(conv_state=torch.zeros(2, 4, 160))
    with pytest.raises(ValueError, match=r"ssm_norm must have shape \(16,\)"):
        _call(ssm_norm=torch.ones(8))
    with pytest.raises(ValueError, match="conv_w must have shape"):
        _call(conv_w=torch.zeros(160, 3))
    with pytest.raises(ValueError, match="head_order must be one of"):
        _call(head_order="llama")
    with pytest.raises(ValueError, match="variant must be"):
        _call(variant=3)
    with pytest.raises(ValueError, match="conv_state_out must not overlap conv_state"):
        _call(conv_state=S["conv_state"], conv_state_out=S["conv_state"])
    with pytest.raises(ValueError, match="state must be contiguous"):
        _call(state=S["state"].transpose(2, 3))
    with pytest.raises(ValueError, match="CUDA kernel needs head dims"):
        _call(backend="cuda")


# ----------------------------------------------------------------------------- GPU: kernel vs reference

def _run_steps(B, H, HK, head_order, variant, x_dtype, out_dtype, steps, seed=0):
    dev = "cuda"
    L = ref.random_layer(H, HK, seed=seed, device=dev)
    S0 = ref.random_state(B, H, HK, seed=seed + 1, dtype=x_dtype, device=dev)
    st_k, cv_k = S0["state"].clone(), S0["conv_state"].clone()
    st_r, cv_r = S0["state"].clone(), S0["conv_state"].clone()
    worst = {"out": 0.0, "state": 0.0}
    for s in range(steps):
        X = ref.random_step(B, H, HK, seed=1000 * seed + s, dtype=x_dtype, device=dev)
        out = torch.full((B, H * 128), float("nan"), dtype=out_dtype, device=dev)
        cv_new = torch.full_like(cv_k, float("nan"))
        dn.gated_deltanet_decode(**X, conv_state=cv_k, state=st_k, **L, num_k_heads=HK, head_order=head_order,
                                 out_dtype=out_dtype, conv_state_out=cv_new, out=out, variant=variant,
                                 backend="cuda")
        out_r, cv_r, st_r = ref.gated_deltanet_decode(**X, conv_state=cv_r, state=st_r, **L, num_k_heads=HK,
                                                      head_order=head_order, out_dtype=torch.float32)
        assert torch.equal(cv_new, cv_r), f"conv state differs at step {s}"
        assert not torch.isnan(out).any(), f"unwritten output at step {s}"
        worst["out"] = max(worst["out"], _rel(out.float(), out_r))
        cv_k = cv_new
    worst["state"] = _rel(st_k, st_r)
    return worst


@pytest.mark.gpu
@pytest.mark.slow  # 64 steps of kernel + reference: left out of the sanitizer runs, which take the test below
@pytest.mark.parametrize("B", [1, 4])
@pytest.mark.parametrize("head_order", ["hf", "gguf"])
@pytest.mark.parametrize("variant", list(dn.SPLITS))
def test_kernel_exact_over_64_steps_fp32(B, head_order, variant):
    torch.backends.cuda.matmul.allow_tf32 = False
    worst = _run_steps(B, 48, 16, head_order, variant, torch.float32, torch.float32, steps=64)
    assert worst["out"] < 1e-5 and worst["state"] < 1e-5, worst


@pytest.mark.gpu
@pytest.mark.parametrize("B", [1, 4])
@pytest.mark.parametrize("head_order", ["hf", "gguf"])
@pytest.mark.parametrize("variant", list(dn.SPLITS))
def test_kernel_exact_over_2_steps_fp32(B, head_order, variant):
    """Every launch shape of the 64-step test, short enough to run under compute-sanitizer."""
    torch.backends.cuda.matmul.allow_tf32 = False
    worst = _run_steps(B, 48, 16, head_order, variant, torch.float32, torch.float32, steps=2, seed=5)
    assert worst["out"] < 1e-5 and worst["state"] < 1e-5, worst


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["head", "split"])
def test_kernel_fp16_io(variant):
    torch.backends.cuda.matmul.allow_tf32 = False
    worst = _run_steps(2, 48, 16, "gguf", variant, torch.float16, torch.float16, steps=8, seed=3)
    assert worst["out"] < 2e-3 and worst["state"] < 1e-5, worst


@pytest.mark.gpu
def test_kernel_odd_head_counts_and_inplace_conv():
    # 10 value heads over 5 key heads; default in-place conv state update
    dev = "cuda"
    L = ref.random_layer(10, 5, seed=2, device=dev)
    S = ref.random_state(3, 10, 5, seed=3, dtype=torch.float16, device=dev)
    X = ref.random_step(3, 10, 5, seed=4, dtype=torch.float16, device=dev)
    out_r, cv_r, st_r = ref.gated_deltanet_decode(**X, **S, **L, num_k_heads=5, head_order="hf")
    for v in (1, 4):
        st, cv = S["state"].clone(), S["conv_state"].clone()
        out = dn.gated_deltanet_decode(**X, conv_state=cv, state=st, **L, num_k_heads=5, variant=v, backend="cuda")
        assert torch.equal(cv, cv_r)
        assert _rel(st, st_r) < 1e-5
        assert _rel(out.float(), out_r.float()) < 2e-3


@pytest.mark.gpu
def test_kernel_under_cuda_graph_and_workspace_reset():
    dev = "cuda"
    B_, H_, HK_ = 1, 48, 16
    L = ref.random_layer(H_, HK_, seed=8, device=dev)
    S = ref.random_state(B_, H_, HK_, seed=9, dtype=torch.float16, device=dev)
    X = ref.random_step(B_, H_, HK_, seed=10, dtype=torch.float16, device=dev)
    st, cv_a = S["state"].clone(), S["conv_state"].clone()
    cv_b = torch.empty_like(cv_a)
    out = torch.empty(B_, H_ * 128, dtype=torch.float16, device=dev)

    def step():
        dn.gated_deltanet_decode(**X, conv_state=cv_a, state=st, **L, num_k_heads=HK_, head_order="gguf",
                                 conv_state_out=cv_b, out=out, variant="split", backend="cuda")

    step()  # warm-up (builds, allocates the workspace)
    torch.cuda.synchronize()
    st.copy_(S["state"])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    st.copy_(S["state"])
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    _, _, st1 = ref.gated_deltanet_decode(**X, **S, **L, num_k_heads=HK_, head_order="gguf")
    out_r, _, st2 = ref.gated_deltanet_decode(**X, conv_state=S["conv_state"], state=st1, **L, num_k_heads=HK_,
                                              head_order="gguf")
    assert _rel(st, st2) < 1e-5
    assert _rel(out.float(), out_r.float()) < 2e-3
    ws_cnt = dn._workspace(torch.device(dev, torch.cuda.current_device()), B_ * H_)[2]
    assert int(ws_cnt.abs().sum()) == 0
