"""Every kernel family builds for sm_75 with plain nvcc (no GPU needed), with no
spills in hot kernels and at most 64 KB of shared memory per kernel."""
import shutil

import pytest

from t4lib import _build

FAMILIES = _build.families()
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not _build.os.environ.get("NVCC"),
                                reason="nvcc not installed")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_builds_without_spills(family):
    rows = _build.resource_report(family)
    print("\n" + _build.format_report(rows))
    assert rows, f"{family}: no kernels compiled"
    hot = [r for r in rows if r["hot"]]
    assert hot, f"{family}: mark its hot kernels with '// t4lib:hot name'"
    spills = [r["kernel"] for r in hot if r["spill_stores"] or r["spill_loads"]]
    assert not spills, f"{family}: hot kernels spill: {spills}"
    big = [(r["kernel"], r["smem"]) for r in rows if r["smem"] > _build.SMEM_LIMIT]
    assert not big, f"{family}: more than 64 KB shared memory: {big}"


@pytest.mark.parametrize("family", FAMILIES)
def test_library_builds_and_exports_error_string(family):
    import ctypes

    lib = ctypes.CDLL(str(_build.build(family)))
    lib.t4lib_error_string.restype = ctypes.c_char_p
    assert lib.t4lib_error_string(ctypes.c_int(0)) == b"no error"


def test_sm75_only_in_flags():
    assert "arch=compute_75,code=[sm_75,compute_75]" in _build.NVCC_FLAGS
    assert "static" in _build.NVCC_FLAGS


def test_build_error_carries_nvcc_log(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text("this is not C++\n")
    monkeypatch.setenv("T4LIB_KERNELS", str(tmp_path))
    monkeypatch.setenv("T4LIB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(_build.BuildError) as e:
        _build.build("broken")
    assert "nvcc log" in str(e.value) and "broken.cu" in e.value.log


def test_missing_nvcc_is_named(monkeypatch):
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    with pytest.raises(_build.BuildError, match="nvcc not found"):
        _build.find_nvcc()


def test_unknown_family():
    with pytest.raises(_build.BuildError, match="unknown kernel family"):
        _build.sources("no_such_family")


def test_cache_key_changes_with_source(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_KERNELS", str(tmp_path))
    (tmp_path / "k.cu").write_text("// a\n")
    h1 = _build.source_hash("k")
    (tmp_path / "k.cu").write_text("// b\n")
    assert _build.source_hash("k") != h1


def test_sources_are_the_headers_a_family_includes():
    """A header change rebuilds exactly the families that include it, directly or through another header."""
    gguf = [p.name for p in _build.sources("gguf")]
    assert gguf[0] == "gguf.cu" and {"common.cuh", "gemv.cuh", "gguf_blocks.cuh", "gguf_gemv_fp16.cuh",
                                     "gguf_gemv_int8.cuh"} <= set(gguf)
    assert "gguf_blocks.cuh" not in [p.name for p in _build.sources("int4")]
    every_header = {p.name for p in _build.kernels_dir().glob("*.cuh")}
    included = {p.name for fam in _build.families() for p in _build.sources(fam)[1:]}
    assert included == every_header, f"headers no family includes: {sorted(every_header - included)}"
