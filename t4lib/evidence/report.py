"""The README's results table and the records of ``results/README.md``, generated from ``results/``.

Two templates live beside this module: ``report_summary.md`` (the README's table: at most a dozen rows of short
cells, each linking to its record) and ``report_results.md`` (the records, one section per row, with the detail).
Every number in them that a results file holds is a placeholder ``{{FILE|FIGURE|FORMAT}}``:
``FILE`` relative to ``results/``, ``FIGURE`` a figure's name in it, ``FORMAT`` a
Python format spec, optionally followed by ``*SCALE`` (``{{nvidia-h200/x.json|
k/t4_projection|.2f*0.001}}``: microseconds shown as milliseconds). Two other
records hold figures that are not results files, and are read by key path
(dot-separated keys, a trailing ``#`` for a list's length): the GPU verification
ledger (``FILE`` under ``verification/``, e.g. ``{{verification/nvidia-h200.json|
gpu_tests.counts.passed|d}}``) and the local models' training records (``FILE``
``data:models/<name>/training_record.json``, relative to the repository's data
folder). A results file's other keys are read the same way with ``@`` before the key path
(``{{nvidia-h200/rehearsal.json|@runs.07_x/t4.status|s}}``: a run's status). ``{{sources}}`` says whether the files named beside it (in the same table row, or else the same
paragraph) were measured at today's sources: ``current``, ``changed since`` (their sources changed since),
``not recorded`` (the file records none). ``render`` fills them in; ``python -m t4lib report --readme README.md``
rewrites the README's section between ``BEGIN`` and ``END``, ``python -m t4lib report --out results/README.md``
writes the records, the executed notebooks (:func:`executed_notebooks`) and the full figure table, and a test
fails when the README differs.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from t4lib.core import results

TEMPLATE = Path(__file__).with_name("report_summary.md")
RECORDS = Path(__file__).with_name("report_results.md")
BEGIN = ("<!-- results table: generated from results/ by `python -m t4lib report --readme README.md` "
         "(template: t4lib/evidence/report_summary.md) -->")
END = "<!-- end of the generated results table -->"
_FIELD = re.compile(r"\{\{([^|{}]+)\|([^|{}]+)\|([^|{}]*)\}\}")
_SOURCES = "{{sources}}"


DATA = Path(__file__).resolve().parents[2] / "data"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _record(path: Path, file: str, key_path: str):
    """The value at ``key_path`` (``a.b.c``; a trailing ``#``: the length of the list there). A key may hold
    dots itself (a file name such as ``tests/test_x.py``): each step takes the longest run of parts that is a key."""
    count = key_path.endswith("#")
    v = json.loads(path.read_text())
    parts, i = key_path.rstrip("#").split("."), 0
    while i < len(parts):
        j = next((j for j in range(len(parts), i, -1) if isinstance(v, dict) and ".".join(parts[i:j]) in v), None)
        if j is None:
            raise KeyError(f"{file} holds no {key_path!r} (no key {parts[i]!r}; named in a template)")
        v, i = v[".".join(parts[i:j])], j
    return len(v) if count else v


def _value(root: Path, cache: dict, file: str, name: str):
    record = file.startswith("data:") or file.startswith("verification/")
    path = DATA / file[len("data:"):] if file.startswith("data:") else root / file
    if not path.is_file():
        raise KeyError(f"{'record' if record else 'results file'} {file} (named in a template) does not exist")
    if record:
        return _record(path, file, name)
    if name.startswith("@"):   # a key of the results file beside its figures (a run's status, say)
        return _record(path, file, name[1:])
    if file not in cache:
        cache[file] = results.figures_by_name(path)
    if name not in cache[file]:
        raise KeyError(f"{file} holds no figure {name!r} (named in a template)")
    return cache[file][name]["value"]


def _status(root: Path, file: str, current: str) -> str:
    """``current``, ``changed since <commit>`` or ``not recorded`` for one file a placeholder names."""
    if file.startswith("verification/"):
        doc = json.loads((root / file).read_text())
        if doc.get("sources_sha256") == current:
            return "current"
        return f"changed since {str(doc.get('commit') or '')[:10]}".strip()
    status = results.provenance_status(json.loads((root / file).read_text()), current)
    return "not recorded" if status == "no provenance" else status.removeprefix("sources ")


def _sources(root: Path, files: list[str], current: str, short: bool) -> str:
    files = sorted({f for f in files if not f.startswith("data:")})
    if not files:
        return "—"
    status = {f: _status(root, f, current) for f in files}
    if short:
        kinds = [k for k in ("current", "changed since", "not recorded")
                 if any(v.startswith(k) for v in status.values())]
        return " / ".join(kinds)
    return "; ".join(f"`{f}` {v}" for f, v in status.items())


def render(template: str | None = None, root: str | Path | None = None) -> str:
    """The template with every placeholder replaced by its figure's value, and every ``{{sources}}`` by the
    provenance of the files its table row (short form) or paragraph (one status per file) names."""
    template = TEMPLATE.read_text() if template is None else template
    root = Path(root) if root else results.results_dir()
    cache: dict = {}

    def sub(m: re.Match) -> str:
        spec, _, scale = m[3].partition("*")
        v = _value(root, cache, m[1].strip(), m[2].strip())
        return format(v * float(scale) if scale else v, spec)

    if _SOURCES in template:
        current = results.current_sources_sha256()
        blocks = re.split(r"(\n\s*\n)", template)
        for i, block in enumerate(blocks):
            if _SOURCES not in block:
                continue
            lines = block.split("\n")
            for j, line in enumerate(lines):
                if _SOURCES in line and line.lstrip().startswith("|"):
                    files = [m[1].strip() for m in _FIELD.finditer(line)]
                    lines[j] = line.replace(_SOURCES, _sources(root, files, current, short=True))
            block = "\n".join(lines)
            if _SOURCES in block:
                files = [m[1].strip() for m in _FIELD.finditer(block)]
                block = block.replace(_SOURCES, _sources(root, files, current, short=False))
            blocks[i] = block
        template = "".join(blocks)
    return _FIELD.sub(sub, template)


def records(root: str | Path | None = None) -> str:
    """The records section of ``results/README.md``: every README row's detail (``report_results.md``)."""
    return ("## Records\n\nThe detail behind each row of the README's results table, generated from the files "
            "named (template: `t4lib/evidence/report_results.md`). Figures come from the GPU named in each record; T4 "
            "figures are projections (ESTIMATED), never measurements.\n\n" + render(RECORDS.read_text(), root))


def executed_notebooks(root: str | Path | None = None) -> str:
    """The executed-notebooks section of ``results/README.md``: every ``results/<device>/NN_*.ipynb`` but the
    CPU runs, with the profile, commit and sources a run stamps in its ``t4lib`` metadata, and whether those
    sources are today's (``current``, ``changed since``, or ``not recorded`` for a copy without the stamp)."""
    root = Path(root) if root else results.results_dir()
    current = results.current_sources_sha256()
    rows = ["| notebook | device | profile | commit | sources |", "|---|---|---|---|---|"]
    copies = sorted(p for p in root.glob("*/[0-9][0-9]_*.ipynb")
                    if p.parent.name != "cpu" and not p.name.endswith(".partial.ipynb"))   # a failed run's output
    never = sorted({p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")} - {p.stem for p in copies})
    for path in copies:
        meta = json.loads(path.read_text()).get("metadata", {}).get("t4lib") or {}
        src = meta.get("sources_sha256")
        status = "not recorded" if not src else "current" if src == current else "changed since"
        rows.append(f"| [{path.stem}]({path.relative_to(root).as_posix()}) | {meta.get('device', path.parent.name)} "
                    f"| {meta.get('profile', '—')} | {str(meta.get('commit') or '—')[:10]} | {status} |")
    return ("## Executed notebooks\n\nThe copies of the notebooks run on a GPU, with what each was run at "
            "(`run_all.sh run` stamps it); a copy whose sources changed since shows an earlier state of the "
            "code.\n\n" + "\n".join(rows) + "\n"
            + (f"\nNot run on a GPU: {', '.join(never)}.\n" if never else ""))


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
    results.atomic_write_text(path, head + BEGIN + "\n" + new + END + rest.split(END, 1)[1])
    return True
