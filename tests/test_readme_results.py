"""The README's results table (t4lib/evidence/report_summary.md) and the records of results/README.md
(t4lib/evidence/report_results.md) are generated from results/, not typed."""
import json
from pathlib import Path

import pytest

from t4lib.evidence import report as R
from t4lib.core import provenance, results

ROOT = Path(__file__).resolve().parent.parent
PRODUCER = "t4lib/benchmarks/speculative.py"


def _prov(**over):
    """A provenance block at today's sources of PRODUCER (``stale=True``: one file of its closure changed since)."""
    prov = provenance.provenance_of(PRODUCER)
    if over.pop("stale", False):
        prov["closure"] = {**prov["closure"], PRODUCER: "0" * 16}
    return {**prov, **over}


def test_readme_table_is_what_the_results_generate():
    assert R.section((ROOT / "README.md").read_text()) == R.render(), (
        "README.md's results table differs from what results/ generates: run "
        "'python -m t4lib report --readme README.md' (and edit t4lib/evidence/report_summary.md, not the README)")


def test_placeholders_format_figures_and_name_what_is_missing(tmp_path):
    fig = results.figure("k/t", 1298.62, "us", "ESTIMATED", "s", note="m")   # files are validated on read
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "a.json").write_text(json.dumps({"schema": 1, "provenance": _prov(), "figures": [fig]}))
    assert R.render("| {{dev/a.json|k/t|.0f}} us = {{dev/a.json|k/t|.2f*0.001}} ms |", tmp_path) == "| 1299 us = 1.30 ms |"
    with pytest.raises(KeyError, match="no figure 'k/x'"):
        R.render("{{dev/a.json|k/x|.1f}}", tmp_path)
    with pytest.raises(KeyError, match="dev/b.json"):
        R.render("{{dev/b.json|k/t|.1f}}", tmp_path)


def test_update_rewrites_only_the_generated_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{R.BEGIN}\nstale\n{R.END}\nrest\n")
    assert R.update(readme)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{R.END}\nrest\n") and R.section(text) == R.render()
    assert not R.update(readme)


def test_records_are_read_by_key_path(tmp_path):
    (tmp_path / "verification").mkdir()
    (tmp_path / "verification" / "dev.json").write_text(json.dumps(
        {"kat": {"counts": {"passed": 12}}, "sanitizer_targets": ["a", "b", "c"], "commit": "abcdef0123"}))
    got = R.render("{{verification/dev.json|kat.counts.passed|d}} passed, "
                   "{{verification/dev.json|sanitizer_targets#|d}} files, {{verification/dev.json|commit|.6}}",
                   tmp_path)
    assert got == "12 passed, 3 files, abcdef"
    with pytest.raises(KeyError, match="no key 'failed'"):
        R.render("{{verification/dev.json|kat.counts.failed|d}}", tmp_path)
    # a key holding dots (a test file's name) is found whole
    (tmp_path / "verification" / "san.json").write_text(json.dumps(
        {"files": {"tests/test_x.py": {"errors": 4}, "tests/test_x": {"errors": 9}}}))
    assert R.render("{{verification/san.json|files.tests/test_x.py.errors|d}}", tmp_path) == "4"
    assert R.render("{{verification/san.json|files.tests/test_x.errors|d}}", tmp_path) == "9"
    with pytest.raises(KeyError, match="no key 'tests/test_y'"):
        R.render("{{verification/san.json|files.tests/test_y.py.errors|d}}", tmp_path)
    # a results file's other keys, with @ before the key path
    fig = results.figure("k/t", 1.0, "s", "MEASURED", "s", note="m")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "r.json").write_text(json.dumps({"schema": 1, "figures": [fig], "provenance": _prov(),
                                                         "runs": {"07_x/t4": {"status": "timed out"}}}))
    assert R.render("{{dev/r.json|@runs.07_x/t4.status|s}}, {{dev/r.json|k/t|.0f}} s", tmp_path) == "timed out, 1 s"
    with pytest.raises(KeyError, match="no key '08_x/t4'"):
        R.render("{{dev/r.json|@runs.08_x/t4.status|s}}", tmp_path)
    rec = json.loads((R.DATA / "models" / "tiny-cpu" / "training_record.json").read_text())
    assert R.render("{{data:models/tiny-cpu/training_record.json|n_params|d}}") == str(rec["n_params"])
    with pytest.raises(KeyError, match="does not exist"):
        R.render("{{data:models/none/training_record.json|n_params|d}}")


