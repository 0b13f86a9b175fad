"""The GPU verification ledger, per GPU test file: what each file's closure holds, and what check_ledger demands
of an entry."""
import json
from functools import lru_cache

import pytest

from t4lib.core import build, provenance
from t4lib.evidence import kat, verify


def _family_file(fam):
    """A GPU test file of the family (tests/test_<family>*.py), the first by name."""
    return sorted(str(p.relative_to(verify.REPO)) for p in (verify.REPO / "tests").glob(f"test_{fam}*.py"))[0]


FILES = sorted({_family_file(fam) for fam in build.families()})
# A planted -m gpu collection: one test per family's file, two in the first (so one can go missing).
FAMILY_IDS = sorted([f"{f}::test_runs" for f in FILES] + [f"{FILES[0]}::test_more"])


def _entry(**over):
    """A complete schema-2 entry for today's sources over the planted collection (FAMILY_IDS)."""
    files = {f: {"closure": verify.test_file_closure(f),
                 "tests": {i: "passed" for i in FAMILY_IDS if i.split("::", 1)[0] == f}} for f in FILES}
    e = {"schema": verify.LEDGER_SCHEMA, "device": "NVIDIA H200", "capability": [9, 0],
         "nvcc_flags": list(build.NVCC_FLAGS), "files": files,
         "builds": {fam: {"ok": True, "sources": verify.family_sources(fam)} for fam in build.families()},
         "kat": {"closure": verify.kat_closure(),
                 "rows": [{"family": f, "vectors": 8, "passed": 8, "max_abs_diff": 0.0} for f in kat.FAMILIES]}}
    e.update(over)
    return e


def _collection(ids):
    """A stand-in for verify._current_collection (cached, as verify.run clears it)."""
    return lru_cache(maxsize=1)(lambda: tuple(ids))


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "ledger_dir", lambda: tmp_path)
    monkeypatch.setattr(verify, "_current_collection", _collection(FAMILY_IDS))

    def plant(entry):
        (tmp_path / "dev.json").write_text(json.dumps(entry))
        return verify.check_ledger()
    return plant


def test_fake_minimal_entry_is_rejected(ledger):
    """An entry that claims a pass on an accepted device without the evidence: each missing piece is named."""
    ok, why = ledger({"schema": verify.LEDGER_SCHEMA, "device": "NVIDIA H200", "capability": [9, 0],
                      "nvcc_flags": list(build.NVCC_FLAGS), "passed": True})
    assert not ok
    for missing in ("GPU test files not verified at their current closure", "no record",
                    "no known-answer (KAT) step", "families not built at current sources"):
        assert missing in why, missing
    ok, why = ledger({"passed": True})
    assert not ok and "ledger schema None, not 2" in why


def test_complete_entry_is_accepted_and_its_verdict_names_the_jit(ledger):
    e = _entry()
    ok, why = ledger(e)
    assert ok, why
    assert f"{len(FILES)} GPU test files verified at their current closures by ['dev.json']" in why
    assert "cannot re-run" in why
    v = verify.verdict(e)
    assert "compute_75 PTX JIT-compiled" in v and "sm_75 machine code itself has not run" in v
    assert "cannot re-run" in v
    st = verify.ledger_state()
    assert st["ok"] and st["stale"] == [] and all(x["verified_by"] == ["dev.json"] for x in st["files"].values())


def _failed(e):
    e["files"][FILES[0]]["tests"][f"{FILES[0]}::test_runs"] = "failed"


def _errored(e):
    e["files"][FILES[1]]["tests"][f"{FILES[1]}::test_runs"] = "error"


def _one_not_run(e):
    del e["files"][FILES[0]]["tests"][f"{FILES[0]}::test_more"]


def _only_skipped(e):
    e["files"][FILES[2]]["tests"][f"{FILES[2]}::test_runs"] = "skipped"


def _odd_outcome(e):
    e["files"][FILES[2]]["tests"][f"{FILES[2]}::test_runs"] = "xpassed-ish"


def _file_missing(e):
    del e["files"][FILES[-1]]


def _no_closure(e):
    del e["files"][FILES[0]]["closure"]


def _forged_fingerprint(e):
    """The entry claims the file ran at a fingerprint of common.cuh that today's tree does not have."""
    c = e["files"][FILES[0]]["closure"]
    assert "kernels/common.cuh" in c
    c["kernels/common.cuh"] = "0" * 16


def _closure_lacks_a_file(e):
    c = e["files"][FILES[0]]["closure"]
    del c[sorted(k for k in c if k.startswith("t4lib/"))[0]]


def _closure_of_another_file(e):
    e["files"][FILES[0]]["closure"] = e["files"][FILES[1]]["closure"]


