"""qwen35 engine from GGUF (CPU): the converter round trip, the engine against
transformers' own Qwen3_5ForCausalLM at tiny size (F32 weights; all eight GGUF
formats against transformers on the dequantized weights), the synthetic file
(every tensor type and layer kind), the two-stage split, sampling, bad input."""
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("installed transformers has no Qwen3_5ForCausalLM", allow_module_level=True)

from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

from t4lib.models.qwen35 import Qwen35Engine, Qwen35Model, plan_stages  # noqa: E402
from t4lib.models.qwen35.convert import (
    gguf_to_hf_state_dict, hf_to_gguf, hf_to_gguf_tensors, reorder_v_heads,
)
from t4lib.models.qwen35.oracle import PROMPT, hf_run, quantized_gguf, random_hf, tiny_config  # noqa: E402
from t4lib.models.qwen35.oracle import rel_err as rel  # noqa: E402
from t4lib.quant.gguf import GGUFError, GGUFFile, TinyQwen35Dims, write_tiny_qwen35  # noqa: E402

NEW = 64
# F32 weights, fp32 engine: logits within 1e-5 of max |logit| (measured: ~1e-6);
# fp16 activations through the GEMV path: 1e-2 (measured: ~3e-3)
TOL_F32, TOL_F16 = 1e-5, 1e-2


@pytest.fixture(autouse=True, scope="module")
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny matrices: threads cost more than they give
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def f32_case(tmp_path_factory):
    cfg = tiny_config()
    m = random_hf(cfg)
    path = hf_to_gguf(m.state_dict(), cfg, tmp_path_factory.mktemp("q35") / "f32.gguf")
    return cfg, m, path, hf_run(m)


@pytest.fixture(scope="module")
def quant_case(tmp_path_factory):
    cfg = tiny_config()
    m = random_hf(cfg, seed=1)
    path = quantized_gguf(m, cfg, tmp_path_factory.mktemp("q35") / "quant.gguf")
    oracle = Qwen3_5ForCausalLM(cfg).eval()
    oracle.load_state_dict(gguf_to_hf_state_dict(path, cfg))   # transformers on the dequantized weights
    return cfg, oracle, path, hf_run(oracle)


# ----------------------------------------------------------------------------- converter

def test_reorder_v_heads_is_llama_cpp_tiling_and_inverts():
    t = torch.arange(6 * 2)[:, None]               # 2 key heads x 3 value heads each, 2 rows per head
    g = reorder_v_heads(t, 0, 2, 3, 2)
    # GGUF head j*HK + k is HF head k*r + j: HF heads [0 1 2 | 3 4 5] -> [0 3 1 4 2 5]
    assert g[:, 0].tolist() == [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]
    assert torch.equal(reorder_v_heads(g, 0, 2, 3, 2, inverse=True), t)


def test_converter_round_trip_is_exact(f32_case):
    cfg, m, path, _ = f32_case
    f = GGUFFile(path)
    assert f.architecture == "qwen35" and "output.weight" in f.tensors
    assert f.info("blk.0.ssm_a").shape == (4,) and f.info("blk.0.ssm_conv1d.weight").shape == (512, 4)
    sd, back = m.state_dict(), gguf_to_hf_state_dict(f, cfg)
    assert set(back) == set(sd)
    for n, t in sd.items():
        tol = 1e-6 if n.endswith("A_log") else 0   # log(exp(x)) is not bit-exact; norms +1 -1 are
        assert torch.allclose(back[n], t, rtol=tol, atol=1e-6 if "norm" in n else tol), n
    # the transformation itself: norms + 1, ssm_a = -exp(A_log) in GGUF head order
    g = hf_to_gguf_tensors(sd, cfg)
    assert torch.equal(g["output_norm.weight"], sd["model.norm.weight"] + 1)
    assert torch.equal(g["blk.0.ssm_norm.weight"], sd["model.layers.0.linear_attn.norm.weight"])
    a = -torch.exp(sd["model.layers.0.linear_attn.A_log"])
    assert torch.equal(g["blk.0.ssm_a"], a[[0, 2, 1, 3]])


