"""Figures with provenance: one JSON schema for every number the project reports.

A figure is a dict::

    {"name", "value", "unit", "tag": MEASURED|ESTIMATED|ARITHMETIC,
     "device", "driver", "torch", "clocks", "throttle", "when", "source", "note"?}

``MEASURED`` figures carry the device they were measured on and the clocks and
throttle reasons NVML reported; ``ESTIMATED`` figures (projections such as the
T4 roofline) say their model in ``note``; ``ARITHMETIC`` figures are derived
from other figures. A results file is ``{"schema": 1, "provenance": {...},
"figures": [...], ...}``; ``validate_file`` checks one and the test suite checks
every file under ``results/``.

``provenance`` ties a file to the code it was measured with (:mod:`t4lib.core.provenance`): the git commit,
whether tracked files differed from it, the unit that produced it (``producer``: a benchmark module, a
notebook, a lab script; one that does not exist is an error at write time) and that unit's closure
(``{path: fingerprint}`` of everything it imports and the kernels it binds). Every file carries it
(validation rejects one without); a file is current while its producer's closure today has the same
fingerprints, and otherwise names the files that changed (:func:`provenance_status`). A file written before
closures existed, whose sources cannot be established, carries a closure of ``"unrecorded"`` fingerprints
and is never current.

Every file is written whole or not at all (:func:`atomic_write_text`): a
temporary file beside it, renamed over it. A run that fails part-way keeps
the figures it did not re-measure (:func:`write`'s ``merge``), each marked
``carried_over`` with the provenance it was measured under, beside the
``errors`` that say what failed.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import math
import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from t4lib.core import hw, telemetry
from t4lib.core import provenance as _prov
from t4lib.core.provenance import changed_since, git_commit, provenance_of, valid_closure

TAGS = ("MEASURED", "ESTIMATED", "ARITHMETIC")
SCHEMA_VERSION = 1
REQUIRED = ("name", "value", "unit", "tag", "device", "driver", "torch", "clocks", "throttle", "when", "source")
# The explicit value of a provenance field (commit, sources hash) that was not recorded when the file was written
# and cannot be established since: never a guess.
UNRECORDED = _prov.UNRECORDED

REPO_ROOT = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    """Where results go: ``$T4LIB_RESULTS`` or ``<repo>/results``."""
    return Path(os.environ.get("T4LIB_RESULTS", REPO_ROOT / "results"))


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Device, driver, torch version, current clocks and throttle reasons."""
    dev = hw.device_info()
    snap = telemetry.snapshot()
    return {
        "device": dev["name"],
        "driver": dev.get("driver") or "n/a",
        "torch": dev["torch"],
        "clocks": snap.get("clocks", {}),
        "throttle": snap.get("throttle", []),
    }


def provenance(producer: str | os.PathLike | None = None) -> dict[str, Any]:
    """What a record is measured with: schema, commit, dirty tree, the producer and its closure
    (:func:`t4lib.core.provenance.provenance_of`). ``producer`` defaults to the calling module, as in
    :func:`write`; ValueError naming ``producer`` when it does not exist."""
    return provenance_of(producer if producer is not None else _caller_unit(sys._getframe(1)))


def _caller_unit(frame) -> str:
    caller = frame.f_code.co_filename
    try:
        return _prov.rel(_prov.resolve_unit(caller))
    except ValueError:
        raise ValueError(f"producer: called from {caller}, not a file of this repository (a notebook cell, say): "
                         "name the producing unit, e.g. producer='notebooks/NN_name.ipynb'") from None


# Units whose values are times, rates or ratios of them: a negative value is a measuring error, never a result.
NON_NEGATIVE_UNITS = ("us", "ms", "s", "min", "x", "tokens/s", "GB/s", "TFLOP/s", "MHz", "W", "GiB", "MiB")


def figure(name: str, value: float, unit: str, tag: str, source: str, *,
           env: dict[str, Any] | None = None, note: str | None = None, **extra: Any) -> dict[str, Any]:
    """Build one figure. ``env`` defaults to the live environment for MEASURED
    figures; ESTIMATED and ARITHMETIC figures need a ``note`` saying how."""
    if tag not in TAGS:
        raise ValueError(f"tag must be one of {TAGS}, got {tag!r}")
    if tag != "MEASURED" and not note:
        raise ValueError(f"a {tag} figure needs a note saying its model or derivation")
    if env is None:
        env = environment() if tag == "MEASURED" else {
            "device": "n/a", "driver": "n/a", "torch": "n/a", "clocks": {}, "throttle": []}
    fig = {"name": name, "value": _num(value), "unit": unit, "tag": tag, **{k: env[k] for k in
           ("device", "driver", "torch", "clocks", "throttle")}, "when": now(), "source": source}
    if note:
        fig["note"] = note
    fig.update(extra)
    return fig


