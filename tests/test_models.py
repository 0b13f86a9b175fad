"""Tokenizer, tiny-model factory/training (micro config) and the loading path."""

import json
import math
import os
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from t4lib import models  # noqa: E402
from t4lib.models import corpus, presets, schema, tiny  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "data" / "models"


@pytest.fixture(scope="module")
def tok():
    return tiny.load_tokenizer()


@pytest.mark.parametrize("special", schema.SPECIAL_TOKENS)
def test_special_token_round_trip(tok, special):
    ids = tok.encode(special, add_special_tokens=False)
    assert len(ids) == 1, f"{special} is split into {ids}"
    assert tok.convert_ids_to_tokens(ids[0]) == special
    assert tok.decode(ids) == special
    text = f"Question: 3 apples{special} and 4 more\n{special}"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.encode(text, add_special_tokens=False).count(ids[0]) == 2


def test_tokenizer_basics(tok):
    assert tok.eos_token == schema.EOS and tok.pad_token == schema.PAD
    assert tok.eos_token_id != tok.pad_token_id
    assert len(tok) <= 8192
    # digits are single tokens, so arithmetic is learnable
    pieces = tok.tokenize("12345")
    assert pieces == list("12345")
    for text in ["The answer is 3/4.", "name=Ana Lopez; city=Porto", "def f(x):\n    return x * 2\n",
                 "caf\u00e9 \u00fcber \u4e2d\u6587 \U0001f600"]:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_chat_template_matches_training_format(tok):
    msgs = [{"role": "system", "content": schema.MATH_SYSTEM}, {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "2 + 3 = 5. The answer is 5."}]
    rendered = tok.apply_chat_template(msgs, tokenize=False)
    assert rendered == corpus.chat_doc("What is 2 + 3?", "2 + 3 = 5. The answer is 5.", schema.MATH_SYSTEM)
    gen = tok.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True)
    assert gen.endswith(schema.IM_START + "assistant\n")


def test_presets_and_sizes(tok):
    cpu = tiny.model_config("tiny-cpu", len(tok), tok.eos_token_id, tok.pad_token_id)
    gpu = tiny.model_config("tiny-gpu", len(tok), tok.eos_token_id, tok.pad_token_id)
    assert cpu.tie_word_embeddings and gpu.tie_word_embeddings
    assert cpu.vocab_size >= len(tok) and cpu.vocab_size % 64 == 0
    from transformers import Qwen2ForCausalLM
    with torch.device("meta"):
        n_cpu = sum(p.numel() for p in Qwen2ForCausalLM(cpu).parameters())
        n_gpu = sum(p.numel() for p in Qwen2ForCausalLM(gpu).parameters())
    assert 1e6 <= n_cpu <= 5e6, n_cpu
    assert 6e6 <= n_gpu <= 20e6, n_gpu
    # both fp16 checkpoints together must fit the 22 MB budget of data/models
    assert 2 * (n_cpu + n_gpu) < 22e6
    with pytest.raises(ValueError, match="preset"):
        tiny.get_preset("huge")


