"""Every notebook (those added later included) opens with the Colab/Kaggle install cell of t4lib.core.notebook,
installing exactly the extras of pyproject.toml that the notebook imports, from the repository pyproject.toml
declares.

The extras a notebook needs are derived from its code, not listed by hand: the imports of its code cells; the
imports of every t4lib module it names (function-level ones included: those are what its calls run); and,
transitively, the module-level imports of every t4lib module reached. Each third-party module maps to the
distribution that provides it (pyproject.toml's requirement names, or the installed distributions' file
lists); a module provided by a core dependency needs no extra, and one no extra declares (bitsandbytes, fla:
optional baselines; IPython: part of every notebook runtime) is not asked of the cell.
"""
import ast
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from t4lib.core import notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _declared_repository() -> str:
    return _pyproject()["project"]["urls"]["Repository"]


def _dist_name(requirement: str) -> str:
    """``"transformers>=4.51"`` -> ``"transformers"``; names normalised as PEP 503 does, with ``_``."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "_", name).lower()


def module_extras() -> dict[str, str | None]:
    """Top-level module name -> the extra that installs it (``None``: a core dependency)."""
    project = _pyproject()["project"]
    by_dist: dict[str, str | None] = {}
    for extra, reqs in project["optional-dependencies"].items():
        for r in reqs:
            by_dist.setdefault(_dist_name(r), extra)
    for r in project["dependencies"]:
        by_dist[_dist_name(r)] = None
    modules = {d: e for d, e in by_dist.items()}  # a distribution's module is usually its name
    for module, dists in metadata.packages_distributions().items():
        for d in dists:
            if _dist_name(d) in by_dist and (module not in modules or by_dist[_dist_name(d)] is None):
                modules[module] = by_dist[_dist_name(d)]
    return modules


def _imports(tree: ast.AST, package: str, module_level_only: bool) -> set[str]:
    """Absolute names imported in ``tree`` (``from a import b`` gives ``a`` and ``a.b``)."""
    if module_level_only:
        nodes, todo = [], list(getattr(tree, "body", []))
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            nodes.append(n)
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo += [c for c in getattr(n, field, []) if isinstance(c, ast.AST)]
    else:
        nodes = list(ast.walk(tree))
    out = set()
    for n in nodes:
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")[: len(package.split(".")) - n.level + 1]
                base = ".".join(parts + ([n.module] if n.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in n.names}
    return out


def _t4lib_file(module: str) -> Path | None:
    p = ROOT.joinpath(*module.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def _parse_module(module: str):
    f = _t4lib_file(module)
    if f is None:
        return None, None
    return ast.parse(f.read_text()), module if f.name == "__init__.py" else module.rsplit(".", 1)[0]


def _code_cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def code_cell_trees(path: Path) -> list[ast.Module]:
    """The notebook's own code: a syntax tree per code cell after the install cell, IPython's % and ! lines left
    out."""
    trees = []
    for src in _code_cells(path)[1:]:  # the install cell itself is not the notebook's code
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        trees.append(ast.parse(src))
    return trees


def cell_extras(cell: str) -> set[str]:
    """The extras an install cell installs (``"-e", "./t4lib[a,b]"`` -> ``{"a", "b"}``)."""
    m = re.search(r'"-e", "\./t4lib(?:\[([a-z,]*)\])?"', cell)
    return set(m.group(1).split(",")) if m and m.group(1) else set()


def notebook_imports(path: Path) -> set[str]:
    """Top-level third-party (and stdlib) modules the notebook needs, by the rule in the docstring."""
    named = set()
    for tree in code_cell_trees(path):
        named |= _imports(tree, "", module_level_only=False)
    todo = set(named)
    for m in named:
        if m.split(".")[0] == "t4lib":
            tree, package = _parse_module(m)
            if tree is not None:
                todo |= _imports(tree, package, module_level_only=False)
    seen, third_party = set(), set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        top = m.split(".")[0]
        if top != "t4lib":
            third_party.add(top)
            continue
        parts = m.split(".")
        todo |= {".".join(parts[:i]) for i in range(1, len(parts))}
        tree, package = _parse_module(m)
        if tree is not None:
            todo |= _imports(tree, package, module_level_only=True)
    return third_party - set(sys.stdlib_module_names)


def needed_extras(path: Path) -> set[str]:
    extras = module_extras()
    return {extras[m] for m in notebook_imports(path) if extras.get(m)}


def test_install_cell_clones_the_declared_repository():
    assert notebook.REPOSITORY_URL == _declared_repository()
    assert f'"{_declared_repository()}"' in notebook.install_cell()


def test_extras_map_covers_the_packages_the_notebooks_name():
    extras = module_extras()
    assert extras["trl"] == extras["peft"] == extras["datasets"] == extras["math_verify"] == "train"
    assert extras["gguf"] == "gguf" and extras["matplotlib"] == "notebooks"
    assert extras["torch"] is None and extras["numpy"] is None


@pytest.mark.parametrize("extras", [(), ("notebooks",), ("gguf", "notebooks", "train")])
def test_install_cell_installs_what_it_says_and_keeps_torch(extras):
    cell = notebook.install_cell(extras)
    compile(cell, "install_cell", "exec")
    spec = "./t4lib" + (f"[{','.join(extras)}]" if extras else "")
    assert f'"-e", "{spec}"' in cell and f"pip install {spec} " in cell
    assert '"-c", "torch-constraint.txt"' in cell and "torch=={version('torch')}" in cell
    assert 'google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ' in cell


def test_install_cell_does_nothing_outside_colab_and_kaggle(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(notebook.install_cell(("notebooks", "train")), {})
    assert list(tmp_path.iterdir()) == []


def test_derivation_finds_the_training_and_gguf_stacks():
    by_stem = {p.stem[:2]: needed_extras(p) for p in NOTEBOOKS}
    for stem in ("05", "06"):
        if stem in by_stem:
            assert "train" in by_stem[stem], f"notebook {stem}: TRL/PEFT/datasets/math-verify not found"
    if "07" in by_stem:
        assert {"gguf", "train"} <= by_stem["07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_code_cell_installs_the_extras_the_notebook_imports(path):
    cells = _code_cells(path)
    assert cells, f"{path.name} has no code cell"
    need = needed_extras(path)
    has = cell_extras(cells[0])
    assert need <= has, (f"{path.name}: its imports need the extras {sorted(need)}, the install cell installs "
                         f"{sorted(has)}; paste t4lib.core.notebook.install_cell({sorted(need)})")
    assert cells[0] == notebook.install_cell(need), (
        f"{path.name}: the first code cell differs from t4lib.core.notebook.install_cell({sorted(need)}); paste that")


# ----------------------------------------------------------------------------- the fresh Colab-like environment

class _Pip:
    """Stands in for ``subprocess.run``: records each command, installs nothing, reaches no network."""

    def __init__(self):
        self.calls = []

    def __call__(self, cmd, **kwargs):
        self.calls.append(list(cmd))
        return subprocess.CompletedProcess(cmd, 0)


def test_colab_env_check_installs_from_the_checkout_it_is_given(tmp_path, monkeypatch):
    """run_all.sh's Colab-like environment runs the install cell outside Colab by presenting google.colab only to
    it, and from a local copy named by T4LIB_GIT instead of the repository URL (colab_env_check.colab_kernel):
    the copy is taken, pip installs it with the cell's extras and the torch constraint, nothing is cloned."""
    import colab_env_check

    src = tmp_path / "checkout"
    (src / "t4lib").mkdir(parents=True)
    (src / "t4lib" / "__init__.py").write_text("")
    (src / "pyproject.toml").write_text("# the checkout\n")
    work = tmp_path / "content"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setenv("T4LIB_GIT", "unset by the test")  # restored afterwards; colab_kernel sets it
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(metadata, "requires", _not_installed)  # a fresh runtime: no t4lib yet
    pip = _Pip()
    monkeypatch.setattr(subprocess, "run", pip)

    failed = colab_env_check.colab_kernel(notebook.install_cell(("notebooks", "train")),
                                          ["import json", "import no_such_module_of_t4lib"], str(src))
    assert pip.calls == [[sys.executable, "-m", "pip", "install", "-q", "-c", "torch-constraint.txt",
                          "-e", "./t4lib[notebooks,train]"]]
    assert (work / "t4lib" / "pyproject.toml").read_text() == "# the checkout\n"
    assert (work / "torch-constraint.txt").read_text() == f"torch=={metadata.version('torch')}\n"
    assert sys.path[0] == str(work / "t4lib")
    assert "google.colab" not in sys.modules  # presented to the install cell only
    assert [s for s, _ in failed] == ["import no_such_module_of_t4lib"]
    assert failed[0][1].startswith("ModuleNotFoundError")


