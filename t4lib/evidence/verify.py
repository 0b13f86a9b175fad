"""GPU verification ledger.

CI has no GPU, so GPU correctness is recorded rather than assumed:
``python -m t4lib verify`` (on a machine with a GPU) builds every kernel
family, runs the GPU tests (pytest ``-m gpu``), the known-answer suites and a
short benchmark pass, optionally the same tests under compute-sanitizer, and
writes ``results/verification/<device-slug>.json`` with the sha256 of every
source that decides what a kernel computes or what a GPU test asserts, the ids
of the GPU tests collected and their outcomes, and the device. ``check_ledger``
(a CI test) accepts an entry only when it verifies the current sources with no
failure or error, over the current ``-m gpu`` collection, with every kernel
family tested and the KATs passed, on a device it names (``ACCEPTED_DEVICES``).
The source set is what the GPU tests import (:mod:`t4lib.core.provenance`); the entry records
the commit it ran at and the driver.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import lru_cache
from pathlib import Path

import torch

from t4lib.benchmarks import int4_dequant as int4_bench
from t4lib.core import build, hw, results
from t4lib.core.provenance import (GPU_MARKER, REPO, combined_hash, git_commit, gpu_test_files, ledger_sources,
                                   source_hashes)
from t4lib.evidence import kat

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")


# Devices whose entries check_ledger accepts: name -> (capability, what ran there). Kernels are
# built for compute_75 only (sm_75 machine code plus compute_75 PTX); on anything newer than a T4
# the driver JIT-compiles the PTX, so the sm_75 machine code itself has not run, and launch
# choices that depend on the SM count (split-K, grid caps) take other paths than on a T4's 40 SMs.
def _jit_path(gpu: str) -> str:
    return (f"the compute_75 PTX JIT-compiled by the driver on an {gpu} (sm_90, 132 SMs); the sm_75 machine code "
            "itself has not run, and SM-count-dependent split choices take other paths on a T4's 40 SMs")


ACCEPTED_DEVICES = {
    "Tesla T4": ((7, 5), "the sm_75 machine code on a T4"),
    "NVIDIA H200": ((9, 0), _jit_path("H200")),
    # the same JIT path on the same 132 SMs as the H200, with less and slower memory; lent more readily
    "NVIDIA H100 80GB HBM3": ((9, 0), _jit_path("H100")),
}


def ledger_dir() -> Path:
    return results.results_dir() / "verification"


# racecheck's report of one hazard: "Race reported between Read access at <function>+0x.. and Write access at .."
_RACE = re.compile(r"Race reported between \w+ access at (.+?)\+0x[0-9a-fA-F]+")


def _function_name(signature: str) -> str:
    """``nvcuda::wmma::store_matrix_sync`` of ``void nvcuda::wmma::store_matrix_sync(float *, ...)``: no return
    type, anonymous namespace, template arguments or parameters."""
    s = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", signature.strip())
    s = re.sub(r"^void\s+", "", s)
    return re.split(r"[(<]", s, maxsplit=1)[0].strip()


def race_kernels(text: str) -> dict[str, int]:
    """``{function: reports}`` of racecheck's output, by the function (a kernel, or the device function inlined
    into it) of the first access of each report (the summary counts reports, not where they are: a cuBLAS
    kernel's reports are not ours)."""
    return dict(Counter(_function_name(m) for m in _RACE.findall(text)))


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
           "tail": text[-4000:], "race_kernels": race_kernels(text), "tests": {}}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            nodeid = _node_id(case.get("classname"), case.get("name"))
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            out["tests"][nodeid] = outcome
    return out


