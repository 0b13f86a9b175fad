"""Which honesty sets GRPO trains on (one or several) and which ones a diagnosis may read: never the quarantined one
for training."""
import pytest

pytest.importorskip("datasets")


def test_grpo_dataset_mixes_several_honesty_sets():
    from t4lib.train.grpo import grpo_dataset

    both = grpo_dataset(n_math=0, honesty=["honesty_rl.jsonl", "honesty_rl_wide.jsonl"])
    assert len(both) == 400 + 560 and sum(both["trap"]) == 200 + 280
    assert len(grpo_dataset(n_math=5, honesty=("honesty_rl_wide.jsonl",))) == 565


@pytest.mark.parametrize("bad", [["honesty_rl.jsonl", "honesty_eval.jsonl"], ["honesty_rl.jsonl"] * 2, [],
                                 "honesty_eval.jsonl"])
def test_grpo_dataset_refuses_quarantined_repeated_or_no_sets(bad):
    from t4lib.train.grpo import grpo_dataset

    with pytest.raises(ValueError, match="honesty"):
        grpo_dataset(0, honesty=bad)


def test_evaluate_honesty_names_its_set():
    from t4lib.train.grpo import HONESTY_SETS, evaluate_honesty

    assert "honesty_eval.jsonl" not in HONESTY_SETS
    with pytest.raises(ValueError, match="honesty must be one of"):
        evaluate_honesty(None, None, 0, honesty="math_train.jsonl")


def test_honesty_rates_count_traps_and_twins_apart():
    from t4lib.models import schema
    from t4lib.train.grpo import honesty_rates

    recs = [dict(trap=True, target=schema.ABSTAIN_TAG)] * 2 + [dict(trap=False, target="12")] * 3
    outs = [schema.ABSTAIN_TAG, "The answer is 5", schema.ABSTAIN_TAG, "The answer is 12", "The answer is 7"]
    r = honesty_rates(outs, recs)
    assert (r["abstention"]["k"], r["abstention"]["n"]) == (1, 2)
    assert (r["false_abstention"]["k"], r["false_abstention"]["n"]) == (1, 3)
    assert (r["answerable_accuracy"]["k"], r["answerable_accuracy"]["n"]) == (1, 3)
    with pytest.raises(ValueError, match="differ in length"):
        honesty_rates(outs[:4], recs)
