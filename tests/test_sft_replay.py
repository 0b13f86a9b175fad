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
