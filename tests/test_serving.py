"""StaticEngine: same tokens as Hugging Face generate (CPU), graph decoding equals eager (GPU)."""
import warnings

import pytest
import torch

from t4lib.quant import quantize_model
from t4lib.serving import (
    FusedProjection, StaticEngine, fuse_projections, hf_generate, unfuse_projections,
)


def tiny(seed=0, dtype=torch.float32, init=0.02):
    """A random 2-layer Qwen2; a larger ``init`` (weight std) makes greedy decoding wander instead of repeat."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, initializer_range=init)
    return Qwen2ForCausalLM(cfg).to(dtype).eval()


def wandering(quant=False):
    """A tiny model whose greedy tokens vary (init 0.5), optionally W4A16, and a batch of 2 prompts."""
    m = tiny(seed=5, init=0.5)
    if quant:
        quantize_model(m)
    return m, torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0))


def test_greedy_matches_hf_generate():
    m = tiny()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(3))
    want = hf_generate(m, ids, 12, static_cache=False)
    eng = StaticEngine(m, max_len=64)
    got = eng.generate_with_stats(ids, 12)
    assert torch.equal(got.sequences, want)
    assert got.new_tokens.shape == (2, 12) and got.ttft_s > 0 and not got.graph
    again = eng.generate_with_stats(ids, 12)  # the cache is reset between calls
    assert torch.equal(again.sequences, want)


def test_quantized_model_decodes():
    m = quantize_model(tiny(seed=1))
    res = StaticEngine(m, max_len=32).generate_with_stats(torch.tensor([[1, 2, 3]]), 5, eos_token_id=7)
    assert res.sequences.shape == (1, 8) and 1 <= res.lengths[0] <= 5
    assert res.weight_bytes > 0 and res.bytes_per_step > 0


@pytest.mark.parametrize("quant", [False, True])
def test_compiled_decode_equals_eager(quant):
    m, ids = wandering(quant)
    want = StaticEngine(m, max_len=64, compile=False).generate_with_stats(ids, 12)
    got = StaticEngine(m, max_len=64, compile=True).generate_with_stats(ids, 12)
    assert got.compiled and got.compile_error is None and not want.compiled
    assert len(set(want.new_tokens[0].tolist())) > 3  # the check below means something only if tokens vary
    assert torch.equal(got.sequences, want.sequences)


def test_sampling_is_seeded():
    eng = StaticEngine(tiny(), max_len=32)
    ids = torch.tensor([[5, 6, 7]])
    a = eng.generate_with_stats(ids, 8, do_sample=True, top_k=50, seed=0).new_tokens
    b = eng.generate_with_stats(ids, 8, do_sample=True, top_k=50, seed=0).new_tokens
    c = eng.generate_with_stats(ids, 8, do_sample=True, temperature=5.0, seed=1).new_tokens
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert ((a >= 0) & (a < 256)).all()


@pytest.mark.parametrize("call,err,match", [
    (lambda e: e.generate_with_stats(torch.tensor([[1.0]]), 3), TypeError, "integer"),
    (lambda e: e.generate_with_stats(torch.tensor([[1]]), 0), ValueError, "max_new_tokens"),
    (lambda e: e.generate_with_stats(torch.ones(1, 30, dtype=torch.long), 10), ValueError, "max_len"),
    (lambda e: e.generate_with_stats(torch.tensor([[1]]), 2, do_sample=True, temperature=0.0), ValueError, "temperature"),
])
def test_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call(StaticEngine(tiny(), max_len=32))


def test_bad_engine_args():
    with pytest.raises(TypeError, match="causal LM"):
        StaticEngine(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="use_graph"):
        StaticEngine(tiny(), use_graph=True)
    with pytest.raises(TypeError, match="compile"):
        StaticEngine(tiny(), compile="yes")


@pytest.mark.gpu
@pytest.mark.parametrize("quant", [False, True])
def test_graph_decode_equals_eager(quant):
    m = tiny(seed=2, dtype=torch.float16).cuda()
    if quant:
        quantize_model(m)
    ids = torch.randint(0, 256, (1, 11), generator=torch.Generator().manual_seed(0))
    g = StaticEngine(m, max_len=64, use_graph=True, compile=False).generate_with_stats(ids, 20, output_logits=True)
    e = StaticEngine(m, max_len=64, use_graph=False).generate_with_stats(ids, 20, output_logits=True)
    assert g.graph, g.graph_error
    agree_until_near_tie(e, g)  # cuBLAS may pick other algorithms under graph capture
    assert g.frac_copy_bw is not None and g.peak_mem_bytes > 0
    s1 = StaticEngine(m, max_len=64).generate_with_stats(ids, 10, do_sample=True, seed=4)
    assert s1.graph and ((s1.new_tokens >= 0) & (s1.new_tokens < 256)).all()


def agree_until_near_tie(a, b, rel=2e-2):
    """Two decodes of one model by different kernels (a and b, with output_logits=True) agree: the
    logits each step was chosen from are within ``rel`` of the logits' range while the tokens so far
    are the same, and where the tokens first differ the two choices were a near-tie (their logits
    in ``a`` within twice that). fp16 arithmetic in another order (Inductor's fusion, another GEMV
    split, cuBLAS under graph capture) may flip a near-tie, after which the sequences part ways."""
    tol = rel * a.logits.abs().max()
    for row in range(a.new_tokens.shape[0]):
        ta, tb = a.new_tokens[row], b.new_tokens[row]
        diff = (ta != tb).nonzero()
        n = int(diff[0]) if len(diff) else len(ta) - 1
        assert (a.logits[row, :n + 1] - b.logits[row, :n + 1]).abs().max() <= tol
        if len(diff):
            assert abs(a.logits[row, n, ta[n]] - a.logits[row, n, tb[n]]) <= 2 * tol


def test_output_logits_are_the_choices():
    m, ids = wandering()
    r = StaticEngine(m, max_len=64).generate_with_stats(ids, 10, output_logits=True)
    assert r.logits.shape == (2, 10, 256) and torch.equal(r.logits.argmax(-1), r.new_tokens)
    assert torch.allclose(r.logits[:, 0], m(ids).logits[:, -1], atol=1e-4)
    assert StaticEngine(m, max_len=64).generate_with_stats(ids, 3).logits is None
    agree_until_near_tie(r, StaticEngine(m, max_len=64, compile=True).generate_with_stats(ids, 10, output_logits=True))


@pytest.mark.parametrize("do_sample,temperature,top_k", [(False, 1.0, 0), (True, 0.7, 0), (True, 1.3, 5)])
def test_output_logprobs_are_the_chosen_tokens_log_probabilities(do_sample, temperature, top_k):
    """logprobs[b, i] = log_softmax(logits / temperature over the top k)[token]; the tokens drawn are the
    ones drawn without logprobs (same seed), so recording them changes no sample."""
    m, ids = wandering()
    kw = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, seed=11)
    eng = StaticEngine(m, max_len=64)
    r = eng.generate_with_stats(ids, 10, output_logits=True, output_logprobs=True, **kw)
    scaled = r.logits / temperature
    if top_k:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    want = torch.log_softmax(scaled, -1).gather(-1, r.new_tokens[..., None]).squeeze(-1)
    assert r.logprobs.shape == (2, 10) and torch.isfinite(r.logprobs).all()
    torch.testing.assert_close(r.logprobs, want, rtol=1e-5, atol=1e-5)
    plain = StaticEngine(m, max_len=64).generate_with_stats(ids, 10, **kw)
    assert torch.equal(plain.new_tokens, r.new_tokens) and plain.logprobs is None


@pytest.mark.gpu
def test_output_logprobs_graph_equals_eager():
    m, ids = wandering()
    m = m.cuda()
    kw = dict(temperature=0.8, output_logprobs=True)  # greedy: the same tokens whatever the RNG streams
    g = StaticEngine(m, max_len=64, compile=False).generate_with_stats(ids, 20, **kw)
    e = StaticEngine(m, max_len=64, use_graph=False, compile=False).generate_with_stats(ids, 20, **kw)
    assert g.graph and not e.graph
    assert torch.equal(g.new_tokens, e.new_tokens)
    torch.testing.assert_close(g.logprobs, e.logprobs, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("quant", [False, True])
def test_compiled_graph_decode(quant):
    """The default CUDA engine (compiled step, captured graph) against eager decoding: same logits
    within tolerance while the tokens agree, and they part only at a near-tie."""
    m = tiny(seed=6, dtype=torch.float16, init=0.5).cuda()
    if quant:
        quantize_model(m)
    ids = torch.randint(0, 256, (1, 11), generator=torch.Generator().manual_seed(0))
    g = StaticEngine(m, max_len=64).generate_with_stats(ids, 20, output_logits=True)
    e = StaticEngine(m, max_len=64, use_graph=False, compile=False).generate_with_stats(ids, 20, output_logits=True)
    assert g.graph and g.compiled, (g.graph_error, g.compile_error)
    assert len(set(e.new_tokens[0].tolist())) > 3
    agree_until_near_tie(e, g)


@pytest.mark.gpu
def test_graph_decode_matches_hf_greedy():
    m = tiny(seed=3, dtype=torch.float16).cuda()
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    want = hf_generate(m, ids, 16, static_cache=False).cpu()
    got = StaticEngine(m, max_len=64).generate_with_stats(ids, 16)
    # fp16 logits can tie-break differently between kernels; require the first tokens to agree
    assert torch.equal(got.sequences[:, :12], want[:, :12])


# ---------------------------------------------------------------- fused projections

@pytest.mark.parametrize("quant", [False, True])
def test_fuse_projections_same_outputs_one_product_per_group(quant):
    m, ids = wandering(quant)
    want = m(ids).logits
    state = {k: v.clone() for k, v in m.state_dict().items()}
    assert fuse_projections(m) == 4  # q/k/v and gate/up in each of 2 layers
    assert fuse_projections(m) == 0  # already fused
    calls = []
    for mod in m.modules():
        if isinstance(mod, FusedProjection):
            mod.inner.register_forward_hook(lambda *a: calls.append(1))
    assert torch.allclose(m(ids).logits, want, atol=1e-5, rtol=1e-5)
    assert len(calls) == 4  # each stacked product computed once, not once per member
    assert all(mod._memo is None for mod in m.modules() if isinstance(mod, FusedProjection))
    assert unfuse_projections(m) == 4
    assert set(m.state_dict()) == set(state) and all(torch.equal(m.state_dict()[k], v) for k, v in state.items())


def test_fused_projections_trace_as_one_product():
    m, _ = wandering()
    fuse_projections(m)
    counts = []

    def count_linears(gm, inputs):
        counts.append(sum(n.op == "call_function" and "linear" in str(n.target) for n in gm.graph.nodes))
        return gm.forward

    torch.compile(lambda i: m(input_ids=i).logits, backend=count_linears, fullgraph=True)(torch.tensor([[3]]))
    assert counts == [2 * 4 + 1]  # per layer qkv, o, gate_up, down; then lm_head (unfused: 2 * 7 + 1)


def test_fused_engine_decodes_the_same():
    m, ids = wandering(quant=True)
    want = StaticEngine(m, max_len=64).generate_with_stats(ids, 12)
    fuse_projections(m)
    got = StaticEngine(m, max_len=64).generate_with_stats(ids, 12)
    assert torch.equal(got.sequences, want.sequences) and got.weight_bytes == want.weight_bytes


def test_fuse_projections_bad_input():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        fuse_projections("model")
    m = tiny()
    m.model.layers[0].mlp.gate_up_proj = torch.nn.Identity()
    with pytest.raises(ValueError, match="gate_up_proj"):
        fuse_projections(m)
    from t4lib.quant import default_policy

    mixed = tiny()
    policy = default_policy(mixed)
    policy["model.layers.0.self_attn.q_proj"]["group_size"] = 32
    quantize_model(mixed, policy)
    fuse_projections(mixed)  # group sizes differ in layer 0's q/k/v: that group stays separate
    assert not hasattr(mixed.model.layers[0].self_attn, "qkv_proj")
    assert hasattr(mixed.model.layers[1].self_attn, "qkv_proj")


@pytest.mark.gpu
def test_fused_compiled_graph_decode():
    m = quantize_model(tiny(seed=6, dtype=torch.float16, init=0.5).cuda())
    ids = torch.randint(0, 256, (1, 11), generator=torch.Generator().manual_seed(0))
    e = StaticEngine(m, max_len=64, use_graph=False, compile=False).generate_with_stats(ids, 20, output_logits=True)
    fuse_projections(m)
    g = StaticEngine(m, max_len=64).generate_with_stats(ids, 20, output_logits=True)
    assert g.graph and g.compiled, (g.graph_error, g.compile_error)
    agree_until_near_tie(e, g)


@pytest.mark.parametrize("restore_counters", [True, False])
def test_warm_up_leaves_the_cache_where_it_was(restore_counters, monkeypatch):
    """Graph capture first runs the step twice (compile, load kernels). transformers' StaticLayer writes
    K/V at its own position counter, so the warm-up must restore it: otherwise every captured step
    writes K/V two slots ahead of its position and attends to the warm-up's copies (the negative
    control shows the logits then change)."""
    m = tiny(seed=5, init=0.5)
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(0))
    want = StaticEngine(m, max_len=64).generate_with_stats(ids, 10, output_logits=True)
    eng = StaticEngine(m, max_len=64)
    if not restore_counters:
        monkeypatch.setattr(eng, "_cache_counters", lambda: ([], {}))
    plain_step = eng._step

    def warm_up_then_step():  # what capture does before the first decode step
        eng._step = plain_step
        eng._warm_up()
        plain_step()

    eng._step = warm_up_then_step
    got = eng.generate_with_stats(ids, 10, output_logits=True)
    if restore_counters:
        assert torch.equal(got.logits, want.logits)
    else:
        assert not torch.allclose(got.logits, want.logits, atol=1e-3)


def test_fused_model_must_be_unfused_before_saving(tmp_path):
    from t4lib.quant import load_quantized, save_quantized
    m, _ = wandering(quant=True)
    ids = torch.tensor([[1, 2, 3, 4]])
    want = m(ids).logits
    fuse_projections(m)
    with pytest.raises(ValueError, match="unfuse_projections"):
        save_quantized(m, tmp_path / "q")
    assert not (tmp_path / "q" / "model.safetensors").exists()
    unfuse_projections(m)
    back = load_quantized(save_quantized(m, tmp_path / "q"), dtype=torch.float32)
    assert torch.allclose(back(ids).logits, want, atol=1e-5)


def test_engine_reports_a_step_dynamo_ran_uncompiled(monkeypatch):
    """Past dynamo's recompile limit torch.compile runs the function as plain Python, silently; the
    engine notices (its step never ran as compiled code) and says so instead of reporting compiled."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    ids = torch.tensor([[1, 2, 3]])
    results = []
    for layers in (1, 2):  # another layer count fails a guard: a recompile, past the limit of 1
        torch.manual_seed(0)
        m = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append((StaticEngine(m.eval(), max_len=16, compile=True).generate_with_stats(ids, 4), caught))
    (first, _), (second, caught) = results
    assert first.compiled and first.compile_error is None
    assert not second.compiled and "recompile limit" in second.compile_error
    assert any("recompile limit" in str(w.message) for w in caught)
    torch._dynamo.reset()


def test_unfuse_restores_members_without_bias():
    m, _ = wandering()
    m.model.layers[0].self_attn.k_proj.bias = None  # q and v keep theirs: the stacked bias has zeros for k
    ids = torch.tensor([[1, 2, 3, 4]])
    want, keys = m(ids).logits, set(m.state_dict())
    fuse_projections(m)
    assert torch.allclose(m(ids).logits, want, atol=1e-5)
    unfuse_projections(m)
    assert set(m.state_dict()) == keys and m.model.layers[0].self_attn.k_proj.bias is None
    assert torch.allclose(m(ids).logits, want, atol=1e-5)
