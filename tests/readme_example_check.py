"""The README's example, verbatim, from an installed (non-editable) wheel: it prints an answer that ends at the
model's end-of-sequence token, and stops, within 60 s.

    python tests/readme_example_check.py PYTHON

PYTHON is a fresh virtual environment's python holding the built wheel with the extra the README's pip line
names (``bash run_all.sh test`` makes it). The example runs in an empty folder, so nothing of the checkout is
importable; t4lib must come from PYTHON's site-packages. Not a pytest module (no test_ prefix): run_all.sh runs
it; tests/test_readme_example.py checks the extraction and the verdict on this checkout.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 60
EOS_TEXT = "<|endoftext|>"   # tiny-cpu's end-of-sequence token, as tok.decode prints it


def readme_example(readme: str) -> str:
    """The first ```python block after the README's ``## Example`` heading."""
    part = readme.split("\n## Example\n", 1)
    if len(part) != 2:
        raise ValueError("README.md has no '## Example' section")
    m = re.search(r"```python\n(.*?)```", part[1], flags=re.S)
    if not m:
        raise ValueError("README.md's Example section has no ```python block")
    return m.group(1)


def pip_line(readme: str) -> str:
    """The requirement of the README's install line (``t4lib[extra] @ git+...``)."""
    m = re.search(r'pip install "(t4lib[^"]*)"', readme)
    if not m:
        raise ValueError("README.md has no `pip install \"t4lib...\"` line")
    return m.group(1)


def verdict(stdout: str) -> list[str]:
    """What is wrong with the example's output (empty: it printed an EOS-terminated answer and nothing after)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return ["the example printed nothing"]
    last = lines[-1]
    errors = []
    if not last.rstrip().endswith(EOS_TEXT):
        errors.append(f"the answer does not end at the end-of-sequence token {EOS_TEXT!r}: {last!r}")
    if last.count(EOS_TEXT) != 1:
        errors.append(f"text past the end-of-sequence token: {last!r}")
    if not re.search(r"The answer is \d+", last):
        errors.append(f"no 'The answer is N' in the answer: {last!r}")
    return errors


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    python = argv[0]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = readme_example(readme)
    with tempfile.TemporaryDirectory(prefix="readme-example-") as tmp:
        where = subprocess.run([python, "-c", "import t4lib, sys; print(t4lib.__file__)"], cwd=tmp,
                               capture_output=True, text=True)
        origin = where.stdout.strip()
        if where.returncode != 0 or "site-packages" not in origin or origin.startswith(str(ROOT)):
            print(f"FAIL t4lib does not come from an installed wheel: {origin or where.stderr.strip()}")
            return 1
        (Path(tmp) / "example.py").write_text(code, encoding="utf-8")
        t0 = time.monotonic()
        try:
            r = subprocess.run([python, "example.py"], cwd=tmp, capture_output=True, text=True, timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            print(f"FAIL the README's example ran past {LIMIT_S} s")
            return 1
        secs = time.monotonic() - t0
    print(r.stdout, end="")
    errors = [f"exit status {r.returncode}:\n{r.stderr[-3000:]}"] if r.returncode else verdict(r.stdout)
    for e in errors:
        print(f"FAIL {e}")
    if not errors:
        print(f"ok   the README's example ({pip_line(readme)}, wheel at {origin}): an EOS-terminated answer "
              f"in {secs:.1f} s (limit {LIMIT_S} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