def _node_id(classname: str, name: str) -> str:
    """pytest's node id from a junit testcase: ``tests.test_x[.Class]`` + name ->
    ``tests/test_x.py[::Class]::name``, the form ``--collect-only`` prints."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (REPO / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return f"{classname}::{name}"


def collect_gpu_tests() -> list[str]:
    """Node ids of the whole ``-m gpu`` collection (collect-only also runs without a GPU:
    the tests are collected, then skipped). Raises when collection itself fails."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", GPU_MARKER, "tests"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pytest --collect-only -m {GPU_MARKER} tests failed (rc {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return sorted(ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("tests/") and "::" in ln)


@lru_cache(maxsize=1)
def _current_collection() -> tuple[str, ...]:
    return tuple(collect_gpu_tests())


def _collect(target: str, marker: str) -> list[str]:
    """Node ids of the tests in one file that the marker expression selects."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", marker, target], cwd=REPO, capture_output=True, text=True)
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith(target + "::")]


def _sanitizer_targets(families: list[str] | None = None) -> list[str]:
    """The kernel families' own GPU tests (tests/test_<family>*.py), small by design: every
    family's, or those of ``families``. An item may also name one such test file
    (``tests/test_w4a16_ws.py``), to sanitize part of a large family. ValueError names an item
    that is neither a family nor one of a family's test files."""
    known = build.families()
    of_family = {fam: {str(p.relative_to(REPO)) for p in (REPO / "tests").glob(f"test_{fam}*.py")} for fam in known}
    own_files = set().union(*of_family.values())
    asked = families or known
    unknown = sorted(set(asked) - set(known) - own_files)
    if unknown:
        raise ValueError(f"sanitize families: {unknown} are neither kernel families ({known}) nor their test files")
    return sorted(set().union(*(of_family.get(item, {item}) for item in asked)))


def _sanitize(targets: list[str], timeout: int, workers: int | None = None, shards: int = 1,
              tools: tuple[str, ...] = SANITIZER_TOOLS, only: set | None = None, on_pair=None) -> dict:
    """Each (tool, test file) pair under compute-sanitizer, split into ``shards``
    processes by test id, many processes at once (instrumented runs are bound by
    the host CPU, not the GPU). ``only``: the (tool, file) pairs to run (default
    all). Per file: errors summed over its shards; clean only when every shard
    ran to the end with zero errors and some test passed. ``on_pair(tool, file, merged)``: called as
    each pair's last shard finishes, so a caller can keep what is done if the whole run is cut short."""
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

    out: dict = {}
    left = Counter((tool, t) for tool, t, _ in jobs)   # shards still running per pair
    with ThreadPoolExecutor(workers) as ex:
        futures = {ex.submit(one, job): job for job in jobs}
        for f in as_completed(futures):
            tool, t, _ = futures[f]
            out.setdefault(tool, {}).setdefault(t, []).append(f.result())
            left[(tool, t)] -= 1
            if not left[(tool, t)] and on_pair is not None:
                on_pair(tool, t, _merge_shards(out[tool][t]))
    return {tool: {t: _merge_shards(rs) for t, rs in per.items()} for tool, per in out.items()}


def _sum_kernels(parts) -> dict | None:
    """Racecheck reports by kernel summed over runs; None when some run did not record them (an older entry)."""
    parts = list(parts)
    return None if None in parts else dict(sum(map(Counter, parts), Counter()))


def _merge_shards(rs: list[dict]) -> dict:
    errs = [r["errors"] for r in rs]
    rcs = [r["returncode"] for r in rs]
    merged = {"shards": len(rs), "returncode": None if None in rcs else max(rcs),
              "errors": None if None in errs else sum(errs), "tests_passed": sum(r["tests_passed"] for r in rs),
              "seconds": max(r["seconds"] for r in rs), "tail": rs[-1]["tail"][-1500:],
              "race_kernels": _sum_kernels(r.get("race_kernels") for r in rs)}
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
                     "seconds": max(r["seconds"] for r in per.values()),
                     "race_kernels": _sum_kernels(r.get("race_kernels") for r in per.values()),
                     "files": per}
    return out


def _xdist_args(jobs: int) -> list[str]:
    """pytest arguments for ``jobs`` processes; one process needs no plugin."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    if jobs == 1:
        return []
    if importlib.util.find_spec("xdist") is None:
        raise RuntimeError(f"jobs={jobs} needs pytest-xdist (pip install pytest-xdist); jobs=1 runs without it")
    return ["-n", str(jobs), "--dist", "loadfile"]


def run(sanitize: bool = False, bench: bool = True, out: Path | None = None,
        sanitizer_timeout: int = 240, shards: int = 1, resume: bool = False,
        sanitize_families: list[str] | None = None, jobs: int = 1) -> dict:
    """Run the whole verification on the current GPU and write the ledger entry.

    ``sanitize_families``: run the sanitizers over these families' tests only (the entry's
    ``sanitizer_targets`` says which ran; the others are not covered by this entry).

    ``jobs``: run the GPU tests in this many pytest-xdist processes, each taking whole test files
    (module fixtures stay in one process); the tests share the one GPU.

    ``resume``: when this device's ledger entry already verifies the current
    sources, keep its builds, tests, KATs and bench, and re-run under the
    sanitizers only the (tool, file) pairs that did not finish clean (with
    ``sanitize_families``: those families' files only, added to the ones the
    entry already covers)."""
    xdist = _xdist_args(jobs)   # a bad jobs fails here, before any build
    if not torch.cuda.is_available():
        raise RuntimeError("t4lib verify needs a CUDA GPU; CI relies on the committed ledger instead")
    info = hw.device_info()
    entry: dict = {"when": results.now(), "device": info["name"], "capability": list(info["capability"]),
                   "driver": info["driver"], "torch": info["torch"], "cuda_runtime": info["cuda_runtime"],
                   "nvcc_flags": build.NVCC_FLAGS, "sources": source_hashes()}
    entry["commit"], entry["dirty"] = git_commit()
    entry["sources_sha256"] = combined_hash(entry["sources"])
    out = out or ledger_dir() / f"{info['slug']}.json"
    if resume:
        return _resume_sanitizers(entry, out, sanitizer_timeout, shards, sanitize_families)
    checks: dict[str, bool] = {}

    # 1. every family builds for sm_75 (spills and shared memory are checked by the
    #    CPU test suite, which compiles with -Xptxas -v)
    builds = {fam: {"ok": False, "error": str(b)[-2000:]} if isinstance(b, build.BuildError)
              else {"ok": True, "library": b.name} for fam, b in build.build_many().items()}
    entry["builds"] = builds
    checks["builds"] = all(b["ok"] for b in builds.values())

    # 2. GPU tests: the collection is recorded, so CI can tell a test added or renamed since
    collected = collect_gpu_tests()
    with tempfile.TemporaryDirectory() as tmp:
        entry["gpu_tests"] = _pytest(["-m", GPU_MARKER, *xdist, "tests"], Path(tmp) / "gpu.xml")
    entry["gpu_tests"]["jobs"] = jobs
    entry["gpu_tests"]["collected"] = collected
    checks["every_collected_test_ran"] = set(entry["gpu_tests"]["tests"]) == set(collected)
    outcomes = list(entry["gpu_tests"]["tests"].values())
    entry["gpu_tests"]["counts"] = {k: outcomes.count(k) for k in ("passed", "failed", "error", "skipped")}
    checks["gpu_tests"] = bool(outcomes) and entry["gpu_tests"]["counts"]["passed"] > 0 and not (
        entry["gpu_tests"]["counts"]["failed"] or entry["gpu_tests"]["counts"]["error"])

    # every kernel family must have had GPU tests that ran and passed (a module
    # skipped for a missing package, say, does not verify its family)
    per_family = {fam: sum(1 for k, v in entry["gpu_tests"]["tests"].items()
                           if v == "passed" and f"test_{fam}" in k) for fam in build.families()}
    entry["gpu_tests"]["passed_per_family"] = per_family
    checks["every_family_tested"] = all(per_family.values())

    # 3. known-answer suites on the CUDA backend
    rows = kat.run_all("cuda")
    entry["kat"] = rows
    checks["kat"] = bool(rows) and kat.all_passed(rows)

    # 4. sanitizers over the GPU tests
    if sanitize:
        targets = _sanitizer_targets(sanitize_families)
        entry["sanitizer_targets"] = targets
        entry["sanitizers"] = _summarize(_sanitize(targets, sanitizer_timeout, shards=shards))
        # Recorded beside, not inside, `passed`: a sanitizer run that times out says
        # nothing about the kernels, and the ledger must still say what the tests showed.
        entry["sanitizers_clean"] = all(r["clean"] for r in entry["sanitizers"].values())
    # 5. a short benchmark pass; its figures go into the ledger only, so a quick run never
    #    replaces the full benchmark's results/<slug>/int4_dequant.json
    if bench:
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
    results.write_json(out, entry)
    return entry


def _resume_sanitizers(fresh: dict, out: Path, timeout: int, shards: int,
                       families: list[str] | None = None) -> dict:
    if not out.is_file():
        raise RuntimeError(f"--resume: no ledger entry at {out}; run a full verify first")
    entry = json.loads(out.read_text())
    if entry.get("sources_sha256") != fresh["sources_sha256"] or not entry.get("passed"):
        raise RuntimeError(f"--resume: {out} does not verify the current sources "
                           f"({entry.get('sources_sha256', '?')[:12]} vs {fresh['sources_sha256'][:12]}) or did "
                           "not pass; run a full verify")
    asked = _sanitizer_targets(families) if families else None
    targets = entry.get("sanitizer_targets") or ([] if asked else _sanitizer_targets())
    targets = sorted(set(targets) | set(asked or ()))
    files = {tool: dict(v.get("files", {})) for tool, v in (entry.get("sanitizers") or {}).items()}
    todo = {(tool, t) for tool in SANITIZER_TOOLS for t in (asked or targets)
            if not files.get(tool, {}).get(t, {}).get("clean")}
    def keep(tool, t, r):  # written as each pair finishes: a run cut short keeps what is done
        files.setdefault(tool, {})[t] = {**r, "when": results.now()}
        entry["sanitizer_targets"] = targets
        entry["sanitizers"] = _summarize(files)
        entry["sanitizers_clean"] = all(v["clean"] for v in entry["sanitizers"].values()) and all(
            f in files.get(tool_, {}) for tool_ in SANITIZER_TOOLS for f in targets)
        results.write_json(out, entry)

    _sanitize(targets, timeout, shards=shards, only=todo, on_pair=keep)
    return entry


def entry_problems(entry: dict, hashes: dict[str, str] | None = None) -> list[str]:
    """What keeps one ledger entry from verifying the current sources (empty: it does).

    Everything is re-derived from what the entry recorded rather than trusted from its own
    summary: the per-file hashes, each test's outcome, the per-family passes, the KAT rows."""
    if hashes is None:
        hashes = source_hashes()
    current = combined_hash(hashes)
    problems = []
    recorded = entry.get("sources")
    if not isinstance(recorded, dict):
        problems.append("no per-file source hashes ('sources')")
    else:
        changed = sorted(k for k in hashes if recorded.get(k) != hashes[k])
        gone = sorted(set(recorded) - set(hashes))
        if changed or gone:
            problems.append(f"sources differ from the current tree: changed or new {changed}, no longer hashed {gone}")
        if entry.get("sources_sha256") != combined_hash(recorded):
            problems.append("'sources_sha256' is not the hash of its own 'sources'")
    if entry.get("sources_sha256") != current:
        problems.append(f"sources {str(entry.get('sources_sha256'))[:12]} != current {current[:12]}")
    if entry.get("passed") is not True:
        problems.append(f"passed={entry.get('passed')!r}")

    dev, cap = entry.get("device"), tuple(entry.get("capability") or ())
    if dev not in ACCEPTED_DEVICES:
        problems.append(f"device {dev!r} is not one check_ledger accepts ({sorted(ACCEPTED_DEVICES)})")
    elif cap != ACCEPTED_DEVICES[dev][0]:
        problems.append(f"{dev} with capability {cap}, expected {ACCEPTED_DEVICES[dev][0]}")
    if entry.get("nvcc_flags") != build.NVCC_FLAGS:
        problems.append(f"built with nvcc flags {entry.get('nvcc_flags')}, not the current {build.NVCC_FLAGS}")
    builds = entry.get("builds")
    if not isinstance(builds, dict) or sorted(builds) != build.families() or \
            not all(b.get("ok") for b in builds.values()):
        problems.append(f"not every family built: {builds if isinstance(builds, dict) else 'no builds'}")

    tests = (entry.get("gpu_tests") or {}).get("tests")
    if not isinstance(tests, dict) or not tests:
        problems.append("no GPU test outcomes ('gpu_tests.tests')")
        tests = {}
    bad = sorted(k for k, v in tests.items() if v in ("failed", "error"))
    if bad:
        problems.append(f"{len(bad)} GPU tests failed or errored: {bad[:10]}")
    odd = sorted(k for k, v in tests.items() if v not in ("passed", "failed", "error", "skipped"))
    if odd:
        problems.append(f"unknown outcomes for {odd[:10]}")
    collected = (entry.get("gpu_tests") or {}).get("collected")
    if not isinstance(collected, list) or set(collected) != set(tests):
        problems.append("the recorded collection ('gpu_tests.collected') is missing or differs from the tests run")
    if tests:
        try:
            now = set(_current_collection())
        except RuntimeError as e:
            problems.append(str(e))
        else:
            if set(tests) != now:
                new, old = sorted(now - set(tests)), sorted(set(tests) - now)
                problems.append(f"GPU tests differ from the current '-m {GPU_MARKER}' collection: "
                                f"{len(new)} not run {new[:5]}, {len(old)} no longer collected {old[:5]}")
    untested = [fam for fam in build.families()
                if not any(v == "passed" and re.match(rf"tests[./]test_{fam}", k) for k, v in tests.items())]
    if untested:
        problems.append(f"families with no passing GPU test: {untested}")

    rows = entry.get("kat")
    if not isinstance(rows, list) or not rows:
        problems.append("no known-answer (KAT) step recorded")
    else:
        missing = sorted(set(kat.FAMILIES) - {r.get("family") for r in rows})
        if missing or not all(isinstance(r, dict) and (r.get("vectors") or 0) > 0
                              and r.get("passed") == r.get("vectors") for r in rows):
            problems.append(f"KATs not all passed (missing families {missing}): {rows}")
    return problems


