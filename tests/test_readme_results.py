"""The README's results table is generated from results/ (t4lib/readme_results.md), not typed."""
import json
from pathlib import Path

import pytest

from t4lib import readme_results as R, results

ROOT = Path(__file__).resolve().parent.parent


def test_readme_table_is_what_the_results_generate():
    assert R.section((ROOT / "README.md").read_text()) == R.render(), (
        "README.md's results table differs from what results/ generates: run "
        "'python -m t4lib report --readme README.md' (and edit t4lib/readme_results.md, not the README)")


def test_placeholders_format_figures_and_name_what_is_missing(tmp_path):
    fig = results.figure("k/t", 1298.62, "us", "ESTIMATED", "s", note="m")   # files are validated on read
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "a.json").write_text(json.dumps({"schema": 1, "figures": [fig]}))
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
