"""What a figure or a ledger entry was measured with: the git commit, and the hash of every
source that decides what a kernel computes or what a GPU test asserts.

The source set is computed, not listed: every file the GPU tests import, followed through
``t4lib`` (and the tests' own helpers) to the end, plus every CUDA source. A module a GPU test
reaches only through another module is still in it; a module no GPU test reaches is not, so
changing it does not call for a new GPU run.
"""
from __future__ import annotations

import ast
import hashlib
import os
import subprocess
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GPU_MARKER = "gpu"
CUDA_SUFFIXES = (".cu", ".cuh")


def git_commit(repo: Path = REPO) -> tuple[str, bool | None]:
    """(commit, dirty) of the checkout. ``$T4LIB_COMMIT``, when set, names it (dirty unknown): a
    tree shipped to a GPU machine may carry a stale ``.git`` or none; without either, ("unknown", None)."""
    if os.environ.get("T4LIB_COMMIT"):
        return os.environ["T4LIB_COMMIT"], None
    fallback = ("unknown", None)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return fallback
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=30)
        return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return fallback


def gpu_test_files(repo: Path = REPO) -> list[Path]:
    """tests/*.py holding a gpu-marked test (``pytest.mark.gpu`` on a test or as ``pytestmark``)."""
    return [p for p in sorted((repo / "tests").glob("test_*.py")) if f"pytest.mark.{GPU_MARKER}" in p.read_text()]


def _module_file(dotted: str, repo: Path, beside: Path | None = None) -> Path | None:
    """The file of module ``dotted``: from the repository root, or (a test's helper module, imported by
    its plain name because pytest puts the test folder on the path) from the folder ``beside``."""
    for root in (repo, beside) if beside is not None else (repo,):
        base = root / Path(*dotted.split("."))
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
    return None


def _imports(path: Path, repo: Path) -> set[Path]:
    """The files of this repository that ``path`` imports, at any depth of the module (a
    function-level import counts: it runs when the test does)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = list(path.relative_to(repo).parts[:-1])
    found: set[Path] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join([*up, *([base] if base else [])])
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            # every package on the way is imported too (its __init__ runs)
            for i in range(1, len(parts) + 1):
                f = _module_file(".".join(parts[:i]), repo, path.parent if path.parent.name == "tests" else None)
                if f is not None:
                    found.add(f)
    return found


@lru_cache(maxsize=4)
def _ledger_sources(repo: Path) -> tuple[Path, ...]:
    tests = repo / "tests"
    todo = [*gpu_test_files(repo), *(p for p in (tests / "conftest.py",) if p.is_file())]
    seen: set[Path] = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += [q for q in _imports(p, repo) if q not in seen]
    cuda = [p for d in (repo / "kernels", repo / "t4lib") for p in d.rglob("*") if p.suffix in CUDA_SUFFIXES]
    return tuple(sorted(seen | set(cuda)))


def ledger_sources(repo: Path = REPO) -> list[Path]:
    """Every source that decides what a kernel computes or what a GPU test asserts: the GPU test
    files and conftest, every module they import (followed to the end), and every CUDA source."""
    return list(_ledger_sources(repo))


def source_hashes(files: list[Path] | None = None, repo: Path = REPO) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (ledger_sources(repo) if files is None else files)}


def combined_hash(hashes: dict[str, str]) -> str:
    h = hashlib.sha256()
    for k in sorted(hashes):
        h.update(f"{k}:{hashes[k]}\n".encode())
    return h.hexdigest()


def current_sources_sha256() -> str:
    """The hash of :func:`ledger_sources` as the tree stands."""
    return combined_hash(source_hashes())
