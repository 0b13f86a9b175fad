"""What a record was produced with: the git commit, and the *closure* of the unit that produced it.

A **unit** is a benchmark module, a notebook, a GPU test file or a lab script. Its **closure** is
``{path: fingerprint}`` over the unit itself, every module of this repository it imports (followed to the
end, a function-level import included: it runs when the unit does), and the kernel sources of every op family
a module of it binds (a module-level ``FAMILY = "<name>"``: ``kernels/<name>.cu`` and the headers it includes).
A record goes stale only when a file of its own closure changed, and says which.

A **fingerprint** ignores what cannot change a result: a ``.py`` file is fingerprinted by its syntax tree with
docstrings dropped (comments and layout are not in the tree), a ``.cu``/``.cuh`` file by its text without
comments and blank lines, a notebook by its code cells (their syntax trees) without the install cell, which does
nothing outside Colab and Kaggle.

Formatting infrastructure (:data:`INFRASTRUCTURE`: this module, the results writer, the notebook helpers) is
not part of any closure; what it writes is versioned by :data:`SCHEMA` instead.

Everything here takes the repository root as an argument, so the same code computes the closure of a unit as
it stood at an earlier commit (a tree extracted with ``git archive``). Nothing here reads ``tests/`` on its own:
a caller that wants a test file's closure names the file.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import re
import subprocess
import tokenize
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GPU_MARKER = "gpu"
CUDA_SUFFIXES = (".cu", ".cuh")
# The version of the provenance format (closures, fingerprints, the stamp of an executed notebook). Version 1
# was one sha256 over every GPU-test-reachable source; records of it were re-stamped by content (`restamped`).
SCHEMA = 2
# Formatting and bookkeeping infrastructure, versioned by SCHEMA instead of entering closures.
INFRASTRUCTURE = ("t4lib/core/provenance.py", "t4lib/core/results.py", "t4lib/core/notebook.py")
# The first line of every notebook's install cell (t4lib.core.notebook.install_cell).
INSTALL_CELL_MARK = "# Colab / Kaggle: install t4lib"
UNRECORDED = "unrecorded"
_FP = re.compile(r"[0-9a-f]{16}")


def git_commit(repo: Path = REPO) -> tuple[str, bool]:
    """(commit, dirty) of the checkout: dirty when a tracked file other than an output (``results/``, the README
    whose table is generated from them) differs from the commit, so that writing one record does not make the next
    one dirty. A tree shipped to a
    GPU machine carries no ``.git``: there ``$T4LIB_COMMIT`` names the commit and ``$T4LIB_DIRTY`` (``0``/``1``)
    whether the shipped tree differed from it, both set by whoever shipped it. Without either,
    ("unknown", True): a tree nobody can tie to a commit is never called clean."""
    if os.environ.get("T4LIB_COMMIT"):
        flag = os.environ.get("T4LIB_DIRTY")
        if flag not in ("0", "1"):
            raise RuntimeError("T4LIB_COMMIT is set but T4LIB_DIRTY is not '0' or '1': set both where the tree "
                               "is shipped (T4LIB_DIRTY=1 when `git status --porcelain --untracked-files=no` "
                               "printed anything there)")
        return os.environ["T4LIB_COMMIT"], flag == "1"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=30)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 ":(exclude)results", ":(exclude)README.md"], cwd=repo,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown", True
    if head.returncode != 0 or status.returncode != 0:
        return "unknown", True
    return head.stdout.strip(), bool(status.stdout.strip())


# ---------------------------------------------------------------- fingerprints

def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _serialize(node) -> str:
    """A syntax tree as text that does not depend on the Python version reading it: ``ast.dump`` shows the fields a
    version knows (3.12 added ``type_params`` to every function and class), so fields that are None or empty are
    left out, and every other field is named."""
    if isinstance(node, ast.AST):
        parts = []
        for name in node._fields:
            v = getattr(node, name, None)
            if v is None or (isinstance(v, list) and not v):
                continue
            parts.append(f"{name}={_serialize(v)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_serialize(x) for x in node) + "]"
    return repr(node)


def _python_fingerprint_text(text: str, filename: str) -> str:
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError:   # not Python (a cell of shell escapes, say): its text without comments
        return _strip_hash_comments(text)
    return _serialize(_strip_docstrings(tree))


def _strip_hash_comments(text: str) -> str:
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL)]
        return tokenize.untokenize((t.type, t.string) for t in toks)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(ln.split("#", 1)[0].rstrip() for ln in text.splitlines() if ln.split("#", 1)[0].strip())


_C_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_c_comments(text: str) -> str:
    """C/C++/CUDA source without comments (string and character literals kept whole), trailing spaces and
    blank lines."""
    out = _C_TOKENS.sub(lambda m: " " if m[0].startswith("/") else m[0], text)
    return "\n".join(ln.rstrip() for ln in out.splitlines() if ln.strip())


def notebook_code(text: str) -> list[str]:
    """The sources of a notebook's code cells (``text``: the .ipynb JSON), the install cell left out."""
    nb = json.loads(text)
    cells = []
    for c in nb.get("cells", []):
        if c.get("cell_type") != "code":
            continue
        src = "".join(c.get("source", [])) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        if src.lstrip().startswith(INSTALL_CELL_MARK):
            continue
        cells.append(src)
    return cells


