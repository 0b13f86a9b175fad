"""The README's results table, generated from ``results/`` rather than typed.

The table's text lives in ``readme_results.md`` beside this module; every number
in it that a results file holds is a placeholder ``{{FILE|FIGURE|FORMAT}}``:
``FILE`` relative to ``results/``, ``FIGURE`` a figure's name in it, ``FORMAT`` a
Python format spec, optionally followed by ``*SCALE`` (``{{nvidia-h200/x.json|
k/t4_projection|.2f*0.001}}``: microseconds shown as milliseconds). Two other
records hold figures that are not results files, and are read by key path
(dot-separated keys, a trailing ``#`` for a list's length): the GPU verification
ledger (``FILE`` under ``verification/``, e.g. ``{{verification/nvidia-h200.json|
gpu_tests.counts.passed|d}}``) and the local models' training records (``FILE``
``data:models/<name>/training_record.json``, relative to the repository's data
folder). ``render``
fills them in; ``python -m t4lib report --readme README.md`` rewrites the
README's section between ``BEGIN`` and ``END``, and a test fails when the two
differ.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import results

TEMPLATE = Path(__file__).with_name("readme_results.md")
BEGIN = ("<!-- results table: generated from results/ by `python -m t4lib report --readme README.md` "
         "(template: t4lib/readme_results.md) -->")
END = "<!-- end of the generated results table -->"
_FIELD = re.compile(r"\{\{([^|{}]+)\|([^|{}]+)\|([^|{}]*)\}\}")


DATA = Path(__file__).resolve().parent.parent / "data"


def _record(path: Path, file: str, key_path: str):
    """The value at ``key_path`` (``a.b.c``; a trailing ``#``: the length of the list there). A key may hold
    dots itself (a file name such as ``tests/test_x.py``): each step takes the longest run of parts that is a key."""
    count = key_path.endswith("#")
    v = json.loads(path.read_text())
    parts, i = key_path.rstrip("#").split("."), 0
    while i < len(parts):
        j = next((j for j in range(len(parts), i, -1) if isinstance(v, dict) and ".".join(parts[i:j]) in v), None)
        if j is None:
            raise KeyError(f"{file} holds no {key_path!r} (no key {parts[i]!r}; named in {TEMPLATE.name})")
        v, i = v[".".join(parts[i:j])], j
    return len(v) if count else v


def _value(root: Path, cache: dict, file: str, name: str):
    record = file.startswith("data:") or file.startswith("verification/")
    path = DATA / file[len("data:"):] if file.startswith("data:") else root / file
    if not path.is_file():
        raise KeyError(f"{'record' if record else 'results file'} {file} (named in {TEMPLATE.name}) does not exist")
    if record:
        return _record(path, file, name)
    if file not in cache:
        cache[file] = results.figures_by_name(path)
    if name not in cache[file]:
        raise KeyError(f"{file} holds no figure {name!r} (named in {TEMPLATE.name})")
    return cache[file][name]["value"]


def render(template: str | None = None, root: str | Path | None = None) -> str:
    """The template with every placeholder replaced by its figure's value."""
    template = TEMPLATE.read_text() if template is None else template
    root = Path(root) if root else results.results_dir()
    cache: dict = {}

    def sub(m: re.Match) -> str:
        spec, _, scale = m[3].partition("*")
        v = _value(root, cache, m[1].strip(), m[2].strip())
        return format(v * float(scale) if scale else v, spec)
    return _FIELD.sub(sub, template)


def section(readme: str) -> str:
    """The generated part of a README's text (between ``BEGIN`` and ``END``)."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"the README has no generated results section (markers {BEGIN!r} ... {END!r})")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def update(readme_path: str | Path, root: str | Path | None = None) -> bool:
    """Rewrite the README's generated section from ``results/``; True when it changed."""
    path = Path(readme_path)
    text = path.read_text()
    old = section(text)
    new = render(root=root)
    if new == old:
        return False
    head, rest = text.split(BEGIN, 1)
    path.write_text(head + BEGIN + "\n" + new + END + rest.split(END, 1)[1])
    return True
