"""An executed notebook records what it ran at: run_all.sh takes the provenance (commit, dirty tree, sources hash,
profile, device) before each papermill run and stamps it into the notebook's metadata["t4lib"] after a good one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t4lib.core import notebook, results

ROOT = Path(__file__).resolve().parent.parent


def _nb(path: Path) -> Path:
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# x"]}],
                                "metadata": {"papermill": {"parameters": {"PROFILE": "cpu"}}},
                                "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_stamp_records_commit_sources_profile_and_device(tmp_path):
    path = _nb(tmp_path / "a.ipynb")
    before = notebook.run_provenance("cpu")
    mark = notebook.stamp(path, before)
    nb = json.loads(path.read_text())
    assert nb["metadata"]["t4lib"] == mark and nb["metadata"]["papermill"]["parameters"] == {"PROFILE": "cpu"}
    assert nb["cells"][0]["source"] == ["# x"]
    prov = results.provenance()
    assert mark["commit"] == prov["commit"] and mark["sources_sha256"] == results.current_sources_sha256()
    assert mark["dirty"] == prov["dirty"] and "sources_sha256_after" not in mark
    assert mark["profile"] == "cpu" and mark["profile_resolved"] == "cpu"
    assert mark["device"] and mark["device_slug"] and mark["started"] <= mark["finished"]


def test_sources_edited_during_the_run_are_said_so(tmp_path, monkeypatch):
    path = _nb(tmp_path / "a.ipynb")
    before = {**notebook.run_provenance("auto"), "sources_sha256": "0" * 64, "dirty": False}
    mark = notebook.stamp(path, before)
    assert mark["sources_sha256"] == "0" * 64 and mark["dirty"] is True
    assert mark["sources_sha256_after"] == results.current_sources_sha256()


def test_stamp_rejects_what_is_not_a_notebook_or_a_provenance(tmp_path):
    (tmp_path / "x.ipynb").write_text("{}")
    with pytest.raises(ValueError, match="not a notebook"):
        notebook.stamp(tmp_path / "x.ipynb", notebook.run_provenance("cpu"))
    with pytest.raises(ValueError, match="before: missing"):
        notebook.stamp(_nb(tmp_path / "a.ipynb"), {"commit": "abc"})
    assert "t4lib" not in json.loads((tmp_path / "a.ipynb").read_text())["metadata"]


def test_run_all_stamps_each_good_run(tmp_path):
    """run_all.sh with a stand-in papermill and the real stamp: the good run is moved into place stamped, the
    failed one is neither stamped nor moved."""
    (tmp_path / "notebooks").mkdir()
    for nb in ("00_ok.ipynb", "01_bad.ipynb"):
        _nb(tmp_path / "notebooks" / nb)
    out = tmp_path / "results" / "dev"
    out.mkdir(parents=True)
    (out / "01_bad.ipynb").write_text("previous good run")
    (tmp_path / "run_all.sh").write_text((ROOT / "run_all.sh").read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # python: the real one for the stamp, a stand-in for the rest (device slug, report)
    (bin_ / "py").write_text(f'#!/bin/sh\ncase "$*" in *t4lib.core.notebook*) exec {sys.executable} "$@" ;; '
                             '*device_slug*) echo dev ;; esac\nexit 0\n')
    (bin_ / "papermill").write_text('#!/bin/sh\nfor a; do :; done\ncase "$a" in *01_bad*) exit 1 ;; esac\n'
                                    'cp "$(dirname "$a")/../../notebooks/$(basename "$a" .partial.ipynb).ipynb" "$a"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHON": str(bin_ / "py"), "T4LIB_NO_INSTALL": "1",
           "PYTHONPATH": str(ROOT), "PROFILE": "cpu"}
    r = subprocess.run(["bash", str(tmp_path / "run_all.sh"), "run"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "01_bad" in r.stderr, r.stderr
    mark = json.loads((out / "00_ok.ipynb").read_text())["metadata"]["t4lib"]
    assert mark["commit"] == results.provenance()["commit"] and mark["profile"] == "cpu"
    assert mark["sources_sha256"] == results.current_sources_sha256()
    assert (out / "01_bad.ipynb").read_text() == "previous good run"