def _cell_python(src: str) -> str:
    """A cell's Python: IPython's line magics and shell escapes blanked (they run no t4lib code)."""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines())


def fingerprint_text(path: str, text: str) -> str:
    """The fingerprint of a file named ``path`` (its suffix decides how it is read) whose content is ``text``:
    16 hex digits of a sha256 over what can change a result."""
    if path.endswith(".py"):
        body = _python_fingerprint_text(text, path)
    elif path.endswith(CUDA_SUFFIXES):
        body = strip_c_comments(text)
    elif path.endswith(".ipynb"):
        body = "\n\0\n".join(_python_fingerprint_text(_cell_python(c), path) for c in notebook_code(text))
    else:
        body = text
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@lru_cache(maxsize=4096)
def _fingerprint_cached(path: str, mtime_ns: int, size: int) -> str:
    return fingerprint_text(path, Path(path).read_text(encoding="utf-8"))


def fingerprint(path: str | os.PathLike) -> str:
    """:func:`fingerprint_text` of the file at ``path``."""
    p = Path(path)
    st = p.stat()
    return _fingerprint_cached(str(p), st.st_mtime_ns, st.st_size)


# ---------------------------------------------------------------- imports and closures

def _module_file(dotted: str, roots: tuple[Path, ...]) -> Path | None:
    for root in roots:
        base = root / Path(*dotted.split("."))
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
    return None


def _source_trees(path: Path) -> list[ast.AST]:
    if path.suffix not in (".py", ".ipynb"):
        return []   # a shell script or a kernel source imports no Python
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        trees = []
        for src in notebook_code(text):
            try:
                trees.append(ast.parse(_cell_python(src)))
            except SyntaxError:
                continue
        return trees
    return [ast.parse(text, filename=str(path))]


@lru_cache(maxsize=4096)
def _imports_cached(path: str, mtime_ns: int, repo: str) -> tuple[str, ...]:
    p, root = Path(path), Path(repo)
    # A module inside the repository's packages is imported by its dotted name from the root; a script, test or
    # notebook also imports its plain-named neighbours (a test's helper module, a lab's shared code).
    inside = p.is_relative_to(root / "t4lib")
    roots = (root,) if inside else (root, p.parent)
    package = list(p.relative_to(root).parts[:-1])
    found: set[str] = set()
    for tree in _source_trees(p):
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
                for i in range(1, len(parts) + 1):   # every package on the way runs its __init__
                    f = _module_file(".".join(parts[:i]), roots)
                    if f is not None and f != p:
                        found.add(str(f))
    return tuple(sorted(found))


def imports(path: Path, repo: Path = REPO) -> list[Path]:
    """The files of the repository at ``repo`` that ``path`` imports, at any depth of the module."""
    return [Path(f) for f in _imports_cached(str(path), path.stat().st_mtime_ns, str(repo))]


