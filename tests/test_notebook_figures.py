"""Figures in notebook prose come from results/, and verdicts are compared by nbval.

* ``t4lib.core.notebook.figure`` reads one figure of a results file (validated) and names the argument it rejects.
* No markdown cell of the notebooks below types a measured figure (a time, a multiple, a rate): such sentences
  are code cells that format the figure from its JSON (``notebook.figure``) and print Markdown. A sentence
  that labels its number a target or a datasheet figure, and the T4 datasheet figures of ``t4lib.core.hw``, are allowed.
* A code cell whose committed output carries a verdict (PASS/FAIL, a target met or not, a tolerance check, a
  controller decision, strict failures) is not marked ``NBVAL_IGNORE_OUTPUT``: nbval compares it.
"""
import json
import re
from pathlib import Path

import pytest

from t4lib.core import hw, notebook, provenance, results

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
CHECKED = ["00_environment", "01_kernel_kats", "02_thermal_pacing", "03_w4a16_serving", "04_speculative_decoding",
           "05_grpo_cp_hybrid", "06_cold_start_sft", "07_qwen35_deltanet_decode", "08_transformer_benchmark"]
IGNORE = "NBVAL_IGNORE_OUTPUT"

# A measured figure: a number (or range) with a unit of time, a multiple or a rate.
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?\s?"
                    r"(?:us|µs|ms|x|GB/s|TB/s|tok/s|tokens/s|TFLOP/s)(?!\w)")
VERDICT = re.compile(r"\bPASS\b|\bFAIL|\bMET\b|within tolerance|verified against|strict failures|"
                     r"same tokens as|: cap = |no decision:")


def _t4_datasheet() -> set[str]:
    b = hw.budget_dict()
    return {f"{b['sustained_bw'] / 1e9:.0f} GB/s", f"{b['peak_bw'] / 1e9:.0f} GB/s",
            f"{b['fp16_tensor_flops'] / 1e12:.0f} TFLOP/s"}


def typed_figures(text: str) -> list[str]:
    """Measured-looking figures in prose, less labelled targets and the T4 datasheet figures."""
    allowed = _t4_datasheet()
    found = []
    for sentence in re.split(r"(?<=[.;:!?])\s+", text):
        if re.search(r"\btargets?\b|\bdatasheet\b", sentence, re.I):
            continue
        found += [m.group() for m in FIGURE.finditer(sentence) if re.sub(r"\s+", " ", m.group()) not in allowed]
    return found


def _nb(stem):
    return json.loads((NB_DIR / f"{stem}.ipynb").read_text())


def _src(cell):
    return "".join(cell["source"])


def _text(output):
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    return "".join(data.get("text/markdown", "")) + "".join(data.get("text/plain", ""))


@pytest.mark.parametrize("stem", CHECKED)
def test_no_typed_figures_in_prose(stem):
    bad = {i: typed_figures(_src(c)) for i, c in enumerate(_nb(stem)["cells"]) if c["cell_type"] == "markdown"}
    bad = {i: f for i, f in bad.items() if f}
    assert not bad, f"{stem}: markdown cells quote measured figures (format them from results/): {bad}"


@pytest.mark.parametrize("stem", CHECKED)
def test_verdict_cells_are_compared(stem):
    ignored = [i for i, c in enumerate(_nb(stem)["cells"]) if c["cell_type"] == "code" and IGNORE in _src(c)
               and any(VERDICT.search(_text(o)) for o in c.get("outputs", []))]
    assert not ignored, f"{stem}: cells {ignored} print a verdict but nbval ignores their output"


@pytest.mark.parametrize("stem", ["03_w4a16_serving", "07_qwen35_deltanet_decode"])
def test_prose_figures_are_formatted_from_results(stem):
    cells = [c for c in _nb(stem)["cells"] if c["cell_type"] == "code" and "notebook.figure(" in _src(c)]
    assert cells, f"{stem}: no cell formats its prose figures with notebook.figure"
    for c in cells:
        assert IGNORE not in _src(c), f"{stem}: a prose cell formatted from results/ must be compared"
        assert any("text/markdown" in o.get("data", {}) for o in c["outputs"]), f"{stem}: no Markdown output"


def test_the_pattern_catches_typed_figures():
    assert typed_figures("the kernel alone took 15.9 us (3.3x cuBLAS)") == ["15.9 us", "3.3x"]
    assert typed_figures("four rows 27-32 us, and 1.6-1.9x faster") == ["27-32 us", "1.6-1.9x"]
    assert typed_figures("The 2.1 us target lies below the copy.") == []
    assert typed_figures("a T4 at its sustained 260 GB/s") == []
    assert typed_figures("streams it in 0.1 ms at its datasheet bandwidth") == []
    assert typed_figures("the H200 at 4800 GB/s") == ["4800 GB/s"]
    assert typed_figures("a 5120x17408 shape, 64 Mi values, 2 CTAs per head") == []


# -- notebook.figure ------------------------------------------------------------------------------------------

def _write(root: Path, device="dev-a", file="bench.json", doc=None):
    fig = results.figure("bench/time", 1.25, "us", "ARITHMETIC", "tests", note="made up for the test")
    doc = doc if doc is not None else {"schema": results.SCHEMA_VERSION, "figures": [fig],
                                       "provenance": provenance.provenance_of("t4lib/benchmarks/w4a16.py")}
    (root / device).mkdir(parents=True, exist_ok=True)
    (root / device / file).write_text(json.dumps(doc))


def test_figure_reads_one_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_RESULTS", str(tmp_path))
    _write(tmp_path)
    assert notebook.figure("dev-a", "bench.json", "bench/time")["value"] == 1.25
    assert notebook.figure("dev-a", "bench", "bench/time")["unit"] == "us"


def test_figure_reads_the_committed_results():
    f = notebook.figure("nvidia-h200", "w4a16_gemv", "w4a16_gemv/M1/5120x17408/w4a16_gemv/time_median")
    assert f["unit"] == "us" and f["tag"] == "MEASURED" and f["value"] > 0


@pytest.mark.parametrize("args, exc, word", [
    ((None, "bench", "bench/time"), TypeError, "device"),
    (("dev-a", "", "bench/time"), TypeError, "file"),
    (("dev-a", "bench", 3), TypeError, "name"),
    (("../dev-a", "bench", "bench/time"), ValueError, "device"),
    (("dev-a", "../bench", "bench/time"), ValueError, "file"),
    (("dev-b", "bench", "bench/time"), ValueError, "file"),
    (("dev-a", "bench", "bench/other"), ValueError, "name"),
])
def test_figure_rejects_bad_input(tmp_path, monkeypatch, args, exc, word):
    monkeypatch.setenv("T4LIB_RESULTS", str(tmp_path))
    _write(tmp_path)
    with pytest.raises(exc, match=word):
        notebook.figure(*args)


def test_figure_rejects_an_invalid_results_file(tmp_path, monkeypatch):
    monkeypatch.setenv("T4LIB_RESULTS", str(tmp_path))
    _write(tmp_path, doc={"schema": 99, "figures": []})
    with pytest.raises(ValueError, match="schema"):
        notebook.figure("dev-a", "bench", "bench/time")
