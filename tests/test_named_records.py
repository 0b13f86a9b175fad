"""Records of a model other than tiny-gpu: the speculative benchmark's named figures read as unnamed ones,
and SFT figures read from the evaluation sets named (small-gpu's open test split)."""
from t4lib.benchmarks import speculative as bench
from t4lib.train import sft

ENV = dict(device="GPU", driver="0", torch="0", clocks={}, throttle=[])


def test_unprefixed_names_a_named_run_like_an_unnamed_one():
    doc = {"figures": [{"name": "speculative/small-gpu/pld/b1/tokens_per_forward", "value": 3.0, "tag": "ARITHMETIC"},
                       {"name": "speculative/other/x", "value": 1.0, "tag": "MEASURED"}], "prompts": 4}
    got = bench.unprefixed(doc, "small-gpu")
    assert [f["name"] for f in got["figures"]] == ["speculative/pld/b1/tokens_per_forward", "speculative/other/x"]
    assert got["prompts"] == 4 and doc["figures"][0]["name"].startswith("speculative/small-gpu/")   # a copy
    assert bench.unprefixed(doc, None) is doc
    row = next(r for r in bench.targets_table(got) if r["figure"] == "speculative/pld/b1/tokens_per_forward")
    assert row["value"] == 3.0


def _cell(rate, n=10):
    return {"rate": rate, "k": round(rate * n), "ci95": [0.0, 1.0]}


def _summary(rate):
    return {"overall": {"n": 10, "schema_valid": _cell(1.0), "grounded": _cell(rate), "correct": _cell(rate)},
            "two_step": {"n": 4, "grounded": _cell(rate / 2, 4)}}


def test_sft_figures_read_the_named_eval_sets():
    rec = {"after": {"open_test_1_2": _summary(0.7), "open_test_3_4": _summary(0.5)},
           "before": {fmt: {"open_test_1_2": _summary(0.6)} for fmt in ("tags", "plain")}}
    figs = {f["name"]: f["value"] for f in sft.sft_figures(rec, "small-gpu", env=ENV, heldout="open_test_1_2",
                                                           heldout_3_4="open_test_3_4")}
    assert figs["sft/small-gpu/grounded_pass"] == 0.7
    assert figs["sft/small-gpu/grounded_pass_two_step"] == 0.35
    assert figs["sft/small-gpu/grounded_pass_3_4_steps"] == 0.5
    assert figs["sft/small-gpu/base/plain_exact_match"] == 0.6