def test_converter_quantized_types_and_errors(tmp_path):
    cfg = tiny_config(layers=2)
    m = random_hf(cfg)
    p = hf_to_gguf(m.state_dict(), cfg, tmp_path / "q8.gguf", types={"ffn_up": "Q8_0", "attn_qkv": "F16"})
    f = GGUFFile(p)
    assert f.info("blk.0.ffn_up.weight").type_name == "Q8_0"
    assert f.info("blk.0.attn_qkv.weight").type_name == "F16"
    assert f.info("blk.0.attn_norm.weight").type_name == "F32"
    with pytest.raises(ValueError, match="no quantizer for Q4_K"):
        hf_to_gguf(m.state_dict(), cfg, tmp_path / "k.gguf", types={"ffn_up": "Q4_K"})
    with pytest.raises(ValueError, match="does not know"):
        hf_to_gguf({"model.layers.0.bogus.weight": torch.zeros(2)}, cfg, tmp_path / "b.gguf")


# ----------------------------------------------------------------------------- engine against transformers

def test_f32_weights_match_transformers_prefill_and_64_steps(f32_case):
    cfg, m, path, (ref_prompt, ref_logits, ref_tokens) = f32_case
    for dtype, tol in ((torch.float32, TOL_F32), (torch.float16, TOL_F16)):
        eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=80, dtype=dtype)
        r = eng.generate(PROMPT, NEW, return_logits=True)
        assert r.prompt_logits.shape == ref_prompt.shape and r.logits.shape == ref_logits.shape
        assert rel(r.prompt_logits, ref_prompt) < tol, dtype
        assert rel(r.logits, ref_logits) < tol, dtype
        assert r.tokens == ref_tokens, dtype
    assert len(set(ref_tokens)) > 3   # the check is not over a constant sequence


def test_every_gguf_format_matches_transformers_on_dequantized_weights(quant_case):
    cfg, oracle, path, (ref_prompt, ref_logits, ref_tokens) = quant_case
    f = GGUFFile(path)
    types = {f.info(n).type_name for n in f.tensors}
    assert {"Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ3_S", "IQ4_XS", "F16", "F32"} <= types
    for dtype, tol in ((torch.float32, TOL_F32), (torch.float16, TOL_F16)):   # fp16: the GEMV op of each format
        eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=80, dtype=dtype)
        r = eng.generate(PROMPT, NEW, return_logits=True)
        assert rel(r.prompt_logits, ref_prompt) < tol and rel(r.logits, ref_logits) < tol, dtype
        assert r.tokens == ref_tokens, dtype


def test_tied_head_uses_the_embedding(tmp_path):
    cfg = tiny_config(tied=True, layers=2)
    m = random_hf(cfg, seed=3)
    path = hf_to_gguf(m.state_dict(), cfg, tmp_path / "tied.gguf")
    assert "output.weight" not in GGUFFile(path).tensors
    ref_prompt, ref_logits, ref_tokens = hf_run(m, new=8)
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=20, dtype=torch.float32)
    assert eng.cfg.tied
    r = eng.generate(PROMPT, 8, return_logits=True)
    assert rel(r.logits, ref_logits) < TOL_F32 and r.tokens == ref_tokens


def test_synthetic_file_every_type_and_layer_kind_against_transformers(tmp_path):
    """write_tiny_qwen35: eight quant formats, both layer kinds, an MTP block (left out)."""
    d = TinyQwen35Dims()
    path = write_tiny_qwen35(tmp_path / "syn.gguf", d)
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=12, dtype=torch.float32)
    assert eng.cfg.n_layers == d.n_layers and eng.cfg.n_nextn == 1
    assert eng.cfg.layer_types == ("deltanet", "deltanet", "deltanet", "attention")
    cfg = Qwen3_5TextConfig(
        vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn, num_hidden_layers=d.n_layers,
        num_attention_heads=d.attn_heads, num_key_value_heads=d.attn_kv_heads, head_dim=d.attn_head_dim,
        linear_key_head_dim=d.ssm_head_dim, linear_value_head_dim=d.ssm_head_dim, linear_num_key_heads=d.ssm_k_heads,
        linear_num_value_heads=d.ssm_v_heads, full_attention_interval=d.full_attention_interval,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                         "partial_rotary_factor": d.rope_dim / d.attn_head_dim})
    cfg._attn_implementation = "eager"
    oracle = Qwen3_5ForCausalLM(cfg).eval()
    oracle.load_state_dict(gguf_to_hf_state_dict(path, cfg))
    prompt = [1, 2, 3, 4]
    ref_prompt, ref_logits, ref_tokens = hf_run(oracle, prompt, new=4)
    r = eng.generate(prompt, 4, return_logits=True)
    assert rel(r.prompt_logits, ref_prompt) < 1e-4 and rel(r.logits, ref_logits) < 1e-4
    assert r.tokens == ref_tokens


