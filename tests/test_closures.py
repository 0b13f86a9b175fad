"""Closures on the real tree: what an edit to one file stales, and what it does not.

Edits are made to a copy of the repository's sources (t4lib, kernels, notebooks, tests) under a temporary
directory; closures are computed there with ``provenance.closure(unit, repo=copy)``. The real files are never
touched."""
import ast
import json
import shutil
import statistics
from collections import Counter
from pathlib import Path

import pytest

from t4lib.core import notebook, provenance, results
from t4lib.evidence import verify

REPO = provenance.REPO
SPECULATIVE = "t4lib/benchmarks/speculative.py"
NB04 = "notebooks/04_speculative_decoding.ipynb"


def _copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.o", "*.json", "*.jsonl")
    for d in ("t4lib", "kernels", "tests"):
        shutil.copytree(REPO / d, dst / d, ignore=ignore)
    (dst / "notebooks").mkdir()
    for nb in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        shutil.copy2(nb, dst / "notebooks" / nb.name)
    return dst


@pytest.fixture(scope="module")
def gpu_files():
    return verify.gpu_test_files()


def _units(gpu_files, repo: Path = REPO) -> dict[str, list[str]]:
    """The units whose closures the edits are checked against, by kind."""
    return {"gpu test files": list(gpu_files),
            "notebooks": sorted(p.relative_to(repo).as_posix() for p in (repo / "notebooks").glob("[0-9][0-9]_*.ipynb")),
            "benchmarks": sorted(p.relative_to(repo).as_posix() for p in (repo / "t4lib" / "benchmarks").glob("*.py")
                                 if p.name != "__init__.py")}


def _closures(units: dict[str, list[str]], repo: Path) -> dict[str, dict[str, str]]:
    out = {}
    for kind, names in units.items():
        for u in names:
            c = provenance.closure(u, repo)
            if kind == "gpu test files":   # as the ledger computes it: the file and tests/conftest.py
                c = {**c, **provenance.closure(verify.CONFTEST, repo)}
            out[u] = c
    return out


def _library_files(repo: Path) -> list[Path]:
    return sorted(p for p in (repo / "t4lib").rglob("*.py") if "__pycache__" not in p.parts)


