"""The README's results table and the records of ``results/README.md``, generated from ``results/``.

Two templates live beside this module: ``report_summary.md`` (the README's table: at most a dozen rows of short
cells, each linking to its record) and ``report_results.md`` (the records, one section per row, with the detail).
Every number in them that a results file holds is a placeholder ``{{FILE|FIGURE|FORMAT}}``:
``FILE`` relative to ``results/``, ``FIGURE`` a figure's name in it, ``FORMAT`` a
Python format spec, optionally followed by ``*SCALE`` (``{{nvidia-h200/x.json|
k/t4_projection|.2f*0.001}}``: microseconds shown as milliseconds). ``FILE`` may name any GPU instead of one
(``*/x.json``): the figure then comes from every device whose record of it is current (both shown, each with its
device, where they differ; no device is chosen because its number is better), or, where none is current, from the
newest record, marked stale. ``{{ledger|KEY|FORMAT}}`` reads today's verdict over the GPU verification ledger
(:func:`ledger_figures`). Two other
records hold figures that are not results files, and are read by key path
(dot-separated keys, a trailing ``#`` for a list's length): the GPU verification
ledger (``FILE`` under ``verification/``, e.g. ``{{verification/nvidia-h200.json|
gpu_tests.counts.passed|d}}``) and the local models' training records (``FILE``
``data:models/<name>/training_record.json``, relative to the repository's data
folder). A results file's other keys are read the same way with ``@`` before the key path
(``{{nvidia-h200/rehearsal.json|@runs.07_x/t4.status|s}}``: a run's status). ``{{sources}}`` says whether the files named beside it (in the same table row, or else the same
paragraph) were measured at today's sources: ``current``, ``changed since: <the files of their closure that
changed>``, ``not recorded`` (the file records no closure). ``render`` fills them in; ``python -m t4lib report --readme README.md``
rewrites the README's section between ``BEGIN`` and ``END``, ``python -m t4lib report --out results/README.md``
writes the records, the executed notebooks (:func:`executed_notebooks`) and the full figure table, and a test
fails when the README differs.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from t4lib.core import results
from t4lib.core.notebook import stamp_status
from t4lib.evidence import verify

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
        if isinstance(v, list) and parts[i].isdigit() and int(parts[i]) < len(v):   # a list's item by its index
            v, i = v[int(parts[i])], i + 1
            continue
        j = next((j for j in range(len(parts), i, -1) if isinstance(v, dict) and ".".join(parts[i:j]) in v), None)
        if j is None:
            raise KeyError(f"{file} holds no {key_path!r} (no key {parts[i]!r}; named in a template)")
        v, i = v[".".join(parts[i:j])], j
    return len(v) if count else v


def device_label(slug: str) -> str:
    """``H200`` for ``nvidia-h200``, ``H100`` for ``nvidia-h100-80gb-hbm3``, ``cpu``: the short device name."""
    m = re.match(r"nvidia-(?:tesla-)?([a-z]\d+)", slug)
    return m[1].upper() if m else slug


class _Resolver:
    """Resolves placeholders against ``results/``: values, and which records (with their status) they came from."""

    def __init__(self, root: Path):
        self.root, self.docs, self.status = root, {}, {}
        self.used: list[tuple[str, str]] = []   # (file, status) of the records the current block read
        self._ledger = None

    def doc(self, file: str) -> dict:
        if file not in self.docs:
            path = self.root / file
            try:
                doc = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ValueError(f"{path}: not a readable JSON results file ({e})") from None
            results.validate(doc)
            self.docs[file] = doc
            self.status[file] = results.provenance_status(doc)
        return self.docs[file]

    def figure(self, file: str, name: str):
        if not (self.root / file).is_file():
            raise KeyError(f"results file {file} (named in a template) does not exist")
        figs = {f["name"]: f for f in self.doc(file)["figures"]}
        if name not in figs:
            raise KeyError(f"{file} holds no figure {name!r} (named in a template)")
        return figs[name]["value"]

    def candidates(self, pattern: str, name: str) -> list[str]:
        rel = pattern.split("/", 1)[1]
        out = []
        for d in sorted(p for p in self.root.iterdir() if p.is_dir() and p.name not in ("cpu", "verification")):
            f = f"{d.name}/{rel}"
            if (d / rel).is_file() and any(g["name"] == name for g in self.doc(f)["figures"]):
                out.append(f)
        if not out:
            raise KeyError(f"no GPU's results file {pattern} holds figure {name!r} (named in a template)")
        return out

    def ledger(self) -> dict:
        if self._ledger is None:
            self._ledger = ledger_figures()
        return self._ledger

    def value(self, file: str, name: str, spec: str, scale: str) -> str:
        fmt = lambda v: format(v * float(scale) if scale else v, spec)  # noqa: E731
        if file == "ledger":
            st = self.ledger()
            self.used.append(("ledger", st["status"]))
            if name not in st:
                raise KeyError(f"the ledger verdict has no {name!r} (named in a template); it has {sorted(st)}")
            return fmt(st[name])
        if file.startswith("data:") or file.startswith("verification/"):
            path = DATA / file[len("data:"):] if file.startswith("data:") else self.root / file
            if not path.is_file():
                raise KeyError(f"record {file} (named in a template) does not exist")
            if file.startswith("verification/"):
                self.used.append((file, "a record of GPU runs"))
            return fmt(_record(path, file, name))
        if file.startswith("*/"):
            cands = self.candidates(file, name)
            current = [f for f in cands if self.status[f] == "current"]
            if not current:   # the newest record, said stale
                f = max(cands, key=lambda c: str(self.doc(c).get("written", "")))
                self.used.append((f, self.status[f]))
                return f"{fmt(self.figure(f, name))}{_LABEL}{device_label(f.split('/')[0])}\u2020{_END}"
            shown: dict[str, list[str]] = {}
            for f in current:
                self.used.append((f, "current"))
                shown.setdefault(fmt(self.figure(f, name)), []).append(device_label(f.split("/")[0]))
            return " / ".join(f"{v}{_LABEL}{', '.join(devs)}{_END}" for v, devs in shown.items())
        if not (self.root / file).is_file():
            raise KeyError(f"results file {file} (named in a template) does not exist")
        if name.startswith("@"):   # a key of the results file beside its figures (a run's status, say)
            self.doc(file)
            self.used.append((file, self.status[file]))
            return fmt(_record(self.root / file, file, name[1:]))
        v = self.figure(file, name)
        self.used.append((file, self.status[file]))
        return fmt(v)


def ledger_figures() -> dict:
    """Today's verdict over the GPU verification ledger, for templates: ``files`` (GPU test files collected),
    ``verified`` (those verified at their current closure), ``stale``, ``passed`` / ``failed`` (outcomes in the
    records that verify them), ``status``."""
    st = verify.ledger_state()
    entries = {p.name: json.loads(p.read_text()) for p in verify.ledger_dir().glob("*.json")}
    outcomes = []
    for f, v in st["files"].items():
        if v["verified_by"]:
            outcomes += list(entries[v["verified_by"][0]]["files"][f]["tests"].values())
    stale = st["stale"]
    return {"files": len(st["files"]), "verified": len(st["files"]) - len(stale), "stale": len(stale),
            "passed": outcomes.count("passed"), "failed": outcomes.count("failed") + outcomes.count("error"),
            "status": "current" if st["ok"] else "changed since: " + ", ".join(stale) if stale else
            "not verified: " + ", ".join([f"family {f}" for f, v in st["families"].items()
                                          if not (v["built"] and v["tested_by"])] + ([] if st["kat"] else ["KATs"]))}


# A value's device label while a line is filled: kept as " (H100)" where a line mixes devices, dropped where every
# value of the line comes from the same device and state (its sources cell then says which).
_LABEL, _END = "\x00", "\x01"
_LABELLED = re.compile("\x00([^\x01]*)\x01")


def _labels(line: str) -> str:
    found = set(_LABELLED.findall(line))
    return _LABELLED.sub("" if len(found) == 1 else r" (\1)", line)


#: files a summary cell names before "+N more" (the record names them all)
SHORT_FILES = 3


#: the longest sources cell of the summary table
CELL = 190


def _short(file: str, status: str, keep: int = SHORT_FILES) -> str:
    dev = device_label(file.split("/")[0]) if "/" in file and not file.startswith("verification/") else ""
    if status.startswith("changed since: "):
        files = status.removeprefix("changed since: ").split(", ")
        more = len(files) - keep
        named = ", ".join(files[:keep])
        status = ("changed since: " + named + (f" +{more} more" if more > 0 and keep else "") if keep
                  else f"changed since: {len(files)} file{'s' * (len(files) > 1)}")
    return f"{status} ({dev})" if dev else status


def _sources(used: list[tuple[str, str]], short: bool) -> str:
    used = sorted(set(used))
    if not used:
        return "—"
    if short:   # as many changed files named as a table cell holds (the record names them all)
        for keep in (SHORT_FILES, 1, 0):
            seen = []
            for f, st in used:
                item = _short(f, st, keep)
                if item not in seen:
                    seen.append(item)
            if len("; ".join(seen)) <= CELL:
                break
        return "; ".join(seen)
    return "; ".join(f"`{f}` {st}" for f, st in used)


def render(template: str | None = None, root: str | Path | None = None) -> str:
    """The template with every placeholder replaced by its figure's value, and every ``{{sources}}`` by the
    provenance of the records its table row (short form) or paragraph (one status per file) read."""
    template = TEMPLATE.read_text() if template is None else template
    res = _Resolver(Path(root) if root else results.results_dir())

    def fill(text: str) -> str:
        return _FIELD.sub(lambda m: res.value(m[1].strip(), m[2].strip(), *m[3].partition("*")[::2]), text)

    blocks = re.split(r"(\n\s*\n)", template)
    for i, block in enumerate(blocks):
        lines = block.split("\n")
        para_used: list[tuple[str, str]] = []
        for j, line in enumerate(lines):
            res.used = []
            line = _labels(fill(line))
            if _SOURCES in line and line.lstrip().startswith("|"):
                line = line.replace(_SOURCES, _sources(res.used, short=True))
            para_used += res.used
            lines[j] = line
        block = "\n".join(lines)
        if _SOURCES in block:
            block = block.replace(_SOURCES, _sources(para_used, short=False))
        blocks[i] = block
    return "".join(blocks)


def records(root: str | Path | None = None) -> str:
    """The records section of ``results/README.md``: every README row's detail (``report_results.md``)."""
    return ("## Records\n\nThe detail behind each row of the README's results table, generated from the files "
            "named (template: `t4lib/evidence/report_results.md`). Figures come from the GPU named in each record; T4 "
            "figures are projections (ESTIMATED), never measurements.\n\n" + render(RECORDS.read_text(), root))


def executed_notebooks(root: str | Path | None = None) -> str:
    """The executed-notebooks section of ``results/README.md``: every ``results/<device>/NN_*.ipynb`` but the
    CPU runs, with the profile and commit a run stamps in its ``t4lib`` metadata, and whether its closure (its code
    cells and what they import) is today's (``current``, ``changed since: <files>``, or ``not recorded``)."""
    root = Path(root) if root else results.results_dir()
    rows = ["| notebook | device | profile | commit | sources |", "|---|---|---|---|---|"]
    copies = sorted(p for p in root.glob("*/[0-9][0-9]_*.ipynb")
                    if p.parent.name != "cpu" and not p.name.endswith(".partial.ipynb"))   # a failed run's output
    never = sorted({p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")} - {p.stem for p in copies})
    for path in copies:
        meta = json.loads(path.read_text()).get("metadata", {}).get("t4lib") or {}
        status = stamp_status(meta)
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