def verdict(entry: dict) -> str:
    """One line saying what the entry verified and on what, the JIT caveat included."""
    dev = entry.get("device")
    ran = ACCEPTED_DEVICES.get(dev, ((), f"an unlisted device {dev!r}"))[1]
    counts = (entry.get("gpu_tests") or {}).get("counts", {})
    return (f"GPU tests passed={counts.get('passed')} failed={counts.get('failed')} error={counts.get('error')} "
            f"skipped={counts.get('skipped')}, KATs of {len(entry.get('kat') or [])} families passed, "
            f"sources {str(entry.get('sources_sha256'))[:12]}; ran {ran}")


def check_ledger() -> tuple[bool, str]:
    """(ok, why): does some ledger entry verify the current sources (see ``entry_problems``)?
    tests/test_verify.py plants entries that claim a pass without the evidence and requires
    them rejected."""
    hashes = source_hashes()
    current = combined_hash(hashes)
    entries = [(p.name, json.loads(p.read_text())) for p in sorted(ledger_dir().glob("*.json"))] \
        if ledger_dir().is_dir() else []
    why = {}
    for name, e in entries:
        problems = entry_problems(e, hashes)
        if not problems:
            return True, f"{name} verifies sources {current[:12]}: {verdict(e)}"
        why[name] = problems
    detail = "; ".join(f"{name}: " + " | ".join(p) for name, p in why.items()) or "no entries"
    return False, (f"no GPU verification entry accepts the current sources {current[:12]}. Refresh it on a GPU "
                   f"with 'python -m t4lib verify' (add --sanitize for the compute-sanitizer runs) and commit "
                   f"results/verification/. {detail}")