def _build_at_other_sources(e):
    fam = build.families()[0]
    src = e["builds"][fam]["sources"]
    e["builds"][fam]["sources"] = {k: "0" * 16 for k in src}


def _build_failed(e):
    e["builds"][build.families()[0]]["ok"] = False


def _kat_failed(e):
    e["kat"]["rows"][0]["passed"] = 7


def _kat_family_missing(e):
    e["kat"]["rows"].pop()


def _kat_closure_changed(e):
    e["kat"]["closure"] = dict(e["kat"]["closure"], **{"t4lib/evidence/kat.py": "0" * 16})


def _kat_as_a_list(e):
    e["kat"] = e["kat"]["rows"]


def _other_device(e):
    e["device"] = "NVIDIA A100-SXM4-80GB"


def _wrong_capability(e):
    e["capability"] = [8, 0]


def _other_flags(e):
    e["nvcc_flags"] = e["nvcc_flags"][:-2] + ["-gencode", "arch=compute_90,code=sm_90"]


def _schema_1(e):
    e["schema"] = 1


# each break and what the rejection names
BREAKS = {_failed: "1 failed or errored", _errored: "1 failed or errored",
          _one_not_run: f"1 not run ['{FILES[0]}::test_more']", _only_skipped: "no test passed",
          _odd_outcome: "unknown outcomes", _file_missing: "no record", _no_closure: "no closure",
          _forged_fingerprint: "changed since: kernels/common.cuh", _closure_lacks_a_file: "changed since: t4lib/",
          _closure_of_another_file: "changed since:", _build_at_other_sources: "families not built at current sources",
          _build_failed: "families not built at current sources", _kat_failed: "KATs not all passed",
          _kat_family_missing: "KATs not all passed", _kat_closure_changed: "KAT closure changed since: t4lib/evidence/kat.py",
          _kat_as_a_list: "no known-answer (KAT) step", _other_device: "is not one check_ledger accepts",
          _wrong_capability: "NVIDIA H200 with capability (8, 0)", _other_flags: "built with nvcc flags",
          _schema_1: "ledger schema 1, not 2"}


@pytest.mark.parametrize("breaks", list(BREAKS), ids=[b.__name__.strip("_") for b in BREAKS])
def test_each_missing_piece_of_evidence_rejects(ledger, breaks):
    e = _entry()
    breaks(e)
    ok, why = ledger(e)
    assert not ok, why
    assert BREAKS[breaks] in why, why


def test_a_stale_file_is_verified_by_another_entry_that_matches(ledger, tmp_path):
    """Verification is per file: a file whose record in one entry is forged is verified by another entry whose
    record matches today's closure; the check names which entry verifies which file."""
    bad = _entry()
    _forged_fingerprint(bad)
    (tmp_path / "other.json").write_text(json.dumps(_entry(device="NVIDIA H100 80GB HBM3")))
    ok, why = ledger(bad)
    assert ok, why
    st = verify.ledger_state()
    assert st["files"][FILES[0]]["verified_by"] == ["other.json"]
    assert st["files"][FILES[1]]["verified_by"] == ["dev.json", "other.json"]
    (tmp_path / "other.json").unlink()
    st = verify.ledger_state()
    assert st["stale"] == [FILES[0]] and not st["ok"]
    assert "changed since: kernels/common.cuh" in st["files"][FILES[0]]["why_not"]["dev.json"][0]


@pytest.mark.parametrize("device", sorted(verify.ACCEPTED_DEVICES))
def test_each_accepted_device_is_accepted_at_its_capability_only(ledger, device):
    """An H100 runs the same compute_75 JIT path as the H200; each listed device passes with its own
    capability and is rejected with another."""
    cap = list(verify.ACCEPTED_DEVICES[device][0])
    e = _entry(device=device, capability=cap)
    ok, why = ledger(e)
    assert ok, why
    assert verify.ACCEPTED_DEVICES[device][1] in verify.verdict(e)
    ok, why = ledger(_entry(device=device, capability=[8, 6]))
    assert not ok and f"{device} with capability (8, 6)" in why


def test_collection_changed_since_the_run_rejects(ledger, monkeypatch):
    monkeypatch.setattr(verify, "_current_collection", _collection([*FAMILY_IDS, f"{FILES[1]}::test_new"]))
    ok, why = ledger(_entry())
    assert not ok and f"1 not run ['{FILES[1]}::test_new']" in why