def _num(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) if isinstance(v, float) else v
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"figure value must be a number, got {type(v).__name__}")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory, flushed to disk and renamed
    over ``path`` (``os.replace``, atomic on POSIX and Windows): a crash, a full disk or a reader at any moment
    sees the previous file or the complete new one, never a part. Returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """:func:`atomic_write_text` for bytes (a plot, say)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    # created by open() so that it takes the umask's permissions, as a plain write would
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


_TMP = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files an interrupted write to ``path`` left beside it (``.<name>.<pid>.<hex>.tmp``
    of a process that no longer runs on this machine); returns what it removed."""
    path = Path(path)
    gone = []
    for p in path.parent.glob(f".{path.name}.*.tmp") if path.parent.is_dir() else ():
        m = _TMP.fullmatch(p.name)
        if m and m["name"] == path.name and not _alive(int(m["pid"])):
            try:
                p.unlink()
                gone.append(p)
            except OSError:
                pass
    return gone


def save_figure(fig, path: str | os.PathLike, **savefig_kw: Any) -> Path:
    """A matplotlib figure rendered in memory, then written by :func:`atomic_write_bytes` (the format from the
    suffix): a failed render or write leaves the previous plot."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig_kw)
    return atomic_write_bytes(path, buf.getvalue())


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 1, **dumps_kw: Any) -> Path:
    """``obj`` as JSON (one trailing newline) through :func:`atomic_write_text`; serialised before the file is
    touched, so an object that does not serialise leaves the previous file as it was."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, **dumps_kw) + "\n")


def check_writable(path: str | os.PathLike, name: str = "path", *, directory: bool = False) -> Path:
    """ValueError naming ``name`` unless a file (``directory``: a directory) can be written at ``path``: checked
    by writing a scratch file where it will go (creating missing parent directories), so that a command fails
    before its work, not after it."""
    p = Path(path)
    where = p if directory else p.parent
    if (p.is_dir() and not directory) or (p.exists() and directory and not p.is_dir()):
        raise ValueError(f"{name}: {p} is {'a directory' if p.is_dir() else 'a file'}, not a "
                         f"{'directory' if directory else 'file'} to write")
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        raise ValueError(f"{name}: cannot write to {where} ({type(e).__name__}: {e.strerror or e})") from None
    return p


def read_results(path: str | os.PathLike) -> dict[str, Any] | None:
    """The valid results document at ``path``, or None (missing, not JSON, or not a valid document)."""
    try:
        doc = json.loads(Path(path).read_text())
        validate(doc)
    except (OSError, ValueError, AttributeError):
        return None
    return doc


def carried_over(old: dict[str, Any], measured: set[str]) -> list[dict[str, Any]]:
    """The figures of the results document ``old`` whose names are not in ``measured``, each marked
    ``carried_over``: when and under which provenance it was measured (kept from an earlier carry)."""
    mark = {"written": old.get("written"), "provenance": old.get("provenance")}
    return [{**f, "carried_over": f.get("carried_over") or mark} for f in old["figures"] if f["name"] not in measured]


def write(path: str | os.PathLike, figures: Iterable[dict[str, Any]], *, producer: str | os.PathLike | None = None,
          merge: bool | None = None, **meta: Any) -> Path:
    """Validate and write a results file (atomically: :func:`atomic_write_text`); returns its path.

    ``producer``: the unit that measured the figures, whose closure is recorded: by default the module that calls
    ``write``; a notebook names itself (``"notebooks/00_environment.ipynb"``), its cells having no file of the
    repository. A producer that does not exist is a ValueError before anything is written.

    ``merge``: keep the figures of the existing file whose names this call does not re-measure
    (:func:`carried_over`). None (the default) merges when ``meta["errors"]`` is non-empty: a benchmark that
    failed part-way keeps the previous figures of what it did not re-measure, its errors recorded beside
    them. A call with no figures never replaces a file that has some: without merge it raises ValueError and
    the file stays as it was."""
    if producer is None:
        producer = _caller_unit(sys._getframe(1))
    path = Path(path)
    figs = list(figures)
    doc = {"schema": SCHEMA_VERSION, "written": now(), "provenance": provenance(producer), **meta, "figures": figs}
    validate(doc)
    if merge is None:
        merge = bool(meta.get("errors"))
    old = read_results(path) if merge or not figs else None
    if merge and old:
        doc["figures"] = figs + carried_over(old, {f["name"] for f in figs})
    elif not figs and old and old["figures"]:
        raise ValueError(f"no figures to write: {path} keeps its {len(old['figures'])} figures (write with "
                         "merge=True or errors=[...] to record a failed run beside them)")
    return write_json(path, doc)


