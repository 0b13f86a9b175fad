"""A fresh Colab-like environment runs every notebook's install cell, then the notebook's imports, without error.

    python tests/colab_env_check.py PYTHON [NN ...]

PYTHON is a fresh virtual environment's python (no system site packages, nothing of the project) holding what a
Colab runtime already has; ``bash run_all.sh test`` makes it (``colab_env_check`` there says what it holds). NN
picks notebooks by number. Not a pytest module (no test_ prefix): run_all.sh runs it; tests/test_install_cell.py
tests its kernel side with pip mocked.

For each notebook, one process of PYTHON in a fresh folder does what a Colab kernel does: it runs the notebook's
first code cell as committed, with ``google.colab`` present (how the cell knows it is on Colab) and T4LIB_GIT naming
a copy of this checkout (the files git tracks or would track), which the cell copies instead of cloning the
repository URL; then it runs every import statement of the notebook's code cells and imports every third-party
module the notebook needs (the derivation of tests/test_install_cell.py: the imports of the t4lib modules it names,
function-level ones included, and of every t4lib module they reach). Optional baselines no extra declares
(bitsandbytes, fla) are not asked for. Notebooks run in order of the extras their cells install, fewest first, all
in the one environment: the notebooks' extras nest, so each is checked with no extra it did not ask for (a line says
so where that does not hold).
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# imported by t4lib only inside a function that falls back without them; no extra installs them
OPTIONAL_BASELINES = {"bitsandbytes", "fla"}


# ----------------------------------------------------------------------------- the kernel side (stdlib only)

def colab_kernel(cell: str, statements: list[str], source: str) -> list[tuple[str, str]]:
    """In this process, as a Colab kernel would: run the install ``cell`` with ``google.colab`` present and
    T4LIB_GIT=``source``, then each of ``statements``. Returns the (statement, error) pairs that failed; an install
    cell that fails raises."""
    os.environ["T4LIB_GIT"] = source
    stub = "google.colab" not in sys.modules
    if stub:
        sys.modules["google.colab"] = types.ModuleType("google.colab")
    try:
        exec(compile(cell, "<install cell>", "exec"), {"__name__": "__main__"})
    finally:
        if stub:  # only the install cell asks; libraries that probe for Colab must not find a stand-in
            del sys.modules["google.colab"]
    failed = []
    for s in statements:
        try:
            exec(compile(s, "<notebook import>", "exec"), {"__name__": "__main__"})
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the others
            failed.append((s, f"{type(e).__name__}: {e}"))
    return failed


def _kernel_main(spec_path: str) -> int:
    from importlib.metadata import version

    spec = json.loads(Path(spec_path).read_text())
    out = {"torch_before": version("torch")}
    try:
        out["failed"] = colab_kernel(spec["cell"], spec["statements"], spec["source"])
    except Exception as e:  # noqa: BLE001
        out["install_error"] = f"{type(e).__name__}: {e}"
    out["torch_after"], out["transformers_after"] = version("torch"), version("transformers")
    Path(spec["result"]).write_text(json.dumps(out))
    return 0


# ----------------------------------------------------------------------------- the host side

def _source_copy(dest: Path) -> Path:
    """A copy of the checkout as a clone would have it (tracked and untracked, not ignored, files); the checkout
    itself where git cannot list it."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return ROOT
    for rel in filter(None, r.stdout.split("\0")):
        f = ROOT / rel
        if f.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / rel)
    return dest


def plan(notebooks: list[Path]) -> list[dict]:
    """Per notebook: its install cell, the extras it installs, and the import statements to run after it."""
    if str(ROOT) not in sys.path:  # this checkout's t4lib, not one installed elsewhere
        sys.path.insert(0, str(ROOT))
    import test_install_cell as derive  # the one derivation of a notebook's imports; it needs pytest, the host's

    out = []
    for path in notebooks:
        cell = derive._code_cells(path)[0]
        statements = []
        for tree in derive.code_cell_trees(path):
            for n in ast.walk(tree):
                if isinstance(n, (ast.Import, ast.ImportFrom)) and ast.unparse(n) not in statements:
                    statements.append(ast.unparse(n))
        modules = sorted(derive.notebook_imports(path) - OPTIONAL_BASELINES)
        statements += [f"import {m}" for m in modules if f"import {m}" not in statements]
        out.append({"path": path, "cell": cell, "extras": derive.cell_extras(cell), "statements": statements})
    return sorted(out, key=lambda p: (len(p["extras"]), p["path"].name))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--kernel":
        return _kernel_main(argv[1])
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    python, only = argv[0], argv[1:]
    notebooks = [p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                 if not only or p.name[:2] in only]
    failures, installed, t_all = [], set(), time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("T4LIB_WHEELS", "KAGGLE_KERNEL_RUN_TYPE")}
    with tempfile.TemporaryDirectory(prefix="colab-env-") as tmp:
        source = _source_copy(Path(tmp) / "source")
        for p in plan(notebooks):
            name, extras = p["path"].stem, p["extras"]
            extra_ones = installed - extras
            installed |= extras
            work = Path(tmp) / name
            work.mkdir()
            spec = {"cell": p["cell"], "statements": p["statements"], "source": str(source),
                    "result": str(work / "result.json")}
            (work / "spec.json").write_text(json.dumps(spec))
            t0 = time.monotonic()
            try:
                r = subprocess.run([python, str(Path(__file__).resolve()), "--kernel", str(work / "spec.json")],
                                   cwd=work, env=env, capture_output=True, text=True, timeout=300)
                log = r.stdout + r.stderr
                res = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else None
            except subprocess.TimeoutExpired as e:
                log, res = f"{e}\n{e.stdout or ''}{e.stderr or ''}", None
            secs = time.monotonic() - t0
            errors = []
            if res is None:
                errors.append("the kernel process ended without a result:\n" + "\n".join(log.splitlines()[-30:]))
            else:
                if "install_error" in res:
                    errors.append(f"install cell: {res['install_error']}")
                errors += [f"{s}: {e}" for s, e in res.get("failed", [])]
                if res["torch_after"] != res["torch_before"]:
                    errors.append(f"the install cell replaced torch {res['torch_before']} by {res['torch_after']}")
            head = f"{name}  extras: {','.join(sorted(extras)) or 'none'}  {len(p['statements'])} imports"
            if res is not None:
                head += f"  torch {res['torch_after']}, transformers {res['transformers_after']}"
            if extra_ones:
                head += f"  (also present: extras {sorted(extra_ones)} of notebooks checked before it)"
            print(f"{'ok  ' if not errors else 'FAIL'} {head}  ({secs:.0f} s)", flush=True)
            for e in errors:
                print(f"     {name}: {e}", flush=True)
            for line in log.splitlines():  # pip's word on conflicts it left (a dependency it could not satisfy)
                if line.startswith("ERROR:") or ", but you have " in line:
                    print(f"     {name}: pip: {line.strip()}", flush=True)
            if errors and res is not None and "install_error" in res:
                print("\n".join("     | " + line for line in log.splitlines()[-30:]), flush=True)
            failures += [name] if errors else []
    print(f"{len(notebooks) - len(failures)}/{len(notebooks)} notebooks install and import in a fresh Colab-like "
          f"environment ({time.monotonic() - t_all:.0f} s)" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
