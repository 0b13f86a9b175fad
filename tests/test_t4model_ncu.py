"""Parsing of Nsight Compute's CSV for the T4 model's counters (CPU only, fixed text: no ncu, no GPU)."""
import pytest

from t4lib.benchmarks import t4model as kc
from t4lib.evidence import t4model as m

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
METRICS = {"dram__bytes_read.sum": "dram_read_bytes", "dram__bytes_write.sum": "dram_write_bytes",
           "lts__t_bytes.sum": "l2_bytes", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "shared_wavefronts",
           "smsp__inst_executed.sum": "instructions", "sm__inst_executed_pipe_tensor_op_hmma.sum":
           "tensor_hmma_instructions"}


def _rows(i, kernel, values, stream="7", units=None):
    units = units or {}
    return [f'"{i}","99","python3","host","{kernel}","1","{stream}","(128, 1, 1)","(40, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{units.get(metric, "")}","{v}"'
            for metric, v in values.items()]


def _launch(dram=1000, inst=500, hmma=0):
    return {"dram__bytes_read.sum": f"{dram:,}", "dram__bytes_write.sum": "64", "lts__t_bytes.sum": "2,048",
            "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "0", "smsp__inst_executed.sum": str(inst),
            "sm__inst_executed_pipe_tensor_op_hmma.sum": str(hmma)}


def _csv(*blocks):
    lines = ["==PROF== Connected to process 99 (/usr/bin/python3)", HEADER]
    for b in blocks:
        lines += b
    return "\n".join(lines) + "\n"


def test_parse_launches_in_order_with_all_fields():
    text = _csv(_rows(0, "spin_kernel(long)", _launch(0, 10)),
                _rows(1, "void gemv_kernel<Int4G>(Args)", _launch(1_234_567, 900)),
                _rows(2, "w4a16_mma_kernel", _launch(4096, 300, hmma=16)))
    ls = kc.parse_ncu_csv(text, METRICS)
    assert [d["id"] for d in ls] == [0, 1, 2]
    g = ls[1]
    assert g["kernel"].startswith("void gemv_kernel") and g["stream"] == "7" and g["grid"] == "(40, 1, 1)"
    assert g["dram_read_bytes"] == 1_234_567 and g["l2_bytes"] == 2048 and g["instructions"] == 900
    assert ls[2]["tensor_flops"] == 16 * 2048 and ls[2]["tensor_hmma_instructions"] == 16
    assert g["launches"] == 1 and g["graph_nodes"] == 0
    m.predict(g)    # every field the model needs is there


def test_scaled_units_are_read_in_base_units():
    vals = _launch()
    vals["dram__bytes_read.sum"] = "1.5"
    ls = kc.parse_ncu_csv(_csv(_rows(0, "k", vals, units={"dram__bytes_read.sum": "Mbyte"})), METRICS)
    assert ls[0]["dram_read_bytes"] == pytest.approx(1.5e6)


def test_missing_metric_is_a_clear_error():
    vals = _launch()
    del vals["lts__t_bytes.sum"]
    with pytest.raises(ValueError, match=r"lts__t_bytes\.sum.*'gemv'"):
        kc.parse_ncu_csv(_csv(_rows(0, "gemv", vals)), METRICS)


def test_metric_without_a_number_is_a_clear_error():
    vals = _launch()
    vals["smsp__inst_executed.sum"] = "n/a"
    with pytest.raises(ValueError, match=r"smsp__inst_executed\.sum.*'gemv'.*n/a"):
        kc.parse_ncu_csv(_csv(_rows(3, "gemv", vals)), METRICS)


def test_no_table_is_a_clear_error():
    with pytest.raises(ValueError, match="no ncu CSV table"):
        kc.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission\n", METRICS)


def test_sections_split_at_markers_and_graph_nodes():
    text = _csv(_rows(0, "spin_kernel(long)", _launch(0, 1)), _rows(1, "gemv", _launch(100, 10)),
                _rows(2, "spin_kernel(long)", _launch(0, 1)), _rows(3, "rmsnorm", _launch(10, 5)),
                _rows(4, "gemv", _launch(200, 20)))
    secs = kc.group_sections(kc.parse_ncu_csv(text, METRICS),
                             [{"name": "w4a16_gemv", "graph": False}, {"name": "decode_step", "graph": True}])
    assert [d["kernel"] for d in secs["w4a16_gemv"]["kernels"]] == ["gemv"]
    step = secs["decode_step"]
    assert step["total"]["dram_read_bytes"] == 210 and step["total"]["graph_nodes"] == 2
    assert step["total"]["launches"] == 0 and set(step["total"]) == set(kc.FIELDS)
    assert m.predict_sequence(step["kernels"]).time > 0
    with pytest.raises(ValueError, match="marker"):
        kc.group_sections(kc.parse_ncu_csv(text, METRICS), [{"name": "one", "graph": False}])


def test_default_metrics_cover_every_counter_field():
    fields = set(kc.NCU_METRICS.values()) - {"tensor_hmma_instructions"} | {"tensor_flops", "launches", "graph_nodes"}
    assert fields == set(kc.FIELDS)
    assert "--print-units" in kc.NCU_OPTIONS and "--profile-from-start" in kc.NCU_OPTIONS
