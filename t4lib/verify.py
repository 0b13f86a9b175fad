"""GPU verification ledger.

CI has no GPU, so GPU correctness is recorded rather than assumed:
``python -m t4lib verify`` (on a machine with a GPU) builds every kernel
family, runs the GPU tests (pytest ``-m gpu``), the known-answer suites and a
short benchmark pass, optionally the same tests under compute-sanitizer, and
writes ``results/verification/<device-slug>.json`` with the sha256 of every
kernel and binding source it tested. ``check_ledger`` (a CI test) fails when no
passing entry matches the current sources.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import _build, hw, results

REPO = Path(__file__).resolve().parent.parent
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")


def ledger_sources() -> list[Path]:
    """Kernel sources, the build recipe and every ctypes binding."""
    files = sorted((REPO / "kernels").rglob("*.cu")) + sorted((REPO / "kernels").rglob("*.cuh"))
    files += [REPO / "t4lib" / "_build.py"] + sorted((REPO / "t4lib").rglob("binding.py"))
    return files


def source_hashes() -> dict[str, str]:
    return {str(p.relative_to(REPO)): hashlib.sha256(p.read_bytes()).hexdigest() for p in ledger_sources()}


def combined_hash(hashes: dict[str, str]) -> str:
    h = hashlib.sha256()
    for k in sorted(hashes):
        h.update(f"{k}:{hashes[k]}\n".encode())
    return h.hexdigest()


def ledger_dir() -> Path:
    return results.results_dir() / "verification"


def _pytest(args: list[str], junit: Path, prefix: list[str] | None = None, timeout: int = 1800) -> dict:
    cmd = [*(prefix or []), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}", *args]
    t0 = time.time()
    # Own process group: on a timeout the sanitizer *and* the Python it wraps are killed,
    # so no orphan keeps the GPU busy for the runs that follow.
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        rc, text = None, f"{text or ''}\nTIMED OUT after {timeout} s"
    out = {"cmd": " ".join(cmd), "returncode": rc, "seconds": round(time.time() - t0, 1),
           "tail": text[-4000:], "tests": {}}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            nodeid = f"{case.get('classname')}::{case.get('name')}"
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            out["tests"][nodeid] = outcome
    return out


def _collect(target: str, marker: str) -> list[str]:
    """Node ids of the tests in one file that the marker expression selects."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", marker, target], cwd=REPO, capture_output=True, text=True)
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith(target + "::")]


def _sanitizer_targets() -> list[str]:
    """Every kernel family's own GPU tests (tests/test_<family>*.py), small by design."""
    return sorted({str(p.relative_to(REPO)) for fam in _build.families()
                   for p in (REPO / "tests").glob(f"test_{fam}*.py")})


def _sanitize(targets: list[str], timeout: int, workers: int | None = None, shards: int = 1,
              tools: tuple[str, ...] = SANITIZER_TOOLS, only: set | None = None) -> dict:
    """Each (tool, test file) pair under compute-sanitizer, split into ``shards``
    processes by test id, many processes at once (instrumented runs are bound by
    the host CPU, not the GPU). ``only``: the (tool, file) pairs to run (default
    all). Per file: errors summed over its shards; clean only when every shard
    ran to the end with zero errors and some test passed."""
    marker = "gpu and not slow and not timing"
    pairs = [(tool, t) for tool in tools for t in targets if only is None or (tool, t) in only]
    ids = {t: _collect(t, marker) for t in {t for _, t in pairs}} if shards > 1 else {}
    jobs = []
    for tool, t in pairs:
        parts = [ids[t][k::shards] for k in range(shards)] if ids.get(t) else [[t]]
        jobs += [(tool, t, tuple(p)) for p in parts if p]
    workers = workers or max(1, min(len(jobs), 24))  # GPU-light, host-CPU-bound: oversubscribe

    def one(job):
        tool, _, args = job
        with tempfile.TemporaryDirectory() as tmp:
            r = _pytest(["-m", marker, *args], Path(tmp) / "s.xml",
                        prefix=["compute-sanitizer", "--tool", tool, "--error-exitcode", "86",
                                "--target-processes", "all"], timeout=timeout)
        # memcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck: "... hazards displayed (N errors, ..."
        m = re.findall(r"ERROR SUMMARY: (\d+) error|hazards displayed \((\d+) error", r["tail"])
        counts = r.pop("tests")
        r["errors"] = sum(int(a or b) for a, b in m) if m else None
        r["tests_passed"] = sum(v == "passed" for v in counts.values())
        return r

    with ThreadPoolExecutor(workers) as ex:
        runs = list(ex.map(one, jobs))
    out: dict = {}
    for (tool, t, _), r in zip(jobs, runs):
        out.setdefault(tool, {}).setdefault(t, []).append(r)
    return {tool: {t: _merge_shards(rs) for t, rs in per.items()} for tool, per in out.items()}