def _not_installed(name):
    raise metadata.PackageNotFoundError(name)


def _installed(requirements: list[str], versions: dict[str, str]):
    """Stand-ins for importlib.metadata's ``requires`` and ``version``: t4lib installed with ``requirements``
    (its metadata's form, ``'trl; extra == "train"'``), and ``versions`` the distributions present."""
    def requires(name):
        if name != "t4lib":
            raise metadata.PackageNotFoundError(name)
        return requirements

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]
    return requires, version


_T4LIB_REQUIRES = ['torch>=2.1', 'numpy', 'matplotlib; extra == "notebooks"', 'transformers>=5.0; extra == "train"',
                   'trl; extra == "train"', 'gguf>=0.10; extra == "gguf"']


@pytest.mark.parametrize("present, wanted", [
    ({"torch": "2.13.0", "numpy": "2.0", "matplotlib": "3.9"}, ["trl"]),  # an earlier notebook's extras only
    ({"torch": "2.13.0", "numpy": "2.0", "matplotlib": "3.9", "transformers": "4.57.1", "trl": "0.20"},
     ["transformers 4.57.1 (needs >=5.0)"]),  # the runtime's own transformers, below the floor
], ids=["extra-missing", "extra-too-old"])
def test_install_cell_installs_missing_extras_although_t4lib_is_there(tmp_path, monkeypatch, present, wanted, capsys):
    """Keyed on what is installed, not on a folder: in the Kaggle loop of the README an earlier notebook left ./t4lib
    and an install of t4lib with its own extras; a later notebook that imports more installs them, from ./t4lib."""
    (tmp_path / "t4lib").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("T4LIB_GIT", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    requires, version = _installed(_T4LIB_REQUIRES, present)
    monkeypatch.setattr(metadata, "requires", requires)
    monkeypatch.setattr(metadata, "version", version)
    pip = _Pip()
    monkeypatch.setattr(subprocess, "run", pip)
    exec(notebook.install_cell(("notebooks", "train")), {})
    assert pip.calls == [[sys.executable, "-m", "pip", "install", "-q", "-c", "torch-constraint.txt",
                          "-e", "./t4lib[notebooks,train]"]]  # no clone, no copy: ./t4lib is reused
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t4lib", "torch-constraint.txt"]
    out = capsys.readouterr().out
    assert all(w in out for w in wanted) and f"from {tmp_path / 't4lib'}" in out
    assert sys.path[0] == str(tmp_path / "t4lib")


def test_install_cell_installs_nothing_when_t4lib_and_its_extras_are_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "google.colab", sys)  # any module: the cell only asks whether it is there
    requires, version = _installed(_T4LIB_REQUIRES, {"torch": "2.13.0", "numpy": "2.0", "matplotlib": "3.9",
                                                     "transformers": "5.12.0", "trl": "0.20"})
    monkeypatch.setattr(metadata, "requires", requires)
    monkeypatch.setattr(metadata, "version", version)
    pip = _Pip()
    monkeypatch.setattr(subprocess, "run", pip)
    exec(notebook.install_cell(("notebooks", "train")), {})  # gguf is not asked for: its absence does not count
    assert pip.calls == [] and list(tmp_path.iterdir()) == []


