"""GGUF export of a Qwen2 model: the project's reader gives back the model's logits (F16: those of the model
with fp16-rounded weights, to float error; Q8_0: a small KL), the tokenizer and special ids travel in the file,
and a model that is not plain Qwen2 is refused by name."""
import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from t4lib.quant.gguf import GGUFError, GGUFFile  # noqa: E402
from t4lib.quant.gguf.export import export_qwen2, load_qwen2  # noqa: E402

PROMPTS = ["The quick brown fox, 12 + 30 = 42.", "What is 47 + 29? The answer is 76."]


@pytest.fixture(scope="module")
def model_and_tok():
    from t4lib import models
    try:
        return models.load("tiny-cpu", dtype=torch.float32)
    except FileNotFoundError:
        pytest.skip("tiny-cpu checkpoint absent")


def _random_qwen2(tied=False, hidden=64, vocab=1472):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=tied)
    return Qwen2ForCausalLM(cfg).eval()


@torch.no_grad()
def _logits(m, ids):
    return m(input_ids=ids).logits.float()


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_f16_round_trip_equals_fp16_rounded_model(tmp_path, tied):
    m = _random_qwen2(tied)
    ids = torch.randint(0, m.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    g = load_qwen2(export_qwen2(m, tmp_path / "m.gguf", ftype="F16"))
    rounded = copy.deepcopy(m)
    for name, p in rounded.named_parameters():
        if p.ndim == 2:
            p.data = p.data.half().float()
    torch.testing.assert_close(_logits(g, ids), _logits(rounded, ids), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_logits(g, ids), _logits(m, ids), rtol=0, atol=1e-2)  # fp16 tolerance
    f = GGUFFile(tmp_path / "m.gguf")
    assert f.architecture == "qwen2" and ("output.weight" in f.tensors) == (not tied)
    assert f.info("blk.0.attn_q.bias").type_name == "F32" and f.info("blk.1.ffn_down.weight").type_name == "F16"


def test_q8_0_export_of_the_tiny_model(tmp_path, model_and_tok):
    model, tok = model_and_tok
    ids = tok(PROMPTS, return_tensors="pt", padding=True)["input_ids"]
    path = export_qwen2(model, tmp_path / "tiny.gguf", tok, ftype="Q8_0")
    f = GGUFFile(path)
    assert f.info("blk.0.attn_q.weight").type_name == "Q8_0" and f.info("token_embd.weight").type_name == "Q8_0"
    assert f.metadata["tokenizer.ggml.model"] == "gpt2" and len(f.metadata["tokenizer.ggml.tokens"]) == \
        model.config.vocab_size
    assert f.metadata["tokenizer.ggml.eos_token_id"] == tok.eos_token_id
    q = load_qwen2(path)
    lp, lq = torch.log_softmax(_logits(model, ids), -1), torch.log_softmax(_logits(q, ids), -1)
    kl = float((lp.exp() * (lp - lq)).sum(-1).mean())
    print(f"Q8_0 export of tiny-cpu: mean KL(model || GGUF) = {kl:.2e} nats/token")
    assert 0 < kl < 1e-3
    assert (lp.argmax(-1) == lq.argmax(-1)).float().mean() > 0.95
    f16 = load_qwen2(export_qwen2(model, tmp_path / "tiny16.gguf", tok, ftype="F16"))
    torch.testing.assert_close(_logits(f16, ids), _logits(model, ids), rtol=0, atol=1e-2)


def test_bad_input_is_named(tmp_path):
    m = _random_qwen2()
    with pytest.raises(ValueError, match="ftype"):
        export_qwen2(m, tmp_path / "x.gguf", ftype="Q4_K")
    m.config.model_type = "llama"
    with pytest.raises(ValueError, match="qwen2"):
        export_qwen2(m, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "x.gguf.partial").exists()
    with pytest.raises(GGUFError, match="not found"):
        load_qwen2(tmp_path / "absent.gguf")


def test_w4a16_layers_export_their_dequantized_weights(tmp_path):
    from t4lib.quant.model import default_policy, quantize_model

    m = _random_qwen2()
    q = quantize_model(m, default_policy(m, 32, "rtn"), inplace=False)
    ids = torch.randint(0, m.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    g = load_qwen2(export_qwen2(q, tmp_path / "q.gguf", ftype="F32"))
    torch.testing.assert_close(_logits(g, ids), _logits(q, ids), rtol=1e-4, atol=1e-4)