def validate(doc: dict[str, Any]) -> None:
    """Raise ValueError naming the first problem in a results document."""
    if doc.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"schema must be {SCHEMA_VERSION}, got {doc.get('schema')!r}")
    _validate_provenance(doc.get("provenance"))
    figs = doc.get("figures")
    if not isinstance(figs, list):
        raise ValueError("'figures' must be a list")
    for i, f in enumerate(figs):
        where = f"figures[{i}] ({f.get('name', '?')})"
        missing = [k for k in REQUIRED if k not in f]
        if missing:
            raise ValueError(f"{where}: missing {missing}")
        if f["tag"] not in TAGS:
            raise ValueError(f"{where}: tag {f['tag']!r} not in {TAGS}")
        if f["tag"] != "MEASURED" and not f.get("note"):
            raise ValueError(f"{where}: {f['tag']} figure without a note")
        if f["tag"] == "MEASURED" and f["device"] in ("", "n/a", None):
            raise ValueError(f"{where}: MEASURED figure without a device")
        v = f["value"]
        if not isinstance(v, (int, float, str)) or isinstance(v, bool):
            raise ValueError(f"{where}: value must be a number or string")
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where}: value is not finite")
        if isinstance(v, (int, float)) and v < 0 and f["unit"] in NON_NEGATIVE_UNITS:
            raise ValueError(f"{where}: a negative {f['unit']} ({v}) is a measuring error, not a result")
        if not isinstance(f["throttle"], list) or not isinstance(f["clocks"], dict):
            raise ValueError(f"{where}: 'throttle' must be a list and 'clocks' a dict")


def _validate_provenance(prov: Any, where: str = "provenance") -> None:
    if prov is None:
        raise ValueError(f"{where} missing: every record carries the commit, the producer and its closure "
                         "(results.write adds them)")
    if not isinstance(prov, dict) or not isinstance(prov.get("commit"), str) or not prov["commit"]:
        raise ValueError(f"{where} must be a dict with a 'commit' string, got {prov!r}")
    if prov.get("schema") != _prov.SCHEMA:
        raise ValueError(f"{where}.schema must be {_prov.SCHEMA} (closures per unit), got {prov.get('schema')!r}")
    if not isinstance(prov.get("dirty"), bool):
        raise ValueError(f"{where}.dirty must be true or false, got {prov.get('dirty')!r}")
    if not isinstance(prov.get("producer"), str) or not prov["producer"]:
        raise ValueError(f"{where}.producer must name the unit that produced the record, got {prov.get('producer')!r}")
    if not valid_closure(prov.get("closure")):
        raise ValueError(f"{where}.closure must be a non-empty {{path: fingerprint}} of the producer's sources, "
                         f"got {str(prov.get('closure'))[:200]!r}")


def validate_file(path: str | os.PathLike) -> None:
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    try:
        validate(doc)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


# ---------------------------------------------------------------- layout and lab record fields

LAYOUT_MD = """\
## Layout

- `results/<device-slug>/` (for example `nvidia-h200/`, `cpu/`): the figures (`*.json` with `"figures"`, written
  through `t4lib.core.results.write`, each file with its `provenance`: commit, producer and its closure) and the
  notebooks executed on that device, with their plots. Companion documents a benchmark writes beside its
  figures (such as `contract_plan.json`) stay with them.
- `results/<device-slug>/logs/`: the logs the figures, the notebooks and this page cite (compute-sanitizer, Nsight
  Compute, SASS dumps); no scripts.
- `results/verification/<device-slug>.json`: the GPU verification ledger (`python -m t4lib verify`);
  `results/verification/history/`: earlier entries kept because they hold evidence the current one does not
  (a sanitizer run over every family, say); `check_ledger` reads only the current entries.

Experiments outside the package (the labs: launch-shape sweeps, ablations, recipe sweeps) keep their records
beside their scripts in the repository, not here; each record carries at least `device`, `commit` (its source is
that commit's version of the script), `command`, `date` and `provenance` (the script's closure: which library
code and kernels it measured), and the library reads none of them. A lab named on
this page (the `gemv` lab, say) is the repository folder of that name among them.
"""

LAB_KEYS = ("device", "commit", "command", "date", "provenance")
_SCRIPT = re.compile(r"(?:^|\s)(?:python3?|bash)\s+(?:-u\s+)?(?:-m\s+([\w.]+)|(\S+\.(?:py|sh)))")


def lab_producer(command: str) -> str:
    """The script (or ``-m`` module) a lab's command line runs first: the unit whose closure its record carries.
    ValueError naming ``command`` when it runs none that exists in the repository."""
    for mod, script in _SCRIPT.findall(command or ""):
        name = mod or script
        try:
            return _prov.rel(_prov.resolve_unit(name))
        except ValueError:
            continue
    raise ValueError(f"command: {command!r} runs no script or module of this repository (python PATH.py, "
                     "python -m MODULE, bash PATH.sh); pass producer= to lab_record")


