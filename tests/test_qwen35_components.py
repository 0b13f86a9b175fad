"""The qwen35 components benchmark's results file without fla: the figures against fla from an earlier run
are kept (marked carried_over) and the missing baseline is recorded as an error, not silently dropped."""
import json

from t4lib.benchmarks import qwen35_components as bench
from t4lib.core import results

ENV = dict(device="test device", driver="0", torch="0", clocks={}, throttle=[])


def _fig(name, value):
    return results.figure(name, value, "us", "MEASURED", bench.SOURCE, env=ENV)


def _parts(monkeypatch, fla: bool):
    meta = {"fla": "measured" if fla else "skipped (ModuleNotFoundError: No module named 'fla')"}
    figs = [_fig("deltanet/B1/t4lib_head/us", 5.7)] + ([_fig("deltanet/B1/fla_fused_recurrent/us", 5.3)] if fla else [])
    monkeypatch.setattr(bench.timing, "copy_bandwidth_figure", lambda source: _fig("copy_bandwidth", 4200.0))
    monkeypatch.setattr(bench, "decode_step", lambda B, quick: (list(figs) if B == 1 else [], dict(meta, B=B)))
    monkeypatch.setattr(bench, "dequant_gemv", lambda quick: ([], {}))
    monkeypatch.setattr(bench, "full_layer", lambda B, quick: ([], {}))


def test_a_run_without_fla_keeps_the_fla_figures_and_says_so(tmp_path, monkeypatch):
    _parts(monkeypatch, fla=True)
    bench.run(tmp_path)
    first = json.loads((tmp_path / "qwen35_deltanet.json").read_text())
    assert not first["errors"] and len(first["figures"]) == 3
    _parts(monkeypatch, fla=False)
    bench.run(tmp_path)
    doc = json.loads((tmp_path / "qwen35_deltanet.json").read_text())
    results.validate(doc)
    assert "not measured" in doc["errors"]["fla"]
    kept = {f["name"]: f for f in doc["figures"]}
    assert kept["deltanet/B1/fla_fused_recurrent/us"]["carried_over"]["written"] == first["written"]
    assert "carried_over" not in kept["deltanet/B1/t4lib_head/us"]
