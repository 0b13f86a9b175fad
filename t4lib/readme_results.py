"""The README's results table, generated from ``results/`` rather than typed.

The table's text lives in ``readme_results.md`` beside this module; every number
in it that a results file holds is a placeholder ``{{FILE|FIGURE|FORMAT}}``:
``FILE`` relative to ``results/``, ``FIGURE`` a figure's name in it, ``FORMAT`` a
Python format spec, optionally followed by ``*SCALE`` (``{{nvidia-h200/x.json|
k/t4_projection|.2f*0.001}}``: microseconds shown as milliseconds). ``render``
fills them in; ``python -m t4lib report --readme README.md`` rewrites the
README's section between ``BEGIN`` and ``END``, and a test fails when the two
differ.
"""
from __future__ import annotations

import re
from pathlib import Path

from . import results

TEMPLATE = Path(__file__).with_name("readme_results.md")
BEGIN = ("<!-- results table: generated from results/ by `python -m t4lib report --readme README.md` "
         "(template: t4lib/readme_results.md) -->")
END = "<!-- end of the generated results table -->"
_FIELD = re.compile(r"\{\{([^|{}]+)\|([^|{}]+)\|([^|{}]*)\}\}")


def _value(root: Path, cache: dict, file: str, name: str) -> float:
    if file not in cache:
        path = root / file
        if not path.is_file():
            raise KeyError(f"results file {file} (named in {TEMPLATE.name}) does not exist")
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
