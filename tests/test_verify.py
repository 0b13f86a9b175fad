"""The GPU verification ledger: what it hashes, and what check_ledger demands of an entry."""
import json

import pytest

from t4lib.core import build
from t4lib.evidence import kat, verify

FAMILY_IDS = [f"tests/test_{fam}.py::test_runs" for fam in build.families()]


def _entry(**over):
    """A complete entry for the current sources over a planted collection (FAMILY_IDS)."""
    hashes = verify.source_hashes()
    e = {"device": "NVIDIA H200", "capability": [9, 0], "nvcc_flags": list(build.NVCC_FLAGS),
         "sources": hashes, "sources_sha256": verify.combined_hash(hashes), "passed": True,
         "builds": {fam: {"ok": True} for fam in build.families()},
         "gpu_tests": {"tests": {t: "passed" for t in FAMILY_IDS}, "collected": list(FAMILY_IDS),
                       "counts": {"passed": len(FAMILY_IDS), "failed": 0, "error": 0, "skipped": 0}},
         "kat": [{"family": f, "vectors": 8, "passed": 8, "max_abs_diff": 0.0} for f in kat.FAMILIES]}
    e.update(over)
    return e


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "ledger_dir", lambda: tmp_path)
    monkeypatch.setattr(verify, "_current_collection", lambda: tuple(FAMILY_IDS))

    def plant(entry):
        (tmp_path / "dev.json").write_text(json.dumps(entry))
        return verify.check_ledger()
    return plant


def test_fake_minimal_entry_is_rejected(ledger):
    """The check before issue 26 accepted exactly this entry (it compared sources_sha256 and
    passed, nothing else); now each missing piece of evidence is named."""
    current = verify.combined_hash(verify.source_hashes())
    ok, why = ledger({"sources_sha256": current, "passed": True})
    assert not ok
    for missing in ("no per-file source hashes", "no GPU test outcomes", "no known-answer (KAT) step",
                    "families with no passing GPU test", "is not one check_ledger accepts", "not every family built"):
        assert missing in why, missing


def test_complete_entry_is_accepted_and_names_the_jit(ledger):
    ok, why = ledger(_entry())
    assert ok, why
    assert "compute_75 PTX JIT-compiled" in why and "sm_75 machine code itself has not run" in why


def _failed(e):
    e["gpu_tests"]["tests"][FAMILY_IDS[0]] = "failed"


def _errored(e):
    e["gpu_tests"]["tests"][FAMILY_IDS[1]] = "error"


def _one_not_run(e):
    gone = FAMILY_IDS[-1]
    del e["gpu_tests"]["tests"][gone]
    e["gpu_tests"]["collected"].remove(gone)


def _family_only_skipped(e):
    e["gpu_tests"]["tests"][FAMILY_IDS[2]] = "skipped"


def _kat_failed(e):
    e["kat"][0]["passed"] = 7


def _kat_family_missing(e):
    e["kat"].pop()


def _source_changed(e):
    e["sources"] = dict(e["sources"], **{"kernels/common.cuh": "0" * 64})
    e["sources_sha256"] = verify.combined_hash(e["sources"])


def _summary_hash_forged(e):
    e["sources"] = dict(e["sources"], **{"kernels/common.cuh": "0" * 64})  # sha256 left as current


def _other_device(e):
    e["device"] = "NVIDIA A100-SXM4-80GB"


def _wrong_capability(e):
    e["capability"] = [8, 0]


def _other_flags(e):
    e["nvcc_flags"] = e["nvcc_flags"][:-2] + ["-gencode", "arch=compute_90,code=sm_90"]


def _not_passed(e):
    e["passed"] = False


BREAKS = [_failed, _errored, _one_not_run, _family_only_skipped, _kat_failed, _kat_family_missing,
          _source_changed, _summary_hash_forged, _other_device, _wrong_capability, _other_flags, _not_passed]


@pytest.mark.parametrize("breaks", BREAKS, ids=[b.__name__.strip("_") for b in BREAKS])
def test_each_missing_piece_of_evidence_rejects(ledger, breaks):
    e = _entry()
    breaks(e)
    ok, why = ledger(e)
    assert not ok, why


@pytest.mark.parametrize("device", sorted(verify.ACCEPTED_DEVICES))
def test_each_accepted_device_is_accepted_at_its_capability_only(ledger, device):
    """An H100 runs the same compute_75 JIT path as the H200; each listed device passes with its own
    capability and is rejected with another."""
    cap = list(verify.ACCEPTED_DEVICES[device][0])
    ok, why = ledger(_entry(device=device, capability=cap))
    assert ok, why
    assert verify.ACCEPTED_DEVICES[device][1] in why
    ok, why = ledger(_entry(device=device, capability=[8, 6]))
    assert not ok and f"{device} with capability (8, 6)" in why


