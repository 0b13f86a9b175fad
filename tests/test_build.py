"""Every kernel family builds for sm_75 with plain nvcc (no GPU needed), with no
spills in hot kernels and at most 64 KB of shared memory per kernel.

The ``-Xptxas -v`` report is kept in ``resource_report.json`` beside this file, keyed by each family's
source hash (sources and flags) and the nvcc release: a family whose key matches is read from it, any
other is compiled again. ``T4LIB_WRITE_RESOURCE_REPORT=1`` rewrites the file from fresh compiles."""
import json
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from t4lib.core import build

FAMILIES = build.families()
REPORT = Path(__file__).with_name("resource_report.json")
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not build.os.environ.get("NVCC"),
                                reason="nvcc not installed")


@lru_cache(maxsize=None)
def _nvcc_release() -> str:
    out = subprocess.run([build.find_nvcc(), "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def _key(family: str) -> str:
    return f"{build.source_hash(family)} {_nvcc_release()}"


def resource_rows(family: str) -> list[dict]:
    """The family's resource report: from resource_report.json when its key matches, else compiled."""
    cached = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    entry = cached.get(family)
    if entry and entry["key"] == _key(family) and not os.environ.get("T4LIB_WRITE_RESOURCE_REPORT"):
        return entry["rows"]
    rows = build.resource_report(family)
    if os.environ.get("T4LIB_WRITE_RESOURCE_REPORT"):
        cached = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
        cached[family] = {"key": _key(family), "rows": rows}
        REPORT.write_text(json.dumps(dict(sorted(cached.items())), indent=1) + "\n")
    return rows


def test_cached_report_is_read_only_for_its_own_sources(monkeypatch, tmp_path):
    """A stale key (the sources, flags or nvcc changed) means a fresh compile, never the stored rows."""
    fam = FAMILIES[0]
    fake = tmp_path / "resource_report.json"
    fake.write_text(json.dumps({fam: {"key": "stale", "rows": [{"kernel": "stored"}]}}))
    monkeypatch.setattr(f"{__name__}.REPORT", fake)
    monkeypatch.delenv("T4LIB_WRITE_RESOURCE_REPORT", raising=False)
    monkeypatch.setattr(build, "resource_report", lambda family: [{"kernel": "compiled"}])
    assert resource_rows(fam) == [{"kernel": "compiled"}]
    fake.write_text(json.dumps({fam: {"key": _key(fam), "rows": [{"kernel": "stored"}]}}))
    assert resource_rows(fam) == [{"kernel": "stored"}]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_builds_without_spills(family):
    rows = resource_rows(family)
    print("\n" + build.format_report(rows))
    assert rows, f"{family}: no kernels compiled"
    hot = [r for r in rows if r["hot"]]
    assert hot, f"{family}: mark its hot kernels with '// t4lib:hot name'"
    spills = [r["kernel"] for r in hot if r["spill_stores"] or r["spill_loads"]]
    assert not spills, f"{family}: hot kernels spill: {spills}"
    big = [(r["kernel"], r["smem"]) for r in rows if r["smem"] > build.SMEM_LIMIT]
    assert not big, f"{family}: more than 64 KB shared memory: {big}"


@pytest.mark.parametrize("family", FAMILIES)
def test_library_builds_and_exports_error_string(family):
    import ctypes

    lib = ctypes.CDLL(str(build.build(family)))
    lib.t4lib_error_string.restype = ctypes.c_char_p
    assert lib.t4lib_error_string(ctypes.c_int(0)) == b"no error"


def test_sm75_only_in_flags():
    assert "arch=compute_75,code=[sm_75,compute_75]" in build.NVCC_FLAGS
    assert "static" in build.NVCC_FLAGS


def test_build_error_carries_nvcc_log(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text("this is not C++\n")
    monkeypatch.setenv("T4LIB_KERNELS", str(tmp_path))
    monkeypatch.setenv("T4LIB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(build.BuildError) as e:
        build.build("broken")
    assert "nvcc log" in str(e.value) and "broken.cu" in e.value.log


def test_missing_nvcc_is_named(monkeypatch):
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    with pytest.raises(build.BuildError, match="nvcc not found"):
        build.find_nvcc()


def test_unknown_family():
    with pytest.raises(build.BuildError, match="unknown kernel family"):
        build.sources("no_such_family")


def test_cache_key_changes_with_source(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_KERNELS", str(tmp_path))
    (tmp_path / "k.cu").write_text("// a\n")
    h1 = build.source_hash("k")
    (tmp_path / "k.cu").write_text("// b\n")
    assert build.source_hash("k") != h1


def test_sources_are_the_headers_a_family_includes():
    """A header change rebuilds exactly the families that include it, directly or through another header."""
    gguf = [p.name for p in build.sources("gguf")]
    assert gguf[0] == "gguf.cu" and {"common.cuh", "gemv.cuh", "gguf_blocks.cuh", "gguf_gemv_fp16.cuh",
                                     "gguf_gemv_int8.cuh"} <= set(gguf)
    assert "gguf_blocks.cuh" not in [p.name for p in build.sources("int4")]
    every_header = {p.name for p in build.kernels_dir().glob("*.cuh")}
    included = {p.name for fam in build.families() for p in build.sources(fam)[1:]}
    assert included == every_header, f"headers no family includes: {sorted(every_header - included)}"