def _comment_only_python(text: str) -> str:
    """The same module with every docstring reworded (to a different number of lines) and comment lines added
    at the top, before every top-level statement and at the end."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []   # (line index, col, end line index, end col, replacement) of each docstring
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                v = first.value
                edits.append((v.lineno - 1, v.col_offset, v.end_lineno - 1, v.end_col_offset,
                              '"""Reworded: this text says\n    nothing the code does."""'))
    for l0, c0, l1, c1, new in sorted(edits, reverse=True):
        head, tail = lines[l0][:c0], lines[l1][c1:]
        lines[l0:l1 + 1] = [head + new + tail]
    text = "".join(lines)
    tree = ast.parse(text)
    starts = sorted({min([d.lineno for d in getattr(n, "decorator_list", [])] + [n.lineno]) - 1 for n in tree.body},
                    reverse=True)
    lines = text.splitlines(keepends=True)
    for s in starts:
        lines.insert(s, "# a comment between statements\n\n")
    return "# a comment at the top\n" + "".join(lines) + "\n# a comment at the end\n"


def _comment_only_cuda(text: str) -> str:
    out = ["// a comment at the top", "/* a block comment", "   over two lines */"]
    for ln in text.splitlines():
        out.append(ln + "  // trailing comment" if ln.rstrip().endswith(";") and not ln.rstrip().endswith("\\")
                   else ln)
        if ln.startswith("}"):
            out.append("")
    return "\n".join(out) + "\n/* the end */\n"


def test_comment_and_docstring_edits_change_no_fingerprint_and_stale_nothing(tmp_path, gpu_files):
    """Every library .py file with its docstrings reworded and comments added, and every .cu/.cuh with comments
    added, all at once: not one fingerprint changes, so no closure of a GPU test file, notebook or benchmark
    does. A one-token code edit does change the fingerprint."""
    repo = _copy_tree(tmp_path)
    units = _units(gpu_files, repo)
    before = _closures(units, repo)
    py, cu = _library_files(repo), sorted((repo / "kernels").glob("*.cu*"))
    for p in py:
        text = p.read_text()
        edited = _comment_only_python(text)
        assert edited != text
        p.write_text(edited)
        assert provenance.fingerprint_text(p.name, edited) == provenance.fingerprint_text(p.name, text), p
    for p in cu:
        text = p.read_text()
        edited = _comment_only_cuda(text)
        p.write_text(edited)
        assert provenance.fingerprint_text(p.name, edited) == provenance.fingerprint_text(p.name, text), p
    after = _closures(units, repo)
    assert {u for u in before if before[u] != after[u]} == set()
    assert len(py) > 100 and len(cu) >= len(verify.build.families())
    # a code change (not a comment) is seen, in both languages
    assert provenance.fingerprint_text("a.py", "X = 1\n") != provenance.fingerprint_text("a.py", "X = 2\n")
    assert provenance.fingerprint_text("a.cu", "int x = 1; // c\n") != provenance.fingerprint_text("a.cu", "int x = 2;\n")
    assert provenance.fingerprint_text("a.cu", 'char *s = "// kept";\n') != \
        provenance.fingerprint_text("a.cu", 'char *s = "// other";\n')


def test_an_edit_to_the_speculative_benchmark_stales_its_records_and_notebook_04_only(tmp_path, gpu_files):
    """A code edit to t4lib/benchmarks/speculative.py changes the closure of the benchmark itself and of
    notebook 04, and of no GPU test file, other notebook or other benchmark; among the committed records, the
    ones it stales are those produced by the benchmark or by notebook 04."""
    repo = _copy_tree(tmp_path)
    units = _units(gpu_files, repo)
    before = _closures(units, repo)
    p = repo / SPECULATIVE
    p.write_text(p.read_text() + "\n_EDITED = True\n")
    after = _closures(units, repo)
    changed = {u for u in before if before[u] != after[u]}
    assert changed == {SPECULATIVE, NB04}, changed
    assert not changed & set(units["gpu test files"])
    for u in changed:
        assert [f for f in before[u] if before[u][f] != after[u].get(f)] == [SPECULATIVE]
    # the committed records: those whose closure holds the benchmark, and so would go stale with it
    reached, recorded = set(), 0
    for _, doc in results.load_all(REPO / "results"):
        prov = doc.get("provenance") or {}
        if isinstance(prov.get("closure"), dict):
            recorded += 1
            if SPECULATIVE in prov["closure"]:
                reached.add(prov["producer"])
    assert recorded and reached and reached <= {SPECULATIVE, NB04}, reached


def _reach(gpu_files) -> dict[str, dict[str, int]]:
    """For every library file (t4lib/**/*.py and kernels/*): how many GPU test files, notebooks and benchmarks
    an edit to it reaches (closures holding it)."""
    units = _units(gpu_files)
    closures = _closures(units, REPO)
    files = [p.relative_to(REPO).as_posix() for p in _library_files(REPO)]
    files += sorted(p.relative_to(REPO).as_posix() for p in (REPO / "kernels").iterdir() if p.suffix in (".cu", ".cuh"))
    return {f: {kind: sum(f in closures[u] for u in names) for kind, names in units.items()} for f in files}


def test_the_median_library_file_reaches_at_most_2_gpu_test_files_and_1_notebook(gpu_files):
    """The distribution over every library file of how many GPU test files, notebooks and benchmarks its edit
    reaches (printed: pytest -s shows it). Infrastructure files (the results writer, provenance, the notebook
    helpers) enter no closure and reach nothing."""
    reach = _reach(gpu_files)
    units = _units(gpu_files)
    t4lib = {f: r for f, r in reach.items() if f.startswith("t4lib/")}
    print(f"\nreach of an edit, over {len(t4lib)} t4lib files ({len(reach) - len(t4lib)} kernel sources apart); "
          f"units: {', '.join(f'{len(v)} {k}' for k, v in units.items())}")
    for kind in units:
        for label, group in (("t4lib", t4lib), ("t4lib + kernels", reach)):
            vals = [r[kind] for r in group.values()]
            hist = sorted(Counter(vals).items())
            print(f"  {kind:15s} {label:16s} median {statistics.median(vals):4.1f}  mean {statistics.mean(vals):5.2f}"
                  f"  max {max(vals):2d}  files reaching n: {dict(hist)}")
    widest = sorted(t4lib, key=lambda f: (-t4lib[f]["gpu test files"], f))[:5]
    print("  widest (GPU test files): " + ", ".join(f"{f} {t4lib[f]['gpu test files']}" for f in widest))
    assert statistics.median(r["gpu test files"] for r in t4lib.values()) <= 2
    assert statistics.median(r["notebooks"] for r in t4lib.values()) <= 1
    for f in provenance.INFRASTRUCTURE:
        assert reach[f] == {k: 0 for k in units}, f
    assert all(reach[f]["gpu test files"] == 0 for f in reach if f.startswith("t4lib/benchmarks/"))


def test_a_record_without_a_closure_or_with_a_missing_producer_is_rejected(tmp_path):
    fig = results.figure("x", 1.0, "us", "ESTIMATED", "s", note="m")
    good = provenance.provenance_of(SPECULATIVE)
    results.validate({"schema": 1, "provenance": good, "figures": [fig]})
    for bad in ({k: v for k, v in good.items() if k != "closure"}, dict(good, closure={}), dict(good, closure=None)):
        with pytest.raises(ValueError, match="closure"):
            results.validate({"schema": 1, "provenance": bad, "figures": [fig]})
    with pytest.raises(ValueError, match="producer"):
        results.write(tmp_path / "r.json", [fig], producer="t4lib/benchmarks/no_such_bench.py")
    with pytest.raises(ValueError, match="producer"):
        results.lab_record("python scripts/no_such_script.py")
    assert not (tmp_path / "r.json").exists()


def test_a_forged_ledger_entry_is_rejected_and_a_consistent_one_accepted(tmp_path, monkeypatch):
    """A ledger entry for a GPU test file verifies it only at the file's closure today. (A consistent entry can
    be written on any CPU: the ledger is a record of GPU runs that CI checks for consistency, not proof.)"""
    f = "tests/test_int3.py"
    ids = [f"{f}::test_a", f"{f}::test_b"]
    monkeypatch.setattr(verify, "ledger_dir", lambda: tmp_path)
    monkeypatch.setattr(verify, "_current_collection", lambda: tuple(ids))
    base = {"schema": verify.LEDGER_SCHEMA, "device": "NVIDIA H100 80GB HBM3", "capability": [9, 0],
            "nvcc_flags": list(verify.build.NVCC_FLAGS)}

    def plant(closure):
        rec = {"closure": closure, "tests": {ids[0]: "passed", ids[1]: "skipped"}}
        (tmp_path / "dev.json").write_text(json.dumps({**base, "files": {f: rec}}))
        return verify.ledger_state()["files"][f]

    real = verify.test_file_closure(f)
    assert "kernels/int3.cu" in real and verify.CONFTEST in real
    assert plant(real)["verified_by"] == ["dev.json"]
    for forged, named in ((dict(real, **{"kernels/int3.cu": "0" * 16}), "kernels/int3.cu"),
                          ({k: v for k, v in real.items() if k != "t4lib/ops/int3/binding.py"},
                           "t4lib/ops/int3/binding.py"),
                          (dict(real, **{"t4lib/benchmarks/speculative.py": "0" * 16}), "t4lib/benchmarks/speculative.py"),
                          (verify.test_file_closure("tests/test_fp8.py"), "")):
        got = plant(forged)
        assert got["verified_by"] == [] and "changed since: " + named in got["why_not"]["dev.json"][0], got
    ok, why = verify.check_ledger()
    assert not ok and f in why


def _nb_with(text: str, edit) -> str:
    nb = json.loads(text)
    edit(nb["cells"])
    return json.dumps(nb, indent=1)


def test_a_changed_notebook_cell_stales_its_executed_copy_and_the_install_cell_does_not(tmp_path):
    repo = _copy_tree(tmp_path)
    path = repo / NB04
    text = path.read_text()
    code = [c for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    assert "".join(code[0]["source"]).startswith(provenance.INSTALL_CELL_MARK)
    i = next(i for i, c in enumerate(json.loads(text)["cells"]) if c["cell_type"] == "code"
             and not "".join(c["source"]).startswith(provenance.INSTALL_CELL_MARK))
    install = next(i for i, c in enumerate(json.loads(text)["cells"]) if c["cell_type"] == "code")

    def code_edit(cells):
        cells[i]["source"] = ["".join(cells[i]["source"]) + "\nEDITED = 1\n"]

    def install_edit(cells):
        cells[install]["source"] = ["".join(cells[install]["source"]) + "\nprint('a different install step')\n"]

    def comment_and_output_edit(cells):
        cells[i]["source"] = ["# a comment\n" + "".join(cells[i]["source"])]
        cells[i]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["other output\n"]}]

    real = notebook.run_provenance("cpu", NB04)
    assert notebook.stamp_status(real) == "current"
    for edit, stale in ((code_edit, True), (install_edit, False), (comment_and_output_edit, False)):
        path.write_text(_nb_with(text, edit))
        then = provenance.closure(NB04, repo)   # the notebook as it was when its copy was executed
        assert set(then) == set(real["closure"])
        assert [f for f in then if then[f] != real["closure"][f]] == ([NB04] if stale else []), edit.__name__
        status = notebook.stamp_status({**real, "closure": then})
        assert status == (f"changed since: {NB04}" if stale else "current"), edit.__name__


def test_dirty_is_recorded_as_a_bool(monkeypatch):
    assert isinstance(provenance.provenance_of(SPECULATIVE)["dirty"], bool)
    monkeypatch.setenv("T4LIB_COMMIT", "0123abc")
    for flag, dirty in (("0", False), ("1", True)):
        monkeypatch.setenv("T4LIB_DIRTY", flag)
        prov = provenance.provenance_of(SPECULATIVE)
        assert prov["dirty"] is dirty and prov["commit"] == "0123abc"
        assert results.lab_record("python -m t4lib.benchmarks.speculative")["provenance"]["dirty"] is dirty
    monkeypatch.delenv("T4LIB_DIRTY")
    with pytest.raises(RuntimeError, match="T4LIB_DIRTY"):
        provenance.provenance_of(SPECULATIVE)
