"""Results are never lost: every writer replaces a file whole or not at all, a run that fails part-way keeps
the figures it did not re-measure, and commands that measured nothing exit non-zero without writing."""
import builtins
import errno
import io
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from t4lib import cli
from t4lib.core import results

ROOT = Path(__file__).resolve().parent.parent


def fig(name, value=1.0):
    return results.figure(name, value, "us", "ESTIMATED", "t", note="model")


# ----------------------------------------------------------------------------- every writer, every fault

def _writers(tmp_path):
    """(name, path, write()) for each writer; write() puts new content at path."""
    from t4lib.evidence import report
    from t4lib.contract.calibrate import Plan

    readme = tmp_path / "README.md"
    return [
        ("results.write", tmp_path / "r.json", lambda p: results.write(p, [fig("a", 2.0)])),
        ("results.write_json", tmp_path / "w.json", lambda p: results.write_json(p, {"new": 1})),
        ("results.atomic_write_text", tmp_path / "t.txt", lambda p: results.atomic_write_text(p, "new\n")),
        ("contract Plan.save", tmp_path / "plan.json", lambda p: Plan(device={"name": "d"}).save(p)),
        ("report.update", readme,
         lambda p: report.update(p, root=ROOT / "results")),
        ("t4lib report --out", tmp_path / "RESULTS.md",
         lambda p: cli.main(["report", "--out", str(p)])),
        ("tiny eval --write-record", tmp_path / "training_record.json", _tiny_eval_write_record),
    ]


def _tiny_eval_write_record(path):
    """``python -m t4lib.models.tiny eval --model DIR --write-record``, which rewrites DIR's training record;
    the model load and its evaluation stubbed (what is tested is the write)."""
    from unittest import mock
    from t4lib.models import tiny

    with mock.patch.object(tiny, "load", lambda *a, **k: (None, None)), \
            mock.patch.object(tiny, "evaluate", lambda *a, **k: {"accuracy": 0.5}):
        tiny.main(["eval", "--model", str(Path(path).parent), "--write-record"])


def _old_content(name, path):
    from t4lib.evidence import report
    if name == "report.update":
        return f"intro\n{report.BEGIN}\nstale\n{report.END}\nrest\n"
    if name == "results.write":
        return json.dumps({"schema": 1, "figures": [fig("a")]}, indent=1) + "\n"
    if name == "tiny eval --write-record":
        return json.dumps({"preset": "tiny-cpu", "eval": {"accuracy": 0.25}}, indent=2) + "\n"
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


def _full_disk_everywhere(mp):
    """Every file opened for writing, by any module (builtins.open, io.open: what Path.write_text and
    Path.open call), stores half of each write and then fails as a full disk does; reads are untouched."""
    real = io.open

    def opener(file, mode="r", *a, **k):
        f = real(file, mode, *a, **k)
        return _FullDisk(f) if any(c in mode for c in "wxa+") else f

    mp.setattr(builtins, "open", opener)
    mp.setattr(io, "open", opener)


FAULTS = {
    "json.dumps": lambda mp: mp.setattr(json, "dumps", _boom),
    "open": lambda mp: mp.setattr(results, "open", _boom, raising=False),
    "write (disk full)": lambda mp: mp.setattr(results, "open", lambda *a, **k: _FullDisk(open(*a, **k)),
                                               raising=False),
    "write (disk full, any open)": _full_disk_everywhere,
    "fsync": lambda mp: mp.setattr(os, "fsync", _boom),
    "os.replace": lambda mp: mp.setattr(os, "replace", _boom),
}


def _boom(*a, **k):
    raise OSError(errno.EIO, "injected fault")


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("writer", range(len(_writers(Path("/x")))), ids=[w[0] for w in _writers(Path("/x"))])
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


def test_the_disk_full_fault_catches_an_in_place_writer(tmp_path, monkeypatch):
    """The fault injection above is live: a writer that writes in place (``Path.write_text``, as results.write
    and the tiny model's record did) leaves a broken file under it."""
    path = tmp_path / "r.json"
    old = json.dumps({"figures": [fig("a")]}, indent=1) + "\n"
    path.write_text(old)
    with monkeypatch.context() as mp:
        _full_disk_everywhere(mp)
        with pytest.raises(OSError, match="No space left"):
            path.write_text(json.dumps({"figures": [fig("a", 2.0)]}, indent=1) + "\n")
    assert path.read_text() != old
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())


@pytest.mark.parametrize("writer", range(len(_writers(Path("/x")))), ids=[w[0] for w in _writers(Path("/x"))])
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


def test_a_plot_that_fails_to_render_leaves_the_previous_one(tmp_path):
    class Broken:
        def savefig(self, buf, **kw):
            buf.write(b"half a png")
            raise RuntimeError("renderer failed")

    class Good:
        def savefig(self, buf, format, **kw):
            buf.write(f"a {format} plot".encode())

    p = results.save_figure(Good(), tmp_path / "loss.png", dpi=90)
    assert p.read_bytes() == b"a png plot"
    with pytest.raises(RuntimeError):
        results.save_figure(Broken(), p)
    assert p.read_bytes() == b"a png plot" and [q.name for q in tmp_path.iterdir()] == ["loss.png"]


