"""Results are never lost: every writer replaces a file whole or not at all, a run that fails part-way keeps
the figures it did not re-measure, and commands that measured nothing exit non-zero without writing."""
import errno
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from t4lib import cli, results

ROOT = Path(__file__).resolve().parent.parent


def fig(name, value=1.0):
    return results.figure(name, value, "us", "ESTIMATED", "t", note="model")


# ----------------------------------------------------------------------------- every writer, every fault

def _writers(tmp_path):
    """(name, path, write()) for each writer; write() puts new content at path."""
    from t4lib import readme_results
    from t4lib.contract.calibrate import Plan

    readme = tmp_path / "README.md"
    return [
        ("results.write", tmp_path / "r.json", lambda p: results.write(p, [fig("a", 2.0)])),
        ("results.write_json", tmp_path / "w.json", lambda p: results.write_json(p, {"new": 1})),
        ("results.atomic_write_text", tmp_path / "t.txt", lambda p: results.atomic_write_text(p, "new\n")),
        ("contract Plan.save", tmp_path / "plan.json", lambda p: Plan(device={"name": "d"}).save(p)),
        ("readme_results.update", readme,
         lambda p: readme_results.update(p, root=ROOT / "results")),
        ("t4lib report --out", tmp_path / "RESULTS.md",
         lambda p: cli.main(["report", "--out", str(p)])),
    ]


def _old_content(name, path):
    from t4lib import readme_results
    if name == "readme_results.update":
        return f"intro\n{readme_results.BEGIN}\nstale\n{readme_results.END}\nrest\n"
    if name == "results.write":
        return json.dumps({"schema": 1, "figures": [fig("a")]}, indent=1) + "\n"
    return "previous good content\n"


class _FullDisk:
    """A text file whose write stores half the text and then fails as a full disk does."""

    def __init__(self, f):
        self.f = f

    def write(self, text):
        self.f.write(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, k):
        return getattr(self.f, k)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


FAULTS = {
    "json.dumps": lambda mp: mp.setattr(json, "dumps", _boom),
    "open": lambda mp: mp.setattr(results, "open", _boom, raising=False),
    "write (disk full)": lambda mp: mp.setattr(results, "open", lambda *a, **k: _FullDisk(open(*a, **k)),
                                               raising=False),
    "fsync": lambda mp: mp.setattr(os, "fsync", _boom),
    "os.replace": lambda mp: mp.setattr(os, "replace", _boom),
}


def _boom(*a, **k):
    raise OSError(errno.EIO, "injected fault")


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("writer", range(6), ids=[w[0] for w in _writers(Path("/x"))])
def test_a_fault_at_any_point_leaves_the_previous_file(writer, fault, tmp_path, monkeypatch):
    name, path, write = _writers(tmp_path)[writer]
    old = _old_content(name, path)
    path.write_text(old)
    before = sorted(os.listdir(tmp_path))
    with monkeypatch.context() as mp:
        FAULTS[fault](mp)
        try:
            write(path)
            failed = False
        except Exception:
            failed = True
    if failed:
        assert path.read_text() == old, f"{name} left a changed file after a fault at {fault}"
    else:  # the fault is not on this writer's path (text writers serialise no JSON): a complete new file
        _assert_complete(path, old)
    assert sorted(os.listdir(tmp_path)) == before, "a temporary file was left behind"


def _assert_complete(path, old):
    text = path.read_text()
    assert text != old and text.endswith("\n")
    if path.suffix == ".json":
        json.loads(text)


