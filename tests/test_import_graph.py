"""The package's floors are its architecture: each imports only floors below it (or its own),
no import cycle, and no module of t4lib imported inside a function to dodge one."""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# lowest first; packages on one floor may import each other (without a cycle)
FLOORS = [("core",), ("ops",), ("decoding",), ("quant",), ("serving",), ("speculative",), ("models",),
          ("train", "pacing", "contract"), ("benchmarks",), ("evidence",), ("cli", "__main__")]


def _module_file(dotted: str) -> Path | None:
    base = ROOT / Path(*dotted.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node) -> set[str]:
    """The t4lib modules one import statement loads."""
    out = set()
    if isinstance(node, ast.ImportFrom) and node.level:
        raise AssertionError(f"relative import at line {node.lineno}: the package imports absolutely")
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("t4lib"):
        for a in node.names:
            sub = f"{node.module}.{a.name}"
            out.add(sub if _module_file(sub) else node.module)
    elif isinstance(node, ast.Import):
        out |= {a.name for a in node.names if a.name.startswith("t4lib")}
    return {m for m in out if _module_file(m)}


def _graph():
    """module -> (imports run when the module is imported, imports inside functions)."""
    graph = {}
    for path in sorted((ROOT / "t4lib").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        inner = {n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        top, late = set(), set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                (late if n in inner else top).update(_targets(n))
        me = _name(path)
        graph[me] = (top - {me}, late - {me})
    return graph


def _floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1   # t4lib/__init__.py
    for i, names in enumerate(FLOORS):
        if parts[1] in names:
            return i
    raise AssertionError(f"{module} is on no floor: add its package to FLOORS in this test")


@pytest.fixture(scope="module")
def graph():
    return _graph()


def test_every_module_is_on_a_floor(graph):
    for m in graph:
        _floor(m)


def test_no_upward_import(graph):
    up = sorted(f"{a} -> {b}" for a, (top, late) in graph.items() for b in top | late if _floor(b) > _floor(a))
    assert not up, up


def test_no_import_cycle(graph):
    edges = {m: top for m, (top, _) in graph.items()}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, cycles


def test_no_function_level_import_of_the_package(graph):
    """A module of t4lib imported inside a function hides a dependency (often a cycle); third-party
    optional dependencies (transformers, trl, ...) may still be imported late."""
    late = sorted(f"{a} -> {b}" for a, (_, l) in graph.items() for b in l)
    assert not late, late


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above can fail: a planted cycle and a planted upward import are found."""
    pkg = tmp_path / "t4lib"
    (pkg / "core").mkdir(parents=True)
    (pkg / "ops").mkdir()
    for p in (pkg, pkg / "core", pkg / "ops"):
        (p / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from t4lib.ops import b\n")
    (pkg / "ops" / "b.py").write_text("from t4lib.core import a\n\ndef f():\n    from t4lib.core import c\n")
    (pkg / "core" / "c.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    g = _graph()
    assert g["t4lib.core.a"][0] == {"t4lib.ops.b"} and g["t4lib.ops.b"][1] == {"t4lib.core.c"}
    with pytest.raises(AssertionError):
        test_no_upward_import(g)
    with pytest.raises(AssertionError):
        test_no_import_cycle(g)
    with pytest.raises(AssertionError):
        test_no_function_level_import_of_the_package(g)


def _uncommented_late_imports(root: Path) -> list[str]:
    """Imports inside a function of ``root``'s t4lib with no comment on their line or the line above."""
    out = []
    for path in sorted((root / "t4lib").rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    if "#" not in lines[node.lineno - 1] and not above.startswith("#"):
                        out.append(f"{path.relative_to(root)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(set(out))


def test_every_function_level_import_says_why():
    """A late import is the exception (an optional dependency, a torch-free import path): each says why."""
    assert not _uncommented_late_imports(ROOT), _uncommented_late_imports(ROOT)


def test_the_late_import_check_sees_an_uncommented_one(tmp_path):
    (tmp_path / "t4lib").mkdir()
    (tmp_path / "t4lib" / "m.py").write_text("def f():\n    import json  # deferred: why\n\n\ndef g():\n"
                                              "    import torch\n")
    assert _uncommented_late_imports(tmp_path) == ["t4lib/m.py:6: import torch"]
