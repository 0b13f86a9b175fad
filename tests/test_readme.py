"""README.md is a front door: what t4lib is, an install line from the declared repository, a code example that
runs (here, on CPU, with the project's local tiny model), the two commands, the notebooks, and a short results
table whose rows link to their records in results/README.md."""
import re
import sys
from pathlib import Path

from t4lib.evidence import report as R

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _repository() -> str:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m, f"README.md has no section '## {title}'"
    return m[1]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in rows[2:]]


def test_install_line_uses_the_declared_repository():
    assert f'pip install "t4lib[transformers] @ git+{_repository()}"' in _section("Install")


def test_example_runs_on_cpu_with_the_local_tiny_model(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", _section("Example"), re.S)
    assert len(blocks) == 1, "the Example section holds one python block"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 14, "the example is meant to be about ten lines"
    assert '"tiny-cpu"' in code and "StaticEngine" in code and "quantize_model" in code
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")          # nothing from a hub
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md:Example", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"weights [\d.]+ MiB -> [\d.]+ MiB", out[0]), out[:1]
    assert len(out) >= 2, "the example prints the generated text"


def test_two_commands_and_no_stale_claims():
    assert "bash run_all.sh          #" in README and "bash run_all.sh test     #" in README
    assert "legacy" not in README.lower()
    for word in ("session", "issue", "agent"):
        assert not re.search(rf"\b{word}s?\b", README, re.I), f"README.md mentions {word!r}: it describes the product"


def test_layout_names_every_top_level_part():
    layout = _section("Layout")
    for path in ("kernels/", "t4lib/ops/", "t4lib/pacing/", "t4lib/contract/", "notebooks/", "data/",
                 "results/", "tests/"):
        assert f"`{path}`" in layout, f"the layout table omits {path}"


def test_notebooks_table_lists_every_notebook():
    table = _section("Notebooks")
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"`{nb.stem}`" in table, f"the notebooks table omits {nb.stem}"


def test_results_table_is_short_and_links_to_its_records():
    rows = _table_rows(R.section(README))
    assert 1 <= len(rows) <= 12, f"{len(rows)} result rows; at most a dozen (the detail goes to results/README.md)"
    for row in rows:
        for cell in row:
            assert len(cell) <= 200, f"a results cell of {len(cell)} characters (at most 200): {cell[:80]}..."
    headings = {_slug(h) for h in re.findall(r"^### (.+)$", R.RECORDS.read_text(), re.M)}
    records = (ROOT / "results" / "README.md").read_text()
    written = {_slug(h) for h in re.findall(r"^### (.+)$", records, re.M)}
    for row in rows:
        links = re.findall(r"\]\(results/README\.md#([\w-]+)\)", row[-1])
        assert links, f"row {row[0]!r} does not link to its record in results/README.md"
        assert links[0] in headings, f"row {row[0]!r} links to #{links[0]}, which no record heading makes"
        assert links[0] in written, (f"results/README.md has no record #{links[0]}: run "
                                     "'python -m t4lib report --out results/README.md'")


def test_results_table_marks_sources():
    rows = _table_rows(R.section(README))
    for row in rows:
        state = r"(current|changed since: [^;]+?|not recorded|a record of GPU runs)( \([\w, ]+\))?"
        assert re.fullmatch(rf"—|{state}(; {state})*", row[-2]), row