def _merge_shards(rs: list[dict]) -> dict:
    errs = [r["errors"] for r in rs]
    rcs = [r["returncode"] for r in rs]
    merged = {"shards": len(rs), "returncode": None if None in rcs else max(rcs),
              "errors": None if None in errs else sum(errs), "tests_passed": sum(r["tests_passed"] for r in rs),
              "seconds": max(r["seconds"] for r in rs), "tail": rs[-1]["tail"][-1500:]}
    merged["clean"] = merged["returncode"] == 0 and merged["errors"] == 0 and merged["tests_passed"] > 0
    return merged


def _summarize(files: dict) -> dict:
    """Per tool: clean, errors (None when some run did not finish), tests passed, files."""
    out = {}
    for tool, per in files.items():
        errs = [r["errors"] for r in per.values()]
        out[tool] = {"clean": all(r["clean"] for r in per.values()),
                     "errors": None if None in errs else sum(errs),
                     "tests_passed": sum(r["tests_passed"] for r in per.values()),
                     "seconds": max(r["seconds"] for r in per.values()), "files": per}
    return out


def run(sanitize: bool = False, bench: bool = True, out: Path | None = None,
        sanitizer_timeout: int = 240, shards: int = 1, resume: bool = False) -> dict:
    """Run the whole verification on the current GPU and write the ledger entry.

    ``resume``: when this device's ledger entry already verifies the current
    sources, keep its builds, tests, KATs and bench, and re-run under the
    sanitizers only the (tool, file) pairs that did not finish clean."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("t4lib verify needs a CUDA GPU; CI relies on the committed ledger instead")
    info = hw.device_info()
    entry: dict = {"when": results.now(), "device": info["name"], "capability": list(info["capability"]),
                   "driver": info["driver"], "torch": info["torch"], "cuda_runtime": info["cuda_runtime"],
                   "nvcc_flags": _build.NVCC_FLAGS, "sources": source_hashes()}
    entry["sources_sha256"] = combined_hash(entry["sources"])
    out = out or ledger_dir() / f"{info['slug']}.json"
    if resume:
        return _resume_sanitizers(entry, out, sanitizer_timeout, shards)
    checks: dict[str, bool] = {}

    # 1. every family builds for sm_75 (spills and shared memory are checked by the
    #    CPU test suite, which compiles with -Xptxas -v)
    builds = {fam: {"ok": False, "error": str(b)[-2000:]} if isinstance(b, _build.BuildError)
              else {"ok": True, "library": b.name} for fam, b in _build.build_many().items()}
    entry["builds"] = builds
    checks["builds"] = all(b["ok"] for b in builds.values())

    # 2. GPU tests
    with tempfile.TemporaryDirectory() as tmp:
        entry["gpu_tests"] = _pytest(["-m", "gpu", "tests"], Path(tmp) / "gpu.xml")
    outcomes = list(entry["gpu_tests"]["tests"].values())
    entry["gpu_tests"]["counts"] = {k: outcomes.count(k) for k in ("passed", "failed", "error", "skipped")}
    checks["gpu_tests"] = bool(outcomes) and entry["gpu_tests"]["counts"]["passed"] > 0 and not (
        entry["gpu_tests"]["counts"]["failed"] or entry["gpu_tests"]["counts"]["error"])

    # every kernel family must have had GPU tests that ran and passed (a module
    # skipped for a missing package, say, does not verify its family)
    per_family = {fam: sum(1 for k, v in entry["gpu_tests"]["tests"].items()
                           if v == "passed" and f"test_{fam}" in k) for fam in _build.families()}
    entry["gpu_tests"]["passed_per_family"] = per_family
    checks["every_family_tested"] = all(per_family.values())

    # 3. known-answer suites on the CUDA backend
    try:
        from . import kat

        rows = kat.run_all("cuda")
        entry["kat"] = rows
        checks["kat"] = bool(rows) and kat.all_passed(rows)
    except ImportError:
        entry["kat"] = "t4lib.kat not present"

    # 4. sanitizers over the GPU tests
    if sanitize:
        targets = _sanitizer_targets()
        entry["sanitizer_targets"] = targets
        entry["sanitizers"] = _summarize(_sanitize(targets, sanitizer_timeout, shards=shards))
        # Recorded beside, not inside, `passed`: a sanitizer run that times out says
        # nothing about the kernels, and the ledger must still say what the tests showed.
        entry["sanitizers_clean"] = all(r["clean"] for r in entry["sanitizers"].values())
    # 5. a short benchmark pass; its figures go into the ledger only, so a quick run never
    #    replaces the full benchmark's results/<slug>/int4_dequant.json
    if bench:
        from .ops.int4 import bench as int4_bench

        try:
            with tempfile.TemporaryDirectory() as tmp:
                figs = int4_bench.run(Path(tmp), quick=True)
            entry["bench"] = {f["name"]: f["value"] for f in figs}
            checks["bench"] = True
        except Exception as e:  # a benchmark failure is recorded, not hidden
            entry["bench"] = f"{type(e).__name__}: {e}"
            checks["bench"] = False
    entry["checks"] = checks
    entry["passed"] = all(checks.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def _resume_sanitizers(fresh: dict, out: Path, timeout: int, shards: int) -> dict:
    if not out.is_file():
        raise RuntimeError(f"--resume: no ledger entry at {out}; run a full verify first")
    entry = json.loads(out.read_text())
    if entry.get("sources_sha256") != fresh["sources_sha256"] or not entry.get("passed"):
        raise RuntimeError(f"--resume: {out} does not verify the current sources "
                           f"({entry.get('sources_sha256', '?')[:12]} vs {fresh['sources_sha256'][:12]}) or did "
                           "not pass; run a full verify")
    targets = entry.get("sanitizer_targets") or _sanitizer_targets()
    files = {tool: dict(v.get("files", {})) for tool, v in (entry.get("sanitizers") or {}).items()}
    todo = {(tool, t) for tool in SANITIZER_TOOLS for t in targets
            if not files.get(tool, {}).get(t, {}).get("clean")}
    for tool, per in _sanitize(targets, timeout, shards=shards, only=todo).items():
        for t, r in per.items():
            files.setdefault(tool, {})[t] = {**r, "when": results.now()}
    entry["sanitizer_targets"] = targets
    entry["sanitizers"] = _summarize(files)
    entry["sanitizers_clean"] = all(r["clean"] for r in entry["sanitizers"].values())
    out.write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def check_ledger() -> tuple[bool, str]:
    """(ok, why): is there a passing ledger entry for the current sources?"""
    hashes = source_hashes()
    current = combined_hash(hashes)
    entries = [(p.name, json.loads(p.read_text())) for p in sorted(ledger_dir().glob("*.json"))] \
        if ledger_dir().is_dir() else []
    for name, e in entries:
        if e.get("sources_sha256") == current and e.get("passed") is True:
            return True, f"{name} verifies sources {current[:12]} on {e.get('device')}"
    changed = sorted({path for path, h in hashes.items()
                      if all(e.get("sources", {}).get(path) != h for _, e in entries)})
    seen = [f"{name}: sources {e.get('sources_sha256', '?')[:12]} passed={e.get('passed')}" for name, e in entries]
    return False, (f"no passing GPU verification for kernel/binding sources {current[:12]}; run "
                   f"'python -m t4lib verify' on a GPU and commit results/verification/. Entries: {seen or 'none'}; "
                   f"changed since every entry: {changed}")
