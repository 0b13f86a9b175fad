"""results/README.md's executed-notebooks table: each GPU copy with the commit and sources it was run at, and
whether those are today's; CPU runs left out; notebooks never run on a GPU named."""
import json

from t4lib.core import provenance
from t4lib.evidence import report


def _copy(path, meta=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": [], "metadata": {"t4lib": meta} if meta else {}}))


def test_executed_notebooks_say_whether_their_sources_are_current(tmp_path):
    env, kats = provenance.provenance_of("notebooks/00_environment.ipynb"), provenance.provenance_of(
        "notebooks/01_kernel_kats.ipynb")
    changed = sorted(k for k in kats["closure"] if k.startswith("t4lib/"))[0]
    _copy(tmp_path / "nvidia-h200" / "00_environment.ipynb",
          dict(env, device="NVIDIA H200", profile="gpu", commit="a" * 40))
    _copy(tmp_path / "nvidia-h200" / "01_kernel_kats.ipynb",
          dict(kats, device="NVIDIA H200", profile="gpu", commit="b" * 40,
               closure={**kats["closure"], changed: "0" * 16}))
    _copy(tmp_path / "nvidia-h200" / "03_w4a16_serving.ipynb")
    _copy(tmp_path / "cpu" / "02_thermal_pacing.ipynb",
          dict(provenance.provenance_of("notebooks/02_thermal_pacing.ipynb"), device="cpu", profile="cpu"))
    _copy(tmp_path / "nvidia-h200" / "04_speculative_decoding.partial.ipynb")   # a failed run's own output
    text = report.executed_notebooks(tmp_path)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| [")}
    assert rows["[00_environment](nvidia-h200/00_environment.ipynb)"] == ["NVIDIA H200", "gpu", "a" * 10, "current"]
    assert rows["[01_kernel_kats](nvidia-h200/01_kernel_kats.ipynb)"][-1] == f"changed since: {changed}"
    assert rows["[03_w4a16_serving](nvidia-h200/03_w4a16_serving.ipynb)"][-1] == "not recorded"
    assert not any("02_thermal_pacing" in k for k in rows)                 # a CPU run is not listed
    assert not any("partial" in k for k in rows)                           # nor a failed run's output
    assert "Not run on a GPU:" in text and "02_thermal_pacing" in text.split("Not run on a GPU:")[1]
