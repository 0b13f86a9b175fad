"""The SFT and GRPO command lines check every argument before a model is loaded, with an error naming the
option, and a short run that succeeds exits 0."""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from t4lib.train import grpo, sft  # noqa: E402


@pytest.fixture
def no_work(monkeypatch):
    """Any model load or run fails the test: the checks must come first."""
    def loaded(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    import t4lib.models
    monkeypatch.setattr(t4lib.models, "load", loaded)
    monkeypatch.setattr(sft, "load_base", loaded)
    for name in ("run_grpo", "run_all", "base_on_honesty_sets"):
        monkeypatch.setattr(grpo, name, loaded)


@pytest.fixture
def unwritable(tmp_path):
    """A path no one can write, root included: its parent is a file."""
    (tmp_path / "a_file").write_text("")
    return str(tmp_path / "a_file" / "r.json")


def _fails(main, argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag}" in err, err


@pytest.mark.parametrize("args, flag", [
    (["--epochs", "0"], "--epochs"), (["--epochs", "-1"], "--epochs"), (["--epochs", "nan"], "--epochs"),
    (["--eval-n", "-1"], "--eval-n"), (["--eval-n", "0"], "--eval-n"), (["--batch-size", "0"], "--batch-size"),
    (["--lr", "-1"], "--lr"), (["--lr", "0"], "--lr"), (["--lr", "inf"], "--lr"), (["--r", "0"], "--r"),
    (["--replay", "-2"], "--replay"), (["--weight-decay", "-0.1"], "--weight-decay"),
    (["--eval-sets", "nope"], "--eval-sets"), (["--eval-sets", "heldout_1_2,nope"], "--eval-sets"),
    (["--eval-sets", ","], "--eval-sets"), (["--traces", "nope.jsonl"], "--traces"),
    (["--method", "lora", "--loss-scale", "1024"], "a static loss_scale"),
    (["--neftune", "nan"], "--neftune"), (["--neftune", "inf"], "--neftune"), (["--seed", "-1"], "--seed"),
    (["--seed", str(2 ** 32)], "--seed"),
])
def test_sft_rejects_before_loading(args, flag, tmp_path, no_work, capsys):
    _fails(sft.main, [*args, "--out", str(tmp_path / "r.json")], flag, capsys)
    assert not (tmp_path / "r.json").exists()


def test_sft_rejects_unwritable_paths_before_loading(tmp_path, unwritable, no_work, capsys):
    _fails(sft.main, ["--out", unwritable], "--out", capsys)
    _fails(sft.main, ["--out", str(tmp_path)], "--out", capsys)           # a directory, not a file
    _fails(sft.main, ["--save", unwritable, "--out", str(tmp_path / "r.json")], "--save", capsys)
    _fails(sft.main, ["--eval-only", "--out", unwritable], "--out", capsys)


@pytest.mark.parametrize("args, flag", [
    (["arm", "--steps", "0"], "--steps"), (["arm", "--lr", "-1"], "--lr"), (["arm", "--lr", "nan"], "--lr"),
    (["arm", "--prompts-per-step", "0"], "--prompts-per-step"), (["arm", "--n-math-eval", "-1"], "--n-math-eval"),
    (["all", "--steps", "0"], "--steps"), (["all", "--lr", "0"], "--lr"),
    (["all", "--step-steps", "0"], "--step-steps"),
    (["arm", "--seed", "-1"], "--seed"), (["all", "--seeds", "0", "-1"], "--seeds"),
    (["all", "--arms", "fp16", "fp16"], "--arms"), (["all", "--seeds", "1", "1"], "--seeds"),
])
def test_grpo_rejects_before_loading(args, flag, tmp_path, no_work, capsys):
    extra = ["--logs", str(tmp_path / "logs")] if args[0] == "all" else []
    _fails(grpo.main, [*args, *extra, "--out", str(tmp_path / "r.json")], flag, capsys)


@pytest.mark.parametrize("cmd", ["arm", "all", "base-sets"])
def test_grpo_rejects_unwritable_paths_before_loading(cmd, tmp_path, unwritable, no_work, capsys):
    _fails(grpo.main, [cmd, "--out", unwritable], "--out", capsys)
    if cmd == "all":
        _fails(grpo.main, [cmd, "--logs", unwritable, "--out", str(tmp_path / "r.json")], "--logs", capsys)


@pytest.mark.parametrize("kw, name", [
    (dict(num_generations=0), "num_generations"), (dict(num_generations=1), "num_generations"),
    (dict(prompts_per_step=0), "prompts_per_step"), (dict(max_completion_length=0), "max_completion_length"),
    (dict(learning_rate=-1.0), "learning_rate"), (dict(temperature=0.0), "temperature"), (dict(steps=0), "steps"),
    (dict(n_math=-1), "n_math"), (dict(n_math_eval=-1), "n_math_eval"), (dict(arm="bf16"), "arm"),
    (dict(honesty="honesty_eval.jsonl"), "honesty"), (dict(steps=True), "steps"),
])
def test_run_grpo_checks_before_loading(kw, name, monkeypatch):
    import t4lib.models

    monkeypatch.setattr(t4lib.models, "load", lambda *a, **k: pytest.fail("loaded before the checks"))
    with pytest.raises(ValueError, match=rf"^{name} must"):
        grpo.run_grpo("tiny-cpu", **kw)


@pytest.mark.parametrize("kw, name", [
    (dict(epochs=0), "epochs"), (dict(epochs=float("nan")), "epochs"), (dict(batch_size=0), "batch_size"),
    (dict(lr=-1), "lr"), (dict(lr=0), "lr"), (dict(r=0), "r"), (dict(max_length=4), "max_length"),
    (dict(logging_steps=0), "logging_steps"), (dict(weight_decay=-1), "weight_decay"),
    (dict(max_steps=1.5), "max_steps"),
])
def test_sft_settings_check_their_ranges(kw, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        sft.SFTSettings(**kw)


def test_sft_settings_steps_override_epochs():
    assert sft.SFTSettings(epochs=0, max_steps=2).max_steps == 2


def test_short_sft_run_exits_zero(tmp_path):
    """Fewer steps than the logging interval: no loss is logged, and the run still succeeds."""
    out = tmp_path / "r.json"
    assert sft.main(["--model", "tiny-cpu", "--base", "fp32", "--method", "full", "--epochs", "0.005",
                     "--batch-size", "4", "--eval-n", "1", "--eval-sets", "heldout_1_2", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["after"]["heldout_1_2"]["overall"]["n"] == 1 and rec["settings"]["epochs"] == 0.005


@pytest.mark.parametrize("preset", ["tiny-cpu", "small-gpu"])
def test_tiny_pretraining_checks_its_output_folder_first(preset, unwritable, monkeypatch):
    """``python -m t4lib.models.tiny train --out DIR``: an unwritable DIR fails before any training (the
    streamed presets and the others alike), naming the option."""
    from t4lib.models import tiny

    def trained(*a, **k):
        raise AssertionError("training started before the output folder was checked")

    for name in ("train_streamed", "load_tokenizer", "build_model"):
        monkeypatch.setattr(tiny, name, trained)
    with pytest.raises(ValueError, match="^out: cannot write"):
        tiny.train(preset, out=unwritable)
