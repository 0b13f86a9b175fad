"""Wrong or hostile arguments to the engines, quantizers and the contract rule (CPU) raise an error naming the
argument before any work, instead of returning wrong numbers: token ids outside the vocabulary or not ints,
eos ids as Hugging Face configs hold them (a list), temperature 0 with log-probabilities, weights whose
fp16 scales overflow, a bad GPTQ block, a model left half-quantized, non-float input to QuantLinear, a
chunk that compares nothing; and the declared transformers versions."""
import re
from pathlib import Path

import pytest
import torch
from random_lm import V, NoForward, wandering_qwen2

from t4lib.contract import rule as R
from t4lib.quant import QuantLinear, quantize_gptq, quantize_model, quantize_rtn
from t4lib.quant.quantize import MAX_ABS_WEIGHT
from t4lib.serving import StaticEngine, hf_compat
from t4lib.speculative import PromptLookupDrafter, SpeculativeEngine


@pytest.fixture(scope="module")
def model():
    return wandering_qwen2()


def engines(model):
    return {"static": StaticEngine(NoForward(model), max_len=32),
            "speculative": SpeculativeEngine(NoForward(model), PromptLookupDrafter(), max_len=32)}


BAD_IDS = [
    (torch.tensor([[1, V]]), ValueError, r"in \[0, 256\)"),
    (torch.tensor([[-1, 2]]), ValueError, r"in \[0, 256\)"),
    ([[1, 2], [3, 10 ** 6]], ValueError, r"input_ids\[1\].*in \[0, 256\)"),
    ([[1.0, 2.0]], TypeError, "must be ints"),
    ([[1, 2.7]], TypeError, "must be ints"),
    ([[True, 2]], TypeError, "must be ints"),
    (torch.tensor([[1.0, 2.0]]), TypeError, "integer"),
    ([[1, 2], []], ValueError, "at least one token"),
    ("12", TypeError, "input_ids"),
]


@pytest.mark.parametrize("kind", ["static", "speculative"])
@pytest.mark.parametrize("ids,err,match", BAD_IDS, ids=[f"ids{i}" for i in range(len(BAD_IDS))])
def test_bad_token_ids_refused_before_the_embedding(model, kind, ids, err, match):
    with pytest.raises(err, match=match):
        engines(model)[kind].generate_with_stats(ids, 3)


BAD_EOS = [(1.5, TypeError), ([], TypeError), ([2, "x"], TypeError), ([2, V], ValueError), (-1, ValueError),
           (True, TypeError)]


@pytest.mark.parametrize("kind", ["static", "speculative"])
@pytest.mark.parametrize("eos,err", BAD_EOS, ids=[repr(e) for e, _ in BAD_EOS])
def test_bad_eos_refused(model, kind, eos, err):
    with pytest.raises(err, match="eos_token_id"):
        engines(model)[kind].generate_with_stats([[1, 2]], 3, eos_token_id=eos)


def first_of(tokens, ids):
    return next(i for i, t in enumerate(tokens) if t in ids) + 1


def test_static_engine_takes_a_list_of_eos_ids(model):
    eng = StaticEngine(model, max_len=48)
    res = eng.generate_with_stats([[5, 6, 7], [9, 10, 11]], 20)
    toks = res.new_tokens.tolist()
    eos = [toks[0][4], toks[1][2]]   # a token each row emits, as a two-id eos list
    cut = eng.generate_with_stats([[5, 6, 7], [9, 10, 11]], 20, eos_token_id=eos)
    assert cut.lengths == [first_of(toks[0], eos), first_of(toks[1], eos)]
    assert cut.lengths[1] <= 3


@pytest.mark.parametrize("device_rounds", [False, True])
def test_speculative_engine_takes_a_list_of_eos_ids(model, device_rounds):
    rows = [[5, 6, 7], [9, 10, 11, 12]]
    plain = SpeculativeEngine(model, PromptLookupDrafter(), max_len=48).generate_with_stats(rows, 20).new_tokens
    eos = [plain[0][4], plain[1][2]]
    eng = SpeculativeEngine(model, PromptLookupDrafter(eos_token_id=eos), max_len=48, device_rounds=device_rounds)
    got = eng.generate_with_stats(rows, 20, eos_token_id=eos).new_tokens
    assert got == [p[:first_of(p, eos)] for p in plain]


