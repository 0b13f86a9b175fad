"""Figures with provenance: one JSON schema for every number the project reports.

A figure is a dict::

    {"name", "value", "unit", "tag": MEASURED|ESTIMATED|ARITHMETIC,
     "device", "driver", "torch", "clocks", "throttle", "when", "source", "note"?}

``MEASURED`` figures carry the device they were measured on and the clocks and
throttle reasons NVML reported; ``ESTIMATED`` figures (projections such as the
T4 roofline) say their model in ``note``; ``ARITHMETIC`` figures are derived
from other figures. A results file is ``{"schema": 1, "figures": [...], ...}``;
``validate_file`` checks one and the test suite checks every file under
``results/``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

TAGS = ("MEASURED", "ESTIMATED", "ARITHMETIC")
SCHEMA_VERSION = 1
REQUIRED = ("name", "value", "unit", "tag", "device", "driver", "torch", "clocks", "throttle", "when", "source")

REPO_ROOT = Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    """Where results go: ``$T4LIB_RESULTS`` or ``<repo>/results``."""
    return Path(os.environ.get("T4LIB_RESULTS", REPO_ROOT / "results"))


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Device, driver, torch version, current clocks and throttle reasons."""
    from . import hw, telemetry

    dev = hw.device_info()
    snap = telemetry.snapshot()
    return {
        "device": dev["name"],
        "driver": dev.get("driver") or "n/a",
        "torch": dev["torch"],
        "clocks": snap.get("clocks", {}),
        "throttle": snap.get("throttle", []),
    }


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


def write(path: str | os.PathLike, figures: Iterable[dict[str, Any]], **meta: Any) -> Path:
    """Validate and write a results file; returns its path."""
    doc = {"schema": SCHEMA_VERSION, "written": now(), **meta, "figures": list(figures)}
    validate(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return path


def validate(doc: dict[str, Any]) -> None:
    """Raise ValueError naming the first problem in a results document."""
    if doc.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"schema must be {SCHEMA_VERSION}, got {doc.get('schema')!r}")
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
        if not isinstance(f["throttle"], list) or not isinstance(f["clocks"], dict):
            raise ValueError(f"{where}: 'throttle' must be a list and 'clocks' a dict")


def validate_file(path: str | os.PathLike) -> None:
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    try:
        validate(doc)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def load_all(root: str | os.PathLike | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every results document under ``root`` (the verification ledger excluded)."""
    root = Path(root) if root else results_dir()
    out = []
    for p in sorted(root.rglob("*.json")):
        if "verification" in p.parts:
            continue
        doc = json.loads(p.read_text())
        if isinstance(doc, dict) and "figures" in doc:
            out.append((p, doc))
    return out


def report(root: str | os.PathLike | None = None) -> str:
    """A Markdown table of every figure under ``results/``."""
    rows = ["| figure | value | unit | tag | device | source |", "|---|---|---|---|---|---|"]
    root = Path(root) if root else results_dir()
    for path, doc in load_all(root):
        for f in doc["figures"]:
            v = f["value"]
            vs = f"{v:.4g}" if isinstance(v, float) else str(v)
            rows.append(f"| {f['name']} | {vs} | {f['unit']} | {f['tag']} | {f['device']} | "
                        f"{path.relative_to(root)} |")
    return "\n".join(rows) + "\n"