# ----------------------------------------------------------------------------- decode loop, sampling, split

def test_sampling_is_seeded_and_top_k_1_is_greedy(f32_case):
    cfg, _, path, (_, _, ref_tokens) = f32_case
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=40, dtype=torch.float32)
    a = eng.generate(PROMPT, 12, do_sample=True, temperature=1.5, seed=7).tokens
    b = eng.generate(PROMPT, 12, do_sample=True, temperature=1.5, seed=7).tokens
    c = eng.generate(PROMPT, 12, do_sample=True, temperature=1.5, seed=8).tokens
    assert a == b and a != c and a != ref_tokens[:12]
    assert eng.generate(PROMPT, 12, do_sample=True, top_k=1, seed=1).tokens == ref_tokens[:12]
    assert eng.generate(PROMPT, 12, do_sample=True, top_p=1e-6, seed=1).tokens == ref_tokens[:12]
    assert eng.generate(PROMPT, 12).tokens == ref_tokens[:12]   # the caches were reset between calls


def test_plan_stages_by_bytes_not_layer_count():
    sizes = [10, 10, 10, 10, 10, 50]           # count would split 3 | 3 (30 | 70)
    p = plan_stages(sizes, 2)
    assert [list(r) for r in p.ranges] == [[0, 1, 2, 3, 4], [5]] and p.stage_bytes == (50, 50)
    p = plan_stages(sizes, 2, first_extra=25)   # the embedding's stage takes fewer layers
    assert [list(r) for r in p.ranges] == [[0, 1, 2, 3], [4, 5]] and p.stage_bytes == (65, 60)
    p = plan_stages([5] * 6, 3, capacities=[100, 10, 100])   # a small device gets fewer layers
    assert len(p.ranges[1]) <= 2 and sum(len(r) for r in p.ranges) == 6
    assert p.device_of_layer(["a", "b", "c"]).count("b") == len(p.ranges[1])


def test_two_stages_give_the_same_tokens_as_one(f32_case):
    _, _, path, (_, _, ref_tokens) = f32_case
    one = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=40, dtype=torch.float32)
    two = Qwen35Engine.from_gguf(path, devices=["cpu", "cpu"], max_len=40, dtype=torch.float32,
                                 capacities=[None, None])
    assert len(one.stages) == 1 and len(two.stages) == 2   # two stages, the hidden state handed over
    a, b = one.generate(PROMPT, 24, return_logits=True), two.generate(PROMPT, 24, return_logits=True)
    assert a.tokens == b.tokens == ref_tokens[:24]
    assert torch.equal(a.logits, b.logits)


def test_compiled_step_matches_the_step_as_written(f32_case):
    """compile=True (the default with CUDA graphs) runs the step's elementwise parts as torch.compile'd functions;
    on the CPU they compile through Inductor's C++ backend: the oracle's tokens, logits within TOL_F32 of
    the functions as written, and the engine says it compiled."""
    _, _, path, (_, _, ref_tokens) = f32_case
    runs = {}
    for compiled in (True, False):
        eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=40, dtype=torch.float32, compile=compiled)
        runs[compiled] = eng.generate(PROMPT, 24, return_logits=True)
        assert eng.fns.compiled is compiled and eng.compile_error is None
    c, e = runs[True], runs[False]
    assert c.info["compiled"] and not e.info["compiled"]
    assert c.tokens == e.tokens == ref_tokens[:24]
    assert rel(c.logits, e.logits) < TOL_F32


def test_split_plan_from_file_and_does_not_fit(f32_case):
    cfg, _, path, _ = f32_case
    eng = Qwen35Engine.from_gguf(path, devices=["cpu", "cpu"], max_len=16, dtype=torch.float32,
                                 capacities=[10**9, 10**9])
    assert len(eng.plan.ranges) == 2 and all(len(r) for r in eng.plan.ranges)
    assert sum(eng.plan.stage_bytes) > GGUFFile(path).info("blk.0.ffn_up.weight").n_bytes
    with pytest.raises(ValueError, match="split does not fit: stage"):
        Qwen35Engine.from_gguf(path, devices=["cpu", "cpu"], max_len=16, capacities=[10**6, 10**6])
    with pytest.raises(ValueError, match="n_stages must be"):
        plan_stages([1, 2], 3)
    with pytest.raises(ValueError, match="capacities must give one size per stage"):
        plan_stages([1, 2], 2, capacities=[5])


