"""Which honesty set GRPO trains on and which ones a diagnosis may read: never the quarantined one for training."""
import pytest

pytest.importorskip("datasets")


def test_evaluate_honesty_names_its_set():
    from t4lib.train.grpo import HONESTY_SETS, evaluate_honesty

    assert "honesty_eval.jsonl" not in HONESTY_SETS
    with pytest.raises(ValueError, match="honesty must be one of"):
        evaluate_honesty(None, None, 0, honesty="math_train.jsonl")