def test_prompt_lookup_drafts_stop_at_any_eos():
    d = PromptLookupDrafter(eos_token_id=[7, 9])
    assert d.lookup([1, 2, 3, 8, 9, 4, 1, 2], 5) == [3, 8, 9]
    assert PromptLookupDrafter(eos_token_id=7).lookup([1, 2, 7, 4, 1], 3) == [2, 7]


def test_temperature_zero_logprobs_are_not_nan(model):
    res = StaticEngine(model, max_len=32).generate_with_stats([[3, 4, 5]], 6, temperature=0, output_logprobs=True)
    assert torch.equal(res.logprobs, torch.zeros(1, 6))
    greedy = StaticEngine(model, max_len=32).generate_with_stats([[3, 4, 5]], 6)
    assert torch.equal(res.new_tokens, greedy.new_tokens)


@pytest.mark.parametrize("kw,match", [
    ({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": "hot"}, "temperature"), ({"do_sample": True, "temperature": 0}, "temperature"),
    ({"top_k": -5}, "top_k"), ({"top_k": 2.5}, "top_k"), ({"do_sample": "yes"}, "do_sample"),
    ({"seed": 1.5}, "seed"), ({"max_new_tokens": True}, "max_new_tokens"),
])
def test_bad_sampling_arguments(model, kw, match):
    kw = dict(kw)
    n = kw.pop("max_new_tokens", 3)
    with pytest.raises((TypeError, ValueError), match=match):
        StaticEngine(NoForward(model), max_len=32).generate_with_stats([[1, 2]], n, **kw)


# ----------------------------------------------------------------------------- quantizers

@pytest.mark.parametrize("scale", [2e5, 1e6])
def test_rtn_refuses_weights_whose_fp16_scales_overflow(scale):
    w = torch.randn(8, 128) * scale
    with pytest.raises(ValueError, match=r"\|w\| must stay <= 61410"):
        quantize_rtn(w)
    with pytest.raises(ValueError, match="61410"):
        quantize_gptq(w, torch.eye(128))


def test_rtn_at_the_edge_of_fp16_is_finite():
    w = torch.randn(8, 128)
    w = w / w.abs().amax(1, keepdim=True) * MAX_ABS_WEIGHT
    d = quantize_rtn(w).dequantize()
    assert d.dtype == torch.float16 and torch.isfinite(d).all()


@pytest.mark.parametrize("a", [1e-5, 1e-3])
def test_small_weights_quantize_within_rtn_precision(a):
    """No NaN or inf; every value within twice RTN's bound (``absmax / 15`` of its row), however coarsely a
    subnormal fp16 scale rounds."""
    w = torch.randn(16, 128, generator=torch.Generator().manual_seed(0)) * a
    d = quantize_rtn(w).dequantize(torch.float32)
    assert torch.isfinite(d).all()
    assert ((d - w).abs() <= 2 * w.abs().amax(1, keepdim=True) / 15).all()


@pytest.mark.parametrize("a", [1e-8, 2e-7, 1e-6])
def test_rows_too_small_for_fp16_scales_are_refused_naming_the_row(a):
    """A row of 1e-8 would dequantize to zeros (relative error 1): refused, by RTN, GPTQ and quantize_model."""
    w = torch.randn(4, 128, generator=torch.Generator().manual_seed(0)) * 0.02
    w[2] = torch.randn(128, generator=torch.Generator().manual_seed(1)).clamp(-2, 2) * a
    with pytest.raises(ValueError, match=r"weight: row 2's largest \|w\|"):
        quantize_rtn(w)
    with pytest.raises(ValueError, match=r"row 2's largest"):
        quantize_gptq(w, torch.eye(128))
    lin = torch.nn.Linear(128, 4, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    model = torch.nn.Sequential(lin)
    with pytest.raises(ValueError, match=r"row 2's largest") as e:
        quantize_model(model, {"0": {"format": "w4a16"}})
    assert "0" in str(e.value) and isinstance(model[0], torch.nn.Linear)  # the model unchanged


def test_a_group_whose_fp16_scale_underflows_beside_ordinary_groups_keeps_its_values():
    """absmax / 7.5 rounds to 0 in fp16 in the second group: the scale floors at fp16's smallest subnormal
    rather than dequantizing it to zeros, and its error is within the row's RTN bound."""
    w = torch.full((1, 256), 2e-7)
    w[0, ::2] = -2e-7
    w[0, :128] = torch.linspace(-0.05, 0.05, 128)
    d = quantize_rtn(w).dequantize(torch.float32)
    assert ((d - w)[0, 128:].abs() <= 2e-7 / 7.5 + 2 ** -24).all()
    assert ((d - w).abs() <= 0.05 / 15 + 1e-7).all()
    zero = quantize_rtn(torch.zeros(2, 128)).dequantize(torch.float32)  # an all-zero row is exact
    assert not zero.any()


@pytest.mark.parametrize("block", [-128, 0, 64, 100, 128.0, True])
def test_gptq_block_must_be_a_positive_multiple_of_the_group(block):
    with pytest.raises(ValueError, match="block must be a positive multiple of group_size=128"):
        quantize_gptq(torch.randn(8, 256), torch.eye(256), block=block)


@pytest.mark.parametrize("damp", [-0.1, float("inf"), "x"])
def test_gptq_damp_checked(damp):
    with pytest.raises(ValueError, match="damp"):
        quantize_gptq(torch.randn(8, 128), torch.eye(128), damp=damp)


def test_gptq_refuses_a_nan_hessian():
    H = torch.eye(128)
    H[3, 3] = float("nan")
    with pytest.raises(ValueError, match="hessian contains NaN"):
        quantize_gptq(torch.randn(8, 128), H)


def fresh(model):
    import copy
    return copy.deepcopy(model)


@pytest.mark.parametrize("inplace", [True, False])
def test_quantize_model_names_the_failing_layer_and_replaces_none(model, inplace):
    m = fresh(model)
    with torch.no_grad():
        m.model.layers[1].mlp.down_proj.weight[3, 5] = 3e5   # the last layer quantized by the default policy
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=r"layer 'model\.layers\.1\.mlp\.down_proj'.*no layer was replaced"):
        quantize_model(m, inplace=inplace)
    assert not any(isinstance(x, QuantLinear) for x in m.modules())
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_quantize_model_replaces_none_when_a_late_layer_fails(model, monkeypatch):
    """A failure inside the quantizer itself (after the upfront checks) also leaves the model whole."""
    import t4lib.quant.model as qm

    m = fresh(model)
    real = qm.QuantLinear.from_linear

    def flaky(lin, *a, **k):
        if lin is m.model.layers[1].self_attn.o_proj:
            raise RuntimeError("simulated out of memory")
        return real(lin, *a, **k)

    monkeypatch.setattr(qm.QuantLinear, "from_linear", staticmethod(flaky))
    with pytest.raises(RuntimeError, match=r"layer 'model\.layers\.1\.self_attn\.o_proj'.*simulated"):
        quantize_model(m)
    assert not any(isinstance(x, QuantLinear) for x in m.modules())


@pytest.mark.parametrize("calib", [[torch.tensor([[1, 2, V]])], [torch.tensor([[1, 2]]), torch.tensor([[-3, 1]])]])
def test_gptq_calibration_refuses_out_of_vocabulary_ids(model, calib):
    m = fresh(model)
    with pytest.raises(ValueError, match=r"calib batch \d: token ids must lie in \[0, 256\)"):
        quantize_model(m, {"*proj": {"format": "w4a16", "method": "gptq"}}, calib=calib)
    assert not any(isinstance(x, QuantLinear) for x in m.modules())


def test_cp_hybrid_calibration_refuses_out_of_vocabulary_ids(model):
    from t4lib.train.cp_hybrid import layer_sensitivity

    with pytest.raises(ValueError, match=r"calib: token ids must lie in \[0, 256\)"):
        layer_sensitivity(NoForward(model), torch.tensor([[1, 2, V + 3]]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_quant_linear_refuses_non_float_input(dtype):
    q = QuantLinear.from_linear(torch.nn.Linear(128, 16))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        q(torch.ones(2, 128, dtype=dtype))


def test_quant_linear_still_takes_float_input():
    lin = torch.nn.Linear(128, 16)
    q = QuantLinear.from_linear(lin)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        assert q(torch.ones(2, 128, dtype=dt)).dtype == dt


# ----------------------------------------------------------------------------- contract rule, versions

@pytest.mark.parametrize("chunk", [-1, 0, 2.0, True])
def test_compare_chunk_must_be_positive(chunk):
    a = torch.zeros(4, dtype=torch.float16)
    with pytest.raises(ValueError, match="chunk must be an int >= 1"):
        R.compare(a, a + 1, chunk=chunk)


def test_compare_with_a_small_chunk_still_fails_bad_values():
    a = torch.zeros(5, dtype=torch.float16)
    assert R.compare(a, a + 1, chunk=2).failures == 5


def test_old_transformers_refused_with_the_known_versions(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.51.3")
    with pytest.raises(RuntimeError, match=r"transformers >= 4\.56 \(tested on .*5\.24.*found transformers 4\.51\.3"):
        hf_compat.check_version()


def test_a_changed_static_cache_fails_with_the_known_versions(monkeypatch):
    import transformers

    class OldStaticCache:   # the pre-4.56 signature: batch size, device and dtype required
        def __init__(self, config, max_batch_size, max_cache_len, device, dtype):
            pass

    monkeypatch.setattr(transformers, "StaticCache", OldStaticCache)
    with pytest.raises(RuntimeError, match="StaticCache.*tested on"):
        hf_compat.static_cache(None, 16)


def test_declared_transformers_floor_is_one_the_tokenizers_load_on():
    """The committed tokenizers store ``extra_special_tokens`` as a list, which transformers 4.x cannot read."""
    import json

    root = Path(__file__).resolve().parent.parent
    spec = re.search(r'"transformers>=([0-9.]+)"', (root / "pyproject.toml").read_text()).group(1)
    assert tuple(int(p) for p in spec.split(".")[:2]) >= (5, 0)
    tok = json.loads((root / "data" / "tokenizer" / "tokenizer_config.json").read_text())
    assert isinstance(tok.get("extra_special_tokens"), list)


def test_declared_transformers_floor_is_in_the_ci_matrix():
    """The lowest transformers pyproject.toml allows is one that ``run_all.sh test`` runs the engines' and
    trainers' tests against (its default TRANSFORMERS_MATRIX), and that matrix runs this file."""
    root = Path(__file__).resolve().parent.parent
    floor = re.search(r'"transformers>=([0-9.]+)"', (root / "pyproject.toml").read_text()).group(1)
    script = (root / "run_all.sh").read_text()
    matrix = re.search(r'^TRANSFORMERS_MATRIX=\$\{TRANSFORMERS_MATRIX-"([^"]*)"\}', script, re.M).group(1).split()

    def key(v):
        return tuple(int(x) for x in v.split(".")) + (0,) * (3 - len(v.split(".")))

    assert key(floor) in [key(v) for v in matrix], f"transformers>={floor} but the CI matrix runs {matrix}"
    assert min(map(key, matrix)) >= key(floor), "the matrix runs a version below the declared floor"
    assert "tests/test_untrusted_inputs.py" in script[script.index("VERSION_TESTS="):]


# ----------------------------------------------------------------------------- constructors and options

@pytest.mark.parametrize("kw,err,match", [
    ({"use_graph": "no"}, TypeError, "use_graph must be a bool"), ({"use_graph": 0}, TypeError, "use_graph"),
    ({"max_len": True}, ValueError, "max_len"),
])
def test_static_engine_arguments(model, kw, err, match):
    with pytest.raises(err, match=match):
        StaticEngine(model, **kw)


@pytest.mark.parametrize("kw,err,match", [
    ({"use_graph": "no"}, TypeError, "use_graph must be a bool"), ({"compile": 1}, TypeError, "compile"),
    ({"adaptive": "yes"}, TypeError, "adaptive"), ({"margin": -1}, ValueError, "margin"),
    ({"round_margin": float("nan")}, ValueError, "round_margin"),
])
def test_speculative_engine_arguments(model, kw, err, match):
    with pytest.raises(err, match=match):
        SpeculativeEngine(model, PromptLookupDrafter(), **kw)


@pytest.mark.parametrize("kw,err,match", [
    ({"group_size": 0}, ValueError, "group_size must be one of"), ({"group_size": 100}, ValueError, "group_size"),
    ({"method": "awq"}, ValueError, "method must be one of"), ({"keep_fp16": "lm_head"}, TypeError, "keep_fp16"),
])
def test_default_policy_arguments(model, kw, err, match):
    from t4lib.quant import default_policy

    with pytest.raises(err, match=match):
        default_policy(model, **kw)


@pytest.mark.parametrize("kw", [{"inplace": "no"}, {"progress": 1}])
def test_quantize_model_flags(model, kw):
    m = fresh(model)
    with pytest.raises(TypeError, match="must be a bool"):
        quantize_model(m, **kw)
    assert not any(isinstance(x, QuantLinear) for x in m.modules())


def test_a_weight_without_rows_is_refused_naming_it():
    with pytest.raises(ValueError, match="weight must have at least one row"):
        quantize_rtn(torch.randn(0, 128))
