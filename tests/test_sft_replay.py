"""Plain-format replay for SFT: problems the traces do not use, in the base model's own format, with the
prompt masked like the traces' (TRL's completion-only loss)."""
import pytest

pytest.importorskip("datasets")
pytest.importorskip("trl")


def test_replay_rows_are_plain_untraced_problems():
    from t4lib.models import corpus, schema
    from t4lib.train.data import replay_dataset

    ds = replay_dataset(50, seed=1)
    traced = {r["question"] for r in corpus.load_jsonl("traces.jsonl")}
    assert len(ds) == 50 and set(ds.column_names) == {"prompt", "completion"}
    for row in ds:
        assert row["prompt"].startswith("Question: ") and row["prompt"].endswith("Answer:")
        assert row["prompt"][len("Question: "):-len("\nAnswer:")] not in traced
        assert schema.extract_answer(row["completion"]) is not None and schema.EOS not in row["completion"]
    assert replay_dataset(50, seed=1)["prompt"] == ds["prompt"] != replay_dataset(50, seed=2)["prompt"]


@pytest.mark.parametrize("n", [0, -3, True, 2.0, 10**6])
def test_replay_bad_n(n):
    from t4lib.train.data import replay_dataset

    with pytest.raises(ValueError, match="n"):
        replay_dataset(n)


def test_replay_prompt_tokens_carry_no_loss():
    import torch
    from datasets import concatenate_datasets

    from t4lib import models
    from t4lib.train import data, sft

    model, tok = models.load("tiny-cpu", dtype=torch.float32)
    traces, _ = data.traces_dataset(tok)
    mixed = concatenate_datasets([traces.select_columns(["prompt", "completion"]).select(range(1)),
                                  data.replay_dataset(1)])
    s = sft.SFTSettings(method="full", max_steps=1, batch_size=1)
    tr = sft.make_trainer(sft.prepare(model, s), tok, mixed, s, "/tmp/t4lib_test_sft_replay")
    ex = sft.label_mask_example(tr, 1)
    n_prompt = len(tok(mixed[1]["prompt"], add_special_tokens=False)["input_ids"])
    assert ex["completion_start"] == n_prompt and all(ex["masked"][:n_prompt]) and not any(ex["masked"][n_prompt:])
    assert ex["tokens"][-1] == tok.eos_token and ex["tokens"].count(tok.eos_token) == 1


def test_procedural_replay_is_the_pretraining_plain_format():
    from t4lib.models import procedural, schema
    from t4lib.train.data import replay_dataset

    ds = replay_dataset(20, seed=3, source="procedural")
    assert len(ds) == 20 and set(ds.column_names) == {"prompt", "completion"}
    for row in ds:
        assert row["prompt"].startswith("Question: ") and row["prompt"].endswith("\nAnswer:")
        assert schema.extract_answer(row["completion"]) is not None and schema.EOS not in row["completion"]
    assert [(r["prompt"], r["completion"]) for r in ds] == procedural.plain_problems(20, 3)
    assert replay_dataset(20, seed=4, source="procedural")["prompt"] != ds["prompt"]


def test_replay_bad_source():
    from t4lib.train.data import replay_dataset

    with pytest.raises(ValueError, match="source"):
        replay_dataset(2, source="open_math_test")


def test_procedural_traces_extend_the_committed_file():
    from t4lib.models import corpus
    from t4lib.train.data import load_traces

    committed = corpus.load_jsonl("open_traces.jsonl")
    more = load_traces("procedural:4100")
    assert len(more) == 4100 and more[:4000] == committed
    assert len({r["question"] for r in more}) > 4050          # the extra hundred are new problems
    assert all(r["certified"] for r in more[4000:])


@pytest.mark.parametrize("spec", ["procedural:", "procedural:0", "procedural:-2", "procedural:1e3", "nope.jsonl", "",
                                  None])
def test_bad_trace_spec_names_traces(spec):
    from t4lib.train.data import load_traces

    with pytest.raises(ValueError, match="traces"):
        load_traces(spec)


def test_cli_rejects_bad_traces_and_replay_source_before_loading(tmp_path, capsys):
    from t4lib.train import sft

    out = str(tmp_path / "r.json")
    with pytest.raises(SystemExit):
        sft.main(["--traces", "procedural:zero", "--out", out])
    assert "--traces" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sft.main(["--replay", "4", "--replay-from", "hub", "--out", out])
    assert "--replay-from" in capsys.readouterr().err


def test_with_replay_appends_plain_rows_after_the_traces():
    from t4lib import models
    from t4lib.train import data

    _, tok = models.load("tiny-cpu")
    traces, _ = data.traces_dataset(tok, data.load_traces("open_traces.jsonl")[:5])
    assert data.with_replay(traces, 0) is traces
    mixed = data.with_replay(traces, 3, seed=2, source="procedural")
    assert mixed.column_names == ["prompt", "completion"] and len(mixed) == 8
    assert mixed["prompt"][:5] == traces["prompt"] and all(p.startswith("Question: ") for p in mixed["prompt"][5:])
    with pytest.raises(ValueError, match="n"):
        data.with_replay(traces, -1)