# ----------------------------------------------------------------------------- bad input

def test_other_architecture_is_rejected(tmp_path):
    p = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="architecture is 'llama', expected 'qwen35'"):
        Qwen35Engine.from_gguf(p)


def test_missing_tensor_and_unsupported_type(tmp_path):
    cfg = tiny_config(layers=2)
    m = random_hf(cfg)
    sd = {k: v for k, v in m.state_dict().items() if "layers.1.self_attn.k_proj" not in k}
    p = hf_to_gguf(sd, cfg, tmp_path / "missing.gguf")
    with pytest.raises(GGUFError, match=r"missing tensor 'blk\.1\.attn_k\.weight'"):
        Qwen35Engine.from_gguf(p)
    p = hf_to_gguf(m.state_dict(), cfg, tmp_path / "q4_0.gguf", types={"attn_qkv": "Q4_0"})
    with pytest.raises(GGUFError, match=r"'blk\.0\.attn_qkv\.weight' has unsupported GGUF tensor type Q4_0"):
        Qwen35Engine.from_gguf(p)


def test_prompt_and_argument_errors(f32_case):
    _, _, path, _ = f32_case
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=10, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"prompt of 11 tokens is longer than the cache \(max_len=10\)"):
        eng.generate(list(range(11)), 1)
    with pytest.raises(ValueError, match="does not fit the cache"):
        eng.generate(list(range(8)), 3)
    with pytest.raises(ValueError, match="prompt token ids must be ints in"):
        eng.generate([1, 96], 1)
    with pytest.raises(ValueError, match="at least one token"):
        eng.generate([], 1)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        eng.generate([1], 0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        eng.generate([1], 1, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_p must be in"):
        eng.generate([1], 1, do_sample=True, top_p=0)
    with pytest.raises(TypeError, match="dtype must be"):
        Qwen35Engine(eng.model, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        Qwen35Engine(eng.model, max_len=0)
    with pytest.raises(TypeError, match="compile must be a bool or None"):
        Qwen35Engine(eng.model, compile="yes")
    with pytest.raises(ValueError, match=r"devices must list one device per main layer \(4\), got 2"):
        Qwen35Model.from_gguf(path, devices=["cpu", "cpu"])
    with pytest.raises(ValueError, match="activations must be 'fp16' or 'int8'"):
        Qwen35Model.from_gguf(path, activations="int4")
    with pytest.raises(GGUFError, match="GGUF file not found"):
        Qwen35Engine.from_gguf(path.parent / "absent.gguf")


# ----------------------------------------------------------------------------- the GPU benchmark's model builder

def test_bench_random_model_builds_and_decodes_on_cpu():
    """The 27B benchmark's builder at tiny dimensions: random blocks in its quant mix, the
    fp16 GEMV path against the fp32 yardstick on the same weights."""
    from t4lib.benchmarks import qwen35 as bench

    c = bench.config_27b(n_layers=8)   # 8 layers: the mix's middle layers use IQ3_S, Q3_K, IQ4_NL
    cfg = type(c)(vocab=64, hidden=256, ffn=256, n_layers=8, layer_types=c.layer_types, attn_heads=4,
                  attn_kv_heads=2, head_dim=64, rope_dim=16, rope_base=1e7, eps=1e-6, ssm_k_heads=2, ssm_v_heads=4,
                  ssm_k_dim=64, ssm_v_dim=64)
    model = bench.random_model(cfg, device="cpu")
    kinds = {b.kind for b in model.blocks}
    assert kinds == {"attention", "deltanet"}
    types = {lin.type for b in model.blocks for lin in b.linears()} | {model.embed.type, model.head.type}
    assert {0, 8, 11, 12, 13, 14, 20, 21, 23} <= types   # F32 and the eight GGUF formats
    sb = bench.step_bytes(model, 10)
    assert sb["total"] == sb["weights"] + sb["state"] + sb["kv"] and sb["state"] == 6 * 2 * 4 * 4 * 64 * 64
    r16 = Qwen35Engine(model, max_len=8, dtype=torch.float16).generate([1, 2, 3], 3, return_logits=True)
    r32 = Qwen35Engine(model, max_len=8, dtype=torch.float32).generate([1, 2, 3], 3, return_logits=True)
    assert torch.isfinite(r16.logits).all() and rel(r16.logits, r32.logits) < TOL_F16