@pytest.mark.parametrize("writer", range(6), ids=[w[0] for w in _writers(Path("/x"))])
def test_without_a_fault_the_new_file_is_complete(writer, tmp_path, monkeypatch):
    name, path, write = _writers(tmp_path)[writer]
    path.write_text(_old_content(name, path))
    write(path)
    _assert_complete(path, _old_content(name, path))
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_atomic_write_keeps_the_umask_permissions(tmp_path):
    p = results.atomic_write_text(tmp_path / "a.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask


def test_library_writers_go_through_results():
    """No JSON writer in the library writes in place (each goes through t4lib.results). The two left are
    another module's (the tiny-model trainer) and a ledger-hashed op's lab (its next ledger run changes it)."""
    allowed = {"t4lib/models/tiny.py", "t4lib/ops/w4a16/bench.py"}
    bad = []
    for p in sorted((ROOT / "t4lib").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        text = p.read_text()
        if rel != "t4lib/results.py" and rel not in allowed and re.search(
                r"write_text\(json\.dumps|json\.dump\(", text):
            bad.append(rel)
    assert bad == []


# ----------------------------------------------------------------------------- additive results

def test_a_failed_run_keeps_the_figures_it_did_not_remeasure(tmp_path):
    p = tmp_path / "bench.json"
    results.write(p, [fig("a", 1.0), fig("b", 2.0), fig("c", 3.0)], shapes="all")
    first = json.loads(p.read_text())
    results.write(p, [fig("a", 10.0)], errors=["b: CUDA out of memory"], shapes="some")
    doc = json.loads(p.read_text())
    results.validate(doc)
    assert [(f["name"], f["value"]) for f in doc["figures"]] == [("a", 10.0), ("b", 2.0), ("c", 3.0)]
    assert "carried_over" not in doc["figures"][0]
    mark = doc["figures"][1]["carried_over"]
    assert mark == {"written": first["written"], "provenance": first["provenance"]}
    assert doc["errors"] == ["b: CUDA out of memory"] and doc["shapes"] == "some"
    # carried again: the mark still names the run that measured it
    results.write(p, [fig("c", 30.0)], errors={"a": "failed"})
    doc = json.loads(p.read_text())
    assert {f["name"]: f["value"] for f in doc["figures"]} == {"c": 30.0, "a": 10.0, "b": 2.0}
    assert next(f for f in doc["figures"] if f["name"] == "b")["carried_over"] == mark
    assert "carried over" in results.report(tmp_path)
    assert results.provenance_status(doc) == "current" + (" (dirty tree)" if doc["provenance"]["dirty"] else "")
    stale = {**doc["figures"][1]["carried_over"]["provenance"], "sources_sha256": "0" * 64, "commit": "abc1234"}
    doc["figures"][1]["carried_over"] = {"written": "then", "provenance": stale}
    assert results.provenance_status(doc) == "sources changed since abc1234 (figures carried over)"


def test_merge_is_explicit_or_follows_errors(tmp_path):
    p = tmp_path / "bench.json"
    results.write(p, [fig("a"), fig("b")])
    results.write(p, [fig("a")])                       # a complete run without errors: what it measured
    assert [f["name"] for f in json.loads(p.read_text())["figures"]] == ["a"]
    results.write(p, [fig("b")], merge=True)
    assert [f["name"] for f in json.loads(p.read_text())["figures"]] == ["b", "a"]
    results.write(p, [fig("c")], errors=["x"], merge=False)
    assert [f["name"] for f in json.loads(p.read_text())["figures"]] == ["c"]


def test_nothing_measured_never_replaces_a_good_file(tmp_path):
    p = tmp_path / "bench.json"
    results.write(p, [fig("a")])
    good = p.read_bytes()
    with pytest.raises(ValueError, match="no figures to write"):
        results.write(p, [])
    assert p.read_bytes() == good
    results.write(p, [], errors=["everything failed"])  # the failure recorded beside the kept figures
    doc = json.loads(p.read_text())
    assert [f["name"] for f in doc["figures"]] == ["a"] and doc["errors"] == ["everything failed"]
    results.write(tmp_path / "new.json", [])             # no previous file: an empty document is all there is


def test_a_broken_previous_file_is_replaced(tmp_path):
    p = tmp_path / "bench.json"
    p.write_text('{"schema": 1, "figures": [')
    results.write(p, [fig("a")], errors=["b failed"])
    assert [f["name"] for f in json.loads(p.read_text())["figures"]] == ["a"]


# ----------------------------------------------------------------------------- commands that measured nothing

def _fake_bench(monkeypatch, name, run):
    mod = types.ModuleType(f"t4lib_fake_bench_{name}")
    mod.run = run
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(cli.BENCHES, name, mod.__name__)


def test_bench_exits_nonzero_when_nothing_succeeded(tmp_path, monkeypatch, capsys):
    ran = []
    _fake_bench(monkeypatch, "raises", lambda out: ran.append("raises") or 1 / 0)
    _fake_bench(monkeypatch, "empty", lambda out: ran.append("empty") or [])
    _fake_bench(monkeypatch, "good", lambda out: ran.append("good") or [fig("g")])
    assert cli.main(["bench", "raises", "empty", "--out", str(tmp_path)]) == 1
    assert "empty: FAILED" in capsys.readouterr().err
    assert cli.main(["bench", "good", "--out", str(tmp_path)]) == 0
    ran.clear()
    assert cli.main(["bench", "good", "nope", "--out", str(tmp_path)]) == 2 and ran == []  # checked first


def _arm_record(arm, seed):
    rate = {"rate": 0.5, "k": 1, "n": 2, "wilson95": [0.1, 0.9]}
    ev = {"abstention": rate, "false_abstention": rate, "answerable_accuracy": rate, "math_heldout_accuracy": rate,
          "always_abstain": False}
    return {"arm": arm, "seed": seed, "before": ev, "after": ev, "curves": [{"reward": 0.1}]}


_POPEN = subprocess.Popen


class _FakeArms:
    """subprocess.Popen for ``grpo arm`` runs: the arms in ``ok`` write a record and exit 0, the others exit 1."""

    def __init__(self, ok):
        self.ok = ok

    def __call__(self, cmd, **kw):
        if "--arm" not in cmd:  # git and the rest run as they would
            return _POPEN(cmd, **kw)
        arm, seed, out = cmd[cmd.index("--arm") + 1], int(cmd[cmd.index("--seed") + 1]), cmd[cmd.index("--out") + 1]
        code = 0 if arm in self.ok else 1
        if code == 0:
            Path(out).write_text(json.dumps(_arm_record(arm, seed)))
        return types.SimpleNamespace(wait=lambda: code, returncode=code)


def _grpo_all(tmp_path, arms):
    from t4lib.train import grpo
    return grpo.main(["all", "--model", "tiny-cpu", "--arms", *arms, "--seeds", "0", "--benches", "--steps", "1",
                      "--logs", str(tmp_path / "logs"), "--out", str(tmp_path / "grpo.json")])


def test_grpo_all_with_every_arm_failing_exits_nonzero_and_keeps_the_file(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "grpo.json"
    monkeypatch.setattr(subprocess, "Popen", _FakeArms(ok={"fp16", "int4"}))
    assert _grpo_all(tmp_path, ["fp16", "int4"]) == 0
    good = out.read_bytes()
    assert {f["name"].split("/")[2] for f in json.loads(good)["figures"]} == {"fp16", "int4"}
    monkeypatch.setattr(subprocess, "Popen", _FakeArms(ok=set()))
    assert _grpo_all(tmp_path, ["fp16", "int4"]) == 1
    assert "every arm and benchmark failed" in capsys.readouterr().err
    assert out.read_bytes() == good
    # one arm failing: the other re-measured, the failed one's figures carried over beside the error
    monkeypatch.setattr(subprocess, "Popen", _FakeArms(ok={"fp16"}))
    assert _grpo_all(tmp_path, ["fp16", "int4"]) == 0
    doc = json.loads(out.read_text())
    carried = {f["name"].split("/")[2] for f in doc["figures"] if f.get("carried_over")}
    fresh = {f["name"].split("/")[2] for f in doc["figures"] if not f.get("carried_over")}
    assert fresh == {"fp16"} and carried == {"int4"} and "grpo_int4_s0" in doc["errors"][0]


# ----------------------------------------------------------------------------- run_all.sh

def test_run_all_keeps_the_previous_notebook_when_a_run_fails(tmp_path):
    """run_all.sh with stand-ins for python and papermill: the failing notebook's previous executed copy stays,
    the passing one is replaced."""
    (tmp_path / "notebooks").mkdir()
    for nb in ("00_ok.ipynb", "01_bad.ipynb"):
        (tmp_path / "notebooks" / nb).write_text("{}")
    out = tmp_path / "results" / "dev"
    out.mkdir(parents=True)
    for nb in ("00_ok.ipynb", "01_bad.ipynb"):
        (out / nb).write_text("previous good run")
    (tmp_path / "run_all.sh").write_text((ROOT / "run_all.sh").read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "py").write_text('#!/bin/sh\ncase "$*" in *device_slug*) echo dev ;; esac\nexit 0\n')
    # papermill: writes part of its output, then fails for 01_bad
    (bin_ / "papermill").write_text('#!/bin/sh\nfor a; do :; done\necho partial > "$a"\n'
                                    'case "$a" in *01_bad*) exit 1 ;; esac\necho executed > "$a"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHON": str(bin_ / "py"), "T4LIB_NO_INSTALL": "1"}
    r = subprocess.run(["bash", str(tmp_path / "run_all.sh"), "run"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "01_bad" in r.stderr
    assert (out / "00_ok.ipynb").read_text() == "executed\n" and not (out / "00_ok.ipynb.partial").exists()
    assert (out / "01_bad.ipynb").read_text() == "previous good run"
    assert (out / "01_bad.ipynb.partial").read_text() == "partial\n"