def test_gpu_test_file_closures_cover_what_decides_kernels_and_gpu_tests():
    """Each GPU test file's closure holds the file, tests/conftest.py, its helpers, what it imports at any depth
    (the engines and trainers the tests drive) and the kernels it binds; the KATs' closure their families'."""
    union = set()
    for f in verify.gpu_test_files():
        c = verify.test_file_closure(f)
        assert f in c and verify.CONFTEST in c, f
        assert not set(c) & set(provenance.INFRASTRUCTURE), f
        union |= set(c)
    for must in ("kernels/common.cuh", "kernels/int4.cu", "t4lib/core/build.py",
                 "t4lib/ops/int4/binding.py", "t4lib/ops/int4/__init__.py", "t4lib/ops/int4/reference.py",
                 "t4lib/ops/_dispatch.py", "t4lib/ops/int8_activations.py", "t4lib/ops/gguf/packing.py",
                 "t4lib/quant/w4a16.py", "tests/conftest.py", "tests/kernel_checks.py", "tests/test_w4a16.py",
                 # reached only through what the GPU tests import: the engines and trainers they drive
                 "t4lib/serving/engine.py", "t4lib/speculative/engine.py", "t4lib/quant/linear.py",
                 "t4lib/train/grpo.py", "t4lib/models/tiny.py", "t4lib/core/timing.py"):
        assert must in union, must
    w = verify.test_file_closure("tests/test_w4a16.py")
    assert {"kernels/w4a16.cu", "kernels/gemv.cuh", "kernels/common.cuh", "t4lib/ops/w4a16/binding.py"} <= set(w)
    assert not any(k.startswith("kernels/deltanet") for k in w), "a family the file does not bind"
    k = verify.kat_closure()
    assert "t4lib/evidence/kat.py" in k and all(
        f"kernels/{fam}.cu" in k for fam in ("int4", "int3", "fp8", "swizzle"))