def test_a_local_checkout_alone_does_not_make_the_cell_install(tmp_path, monkeypatch):
    """Outside Colab and Kaggle the cell does nothing, T4LIB_GIT set or not: no copy, no pip."""
    src = tmp_path / "checkout"
    src.mkdir()
    work = tmp_path / "content"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setenv("T4LIB_GIT", str(src))
    pip = _Pip()
    monkeypatch.setattr(subprocess, "run", pip)
    exec(notebook.install_cell(("notebooks", "train")), {})
    assert pip.calls == [] and list(work.iterdir()) == []


def test_colab_env_check_imports_what_the_notebooks_import():
    """What the Colab-like environment imports after each install cell: the cells' own import statements and the
    third-party modules the derivation finds, optional baselines left out; notebooks ordered so the extras nest."""
    import colab_env_check

    plans = colab_env_check.plan(NOTEBOOKS)
    assert sorted(p["path"] for p in plans) == NOTEBOOKS
    for p in plans:
        assert p["extras"] == cell_extras(_code_cells(p["path"])[0])
        assert not {f"import {m}" for m in colab_env_check.OPTIONAL_BASELINES} & set(p["statements"])
        for tree in code_cell_trees(p["path"]):
            for n in ast.walk(tree):
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    assert ast.unparse(n) in p["statements"], (p["path"].name, ast.unparse(n))
    for before, after in zip(plans, plans[1:]):
        assert before["extras"] <= after["extras"], (
            f"{after['path'].name} would be checked with extras it does not install "
            f"({sorted(before['extras'] - after['extras'])}, from {before['path'].name})")
