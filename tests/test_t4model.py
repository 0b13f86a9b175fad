"""The T4 model's arithmetic on fixed counters, its error on an incomplete counter set, the check table's shape
and the analytical counters (CPU only; nothing here asserts on a measured speed)."""
import dataclasses

import pytest

from t4lib.benchmarks import t4model as kc
from t4lib.evidence import t4model as m

ZERO = dict(dram_read_bytes=0, dram_write_bytes=0, l2_bytes=0, shared_wavefronts=0, instructions=0,
            tensor_flops=0, launches=0, graph_nodes=0)


def test_counter_fields_agree():
    assert tuple(f.name for f in dataclasses.fields(m.Counters)) == kc.FIELDS


def test_missing_field_is_named():
    c = dict(ZERO)
    del c["l2_bytes"], c["graph_nodes"]
    with pytest.raises(KeyError, match="'l2_bytes', 'graph_nodes'"):
        m.predict(c)


def test_bad_counter_value_is_named():
    with pytest.raises(ValueError, match="instructions"):
        m.Counters(**{**ZERO, "instructions": -1})


def test_dram_term_large_read():
    c = {**ZERO, "dram_read_bytes": 10 * m.S_FILL}
    p = m.predict(c)
    assert p.terms["dram"] == pytest.approx(10 * m.S_FILL / m.BW_READ + m.T_FILL)
    assert p.binds == "dram" and p.time == pytest.approx(p.terms["dram"])


def test_fill_shrinks_below_fit_size():
    assert m.fill(m.S_FILL / 2) == pytest.approx(m.T_FILL / 2)
    assert m.fill(0) == 0
    assert m.effective_bandwidth(1e12) == pytest.approx(m.BW_READ, rel=1e-3)
    assert m.effective_bandwidth(1e6) < 0.5 * m.BW_READ


def test_compute_terms_scale_with_clock_dram_does_not():
    c = {**ZERO, "instructions": 1e9, "dram_read_bytes": 1e6}
    a, b = m.predict(c, 1590), m.predict(c, 1200)
    assert a.terms["issue"] == pytest.approx(1e9 / (160 * 1.59e9))
    assert b.terms["issue"] / a.terms["issue"] == pytest.approx(1590 / 1200)
    assert a.terms["dram"] == b.terms["dram"]


def test_tensor_shared_l2_terms():
    p = m.predict({**ZERO, "tensor_flops": 1e12, "shared_wavefronts": 1e6, "l2_bytes": 1e6}, 1590)
    assert p.terms["tensor"] == pytest.approx(1e12 / (m.TENSOR_FLOPS_PER_CLK * 1.59e9 * m.TENSOR_EFF))
    assert p.terms["shared"] == pytest.approx(1e6 / (m.SMEM_WAVEFRONTS_PER_CLK_PER_SM * 40 * 1.59e9))
    assert p.terms["l2"] == pytest.approx(1e6 / (m.L2_BYTES_PER_CLK * 1.59e9))
    assert p.binds == "tensor"


def test_launch_binds_tiny_kernels_and_sequence_sums():
    k = {**ZERO, "l2_bytes": 1000, "graph_nodes": 1}
    p = m.predict(k)
    assert p.binds == "launch" and p.time == pytest.approx(m.T_NODE + p.terms["l2"])
    s = m.predict_sequence([k, {**ZERO, "dram_read_bytes": 1e9, "launches": 1}])
    assert s.time == pytest.approx(sum(x.time for x in s.kernels))
    assert s.binds == "dram" and "dram" in s.words()
    with pytest.raises(ValueError):
        m.predict_sequence([])


def test_check_table_structure():
    rows = m.check_table()
    names = {r["figure"] for r in rows}
    assert {"dram_copy_jia", "l2_load_jia", "shared_memory_jia", "cublas_fp16_gemm_jia", "cublas_gemv_896x896",
            "cublas_gemv_896x4864_seed", "cublas_gemv_896x4864_other", "cublas_gemv_4096x4096",
            "decode_7b_int4_trtllm"} <= names
    for r in rows:
        assert r["ratio"] == pytest.approx(r["predicted"] / r["public"])
        assert r["basis"] in ("fit", "held out") and r["source"]
        assert r["within_25pct"] == (abs(r["ratio"] - 1) <= 0.25)
        if not r["within_25pct"]:
            assert r.get("reason") and r["reason"] != "not investigated"


def test_decode_step_counters():
    step = kc.decode_step(kc.QWEN25_05B)
    L = kc.QWEN25_05B["num_hidden_layers"]
    assert len(step) == L * (4 + kc.SMALL_NODES_PER_LAYER) + kc.STEP_NODES + 1
    head = step[-1]
    assert head["dram_read_bytes"] >= 2 * 151936 * 896
    assert all(set(c) == set(kc.FIELDS) for c in step)
    q = kc.decode_step(kc.QWEN25_05B, quantized_head=True)[-1]
    assert q["dram_read_bytes"] < head["dram_read_bytes"] / 3


def test_run_writes_records(tmp_path):
    figs = m.run(tmp_path)
    names = {f["name"] for f in figs}
    assert "t4model/check/cublas_gemv_4096x4096/ratio_to_public" in names
    assert {"serving/qwen2.5-7b-shape/t4_projected_tokens_per_s",
            "serving/qwen2.5-7b-shape/t4_projected_tokens_per_s_1200mhz",
            "serving/qwen2.5-0.5b-shape/t4_projected_fraction_of_byte_ceiling",
            "w4a16/mma/t4_projected_speedup_vs_cublas_m16"} <= names
    for f in figs:
        assert f["tag"] == ("ARITHMETIC" if f["name"].endswith("ratio_to_public") else "ESTIMATED")
    assert (tmp_path / "t4model_check.json").is_file() and (tmp_path / "t4model_projection.json").is_file()