def test_collection_changed_since_the_run_rejects(ledger, monkeypatch):
    monkeypatch.setattr(verify, "_current_collection", lambda: (*FAMILY_IDS, "tests/test_int4_kat.py::test_new"))
    ok, why = ledger(_entry())
    assert not ok and "1 not run ['tests/test_int4_kat.py::test_new']" in why


def test_ledger_hash_covers_what_decides_kernels_and_gpu_tests():
    names = set(verify.source_hashes())
    for must in ("kernels/common.cuh", "kernels/int4.cu", "t4lib/core/build.py", "t4lib/evidence/kat.py",
                 "t4lib/ops/int4/binding.py", "t4lib/ops/int4/__init__.py", "t4lib/ops/int4/reference.py",
                 "t4lib/ops/_dispatch.py", "t4lib/ops/int8_activations.py", "t4lib/ops/gguf/packing.py",
                 "t4lib/quant/w4a16.py", "tests/conftest.py", "tests/kernel_checks.py", "tests/test_w4a16.py",
                 # reached only through what the GPU tests import: the engines and trainers they drive
                 "t4lib/serving/engine.py", "t4lib/speculative/engine.py", "t4lib/quant/linear.py",
                 "t4lib/train/grpo.py", "t4lib/models/tiny.py", "t4lib/core/timing.py"):
        assert must in names, must


def test_ledger_sources_follow_imports_transitively(tmp_path):
    """A module a GPU test reaches only through another module is hashed; one it never reaches is not."""
    from t4lib.core import provenance

    (tmp_path / "tests").mkdir()
    (tmp_path / "kernels").mkdir()
    pkg = tmp_path / "t4lib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from t4lib.sub.c import g\n")
    (pkg / "sub" / "c.py").write_text("g = 1\n")
    (pkg / "sub" / "unreached.py").write_text("")
    (pkg / "sub" / "k.cuh").write_text("")
    (tmp_path / "kernels" / "x.cu").write_text("")
    (tmp_path / "tests" / "test_x.py").write_text("import pytest\nfrom t4lib.sub import a\npytestmark = pytest.mark.gpu\n")
    (tmp_path / "tests" / "test_cpu.py").write_text("from t4lib.sub import unreached\n")
    names = set(provenance.source_hashes(repo=tmp_path))
    assert names == {"tests/test_x.py", "t4lib/__init__.py", "t4lib/sub/__init__.py", "t4lib/sub/a.py",
                     "t4lib/sub/b.py", "t4lib/sub/c.py", "t4lib/sub/k.cuh", "kernels/x.cu"}, names


def test_hashed_test_files_are_those_of_the_gpu_collection():
    """The static rule (a file naming the gpu marker) hashes every file the -m gpu collection draws from."""
    collected_files = {i.split("::")[0] for i in verify._current_collection()}
    hashed = {str(p.relative_to(verify.REPO)) for p in verify.gpu_test_files()}
    assert collected_files and collected_files <= hashed, collected_files - hashed


def test_junit_names_map_to_collection_node_ids():
    assert verify._node_id("tests.test_w4a16", "test_x[7-33]") == "tests/test_w4a16.py::test_x[7-33]"
    assert verify._node_id("tests.test_pacing.TestA", "test_y") == "tests/test_pacing.py::TestA::test_y"


def test_a_verify_run_writes_an_entry_check_ledger_accepts(ledger, monkeypatch, tmp_path):
    """verify.run (its GPU steps stubbed: this machine has no GPU) records everything check_ledger asks
    for; the same run with one failed test writes an entry that is rejected."""
    import torch

    from t4lib.core import hw

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hw, "device_info", lambda index=0: {
        "name": "NVIDIA H200", "slug": "nvidia-h200", "capability": (9, 0), "driver": "580", "torch": "2",
        "cuda_runtime": "13"})
    monkeypatch.setattr(build, "build_many", lambda *a, **k: {f: tmp_path / f"{f}.so" for f in build.families()})
    monkeypatch.setattr(verify, "collect_gpu_tests", lambda: list(FAMILY_IDS))
    monkeypatch.setattr(kat, "run_all", lambda backend: [{"family": f, "vectors": 4, "passed": 4, "max_abs_diff": 0.0}
                                                         for f in kat.FAMILIES])
    outcome = {"value": "passed"}

    def fake_pytest(args, junit, prefix=None, timeout=0):
        return {"cmd": "pytest", "returncode": 0, "seconds": 1, "tail": "",
                "tests": {t: outcome["value"] if t == FAMILY_IDS[0] else "passed" for t in FAMILY_IDS}}
    monkeypatch.setattr(verify, "_pytest", fake_pytest)

    entry = verify.run(bench=False, out=tmp_path / "dev.json")
    assert entry["passed"] and entry["gpu_tests"]["collected"] == FAMILY_IDS
    ok, why = verify.check_ledger()
    assert ok, why
    outcome["value"] = "failed"
    entry = verify.run(bench=False, out=tmp_path / "dev.json")
    assert not entry["passed"]
    ok, why = verify.check_ledger()
    assert not ok and "1 GPU tests failed or errored" in why


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