#: writes in the library that are not results files, each with why it may write in place
NOT_RESULTS = {
    ("t4lib/models/tiny.py", "write_bytes("): "a checkpoint's tokenizer config, beside save_pretrained's files",
    ("t4lib/train/grpo.py", 'open(Path(logs) / f"grpo_{arm}_s{seed}.log", "w")'): "one run's log",
    ("t4lib/train/grpo.py", 'open(f.with_suffix(".log"), "w")'): "one sweep run's log",
    ("t4lib/core/notebook.py", 'open("torch-constraint.txt", "w")'): "pip's constraint file in Colab",
    ("t4lib/evidence/rehearse.py", 'open(log, "w")'): "one rehearsal run's papermill log",
    # whole files ("": any write in them)
    ("t4lib/evidence/hub_standins.py", ""): "stand-in checkpoints in a scratch Hugging Face cache, no results",
}
_WRITE = re.compile(r"\.write_text\(|\.write_bytes\(|json\.dump\(|\.savefig\(|open\([^()]*(?:\([^()]*\)[^()]*)*,\s*"
                    r"(?:mode=)?[\"'][^\"']*[wxa+]")


def test_library_writers_go_through_results():
    """Every write in the library (JSON or text, ``open(..., "w")``, ``write_text``, ``write_bytes``, plots) goes
    through t4lib.core.results' atomic writers, except the files listed in NOT_RESULTS, which are no results."""
    bad, allowed_seen = [], set()
    for p in sorted((ROOT / "t4lib").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if rel == "t4lib/core/results.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if not _WRITE.search(line):
                continue
            hit = next((k for k in NOT_RESULTS if k[0] == rel and k[1] in line), None)
            if hit:
                allowed_seen.add(hit)
            else:
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert bad == []
    stale = {k for k in NOT_RESULTS if k[1] and k not in allowed_seen}
    assert not stale, f"entries of NOT_RESULTS that no longer match (remove them): {stale}"


def test_the_writer_scan_finds_in_place_writes():
    for line in ('(out / "training_record.json").write_text(json.dumps(record, indent=2) + "\\n")',
                 'with open(path, "w") as f:', "open(p, mode='a')", "json.dump(doc, f)",
                 'open(Path(d) / f"{x}.json", "w")', 'fig.savefig(p, dpi=90)', "p.write_bytes(b)"):
        assert _WRITE.search(line), line
    for line in ('with open(self.path, "rb") as f:', 'open(path, encoding="utf-8")', "results.write_json(p, rec)",
                 "results.atomic_write_text(p, text)"):
        assert not _WRITE.search(line), line


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
    assert results.provenance_status(doc) == "current"
    carried = doc["figures"][1]["carried_over"]["provenance"]
    changed = sorted(carried["closure"])[0]
    stale = {**carried, "closure": {**carried["closure"], changed: "0" * 16}, "commit": "abc1234"}
    doc["figures"][1]["carried_over"] = {"written": "then", "provenance": stale}
    assert results.provenance_status(doc) == f"carried over: changed since: {changed}"
    assert results.figure_status(doc, doc["figures"][1]) == f"carried over; changed since: {changed}"
    assert results.figure_status(doc, doc["figures"][0]) == "current"


def test_a_benchmark_section_failing_midway_keeps_the_previous_figures(tmp_path, monkeypatch):
    """The probe of the report: w4a16_gemm.json with many figures, then a run whose GEMM section measures two
    and fails (a simulated out-of-memory): the file keeps every earlier figure beside the two new ones and the
    error, instead of shrinking to what the failed run measured."""
    pytest.importorskip("torch")
    from t4lib.benchmarks import w4a16 as bench

    monkeypatch.setattr(bench.timing, "copy_bandwidth_figure", lambda source: fig("copy_bandwidth", 1000.0))
    many = [fig("copy_bandwidth", 900.0)] + [fig(f"w4a16_gemm/M{m}/4096x4096", float(m)) for m in range(1, 641)]
    results.write(tmp_path / "w4a16_gemm.json", many, shapes="KxN (in x out)")

    def gemm_fails(figs, errors, quick):
        figs.append(fig("w4a16_gemm/M1/4096x4096", 5.0))
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(bench, "_gemm_section", gemm_fails)
    bench.run(tmp_path, gemv_section=False)
    doc = json.loads((tmp_path / "w4a16_gemm.json").read_text())
    results.validate(doc)
    by = {f["name"]: f for f in doc["figures"]}
    assert len(by) == 641 and by["w4a16_gemm/M1/4096x4096"]["value"] == 5.0
    assert by["copy_bandwidth"]["value"] == 1000.0 and "carried_over" not in by["copy_bandwidth"]
    assert by["w4a16_gemm/M640/4096x4096"]["value"] == 640.0 and by["w4a16_gemm/M640/4096x4096"]["carried_over"]
    assert len(doc["errors"]) == 1 and "CUDA out of memory" in doc["errors"][0]


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


def test_bench_and_report_check_out_before_the_work(tmp_path, monkeypatch, capsys):
    ran = []
    _fake_bench(monkeypatch, "good", lambda out: ran.append("good") or [fig("g")])
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert cli.main(["bench", "good", "--out", str(blocker / "sub")]) == 2 and ran == []
    assert "--out" in capsys.readouterr().err
    assert cli.main(["report", "--out", str(blocker / "README.md")]) == 2
    assert "--out" in capsys.readouterr().err
    assert blocker.read_text() == "x"


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
    assert (out / "00_ok.ipynb").read_text() == "executed\n" and not (out / "00_ok.partial.ipynb").exists()
    assert (out / "01_bad.ipynb").read_text() == "previous good run"
    assert (out / "01_bad.partial.ipynb").read_text() == "partial\n"


def test_run_all_inline_python_runs_with_the_real_interpreter():
    """Every ``"$PY" -c "..."`` snippet of run_all.sh runs here (the test above stands in for python, so an import
    path the package no longer has would pass it)."""
    snippets = re.findall(r'"\$PY" -c "([^"]+)"', (ROOT / "run_all.sh").read_text())
    assert snippets
    for code in snippets:
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"{code!r} failed:\n{r.stderr[-2000:]}"


# ----------------------------------------------------------------------------- the swizzle ncu record

_NCU_LOG = "".join(
    f"  void swizzle_bench_kernel<{layout}, {mode}>(float *, int) (1, 1, 1)x(256, 1, 1), Context 1, Device 0\n"
    f"    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum        {c:,}\n"
    f"    l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum            {w:,}\n"
    for layout, mode, c, w in ((0, 1, 1984, 2048), (2, 1, 192, 256), (0, 0, 15872, 16384), (2, 0, 1536, 2048)))


def _fake_ncu(tmp_path, body):
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return str(exe)


def test_swizzle_ncu_writes_its_record_with_provenance(tmp_path):
    from t4lib.benchmarks import swizzle_ncu
    log = tmp_path / "log.txt"
    log.write_text(_NCU_LOG)
    path = swizzle_ncu.run(tmp_path, ncu=_fake_ncu(tmp_path, f"cat {log}\n"))
    doc = results.read_results(path)
    figs = {f["name"]: f["value"] for f in doc["figures"]}
    assert figs["swizzle/ncu/latency/naive/wavefronts_per_load"] == 32.0      # 2048 / (2048 - 1984)
    assert figs["swizzle/ncu/throughput/swizzled/wavefronts_per_load"] == 4.0
    assert figs["swizzle/ncu/throughput/naive/excess_wavefronts"] == 16384 - 4 * 512
    assert doc["provenance"]["producer"] == "t4lib/benchmarks/swizzle_ncu.py" and doc["command"].startswith("ncu ")
    assert "t4lib/benchmarks/swizzle_ncu.py" in doc["provenance"]["closure"]
    assert results.provenance_status(doc) == "current"


@pytest.mark.parametrize("body", ["echo 'ERROR: profiling is not supported' >&2; exit 1\n",
                                  "echo 'no kernels were profiled'\n"])
def test_swizzle_ncu_that_fails_or_counts_nothing_keeps_the_record(tmp_path, body):
    from t4lib.benchmarks import swizzle_ncu
    path = tmp_path / "swizzle_ncu.json"
    path.write_text("previous\n")
    with pytest.raises(RuntimeError, match="ncu exited"):
        swizzle_ncu.run(tmp_path, ncu=_fake_ncu(tmp_path, body))
    assert path.read_text() == "previous\n"


def test_swizzle_ncu_without_nsight_compute_says_so(tmp_path):
    from t4lib.benchmarks import swizzle_ncu
    with pytest.raises(RuntimeError, match="ncu not found"):
        swizzle_ncu.run(tmp_path, ncu=str(tmp_path / "no-such-ncu"))
    assert not (tmp_path / "swizzle_ncu.json").exists()


def test_the_next_write_removes_temporaries_an_interrupted_write_left(tmp_path):
    """A write killed mid-way leaves its temporary file; the next write to the same place removes it (a process
    that still runs keeps its own)."""
    import os

    target = tmp_path / "x.json"
    dead = tmp_path / ".x.json.999999999.0123abcd.tmp"
    live = tmp_path / f".x.json.{os.getpid()}.89abcdef.tmp"
    other = tmp_path / ".y.json.999999999.0123abcd.tmp"
    for p in (dead, live, other):
        p.write_bytes(b"partial")
    results.write_json(target, {"a": 1})
    assert not dead.exists() and live.exists() and other.exists()
    assert json.loads(target.read_text()) == {"a": 1}