def test_micro_training_writes_checkpoint_record_plot(tmp_path):
    rec = tiny.train("micro", tmp_path / "m", steps=3, device="cpu", progress=False)
    out = tmp_path / "m"
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "training_record.json", "loss_curve.png"):
        assert (out / f).is_file(), f
    saved = json.loads((out / "training_record.json").read_text())
    assert saved["steps"] == 3 and math.isfinite(saved["final_loss"])
    assert saved["data"]["math_train.jsonl"] == corpus.sha256("math_train.jsonl")
    ev = saved["eval"]
    for k in ("math_exact_match", "copy_token_accuracy", "abstention_rate", "false_abstention_rate"):
        assert 0.0 <= ev[k] <= 1.0, k
    assert rec["n_params"] == saved["n_params"]
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    # AutoTokenizer on the model directory (transformers 5.x builds Qwen2Tokenizer
    # from the model type) must tokenize exactly like the project tokenizer
    from transformers import AutoTokenizer
    auto, ref = AutoTokenizer.from_pretrained(str(out)), tiny.load_tokenizer()
    texts = corpus.pretrain_documents()[:300] + [t["trace"] for t in corpus.load_jsonl("traces.jsonl")[:20]]
    texts += [corpus.copy_doc(r)[0] for r in corpus.load_jsonl("copy_heldout.jsonl")[:40]]
    for text in texts:
        assert auto.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False), text
    # the one loading path reads it back and generates
    model, t = models.load(str(out), dtype=torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    enc = t(schema.math_prompt("What is 2 + 3?"), return_tensors="pt", add_special_tokens=False)
    g = model.generate(**enc, max_new_tokens=3, do_sample=False, pad_token_id=t.pad_token_id)
    assert g.shape[1] == enc["input_ids"].shape[1] + 3 or t.eos_token_id in g[0].tolist()


def test_eval_cli_judges_a_procedural_preset_on_both_splits(tmp_path, capsys):
    """``tiny eval`` on a procedural-corpus preset evaluates as training does: the validation and test
    splits of the held-out sets, stored under those names by --write-record (not the older format)."""
    out = tmp_path / "m"
    tiny.train("micro-open", out, device="cpu", progress=False, evaluate_after=False)
    capsys.readouterr()
    tiny.main(["eval", "--model", str(out), "--preset", "micro-open", "--device", "cpu", "--write-record"])
    printed = json.loads(capsys.readouterr().out.split("\nupdated ")[0])
    assert set(printed) == {"validation", "test"}
    assert not any(k.endswith("_examples") for k in printed["test"])
    saved = json.loads((out / "training_record.json").read_text())["eval"]
    for split in ("validation", "test"):
        for k in ("math_1step_exact", "copy_exact_match", "trap_abstention"):
            assert 0.0 <= saved[split][k]["rate"] <= 1.0, (split, k)


def test_training_is_deterministic(tmp_path):
    """Same preset, same seed: the same losses and bit-identical weights (what lets a
    committed checkpoint be rebuilt from its recipe)."""
    import hashlib
    recs = [tiny.train("micro", tmp_path / k, steps=3, device="cpu", progress=False, evaluate_after=False)
            for k in ("a", "b")]
    assert recs[0]["final_loss"] == recs[1]["final_loss"]
    digests = {hashlib.sha256((tmp_path / k / "model.safetensors").read_bytes()).hexdigest() for k in ("a", "b")}
    assert len(digests) == 1


def test_training_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        tiny.train("micro", tmp_path, steps=0)
    with pytest.raises(ValueError, match="preset"):
        tiny.train("nope", tmp_path)


def test_load_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="model_id_or_path"):
        models.load("")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.load(str(tmp_path / "missing" / "dir"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.load(str(tmp_path))


def test_load_offline_error_for_uncached_hub_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotAvailableError, match="not in the Hugging Face cache") as e:
        models.load("t4lib-test-org/certainly-not-cached-model")
    assert "certainly-not-cached-model" in str(e.value)
    with pytest.raises(models.ModelNotAvailableError, match="offline"):
        models.load("t4lib-test-org/certainly-not-cached-model", offline=True)


def test_missing_preset_checkpoint_names_path_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        models.load("tiny-gpu")
    msg = str(e.value)
    assert str(tmp_path / "models" / "tiny-gpu") in msg
    assert "python -m t4lib.models.tiny train --preset tiny-gpu" in msg
    # tiny-cpu ships inside the package (the README example's model): found without the data folder
    model, tok = tiny.load_preset("tiny-cpu")
    assert model.config.vocab_size >= len(tok) > 0


def test_preset_overrides():
    p = tiny.override_preset(tiny.get_preset("tiny-gpu"), {"batch_size": "16", "chat_fraction": "0.5"})
    assert (p.batch_size, p.chat_fraction, p.hidden_size) == (16, 0.5, 256)
    assert tiny.override_preset(p, {"hidden_size": "64"}).hidden_size == 64   # an architecture arm
    with pytest.raises(ValueError, match="'name' is not a field"):
        tiny.override_preset(p, {"name": "other"})
    with pytest.raises(ValueError, match="lr='fast': expected a float"):
        tiny.override_preset(p, {"lr": "fast"})
    with pytest.raises(ValueError, match="seed='abc': expected an int"):   # a corpus seed that is not an int
        tiny.override_preset(p, {"seed": "abc"})
    # every field type parses: text, a switch, and an optional count set back to None
    q = tiny.override_preset(p, {"tokenizer": "tokenizer_open", "compile": "true", "eval_n": "12"})
    assert (q.tokenizer, q.compile, q.eval_n) == ("tokenizer_open", True, 12)
    assert tiny.override_preset(q, {"compile": "no", "eval_n": "none"}).eval_n is None
    with pytest.raises(ValueError, match="compile='maybe': expected true or false"):
        tiny.override_preset(p, {"compile": "maybe"})
    with pytest.raises(SystemExit):
        tiny.main(["train", "--preset", "micro", "--set", "steps"])


def _recipe_matches(rec: dict, name: str) -> bool:
    """The record's training recipe is its preset's (fields added to Preset since count at their default)."""
    from dataclasses import fields
    p = tiny.get_preset(name)
    return all(rec["preset_config"].get(f.name, f.default) == getattr(p, f.name) for f in fields(p) if f.name != "extra")


def test_committed_models_budget_and_records():
    if not MODELS.exists():
        pytest.skip("no committed checkpoints yet")
    sizes = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in MODELS.iterdir() if d.is_dir()}
    # small-gpu (20.5M parameters, fp16) at most 64 MB; tiny-gpu 16 MiB, tiny-cpu 2.7 MiB, qwen35-copy 4 MiB
    assert sizes.get("small-gpu", 0) <= 64e6, f"small-gpu is {sizes['small-gpu'] / 1e6:.1f} MB (> 64 MB)"
    rest = sum(v for k, v in sizes.items() if k != "small-gpu")
    assert rest <= 24 * 1024 * 1024, f"data/models without small-gpu is {rest / 2**20:.1f} MiB (> 24 MiB)"
    presets = [d for d in MODELS.iterdir() if (d / "config.json").is_file()]
    assert presets, "data/models has no checkpoint"
    for d in presets:
        rec = json.loads((d / "training_record.json").read_text())
        assert (d / "loss_curve.png").is_file()
        assert rec["preset"] == d.name
        assert _recipe_matches(rec, d.name), \
            f"{d.name} was trained with another recipe than its preset; retrain: {tiny.train_command(d.name)}"
        p = tiny.get_preset(d.name)
        tok_sha = corpus.sha256(f"{p.tokenizer}/tokenizer.json")
        assert rec["tokenizer_sha256"] == tok_sha, \
            f"{d.name} was trained with another tokenizer; retrain: {tiny.train_command(d.name)}"
        assert json.loads((d / "tokenizer.json").read_text())["model"]["vocab"] == \
            json.loads((REPO / "data" / p.tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
        if p.corpus == "procedural":        # judged on the held-out validation and test splits
            for split in ("validation", "test"):
                for k in ("math_1step_exact", "math_2step_exact", "copy_exact_match", "trap_abstention"):
                    cell = rec["eval"][split][k]
                    assert 0.0 <= cell["rate"] <= 1.0 and cell["n"] > 0, (d.name, split, k)
            assert rec["tokens_seen"] >= 200e6 and rec["provenance"]["commit"]
            continue
        assert rec["data"]["math_train.jsonl"] == corpus.sha256("math_train.jsonl"), \
            f"{d.name} was trained on other data than the committed math_train.jsonl"
        for k in ("math_exact_match", "copy_token_accuracy", "abstention_rate"):
            assert 0.0 <= rec["eval"][k] <= 1.0


@pytest.mark.skipif(not (MODELS / "tiny-cpu" / "config.json").is_file(), reason="tiny-cpu not committed")
def test_committed_tiny_cpu_reproduces_recorded_copy_accuracy():
    """Re-measure copy accuracy of the committed (fp16) checkpoint on a slice of
    the held-out tasks; it must agree with the record made at training time."""
    model, tok = models.load("tiny-cpu", dtype=torch.float32)
    rec = json.loads((MODELS / "tiny-cpu" / "training_record.json").read_text())
    res = tiny.eval_copy(model, tok, n=rec["eval"]["copy_n"], batch_size=100, generate_n=0)
    assert abs(res["copy_token_accuracy"] - rec["eval"]["copy_token_accuracy"]) < 0.02


def _copy_of_tiny_cpu(tmp_path):
    import shutil
    src = presets.checkpoint_dir("tiny-cpu")
    if not (src / "model.safetensors").is_file():
        pytest.skip("no tiny-cpu checkpoint")
    return Path(shutil.copytree(src, tmp_path / "ckpt"))


def test_load_refuses_missing_and_unexpected_tensors_naming_them(tmp_path):
    from safetensors.torch import load_file, save_file
    d = _copy_of_tiny_cpu(tmp_path)
    sd = load_file(d / "model.safetensors")
    gone = "model.layers.0.mlp.up_proj.weight"
    save_file({k: v for k, v in sd.items() if k != gone}, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(models.CheckpointError, match=r"missing tensors: model\.layers\.0\.mlp\.up_proj\.weight"):
        models.load(str(d))
    save_file({**sd, "model.extra.weight": torch.zeros(3)}, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(models.CheckpointError, match=r"unexpected tensors: model\.extra\.weight") as e:
        models.load(str(d))
    assert str(d) in str(e.value)
    model, _ = models.load(str(d), strict=False)  # asked for: loads, the extra tensor dropped
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_load_refuses_a_directory_without_a_usable_tokenizer(tmp_path):
    d = _copy_of_tiny_cpu(tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (d / f).unlink()
    with pytest.raises(models.CheckpointError, match="no usable tokenizer") as e:
        models.load(str(d))
    assert str(d) in str(e.value)


@pytest.mark.parametrize("option, value", [
    ("prompt_weight", "-1"), ("eval_n", "-1"), ("eval_math", "-1"), ("steps", "0"), ("steps", "-3"),
    ("batch_size", "0"), ("seq_len", "-1"), ("lr", "nan"), ("lr", "0"), ("lr", "-1e-3"), ("lr", "inf"),
    ("chat_fraction", "1.5"), ("workers", "0"), ("num_attention_heads", "3")])
def test_train_cli_refuses_an_option_out_of_range_naming_it(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as e:
        tiny.main(["train", "--preset", "micro", "--out", str(tmp_path / "m"), "--set", f"{option}={value}"])
    assert e.value.code == 2
    assert f"{option} must be" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_train_cli_refuses_non_positive_steps(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tiny.main(["train", "--preset", "micro", "--out", str(tmp_path / "m"), "--steps", "0"])
    assert "--steps" in capsys.readouterr().err


def test_presets_are_in_range_and_overrides_checked():
    for p in presets.PRESETS.values():  # every committed preset passes its own checks
        assert tiny.override_preset(p, {}) is p
    with pytest.raises(ValueError, match="prompt_weight"):
        tiny.override_preset(tiny.get_preset("micro"), {"prompt_weight": "-0.5"})
    assert tiny.override_preset(tiny.get_preset("micro"), {"eval_math": "0"}).eval_math == 0  # 0: skip the set


def test_train_and_load_name_a_wrong_preset_or_device():
    with pytest.raises(TypeError, match="preset must be a preset name or a Preset"):
        tiny.train(5)
    with pytest.raises(ValueError, match="device must be a torch device"):
        models.load("tiny-cpu", device="tpu")
