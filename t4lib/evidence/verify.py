"""GPU verification ledger: a record of GPU runs, per GPU test file.

CI has no GPU, so GPU correctness is recorded rather than assumed. ``python -m t4lib verify`` (on a machine with
a GPU) builds every kernel family, runs the GPU test files (pytest ``-m gpu``), the known-answer suites and a
short benchmark pass, optionally the tests under compute-sanitizer, and writes
``results/verification/<device-slug>.json``. The entry holds, **per GPU test file**, the file's closure (the file,
``tests/conftest.py``, everything they import and the kernels they bind: :func:`t4lib.core.provenance.closure`)
and the outcome of each of its tests; per kernel family, the fingerprints of its sources and whether it built;
the KATs with the closure of :mod:`t4lib.evidence.kat`.

``check_ledger`` (a CI test) accepts when every GPU test file of today's ``-m gpu`` collection (found by pytest
collection) has, in an entry from a device it names (``ACCEPTED_DEVICES``), outcomes at its *current* closure for
exactly its current tests, none failed, some passed; when every family built at its current sources and has such
a file; and when the KATs passed at their current closure. A change to a file reaches only the GPU test files whose
closure holds it: ``python -m t4lib verify --stale`` re-runs those alone and keeps the rest of the entry.

CI cannot re-run any of this: it checks that the records are consistent with today's sources, not that they are
true. Anyone with a CPU can write a consistent entry by hand; the entries in the repository come from
``verify`` runs on the devices they name.
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
from t4lib.core import provenance
from t4lib.core.provenance import GPU_MARKER, REPO, git_commit
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
    """The kernel families' own GPU test files (tests/test_<family>*.py holding tests of the ``-m gpu``
    collection; a family's CPU-only test file is not one), small by design: every family's, or those of
    ``families``. An item may also name one such test file (``tests/test_w4a16_ws.py``), to sanitize part of a
    large family. ValueError names an item that is neither a family nor one of a family's test files."""
    known = build.families()
    gpu_files = set(gpu_test_files())
    of_family = {fam: {f for f in gpu_files if re.fullmatch(rf"tests/test_{fam}\w*\.py", f)} for fam in known}
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


LEDGER_SCHEMA = 2
CONFTEST = "tests/conftest.py"   # runs before every test: part of every test file's closure