_FAMILY = re.compile(r'^FAMILY\s*=\s*["\']([A-Za-z0-9_]+)["\']', re.M)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def kernel_sources(family: str, repo: Path = REPO) -> list[Path]:
    """``kernels/<family>.cu`` and the headers of ``kernels/`` it includes, directly or through a header."""
    d = repo / "kernels"
    cu = d / f"{family}.cu"
    if not cu.is_file():
        return []
    seen, todo = [cu], [cu]
    while todo:
        for name in _INCLUDE.findall(todo.pop().read_text(encoding="utf-8")):
            h = d / name
            if h.is_file() and h not in seen:
                seen.append(h)
                todo.append(h)
    return seen


def resolve_unit(unit: str | os.PathLike, repo: Path = REPO) -> Path:
    """The file of a unit named by a path (absolute, or relative to ``repo``) or a dotted module name
    (``t4lib.benchmarks.serving``, ``__main__`` excluded). ValueError when no such file exists."""
    s = str(unit)
    cands = [Path(s)] if os.path.isabs(s) else [repo / s]
    if re.fullmatch(r"[A-Za-z_][\w.]*", s) and not s.endswith((".py", ".ipynb")):
        base = repo / Path(*s.split("."))
        cands += [base.with_suffix(".py"), base / "__init__.py"]
    for c in cands:
        if c.is_file():
            try:
                c.resolve().relative_to(repo.resolve())
            except ValueError:
                raise ValueError(f"producer: {s!r} is outside the repository {repo}") from None
            return c.resolve()
    raise ValueError(f"producer: no module, script or notebook {s!r} in {repo} (a record names the unit that "
                     "produced it: a path relative to the repository, or a dotted module name)")


def rel(path: Path, repo: Path = REPO) -> str:
    return path.resolve().relative_to(repo.resolve()).as_posix()


def closure(unit: str | os.PathLike, repo: Path = REPO) -> dict[str, str]:
    """``{path: fingerprint}`` of the unit, everything it imports inside the repository (infrastructure left out)
    and the kernel sources of the families it binds. Paths are relative to ``repo``."""
    repo = Path(repo).resolve()
    start = resolve_unit(unit, repo)
    seen: set[Path] = set()
    todo = [start]
    while todo:
        p = todo.pop()
        if p in seen or rel(p, repo) in INFRASTRUCTURE:
            continue
        seen.add(p)
        todo += [q.resolve() for q in imports(p, repo) if q.resolve() not in seen]
    files = set(seen)
    for p in seen:
        if p.suffix == ".py":
            for fam in _FAMILY.findall(p.read_text(encoding="utf-8")):
                files.update(q.resolve() for q in kernel_sources(fam, repo))
    return {rel(p, repo): fingerprint(p) for p in sorted(files)}


def changed_since(recorded: object, producer: str | None, repo: Path = REPO) -> list[str]:
    """The files whose fingerprints differ between a recorded closure and the producer's closure today (changed,
    gone, or newly imported), sorted; empty when the record is current. A record whose closure was not recorded,
    or whose producer no longer exists, names that instead."""
    if not isinstance(recorded, dict) or not recorded or not producer:
        return ["(closure not recorded)"]
    if any(v == UNRECORDED for v in recorded.values()):
        return ["(closure not recorded)"]
    try:
        now = closure(producer, repo)
    except (ValueError, OSError, SyntaxError):
        return [f"{producer} (gone)"]
    return sorted(p if p in now else f"{p} (gone)" for p in set(recorded) | set(now)
                  if recorded.get(p) != now.get(p))


def valid_closure(c: object) -> bool:
    """A closure as records store it: a non-empty ``{relative path: 16 hex digits}``, or every fingerprint
    ``unrecorded`` (a record older than closures, never current)."""
    return isinstance(c, dict) and bool(c) and all(
        isinstance(k, str) and not k.startswith("/") and isinstance(v, str) and (_FP.fullmatch(v) or v == UNRECORDED)
        for k, v in c.items())


def provenance_of(producer: str | os.PathLike, repo: Path = REPO) -> dict:
    """The provenance block of a record about to be written by ``producer``: schema, commit, dirty, the producer
    (relative path) and its closure. ValueError when the producer does not exist."""
    path = resolve_unit(producer, repo)
    commit, dirty = git_commit(repo)
    return {"schema": SCHEMA, "commit": commit, "dirty": dirty, "producer": rel(path, repo),
            "closure": closure(path, repo)}
