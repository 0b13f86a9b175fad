"""``t4lib.evidence.rehearse.estimate``: what the dress rehearsal recorded for a notebook, read from a
``rehearsal.json`` written by the rehearsal's own writer (``t4lib.evidence.rehearse``), and a sentence, not an
exception, where nothing is recorded."""
import json

import pytest

from t4lib.core import results
from t4lib.evidence import rehearse

BW = 4.0e12  # the rehearsal GPU's copy bandwidth in these records, bytes/s


def _rec(stem, profile, seconds, busy, concurrent=None):
    rec = {"notebook": f"{stem}.ipynb", "profile": profile, "parameters": {"PROFILE": profile}, "hub_ids": [],
           "status": "completed", "seconds": seconds, "timeout_s": 600, "rc": 0, "failed_cell": None,
           "executed_copy": f"rehearsal/{stem}.ipynb", "log": f"logs/rehearsal_{stem}.log",
           "gpu_busy_fraction": busy, "device_peak_bytes": None,
           "torch_peak": {"max_allocated": 2**30, "max_reserved": 2**31, "budget": 15 * 2**30}}
    if concurrent:
        rec["concurrent"] = concurrent
    return rec


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """results/dev/rehearsal.json with a solo run of 01_solo and a shared one of 02_shared, and 01's executed copy."""
    monkeypatch.setenv("T4LIB_RESULTS", str(tmp_path))
    out = tmp_path / "dev"
    runs = {"01_solo/t4": _rec("01_solo", "t4", 120.0, 0.5),
            "02_shared/t4": _rec("02_shared", "t4", 300.0, 0.9, concurrent=4)}
    figs = [f for key, rec in runs.items() for f in rehearse.figures(rec, "rehearsal/" + key.split("/")[0], BW)]
    rehearse.write_records(out / "rehearsal.json", runs, figs, BW)
    cells = [{"cell_type": "markdown", "source": ["## Setup\n"], "metadata": {}},
             {"cell_type": "code", "source": ["x = 1"], "metadata": {"papermill": {"duration": 2.0}}},
             {"cell_type": "markdown", "source": ["## The long part\n", "text"], "metadata": {}},
             {"cell_type": "code", "source": ["y = 2"], "metadata": {"papermill": {"duration": 90.5}}}]
    (out / "rehearsal").mkdir()
    (out / "rehearsal" / "01_solo.ipynb").write_text(json.dumps({"cells": cells}))
    return out


def test_a_solo_run_gives_its_seconds_projection_and_commit(recorded):
    est = rehearse.estimate("01_solo", device="dev")
    projected = rehearse.t4_projection_s(120.0, 0.5, BW) / 60
    assert est["found"] and est["status"] == "completed" and est["seconds"] == 120.0
    assert est["t4_minutes"] == pytest.approx(projected)
    assert not est["over_target"] and projected < rehearse.T4_MINUTES_TARGET
    assert not est["upper_bound"] and est["concurrent"] == 1
    assert est["commit"] == results.read_results(recorded / "rehearsal.json")["provenance"]["commit"]
    assert est["longest_cell"] == {"seconds": 90.5, "under": "The long part"}
    text = est["text"]
    assert "01_solo (profile t4" in text and "on dev: completed in 120.0 s (MEASURED)" in text
    assert f"about {projected:.0f} min (ESTIMATED)" in text and 'under "The long part", 90 s' in text
    assert "upper bound" not in text
    assert rehearse.estimate("01_solo.ipynb", device="dev")["text"] == text  # a file name works too


def test_a_run_that_shared_the_gpu_is_an_upper_bound(recorded):
    est = rehearse.estimate("02_shared", device="dev")
    assert est["upper_bound"] and est["concurrent"] == 4
    assert est["t4_minutes"] == pytest.approx(rehearse.t4_projection_s(300.0, 0.9, BW) / 60)
    assert est["over_target"] and est["t4_minutes"] > rehearse.T4_MINUTES_TARGET
    assert est["longest_cell"] is None  # no executed copy: the rest is still read
    assert "upper bounds of a solo run: 4 notebooks shared the GPU" in est["text"]


def test_a_missing_file_is_said_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_RESULTS", str(tmp_path))
    est = rehearse.estimate("01_solo", device="dev")
    assert not est["found"] and est["t4_minutes"] is None and est["seconds"] is None
    assert est["text"].startswith("no dress rehearsal recorded for 01_solo (profile t4): ")
    assert "rehearsal.json is missing or not a valid results file" in est["text"]


def test_a_notebook_or_profile_not_rehearsed_is_said_not_raised(recorded):
    for name, profile in (("09_never", "t4"), ("01_solo", "kaggle-2xt4")):
        est = rehearse.estimate(name, profile, device="dev")
        assert not est["found"] and est["t4_minutes"] is None
        assert est["text"].startswith(f"no dress rehearsal recorded for {name} (profile {profile}): no run of it in ")


def test_the_committed_rehearsal_is_read():
    """The notebooks' time cells read the committed record: every run in it is found, with its projection."""
    doc = results.read_results(results.results_dir() / rehearse.RECORD_DEVICE / "rehearsal.json")
    assert doc is not None, "the committed rehearsal record is missing or invalid"
    for key, rec in doc["runs"].items():
        stem, profile = key.split("/")
        est = rehearse.estimate(stem, profile)
        assert est["found"] and est["seconds"] == rec["seconds"] and est["t4_minutes"] is not None, key
        assert est["upper_bound"] == ((rec.get("concurrent") or 1) > 1), key
