"""The repository's layout rules: experiments (labs) live outside the package, beside their records; nothing in
the library or the tests reads or names them, and no notebook reads them; results/ holds figures, notebooks and
logs, no scripts.

This file is the one place under tests/ allowed to name the lab folders: it does so to forbid everything else.
"""
import io
import json
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB_DIR, SCRIPT_DIR = "labs", "tools"   # the labs' folder; the folder the labs used to live in
NEEDLES = tuple(f"{name}/" for name in (LAB_DIR, SCRIPT_DIR))
THIS = Path(__file__).resolve()
# a Python string that is only a path part naming one of those folders (to build a path from)
_BARE_PART = re.compile(rf"[rbuRBU]*(['\"]{{1,3}})({LAB_DIR}|{SCRIPT_DIR})\1")


def _strings(code: str):
    """The string tokens of Python source."""
    return [tok for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type == tokenize.STRING]


def _source_files():
    for top in ("t4lib", "tests"):
        for p in sorted((REPO / top).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.resolve() != THIS:
                try:
                    yield p, p.read_text()
                except UnicodeDecodeError:   # a binary file (a built library): no source text
                    continue


def test_library_and_tests_name_no_lab():
    """No file of t4lib/ or tests/ (code, comments, docstrings, templates) mentions the labs' folder or the old
    tools/ folder, and no Python string there is a bare path part "labs" or "tools" to build such a path from."""
    offenders = []
    for p, text in _source_files():
        rel = p.relative_to(REPO)
        for i, line in enumerate(text.splitlines(), 1):
            if any(n in line for n in NEEDLES):
                offenders.append(f"{rel}:{i}: {line.strip()[:100]}")
        if p.suffix == ".py":
            offenders += [f"{rel}:{tok.start[0]}: a path part {tok.string}" for tok in _strings(text)
                          if _BARE_PART.fullmatch(tok.string)]
    assert not offenders, "the library and the tests may not read or cite a lab:\n" + "\n".join(offenders)


def test_results_hold_no_labs_and_no_scripts():
    """results/<device>/ holds figures, executed notebooks, plots and logs: no lab folder, no script."""
    bad = [str(p.relative_to(REPO)) for p in (REPO / "results").rglob("*")
           if (p.is_dir() and p.name == LAB_DIR) or (p.is_file() and p.suffix in (".py", ".sh"))]
    assert not bad, bad
    assert not (REPO / SCRIPT_DIR).exists(), "experiment scripts live in their lab folders"


def test_every_lab_folder_says_what_it_asks_and_found():
    """Each lab folder has a README (the question, the answer, what its files are)."""
    labs = [p for p in sorted((REPO / LAB_DIR).iterdir()) if p.is_dir() and p.name != "__pycache__"]
    missing = [p.name for p in labs if not (p / "README.md").is_file()]
    assert not missing, f"lab folders without a README.md: {missing}"
    readme = (REPO / "README.md").read_text()
    assert f"`{LAB_DIR}/`" in readme, "README.md's layout table omits the lab folders"


def test_notebooks_read_no_lab():
    """A lab folder can be deleted whole: no notebook code cell reads a lab's files (prose may link to a lab's
    README), so nbval never depends on a lab record."""
    offenders = []
    for nb in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            offenders += [f"{nb.name} cell {i}: {tok.string[:80]}" for tok in _strings("".join(cell["source"]))
                          if LAB_DIR + "/" in tok.string or _BARE_PART.fullmatch(tok.string)]
    assert not offenders, "notebooks may link to a lab's README in prose, not read its files:\n" + "\n".join(offenders)