def test_closures_follow_imports_transitively_and_bind_families(tmp_path):
    """A module a unit reaches only through another module (a function-level import included) is in its closure,
    with the kernel sources of a family it binds and the headers they include; what it never reaches is not."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "kernels").mkdir()
    pkg = tmp_path / "t4lib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from t4lib.sub.c import g\n")
    (pkg / "sub" / "c.py").write_text('FAMILY = "x"\ng = 1\n')
    (pkg / "sub" / "unreached.py").write_text('FAMILY = "y"\n')
    (tmp_path / "kernels" / "x.cu").write_text('#include "k.cuh"\n__global__ void x() {}\n')
    (tmp_path / "kernels" / "k.cuh").write_text("#pragma once\n")
    (tmp_path / "kernels" / "other.cuh").write_text("#pragma once\n")
    (tmp_path / "kernels" / "y.cu").write_text("__global__ void y() {}\n")
    (tmp_path / "tests" / "helper.py").write_text("from t4lib.sub import a\n")
    (tmp_path / "tests" / "test_x.py").write_text("import pytest\nimport helper\npytestmark = pytest.mark.gpu\n")
    (tmp_path / "tests" / "test_cpu.py").write_text("from t4lib.sub import unreached\n")
    names = set(provenance.closure("tests/test_x.py", repo=tmp_path))
    assert names == {"tests/test_x.py", "tests/helper.py", "t4lib/__init__.py", "t4lib/sub/__init__.py",
                     "t4lib/sub/a.py", "t4lib/sub/b.py", "t4lib/sub/c.py", "kernels/x.cu", "kernels/k.cuh"}, names
    assert set(provenance.closure("tests/test_cpu.py", repo=tmp_path)) == {
        "tests/test_cpu.py", "t4lib/__init__.py", "t4lib/sub/__init__.py", "t4lib/sub/unreached.py", "kernels/y.cu"}


def test_gpu_test_files_are_those_of_the_gpu_collection():
    """GPU test files come from pytest's -m gpu collection, not from a substring: this file names the marker and
    holds no GPU test."""
    collected_files = {i.split("::")[0] for i in verify._current_collection()}
    assert verify.gpu_test_files() == sorted(collected_files)
    assert "tests/test_w4a16.py" in collected_files
    assert "gpu" in (verify.REPO / "tests/test_verify.py").read_text()
    assert "tests/test_verify.py" not in collected_files
    assert verify.gpu_test_files(["tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_b.py::C::t"]) == [
        "tests/test_a.py", "tests/test_b.py"]


def test_junit_names_map_to_collection_node_ids():
    assert verify._node_id("tests.test_w4a16", "test_x[7-33]") == "tests/test_w4a16.py::test_x[7-33]"
    assert verify._node_id("tests.test_pacing.TestA", "test_y") == "tests/test_pacing.py::TestA::test_y"


def test_a_verify_run_writes_an_entry_check_ledger_accepts(ledger, monkeypatch, tmp_path):
    """verify.run (its GPU steps stubbed: this machine has no GPU) records per GPU test file what check_ledger
    asks for; the same run with one failed test writes an entry that is rejected. With stale_only it runs only
    the files no entry verifies at today's closure, and keeps the records of the others."""
    import torch

    from t4lib.core import hw

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hw, "device_info", lambda index=0: {
        "name": "NVIDIA H200", "slug": "nvidia-h200", "capability": (9, 0), "driver": "580", "torch": "2",
        "cuda_runtime": "13"})
    monkeypatch.setattr(build, "build_many", lambda *a, **k: {f: tmp_path / f"{f}.so" for f in build.families()})
    monkeypatch.setattr(verify, "collect_gpu_tests", lambda: list(FAMILY_IDS))
    kat_runs = []
    monkeypatch.setattr(kat, "run_all", lambda backend: kat_runs.append(backend) or [
        {"family": f, "vectors": 4, "passed": 4, "max_abs_diff": 0.0} for f in kat.FAMILIES])
    outcome = {"value": "passed"}
    ran = []

    def fake_pytest(args, junit, prefix=None, timeout=0):
        files = [a for a in args if a.startswith("tests/")]
        ran.append(files)
        return {"cmd": "pytest", "returncode": 0, "seconds": 1, "tail": "",
                "tests": {t: outcome["value"] if t == FAMILY_IDS[0] else "passed" for t in FAMILY_IDS
                          if t.split("::", 1)[0] in files}}
    monkeypatch.setattr(verify, "_pytest", fake_pytest)

    out = tmp_path / "dev.json"
    entry = verify.run(bench=False, out=out)
    assert entry["schema"] == verify.LEDGER_SCHEMA and sorted(entry["files"]) == FILES == entry["ran"]
    assert isinstance(entry["dirty"], bool)
    for f in FILES:
        assert entry["files"][f]["closure"] == verify.test_file_closure(f)
    for fam in build.families():
        assert entry["builds"][fam]["sources"] == verify.family_sources(fam)
    assert entry["kat"]["closure"] == verify.kat_closure()
    ok, why = verify.check_ledger()
    assert ok, why

    # nothing stale: nothing runs, the KATs are kept
    ran.clear(), kat_runs.clear()
    entry = verify.run(bench=False, out=out, stale_only=True)
    assert entry["ran"] == [] and ran == [] and kat_runs == []
    assert verify.check_ledger()[0]

    # one file's closure changed since: only that file runs again
    real = verify.test_file_closure
    recorded = json.loads(out.read_text())
    recorded["files"][FILES[3]]["closure"]["kernels/common.cuh"] = "0" * 16
    out.write_text(json.dumps(recorded))
    assert verify.ledger_state()["stale"] == [FILES[3]]
    entry = verify.run(bench=False, out=out, stale_only=True)
    assert entry["ran"] == [FILES[3]] and ran == [[FILES[3]]] and kat_runs == []
    assert entry["files"][FILES[3]]["closure"] == real(FILES[3])
    assert verify.check_ledger()[0]

    outcome["value"] = "failed"
    entry = verify.run(bench=False, out=out)
    ok, why = verify.check_ledger()
    assert not ok and "1 failed or errored" in why and FILES[0] in verify.ledger_state()["stale"]


@pytest.mark.parametrize("jobs", [0, -2, 1.5, "4", True])
def test_bad_jobs_is_an_error_naming_it_before_any_build(jobs, monkeypatch):
    monkeypatch.setattr(build, "build_many", lambda *a, **k: pytest.fail("built before checking jobs"))
    with pytest.raises(ValueError, match="jobs"):
        verify.run(bench=False, jobs=jobs)


def test_jobs_runs_whole_test_files_per_process_and_names_a_missing_xdist(monkeypatch):
    import importlib.util

    assert verify._xdist_args(1) == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "xdist" else None)
    assert verify._xdist_args(6) == ["-n", "6", "--dist", "loadfile"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pytest-xdist"):
        verify._xdist_args(6)


def test_sanitizer_targets_for_chosen_families():
    every = verify._sanitizer_targets()
    assert every and all(t.startswith("tests/test_") for t in every)
    assert verify._sanitizer_targets(["int3"]) == ["tests/test_int3.py"]
    with pytest.raises(ValueError, match=r"\['nope'\] are neither kernel families"):
        verify._sanitizer_targets(["int3", "nope"])
    # one test file of a family, alone or beside a family
    assert verify._sanitizer_targets(["tests/test_w4a16_ws.py", "int3"]) == ["tests/test_int3.py",
                                                                            "tests/test_w4a16_ws.py"]
    with pytest.raises(ValueError, match="test_cli.py"):
        verify._sanitizer_targets(["tests/test_cli.py"])
