"""An executed notebook records what it ran at: run_all.sh takes the provenance (commit, dirty tree, the notebook
and its closure, profile, device) before each papermill run and stamps it into the notebook's metadata["t4lib"] after a good one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t4lib.core import notebook, provenance

ROOT = Path(__file__).resolve().parent.parent


def _nb(path: Path) -> Path:
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# x"]}],
                                "metadata": {"papermill": {"parameters": {"PROFILE": "cpu"}}},
                                "nbformat": 4, "nbformat_minor": 5}))
    return path


NB = "notebooks/04_speculative_decoding.ipynb"


def test_stamp_records_commit_closure_profile_and_device(tmp_path):
    path = _nb(tmp_path / "a.ipynb")
    before = notebook.run_provenance("cpu", NB)
    mark = notebook.stamp(path, before)
    nb = json.loads(path.read_text())
    assert nb["metadata"]["t4lib"] == mark and nb["metadata"]["papermill"]["parameters"] == {"PROFILE": "cpu"}
    assert nb["cells"][0]["source"] == ["# x"]
    prov = provenance.provenance_of(NB)
    assert mark["schema"] == provenance.SCHEMA and mark["producer"] == NB
    assert mark["commit"] == prov["commit"] and mark["closure"] == prov["closure"]
    assert NB in mark["closure"] and "t4lib/benchmarks/speculative.py" in mark["closure"]
    assert isinstance(mark["dirty"], bool) and mark["dirty"] == prov["dirty"] and "closure_after" not in mark
    assert mark["profile"] == "cpu" and mark["profile_resolved"] == "cpu"
    assert mark["device"] and mark["device_slug"] and mark["started"] <= mark["finished"]
    assert notebook.stamp_status(mark) == "current"


def test_sources_edited_during_the_run_are_said_so(tmp_path, monkeypatch):
    path = _nb(tmp_path / "a.ipynb")
    real = notebook.run_provenance("auto", NB)
    before = {**real, "closure": {**real["closure"], "t4lib/benchmarks/speculative.py": "0" * 16}, "dirty": False}
    mark = notebook.stamp(path, before)
    assert mark["closure"]["t4lib/benchmarks/speculative.py"] == "0" * 16 and mark["dirty"] is True
    assert mark["closure_after"] == real["closure"]
    assert notebook.stamp_status(mark) == "changed during the run"
    # stamped before the edit, read after it: stale, naming the file
    assert notebook.stamp_status(before) == "changed since: t4lib/benchmarks/speculative.py"


def test_stamps_without_a_closure_are_not_recorded():
    assert notebook.stamp_status(None) == "not recorded"
    assert notebook.stamp_status({"commit": "abc", "sources_sha256": "0" * 64}) == "not recorded"
    real = notebook.run_provenance("cpu", NB)
    assert notebook.stamp_status({**real, "closure": {k: "unrecorded" for k in real["closure"]}}) == "not recorded"


def test_stamp_rejects_what_is_not_a_notebook_or_a_provenance(tmp_path):
    (tmp_path / "x.ipynb").write_text("{}")
    with pytest.raises(ValueError, match="not a notebook"):
        notebook.stamp(tmp_path / "x.ipynb", notebook.run_provenance("cpu", NB))
    with pytest.raises(ValueError, match="before: missing"):
        notebook.stamp(_nb(tmp_path / "a.ipynb"), {"commit": "abc"})
    assert "t4lib" not in json.loads((tmp_path / "a.ipynb").read_text())["metadata"]
    with pytest.raises(ValueError, match="producer"):
        notebook.run_provenance("cpu", "notebooks/99_nope.ipynb")


def test_run_all_stamps_each_good_run(tmp_path):
    """run_all.sh with a stand-in papermill and the real stamp: the good run is moved into place stamped, the
    failed one is neither stamped nor moved."""
    (tmp_path / "notebooks").mkdir()
    # named as notebooks of the repository: the stamp records the repository notebook's closure
    ok, bad = "00_environment", "01_kernel_kats"
    for nb in (f"{ok}.ipynb", f"{bad}.ipynb"):
        _nb(tmp_path / "notebooks" / nb)
    out = tmp_path / "results" / "dev"
    out.mkdir(parents=True)
    (out / f"{bad}.ipynb").write_text("previous good run")
    (tmp_path / "run_all.sh").write_text((ROOT / "run_all.sh").read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # python: the real one for the stamp, a stand-in for the rest (device slug, report)
    (bin_ / "py").write_text(f'#!/bin/sh\ncase "$*" in *t4lib.core.notebook*) exec {sys.executable} "$@" ;; '
                             '*device_slug*) echo dev ;; esac\nexit 0\n')
    (bin_ / "papermill").write_text('#!/bin/sh\nfor a; do :; done\ncase "$a" in *01_kernel_kats*) exit 1 ;; esac\n'
                                    'cp "$(dirname "$a")/../../notebooks/$(basename "$a" .partial.ipynb).ipynb" "$a"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHON": str(bin_ / "py"), "T4LIB_NO_INSTALL": "1",
           "PYTHONPATH": str(ROOT), "PROFILE": "cpu"}
    r = subprocess.run(["bash", str(tmp_path / "run_all.sh"), "run"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and bad in r.stderr, r.stderr
    mark = json.loads((out / f"{ok}.ipynb").read_text())["metadata"]["t4lib"]
    prov = provenance.provenance_of(f"notebooks/{ok}.ipynb")
    assert mark["commit"] == prov["commit"] and mark["profile"] == "cpu"
    assert mark["producer"] == f"notebooks/{ok}.ipynb" and mark["closure"] == prov["closure"]
    assert notebook.stamp_status(mark) == "current"
    assert (out / f"{bad}.ipynb").read_text() == "previous good run"
