"""W4A16 format, quantizers, QuantLinear and policy-driven model quantization (CPU)."""
import pytest
import torch
from torch import nn

from t4lib.ops.int4 import reference as int4_ref
from t4lib.quant import (
    QuantLinear, default_policy, load_quantized, quantize_gptq, quantize_model, quantize_rtn,
    resolve_policy, save_quantized, weight_bytes,
)
from t4lib.quant.w4a16 import (
    HessianAccumulator, output_error, pack_int4_rows, rtn_max_error, unpack_int4_rows,
)


def tiny_qwen2(seed=0, dtype=torch.float32, **kw):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = dict(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    cfg.update(kw)
    return Qwen2ForCausalLM(Qwen2Config(**cfg)).to(dtype).eval()


def test_pack_order_is_the_lop3_order():
    q = torch.arange(-8, 8, dtype=torch.int8).repeat(3).reshape(3, 16)
    packed = pack_int4_rows(q)
    assert packed.shape == (3, 2) and packed.dtype == torch.int32
    assert torch.equal(packed.reshape(-1), int4_ref.pack_int4(q.reshape(-1)))
    assert torch.equal(unpack_int4_rows(packed), q)
    # value 1 of the first word sits in nibble slot 4 (bits 16..19)
    one = torch.zeros(1, 8, dtype=torch.int8)
    one[0, 1] = 5
    assert int(pack_int4_rows(one)) == 5 << 16


@pytest.mark.parametrize("g", [32, 64, 128])
def test_rtn_error_bound_and_range(g):
    w = torch.randn(40, 384) * 0.02
    w[0, :g] = 0  # an all-zero group
    qw = quantize_rtn(w, g)
    q = qw.unpack()
    assert q.min() >= -8 and q.max() <= 7
    # half a step, plus fp16 rounding of the scale (7.5 * 2^-11 at the clamp) and of q * s (8 * 2^-11)
    assert rtn_max_error(w, qw) <= 0.5 + 7.6e-3
    assert torch.equal(qw.dequantize()[0, :g], torch.zeros(g, dtype=torch.float16))
    # the full range is used: the largest-magnitude element of each group maps to -8 or 7
    qg = q.reshape(40, -1, g)[1:]
    assert ((qg.amin(-1) <= -7) | (qg.amax(-1) >= 7)).all()


def test_dequantize_matches_int4_dequant_op():
    from t4lib.ops.int4 import int4_dequant

    qw = quantize_rtn(torch.randn(8, 256), 64)
    flat = int4_dequant(qw.qweight.reshape(-1), qw.scales.reshape(-1), 64)
    assert torch.equal(flat.reshape(8, 256), qw.dequantize())


def test_gptq_beats_rtn_on_correlated_inputs():
    torch.manual_seed(0)
    w = torch.randn(64, 512)
    A = torch.randn(512, 512) / 512 ** 0.5 + 0.3 * torch.eye(512)
    x, x_test = torch.randn(4096, 512) @ A, torch.randn(2048, 512) @ A
    acc = HessianAccumulator(512, "cpu")
    acc.add(x)
    g = quantize_gptq(w, acc.H, 128)
    r = quantize_rtn(w, 128)
    assert output_error(w, g, x_test) < 0.85 * output_error(w, r, x_test)


def test_gptq_bad_hessian():
    with pytest.raises(ValueError, match="hessian must be a"):
        quantize_gptq(torch.randn(8, 128), torch.eye(64))


def test_quantlinear_forward_matches_dequantized_linear():
    lin = nn.Linear(256, 48, bias=True)
    q = QuantLinear.from_linear(lin, 64)
    x = torch.randn(2, 5, 256)
    want = x @ q.dequantize().float().t() + q.bias.float()
    torch.testing.assert_close(q(x), want, rtol=1e-5, atol=1e-5)
    assert q(x.half()).dtype == torch.float16
    with pytest.raises(ValueError, match="in_features=256"):
        q(torch.randn(3, 128))


def test_quantize_model_default_policy():
    m = tiny_qwen2()
    pol = default_policy(m)
    assert pol["lm_head"]["format"] == "fp16"
    assert pol["model.layers.0.mlp.down_proj"] == {"format": "w4a16", "group_size": 128, "method": "rtn"}
    before = weight_bytes(m)
    quantize_model(m, pol)
    assert isinstance(m.model.layers[1].self_attn.q_proj, QuantLinear)
    assert isinstance(m.lm_head, nn.Linear) and isinstance(m.model.embed_tokens, nn.Embedding)
    assert weight_bytes(m) < before
    out = m(input_ids=torch.randint(0, 320, (1, 6))).logits
    assert out.shape == (1, 6, 320) and torch.isfinite(out).all()


def test_policy_patterns_and_errors():
    m = tiny_qwen2()
    pol = resolve_policy(m, {"*.mlp.*": {"format": "w4a16", "group_size": 64}})
    assert pol["model.layers.0.mlp.up_proj"]["group_size"] == 64
    assert pol["model.layers.0.self_attn.q_proj"]["format"] == "fp16"
    with pytest.raises(ValueError, match="not an nn.Linear"):
        resolve_policy(m, {"model.nope": {"format": "w4a16"}})
    with pytest.raises(ValueError, match="group_size must be one of"):
        resolve_policy(m, {"lm_head": {"format": "w4a16", "group_size": 100}})
    with pytest.raises(ValueError, match="format"):
        resolve_policy(m, {"lm_head": {"format": "int3"}})
    with pytest.raises(TypeError, match="policy must be a dict"):
        resolve_policy(m, ["lm_head"])
    with pytest.raises(ValueError, match="calib is None"):
        quantize_model(m, {"*proj": {"format": "w4a16", "method": "gptq"}})


def test_model_without_linear_layers():
    with pytest.raises(ValueError, match="no nn.Linear"):
        quantize_model(nn.Sequential(nn.Embedding(10, 8), nn.ReLU()))
    with pytest.raises(TypeError, match="nn.Module"):
        quantize_model("qwen")


def test_gptq_model_quantization_reduces_output_error():
    m = tiny_qwen2(seed=1)
    ref = tiny_qwen2(seed=1)
    gen = torch.Generator().manual_seed(0)
    calib = [torch.randint(0, 320, (4, 32), generator=gen) for _ in range(4)]
    test_ids = torch.randint(0, 320, (4, 32), generator=gen)
    rtn = quantize_model(m, None, inplace=False)
    gptq = quantize_model(m, default_policy(m, method="gptq"), calib=calib, inplace=False)
    with torch.no_grad():
        l0 = ref(input_ids=test_ids).logits
        e_rtn = (rtn(input_ids=test_ids).logits - l0).norm()
        e_gptq = (gptq(input_ids=test_ids).logits - l0).norm()
    assert e_gptq < e_rtn


def test_save_load_roundtrip(tmp_path):
    m = tiny_qwen2(dtype=torch.float16)
    quantize_model(m)
    save_quantized(m, tmp_path / "q")
    m2 = load_quantized(tmp_path / "q")
    assert isinstance(m2.model.layers[0].mlp.gate_proj, QuantLinear)
    for (n1, t1), (n2, t2) in zip(sorted(m.state_dict().items()), sorted(m2.state_dict().items())):
        assert n1 == n2 and torch.equal(t1, t2), n1
    assert m2.t4lib_quant_policy == m.t4lib_quant_policy


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_quantized(tmp_path)
    with pytest.raises(ValueError, match="not quantized"):
        save_quantized(tiny_qwen2(), tmp_path / "x")


def test_dtype_casts_keep_the_format():
    m = quantize_model(tiny_qwen2())
    m.float()
    q = m.model.layers[0].mlp.up_proj
    assert q.scales.dtype == torch.float16 and q.qweight.dtype == torch.int32
    m.half()
    assert q.scales.dtype == torch.float16


# ----------------------------------------------------------------------------- quality measurement

def _micro_checkpoint(tmp_path):
    """A random micro Qwen2 with the project tokenizer, saved like a trained preset."""
    from t4lib.models import tiny

    tok = tiny.load_tokenizer()
    m = tiny_qwen2(vocab_size=-(-len(tok) // 64) * 64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                   num_attention_heads=2, num_key_value_heads=1, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id)
    with torch.no_grad():  # a wider weight spread than the init, so 4-bit rounding moves the loss
        for n, p in m.named_parameters():
            if n.endswith("proj.weight"):
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(len(n)))
    path = tmp_path / "micro"
    m.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_quality_run_on_project_text(tmp_path):
    import json

    from t4lib import models
    from t4lib.core import results
    from t4lib.benchmarks import quant_quality as quality

    path = _micro_checkpoint(tmp_path)
    r = quality.run(tmp_path / "out", str(path), group_sizes=(32, 64), primary=32, seq_len=64, calib_seqs=8,
                    eval_seqs=6)
    assert r["fallback"] is False and r["source"] == str(path)
    assert r["eval_tokens"] == 6 * 63 and r["calib_tokens"] == 8 * 64
    doc = json.loads((tmp_path / "out" / "w4a16_quality.json").read_text())
    results.validate(doc)
    assert doc["fallback"] is False and doc["primary_group_size"] == 32 and doc["eval_tokens"] == 6 * 63
    figs = {f["name"]: f for f in doc["figures"]}
    assert figs["w4a16_quality/ppl_fp"]["tag"] == "MEASURED" and figs["w4a16_quality/ppl_fp"]["device"]
    # the written figures are the perplexities of independently rebuilt models on the same held-out rows
    model, tok = models.load(str(path), dtype=torch.float32)
    test = quality.heldout_ids(tok, 64, 6)
    fp = quality.perplexity(model, test)
    assert figs["w4a16_quality/ppl_fp"]["value"] == pytest.approx(fp, rel=1e-5)
    rtn = quality.perplexity(quantize_model(model, default_policy(model, 64, "rtn"), inplace=False), test)
    assert figs["w4a16_quality/g64/ppl_rtn"]["value"] == pytest.approx(rtn, rel=1e-5)
    for g in (32, 64):
        q = r["rows"][g]
        assert q["rtn"] != q["fp"] and q["gptq"] != q["fp"]  # quantization really changed the model
        assert figs[f"w4a16_quality/g{g}/gap_rtn"]["value"] == pytest.approx(q["rtn"] - q["fp"])
    assert r["target_met"] == (r["rows"][32]["gap_rtn"] > 0 and r["rows"][32]["gap_ratio"] <= 0.5)
    assert "MET" in quality.format_table(r)
    assert quality.format_table(r, verdict=False) == quality.format_table(r).rsplit("\n", 1)[0]
    # KL to the fp model: zero against itself, positive once quantized, as written
    assert quality.mean_kl(model, model, test) == pytest.approx(0.0, abs=1e-6)
    rtn_model = quantize_model(model, default_policy(model, 64, "rtn"), inplace=False)
    kl = quality.mean_kl(model, rtn_model, test)
    assert kl > 0 and figs["w4a16_quality/g64/kl_rtn"]["value"] == pytest.approx(kl, rel=1e-4)


def test_quality_fallback_is_labelled(tmp_path):
    from t4lib.benchmarks import quant_quality as quality

    r = quality.run(tmp_path, str(tmp_path / "no-such-model"), group_sizes=(64,), primary=64, fallback_steps=2,
                    calib_seqs=8, eval_seqs=4, fallback=True)
    assert r["fallback"] is True and r["source"].startswith("FALLBACK")
    assert "FALLBACK" in quality.format_table(r)


def test_quality_splits_and_errors():
    from t4lib.models import corpus
    from t4lib.benchmarks import quant_quality as quality

    held = quality.heldout_documents()
    assert len(held) == len(corpus.load_jsonl("math_heldout.jsonl")) + len(corpus.load_jsonl("copy_heldout.jsonl"))
    assert not set(held) & set(corpus.pretrain_documents())  # calibration text never contains a held-out doc
    with pytest.raises(ValueError, match="files"):
        quality.heldout_documents(("math_train.jsonl",))
    with pytest.raises(ValueError, match="primary"):
        quality.run(None, group_sizes=(64, 128), primary=32, write=False)


def test_activation_quality_decodes_with_int8_activations(tmp_path):
    import json

    from t4lib.benchmarks import quant_quality as quality

    r = quality.activation_quality(tmp_path, quality.MARKOV, 32, n_seq=2, fallback_steps=2)
    assert r["fallback"] and r["eval_tokens"] == 2 * 63
    assert 0 < r["kl"] < 0.05 and 0.5 < r["top1_agreement"] <= 1  # int8 moved the predictions, a little
    figs = {f["name"]: f for f in json.loads((tmp_path / "w4a8_quality.json").read_text())["figures"]}
    assert figs["w4a8_quality/kl_w4a8_from_w4a16"]["value"] == pytest.approx(r["kl"])
    assert figs["w4a8_quality/ppl_w4a8_decode"]["device"] == "cpu"


def test_decode_log_probs_equal_a_teacher_forced_forward():
    from t4lib.benchmarks import quant_quality as quality

    model = quality.markov_model(steps=2)
    ids = quality.markov_tokens(3, 20, seed=5)
    lp = quality.decode_log_probs(model, ids, batch_size=2)
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=ids).logits.float()[:, :-1], -1)
    assert lp.shape == want.shape
    torch.testing.assert_close(lp, want, rtol=0, atol=1e-4)