def lab_record(command: str, producer: str | os.PathLike | None = None) -> dict[str, Any]:
    """The fields every lab record starts with: the device, the commit, the command, the date, and the provenance
    of the script it ran (``producer``, by default the one ``command`` runs): its closure says which library code
    and kernels the lab measured."""
    prov = provenance(producer if producer is not None else lab_producer(command))
    return {"device": hw.device_info()["name"], "commit": prov["commit"], "command": command, "date": now(),
            "provenance": prov}


def validate_lab(doc: Any, where: str = "lab record") -> None:
    """Raise ValueError naming the first missing or malformed field of a lab record."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: must be a JSON object, got {type(doc).__name__}")
    missing = [k for k in LAB_KEYS if not doc.get(k)]
    if missing:
        raise ValueError(f"{where}: missing {missing} (every lab record carries {list(LAB_KEYS)})")
    _validate_provenance(doc["provenance"], f"{where}: provenance")
    if not isinstance(doc["device"], str):
        raise ValueError(f"{where}: device must be a string, got {doc['device']!r}")
    if not re.fullmatch(r"[0-9a-f]{7,40}", str(doc["commit"])):
        raise ValueError(f"{where}: commit must be a git commit hash, got {doc['commit']!r}")
    if not isinstance(doc["command"], str) or not doc["command"].split()[0] in ("python", "python3", "bash"):
        raise ValueError(f"{where}: command must be the command line that ran the lab, got {doc['command']!r}")
    try:
        _dt.datetime.fromisoformat(str(doc["date"]))
    except ValueError:
        raise ValueError(f"{where}: date must be ISO 8601, got {doc['date']!r}") from None


def figures_by_name(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{name: figure}`` of one results file, validated first (ValueError naming what is wrong)."""
    doc = json.loads(Path(path).read_text())
    validate(doc)
    return {f["name"]: f for f in doc["figures"]}


def load_all(root: str | os.PathLike | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every results document under ``root`` (the verification ledger excluded)."""
    root = Path(root) if root else results_dir()
    out = []
    for p in sorted(root.rglob("*.json")):
        if "verification" in p.parts:
            continue
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{p}: not a readable JSON results file ({e})") from None
        if isinstance(doc, dict) and "figures" in doc:
            out.append((p, doc))
    return out


def status_of(prov: Any) -> str:
    """``current``, ``changed since: <files>`` or ``not recorded`` for one provenance block (a record's, a
    carried-over figure's, an executed notebook's stamp)."""
    if not isinstance(prov, dict):
        return "not recorded"
    changed = changed_since(prov.get("closure"), prov.get("producer"))
    if changed == ["(closure not recorded)"]:
        return "not recorded"
    if changed:
        return "changed since: " + ", ".join(changed)
    return "current"


def provenance_status(doc: dict[str, Any]) -> str:
    """``current`` (the producer's closure today has the fingerprints the file recorded), ``changed since: <the
    files that changed>``, or ``not recorded`` (a file older than closures). A file is current only when the
    figures it carries over from an earlier run are too (their own provenance, said after ``carried over:``)."""
    status = status_of(doc.get("provenance"))
    for f in doc.get("figures", []):
        if f.get("carried_over"):
            old = status_of(f["carried_over"].get("provenance"))
            if old != "current":
                return status if status != "current" else f"carried over: {old}"
    return status


def figure_status(doc: dict[str, Any], fig: dict[str, Any]) -> str:
    """The status of one figure of ``doc``: its file's, or for a figure carried over, the run's it came from."""
    if fig.get("carried_over"):
        return "carried over; " + status_of(fig["carried_over"].get("provenance"))
    return status_of(doc.get("provenance"))


def report(root: str | os.PathLike | None = None) -> str:
    """A Markdown table of every figure under ``results/``, each with its file's provenance."""
    rows = ["| figure | value | unit | tag | device | source | provenance |", "|---|---|---|---|---|---|---|"]
    root = Path(root) if root else results_dir()
    for path, doc in load_all(root):
        statuses = {}
        for f in doc["figures"]:
            key = json.dumps(f.get("carried_over", {}).get("provenance"), sort_keys=True)
            if key not in statuses:
                statuses[key] = figure_status(doc, f)
            v = f["value"]
            vs = f"{v:.4g}" if isinstance(v, float) else str(v)
            rows.append(f"| {f['name']} | {vs} | {f['unit']} | {f['tag']} | {f['device']} | "
                        f"{path.relative_to(root)} | {statuses[key]} |")
    return "\n".join(rows) + "\n"
