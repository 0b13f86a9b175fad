"""The SFT command line's recipe options (weight decay, NEFTune noise), the evaluation's kept outputs and the
classification of wrong answers."""
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


TRACE = ("<understand>Given: number of groups = 9, amount per group = 7. Find: How many coins?</understand>\n"
         "<plan>\n1. Multiply the number of groups by the amount in each group.\n</plan>\n"
         "<compute>\n9 * 7 = 63\n</compute>\n<verify>\n63 / 7 = 9\n</verify>\n<answer>63</answer>")
QUESTION = "Felix fills 9 boxes and puts 7 coins in each box. How many coins are in the boxes in total?"


@pytest.mark.parametrize("edit, kind", [
    (lambda t: t.replace("<verify>", "<check>"), "schema"),
    (lambda t: t.replace("groups = 9", "groups = 19"), "misread"),
    (lambda t: t.replace("9 * 7 = 63", "9 * 7 = 64").replace("63 / 7", "64 / 7").replace(">63<", ">64<"),
     "arithmetic"),
    (lambda t: t.replace("9 * 7 = 63", "9 + 7 = 16").replace("63 / 7 = 9", "16 - 7 = 9").replace(">63<", ">16<"),
     "plan"),
    (lambda t: t.replace("9 * 7 = 63", "nine times seven = 63"), "unchecked"),
])
def test_failure_kind_names_the_first_cause(edit, kind):
    from t4lib.train import evaluate as ev

    assert ev.failure_kind(QUESTION, edit(TRACE)) == kind


def test_failure_counts_count_only_rows_that_are_not_a_grounded_pass():
    from t4lib.train import evaluate as ev

    recs = [dict(id=i, question=QUESTION, answer="63", structure="mul", n_steps=1) for i in range(3)]
    misread = TRACE.replace("= 9,", "= 19,").replace("9 * 7 = 63", "19 * 7 = 133").replace("63 / 7 = 9", "133 / 7 = 19")
    outs = [TRACE, misread.replace(">63<", ">133<"), TRACE.replace("<plan>", "<plan2>")]
    rows = ev.score(recs, outs, "tags")
    assert [r["grounded"] for r in rows] == [True, False, False]
    counts = ev.failure_counts(recs, rows)
    assert counts == {"mul": dict(schema=1, misread=1, arithmetic=0, plan=0, unchecked=0)}
    with pytest.raises(ValueError, match="records lack"):
        ev.failure_counts(recs[:1], rows)