def gpu_test_files(collection: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The test files of the ``-m gpu`` collection (a file holding a gpu-marked test), from pytest's collection."""
    ids = _current_collection() if collection is None else collection
    return sorted({i.split("::", 1)[0] for i in ids})


def test_file_closure(path: str) -> dict[str, str]:
    """The closure of a GPU test file: the file, ``tests/conftest.py`` and what they import and bind."""
    c = provenance.closure(path)
    if (REPO / CONFTEST).is_file():
        c.update(provenance.closure(CONFTEST))
    return dict(sorted(c.items()))


def family_sources(family: str) -> dict[str, str]:
    """``{path: fingerprint}`` of a kernel family's sources (its .cu and the headers it includes)."""
    return {provenance.rel(p): provenance.fingerprint(p) for p in provenance.kernel_sources(family)}


def kat_closure() -> dict[str, str]:
    return provenance.closure(kat.__file__)


def _file_problems(rec: object, ids: list[str], closure: dict[str, str]) -> list[str]:
    """What keeps one file's record from verifying it today (empty: it does)."""
    if not isinstance(rec, dict):
        return ["no record"]
    problems = []
    recorded = rec.get("closure")
    if not isinstance(recorded, dict):
        problems.append("no closure")
    else:
        changed = sorted(p for p in set(recorded) | set(closure) if recorded.get(p) != closure.get(p))
        if changed:
            problems.append(f"changed since: {', '.join(changed)}")
    tests = rec.get("tests")
    if not isinstance(tests, dict) or not tests:
        return problems + ["no test outcomes"]
    bad = sorted(k for k, v in tests.items() if v in ("failed", "error"))
    if bad:
        problems.append(f"{len(bad)} failed or errored: {bad[:5]}")
    odd = sorted(k for k, v in tests.items() if v not in ("passed", "failed", "error", "skipped"))
    if odd:
        problems.append(f"unknown outcomes for {odd[:5]}")
    if not any(v == "passed" for v in tests.values()):
        problems.append("no test passed")
    if set(tests) != set(ids):
        new, old = sorted(set(ids) - set(tests)), sorted(set(tests) - set(ids))
        problems.append(f"tests differ from today's collection: {len(new)} not run {new[:3]}, "
                        f"{len(old)} no longer collected {old[:3]}")
    return problems


def _device_problems(entry: dict) -> list[str]:
    dev, cap = entry.get("device"), tuple(entry.get("capability") or ())
    if entry.get("schema") != LEDGER_SCHEMA:
        return [f"ledger schema {entry.get('schema')!r}, not {LEDGER_SCHEMA} (records per GPU test file)"]
    if dev not in ACCEPTED_DEVICES:
        return [f"device {dev!r} is not one check_ledger accepts ({sorted(ACCEPTED_DEVICES)})"]
    if cap != ACCEPTED_DEVICES[dev][0]:
        return [f"{dev} with capability {cap}, expected {ACCEPTED_DEVICES[dev][0]}"]
    if entry.get("nvcc_flags") != build.NVCC_FLAGS:
        return [f"built with nvcc flags {entry.get('nvcc_flags')}, not the current {build.NVCC_FLAGS}"]
    return []


def _kat_problems(k: object, closure: dict[str, str]) -> list[str]:
    if not isinstance(k, dict) or not isinstance(k.get("rows"), list) or not k["rows"]:
        return ["no known-answer (KAT) step recorded"]
    problems = []
    if k.get("closure") != closure:
        c = k.get("closure") if isinstance(k.get("closure"), dict) else {}
        problems.append("KAT closure changed since: " + ", ".join(
            sorted(p for p in set(c) | set(closure) if c.get(p) != closure.get(p))))
    rows = k["rows"]
    missing = sorted(set(kat.FAMILIES) - {r.get("family") for r in rows if isinstance(r, dict)})
    if missing or not all(isinstance(r, dict) and (r.get("vectors") or 0) > 0
                          and r.get("passed") == r.get("vectors") for r in rows):
        problems.append(f"KATs not all passed (missing families {missing})")
    return problems


def ledger_state(entries: list[tuple[str, dict]] | None = None) -> dict:
    """Today's verdict over every ledger entry: per GPU test file, the entries that verify it at its current
    closure (or why none does); per family, whether it built at its current sources; the KATs. ``ok`` when
    everything is verified somewhere."""
    if entries is None:
        entries = [(p.name, json.loads(p.read_text())) for p in sorted(ledger_dir().glob("*.json"))] \
            if ledger_dir().is_dir() else []
    usable = []
    rejected = {}
    for name, e in entries:
        bad = _device_problems(e) if isinstance(e, dict) else ["not a JSON object"]
        (rejected.__setitem__(name, bad) if bad else usable.append((name, e)))
    collection = list(_current_collection())
    by_file: dict[str, list[str]] = {}
    for i in collection:
        by_file.setdefault(i.split("::", 1)[0], []).append(i)
    files = {}
    for f, ids in sorted(by_file.items()):
        closure = test_file_closure(f)
        why = {name: _file_problems((e.get("files") or {}).get(f), ids, closure) for name, e in usable}
        good = sorted(name for name, p in why.items() if not p)
        files[f] = {"verified_by": good, "why_not": {} if good else why}
    families = {}
    for fam in build.families():
        src = family_sources(fam)
        built = sorted(name for name, e in usable
                       if ((e.get("builds") or {}).get(fam) or {}).get("ok")
                       and ((e.get("builds") or {}).get(fam) or {}).get("sources") == src)
        tested = sorted(f for f, v in files.items() if v["verified_by"] and re.match(rf"tests/test_{fam}", f))
        families[fam] = {"built": built, "tested_by": tested}
    kc = kat_closure()
    kats = {name: _kat_problems(e.get("kat"), kc) for name, e in usable}
    kat_ok = sorted(name for name, p in kats.items() if not p)
    stale = sorted(f for f, v in files.items() if not v["verified_by"])
    ok = bool(files) and not stale and all(v["built"] and v["tested_by"] for v in families.values()) and bool(kat_ok)
    return {"ok": ok, "files": files, "stale": stale, "families": families, "kat": kat_ok,
            "kat_why_not": {} if kat_ok else kats, "rejected": rejected}


def run(sanitize: bool = False, bench: bool = True, out: Path | None = None,
        sanitizer_timeout: int = 240, shards: int = 1, resume: bool = False,
        sanitize_families: list[str] | None = None, jobs: int = 1, stale_only: bool = False) -> dict:
    """Run the verification on the current GPU and write (or update) this device's ledger entry.

    ``stale_only``: run only the GPU test files that no entry verifies at their current closure (and the KATs only
    when theirs changed); the records of the other files in this device's entry are kept as they are.

    ``sanitize_families``: run the sanitizers over these families' tests only (the entry's ``sanitizer_targets``
    says which ran). ``jobs``: the GPU tests in this many pytest-xdist processes, whole test files each.
    ``resume``: keep this device's entry and re-run under the sanitizers only the (tool, file) pairs that did not
    finish clean."""
    xdist = _xdist_args(jobs)   # a bad jobs fails here, before any build
    if not torch.cuda.is_available():
        raise RuntimeError("t4lib verify needs a CUDA GPU; CI relies on the committed ledger instead")
    info = hw.device_info()
    out = out or ledger_dir() / f"{info['slug']}.json"
    old = json.loads(out.read_text()) if out.is_file() else {}
    if old.get("schema") != LEDGER_SCHEMA or old.get("device") != info["name"]:
        old = {}
    if resume:
        if not old:
            raise RuntimeError(f"--resume: no ledger entry of schema {LEDGER_SCHEMA} for {info['name']} at {out}")
        return _resume_sanitizers(old, out, sanitizer_timeout, shards, sanitize_families)
    commit, dirty = git_commit()
    entry: dict = {"schema": LEDGER_SCHEMA, "when": results.now(), "device": info["name"],
                   "capability": list(info["capability"]), "driver": info["driver"], "torch": info["torch"],
                   "cuda_runtime": info["cuda_runtime"], "nvcc_flags": build.NVCC_FLAGS, "commit": commit,
                   "dirty": dirty, "files": dict(old.get("files") or {}) if stale_only else {}}

    # 1. every family builds for sm_75 (spills and shared memory are checked by the CPU test suite)
    entry["builds"] = {fam: ({"ok": False, "error": str(b)[-2000:]} if isinstance(b, build.BuildError)
                             else {"ok": True, "library": b.name}) | {"sources": family_sources(fam)}
                       for fam, b in build.build_many().items()}

    # 2. the GPU test files: all of them, or those no entry verifies at today's closure
    _current_collection.cache_clear()   # collected once, now: ledger_state reads the same collection
    collected = list(_current_collection())
    state = ledger_state() if stale_only else None
    todo = state["stale"] if stale_only else gpu_test_files(collected)
    entry["ran"] = todo
    if todo:
        closures = {f: test_file_closure(f) for f in todo}
        with tempfile.TemporaryDirectory() as tmp:
            r = _pytest(["-m", GPU_MARKER, *xdist, *todo], Path(tmp) / "gpu.xml")
        for f in todo:
            ids = [i for i in collected if i.split("::", 1)[0] == f]
            entry["files"][f] = {"closure": closures[f], "tests": {i: r["tests"].get(i, "not run") for i in ids},
                                 "when": entry["when"], "commit": commit, "dirty": dirty,
                                 "returncode": r["returncode"], "seconds": r["seconds"]}
        entry["last_run"] = {k: r[k] for k in ("cmd", "returncode", "seconds", "tail")} | {"jobs": jobs}

    # 3. known-answer suites on the CUDA backend (again only when their closure changed, with stale_only)
    kc = kat_closure()
    if stale_only and old.get("kat") and not _kat_problems(old["kat"], kc):
        entry["kat"] = old["kat"]
    else:
        entry["kat"] = {"closure": kc, "rows": kat.run_all("cuda"), "when": entry["when"], "commit": commit}

    # 4. sanitizers over the families' own GPU tests
    if sanitize:
        targets = _sanitizer_targets(sanitize_families)
        entry["sanitizer_targets"] = targets
        entry["sanitizers"] = _summarize(_sanitize(targets, sanitizer_timeout, shards=shards))
        entry["sanitizers_clean"] = all(r["clean"] for r in entry["sanitizers"].values())
    elif old.get("sanitizers"):
        entry.update({k: old[k] for k in ("sanitizer_targets", "sanitizers", "sanitizers_clean") if k in old})
    # 5. a short benchmark pass, into the ledger only (never replaces results/<slug>/int4_dequant.json)
    if bench:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                figs = int4_bench.run(Path(tmp), quick=True)
            entry["bench"] = {f["name"]: f["value"] for f in figs}
        except Exception as e:  # a benchmark failure is recorded, not hidden
            entry["bench"] = f"{type(e).__name__}: {e}"
    results.write_json(out, entry)
    return entry


def _resume_sanitizers(entry: dict, out: Path, timeout: int, shards: int,
                       families: list[str] | None = None) -> dict:
    asked = _sanitizer_targets(families) if families else None
    targets = entry.get("sanitizer_targets") or ([] if asked else _sanitizer_targets())
    targets = sorted(set(targets) | set(asked or ()))
    files = {tool: dict(v.get("files", {})) for tool, v in (entry.get("sanitizers") or {}).items()}
    todo = {(tool, t) for tool in SANITIZER_TOOLS for t in (asked or targets)
            if not files.get(tool, {}).get(t, {}).get("clean")}

    def keep(tool, t, r):  # written as each pair finishes: a run cut short keeps what is done
        files.setdefault(tool, {})[t] = {**r, "when": results.now(), "closure": test_file_closure(t)}
        entry["sanitizer_targets"] = targets
        entry["sanitizers"] = _summarize(files)
        entry["sanitizers_clean"] = all(v["clean"] for v in entry["sanitizers"].values()) and all(
            f in files.get(tool_, {}) for tool_ in SANITIZER_TOOLS for f in targets)
        results.write_json(out, entry)

    _sanitize(targets, timeout, shards=shards, only=todo, on_pair=keep)
    return entry


def verdict(entry: dict) -> str:
    """One line saying what the entry holds and on what, the JIT caveat included."""
    dev = entry.get("device")
    ran = ACCEPTED_DEVICES.get(dev, ((), f"an unlisted device {dev!r}"))[1]
    outcomes = [v for f in (entry.get("files") or {}).values() for v in (f.get("tests") or {}).values()]
    counts = {k: outcomes.count(k) for k in ("passed", "failed", "error", "skipped")}
    return (f"{len(entry.get('files') or {})} GPU test files: passed={counts['passed']} failed={counts['failed']} "
            f"error={counts['error']} skipped={counts['skipped']}, KATs of "
            f"{len((entry.get('kat') or {}).get('rows') or [])} families; ran {ran}. A record of GPU runs: CI "
            "checks it against today's sources and cannot re-run it")


def check_ledger() -> tuple[bool, str]:
    """(ok, why): is every GPU test file, every kernel family and the KAT suite verified at today's sources by
    some entry (:func:`ledger_state`)? tests/test_verify.py plants entries that claim a pass without the evidence,
    or for closures they do not match, and requires them rejected."""
    st = ledger_state()
    if st["ok"]:
        devices = sorted({n for v in st["files"].values() for n in v["verified_by"]})
        ran = "; ".join(sorted({ACCEPTED_DEVICES[json.loads((ledger_dir() / n).read_text())["device"]][1]
                                for n in devices}))
        return True, (f"{len(st['files'])} GPU test files verified at their current closures by {devices}; every "
                      f"family built and tested; KATs by {st['kat']}; ran {ran}. A record of GPU runs, checked for "
                      "consistency with today's sources (CI has no GPU and cannot re-run it)")
    parts = []
    if st["stale"]:
        parts.append(f"{len(st['stale'])} GPU test files not verified at their current closure: " + "; ".join(
            f"{f} ({' | '.join(f'{n}: {chr(44).join(p)}' for n, p in st['files'][f]['why_not'].items()) or 'no entry'})"
            for f in st["stale"]))
    fam_bad = {f: v for f, v in st["families"].items() if not (v["built"] and v["tested_by"])}
    if fam_bad:
        parts.append(f"families not built at current sources or without a verified test file: {sorted(fam_bad)}")
    if not st["kat"]:
        parts.append(f"KATs not verified at their current closure: {st['kat_why_not'] or 'no entry'}")
    if st["rejected"]:
        parts.append(f"entries rejected whole: {st['rejected']}")
    return False, ("the GPU verification ledger does not cover today's sources. Re-run what is stale on a GPU with "
                   "'python -m t4lib verify --stale' and commit results/verification/. " + " ".join(parts))
