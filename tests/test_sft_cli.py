"""The SFT command line's recipe options (weight decay, NEFTune noise) and the evaluation's kept outputs."""
import pytest

pytest.importorskip("datasets")
pytest.importorskip("trl")


def test_neftune_and_weight_decay_reach_the_trainer_config():
    from t4lib.train.sft import SFTSettings, sft_config

    c = sft_config(SFTSettings(method="full", weight_decay=0.1, extra={"neftune_noise_alpha": 5.0}), "/tmp/x", "cpu")
    assert c.neftune_noise_alpha == 5.0 and c.weight_decay == 0.1
    assert sft_config(SFTSettings(method="full"), "/tmp/x", "cpu").neftune_noise_alpha is None


@pytest.mark.parametrize("alpha", ["0", "-1"])
def test_neftune_must_be_positive(alpha, tmp_path, capsys):
    from t4lib.train import sft

    with pytest.raises(SystemExit):
        sft.main(["--method", "full", "--base", "fp32", "--neftune", alpha, "--out", str(tmp_path / "r.json")])
    assert "--neftune must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_evaluate_sets_keeps_every_row_only_when_asked():
    from t4lib.train import sft

    model, tok = sft.load_base("tiny-cpu", "fp32", device="cpu")
    kept = sft.evaluate_sets(model, tok, ("heldout_1_2",), n=3, max_new_tokens=8, progress=False, keep_rows=True)
    rows = kept["heldout_1_2"]["rows"]
    assert len(rows) == kept["heldout_1_2"]["overall"]["n"] == 3
    assert set(rows[0]) == {"id", "structure", "n_steps", "schema_valid", "correct", "output"}
    assert sum(r["correct"] for r in rows) == kept["heldout_1_2"]["overall"]["correct"]["k"]
    plain = sft.evaluate_sets(model, tok, ("heldout_1_2",), n=3, max_new_tokens=8, progress=False)
    assert "rows" not in plain["heldout_1_2"]
    assert [r["output"] for r in rows] == [e["output"] for e in plain["heldout_1_2"]["examples"]]
