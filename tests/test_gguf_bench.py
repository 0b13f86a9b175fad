"""The GGUF GEMV benchmark labels each format by the layout gguf_gemv takes at its shapes. Kept apart from the
GPU tests of the GGUF kernels, so that a change to the benchmark does not reach the GPU ledger."""
import pytest

pytest.importorskip("gguf", reason="the gguf package (t4lib[gguf]) is not installed")

from t4lib.ops.gguf import FORMATS, packing, type_id  # noqa: E402

NAMES = [v[0] for v in FORMATS.values()]


def test_bench_reports_every_format_under_the_layout_it_runs():
    """The GEMV bench labels a format 'gemv' exactly when gguf_gemv takes the GEMV layout at its shapes."""
    from t4lib.benchmarks.gguf import FFN, GEMV_FORMATS, HIDDEN, RAW_GEMV_FORMATS

    assert sorted(GEMV_FORMATS + RAW_GEMV_FORMATS) == sorted(NAMES)
    for K in (HIDDEN, FFN):
        assert all(packing.supports(type_id(f), K) for f in GEMV_FORMATS)
        assert not any(packing.supports(type_id(f), K) for f in RAW_GEMV_FORMATS)
