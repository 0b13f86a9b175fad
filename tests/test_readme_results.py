"""The README's results table (t4lib/evidence/report_summary.md) and the records of results/README.md
(t4lib/evidence/report_results.md) are generated from results/, not typed."""
import json
from pathlib import Path

import pytest

from t4lib.evidence import report as R
from t4lib.core import results

ROOT = Path(__file__).resolve().parent.parent


def test_readme_table_is_what_the_results_generate():
    assert R.section((ROOT / "README.md").read_text()) == R.render(), (
        "README.md's results table differs from what results/ generates: run "
        "'python -m t4lib report --readme README.md' (and edit t4lib/evidence/report_summary.md, not the README)")


def test_placeholders_format_figures_and_name_what_is_missing(tmp_path):
    fig = results.figure("k/t", 1298.62, "us", "ESTIMATED", "s", note="m")   # files are validated on read
    (tmp_path / "dev").mkdir()
    prov = {"commit": "c" * 40, "dirty": False, "sources_sha256": "a" * 64}
    (tmp_path / "dev" / "a.json").write_text(json.dumps({"schema": 1, "provenance": prov, "figures": [fig]}))
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
        {"gpu_tests": {"counts": {"passed": 12}}, "sanitizer_targets": ["a", "b", "c"], "sources_sha256": "abcdef0123"}))
    got = R.render("{{verification/dev.json|gpu_tests.counts.passed|d}} passed, "
                   "{{verification/dev.json|sanitizer_targets#|d}} files, {{verification/dev.json|sources_sha256|.6}}",
                   tmp_path)
    assert got == "12 passed, 3 files, abcdef"
    with pytest.raises(KeyError, match="no key 'failed'"):
        R.render("{{verification/dev.json|gpu_tests.counts.failed|d}}", tmp_path)
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
    (tmp_path / "dev" / "r.json").write_text(json.dumps({"schema": 1, "figures": [fig], "provenance": {
        "commit": "c" * 40, "dirty": False, "sources_sha256": "a" * 64}, "runs": {"07_x/t4": {"status": "timed out"}}}))
    assert R.render("{{dev/r.json|@runs.07_x/t4.status|s}}, {{dev/r.json|k/t|.0f}} s", tmp_path) == "timed out, 1 s"
    with pytest.raises(KeyError, match="no key '08_x/t4'"):
        R.render("{{dev/r.json|@runs.08_x/t4.status|s}}", tmp_path)
    rec = json.loads((R.DATA / "models" / "tiny-cpu" / "training_record.json").read_text())
    assert R.render("{{data:models/tiny-cpu/training_record.json|n_params|d}}") == str(rec["n_params"])
    with pytest.raises(KeyError, match="does not exist"):
        R.render("{{data:models/none/training_record.json|n_params|d}}")


def test_sources_mark_says_whether_the_files_are_at_todays_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "current_sources_sha256", lambda: "a" * 64)
    fig = results.figure("k/t", 2.0, "x", "ARITHMETIC", "s", note="a ratio")
    (tmp_path / "dev").mkdir()
    for name, prov in (("now", {"commit": "c" * 40, "dirty": False, "sources_sha256": "a" * 64}),
                       ("old", {"commit": "0123456789abcdef", "dirty": False, "sources_sha256": "b" * 64}),
                       ("none", {"commit": "unrecorded", "dirty": None, "sources_sha256": "unrecorded"})):
        doc = {"schema": 1, "provenance": prov, "figures": [fig]}
        (tmp_path / "dev" / f"{name}.json").write_text(json.dumps(doc))
    row = "| {{dev/%s.json|k/t|.1f}} | {{sources}} |"
    assert R.render(row % "now", tmp_path) == "| 2.0 | current |"
    assert R.render(row % "old", tmp_path) == "| 2.0 | changed since |"
    assert R.render("| {{dev/none.json|k/t|.1f}} {{dev/old.json|k/t|.1f}} | {{sources}} |", tmp_path) == \
        "| 2.0 2.0 | changed since / not recorded |"
    para = "- {{dev/old.json|k/t|.0f}}\n- Sources: {{sources}}\n\n- {{dev/now.json|k/t|.0f}} {{sources}}"
    assert R.render(para, tmp_path) == ("- 2\n- Sources: `dev/old.json` changed since 0123456789\n\n"
                                        "- 2 `dev/now.json` current")