def test_sources_mark_names_the_files_that_changed(tmp_path):
    fig = results.figure("k/t", 2.0, "x", "ARITHMETIC", "s", note="a ratio")
    (tmp_path / "dev").mkdir()
    unrecorded = _prov(commit="unrecorded", dirty=True)
    unrecorded["closure"] = {k: "unrecorded" for k in unrecorded["closure"]}
    for name, prov in (("now", _prov()), ("old", _prov(stale=True, commit="0123456789abcdef")), ("none", unrecorded)):
        doc = {"schema": 1, "provenance": prov, "figures": [fig]}
        (tmp_path / "dev" / f"{name}.json").write_text(json.dumps(doc))
    row = "| {{dev/%s.json|k/t|.1f}} | {{sources}} |"
    assert R.render(row % "now", tmp_path) == "| 2.0 | current (dev) |"
    assert R.render(row % "old", tmp_path) == f"| 2.0 | changed since: {PRODUCER} (dev) |"
    assert R.render("| {{dev/none.json|k/t|.1f}} {{dev/old.json|k/t|.1f}} | {{sources}} |", tmp_path) == \
        f"| 2.0 2.0 | not recorded (dev); changed since: {PRODUCER} (dev) |"
    para = "- {{dev/old.json|k/t|.0f}}\n- Sources: {{sources}}\n\n- {{dev/now.json|k/t|.0f}} {{sources}}"
    assert R.render(para, tmp_path) == (f"- 2\n- Sources: `dev/old.json` changed since: {PRODUCER}\n\n"
                                        "- 2 `dev/now.json` current")


def test_any_gpu_shows_every_current_record_with_its_device(tmp_path):
    """``*/file.json``: the figure from every GPU whose record is current, each with its device (one value
    shared by two devices is shown once); where none is current, the newest record, marked stale; CPU records
    never stand in."""
    def put(dev, value, stale=False, written="2026-01-01T00:00:00+00:00", name="bench.json"):
        fig = results.figure("k/t", value, "x", "ARITHMETIC", "s", note="a ratio")
        (tmp_path / dev).mkdir(exist_ok=True)
        (tmp_path / dev / name).write_text(json.dumps({"schema": 1, "written": written,
                                                       "provenance": _prov(stale=stale), "figures": [fig]}))
    put("nvidia-h200", 2.83, stale=True, written="2026-03-01T00:00:00+00:00")
    put("nvidia-h100-80gb-hbm3", 1.70)
    put("cpu", 9.0)
    row = "| {{*/bench.json|k/t|.2f}} | {{sources}} |"
    assert R.render(row, tmp_path) == "| 1.70 | current (H100) |"   # one device on the line: said once
    put("nvidia-h200", 1.90)
    assert R.render(row, tmp_path) == "| 1.70 (H100) / 1.90 (H200) | current (H100); current (H200) |"
    put("nvidia-h200", 1.70)
    assert R.render(row, tmp_path) == "| 1.70 | current (H100); current (H200) |"
    put("nvidia-h100-80gb-hbm3", 1.70, stale=True, written="2026-01-01T00:00:00+00:00")
    put("nvidia-h200", 2.83, stale=True, written="2026-03-01T00:00:00+00:00")
    assert R.render(row, tmp_path) == f"| 2.83 | changed since: {PRODUCER} (H200) |"
    put("nvidia-h100-80gb-hbm3", 1.70)   # a line mixing devices labels each value, the stale one with a dagger
    put("nvidia-h200", 3.10, stale=True, name="other.json")
    mixed = "| {{*/bench.json|k/t|.2f}} and {{*/other.json|k/t|.2f}} |"
    assert R.render(mixed, tmp_path) == "| 1.70 (H100) and 3.10 (H200\u2020) |"
    with pytest.raises(KeyError, match="no GPU's results file"):
        R.render("{{*/bench.json|k/none|.2f}}", tmp_path)


def test_a_truncated_results_file_is_named_not_a_bare_decode_error(tmp_path):
    from t4lib.core import results
    from t4lib.evidence import report

    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "x.json").write_text('{"schema": 1, "figures": [')
    with pytest.raises(ValueError, match="x.json"):
        report.render("{{dev/x.json|a|.1f}}", root=tmp_path)
    with pytest.raises(ValueError, match="x.json"):
        results.report(tmp_path)
