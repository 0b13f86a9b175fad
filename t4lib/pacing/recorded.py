"""Loading recorded sweeps, and a synthetic one for CPU-only demonstration.

A measured sweep is saved as ``results/<device-slug>/pacing_sweep.json``: a
results file (``t4lib.results`` schema) whose ``pacing`` key holds the sweep
document that ``run_sweep`` returned. ``load_sweep`` reads one back;
``find_recorded`` finds the measured ones shipped in ``results/``.

``synthetic_sweep`` builds a small sweep from a made-up model. It is labelled
``synthetic: True`` and its device says so; it exists so the controller can be
exercised and explained where no recorded sweep is available. It is not a
measurement and must never be presented as one (``report.to_figures``
refuses it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .. import results
from . import grid

SWEEP_FILE = "pacing_sweep.json"
_ROW_KEYS = ("cap", "throughput", "power_avg_w", "reasons_seen")


def validate_sweep(doc: Any, where: str = "sweep") -> dict[str, Any]:
    """Raise ValueError naming the first problem; return ``doc``."""
    if not isinstance(doc, dict) or doc.get("kind") != "pacing_sweep":
        raise ValueError(f"{where}: not a pacing sweep (kind != 'pacing_sweep')")
    ks = doc.get("kernels")
    if not isinstance(ks, dict) or not ks:
        raise ValueError(f"{where}: 'kernels' must be a non-empty dict")
    for name, e in ks.items():
        for i, r in enumerate(e.get("rows", [])):
            missing = [k for k in _ROW_KEYS if k not in r]
            if missing:
                raise ValueError(f"{where}: kernels.{name}.rows[{i}] misses {missing}")
            grid.check_cap(r["cap"], f"{where}: kernels.{name}.rows[{i}].cap")
            t = r["throughput"]
            if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                raise ValueError(f"{where}: kernels.{name}.rows[{i}].throughput must be a positive number, got {t!r}")
    return doc


def load_sweep(path: str | Path) -> dict[str, Any]:
    """The sweep document stored in a ``pacing_sweep.json`` results file (or a bare sweep JSON)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no sweep file at {path}")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    if isinstance(doc, dict) and "figures" in doc:
        results.validate(doc)
        doc = doc.get("pacing")
    return validate_sweep(doc, str(path))


def find_recorded(root: str | Path | None = None) -> list[Path]:
    """Measured (non-synthetic) sweep files under ``results/``, newest first."""
    root = Path(root) if root else results.results_dir()
    found = []
    for p in root.rglob(SWEEP_FILE):
        try:
            d = load_sweep(p)
        except (ValueError, OSError):
            continue
        if not d.get("synthetic"):
            found.append((d.get("written", ""), p))
    return [p for _, p in sorted(found, key=lambda x: (x[0], str(x[1])), reverse=True)]


def _trace(n: int, base_w: float, watts: float, mhz: float, mhz_floor: float | None, tau: float) -> dict[str, list]:
    t = [i * 0.5 for i in range(n)]
    p = [round(base_w + (watts - base_w) * (1 - math.exp(-x / tau)), 2) for x in t]
    if mhz_floor is None:
        sm = [mhz] * n
    else:
        sm = [round(mhz - (mhz - mhz_floor) * (1 - math.exp(-x / tau)), 1) for x in t]
    return {"t": t, "power_w": p, "sm_mhz": sm, "mem_mhz": [5000.0] * n, "temp_c": [round(45 + 0.8 * x, 1) for x in t]}


def synthetic_sweep() -> dict[str, Any]:
    """A deterministic, made-up sweep (labelled SYNTHETIC): two kernels x four caps.

    Its shape follows the story the sweep tests, not any measurement: the
    memory-bound kernel loses little throughput when capped, the compute-bound
    one hits a power cap and clocks down at the higher caps. Caps 0.125 and
    0.25 of the memory-bound kernel share one row of numbers because on a T4
    they map to the same grid (one 8-warp CTA per SM).
    """
    idle = 12.0
    made_up = {  # cap: (relative throughput, avg W, p95 W, SM MHz settled, reasons)
        "int4_dequant": {0.125: (0.97, 54.0, 56.0, 1590, []), 0.25: (0.97, 54.0, 56.0, 1590, []),
                         0.5: (1.00, 61.0, 63.5, 1590, []), 1.0: (1.00, 64.0, 66.5, 1590, [])},
        "w4a16_gemm": {0.125: (0.42, 44.0, 46.0, 1590, []), 0.25: (0.70, 58.0, 61.0, 1590, []),
                       0.5: (0.93, 69.5, 70.0, 1350, ["sw_power_cap"]),
                       1.0: (1.00, 69.8, 70.0, 1200, ["sw_power_cap"])},
    }
    peak = {"int4_dequant": 2.4e11, "w4a16_gemm": 2.0e13}
    units = {"int4_dequant": "B", "w4a16_gemm": "FLOP"}
    kinds = {"int4_dequant": "memory-bound", "w4a16_gemm": "compute-bound"}
    wpc = {"int4_dequant": 8, "w4a16_gemm": 4}
    doc: dict[str, Any] = {
        "kind": "pacing_sweep", "synthetic": True,
        "device": "SYNTHETIC (made-up numbers, not a measurement)", "driver": None, "torch": None,
        "limits": {"num_sms": grid.T4_LIMITS.num_sms, "max_warps_per_sm": grid.T4_LIMITS.max_warps_per_sm},
        "power_limit_w": 70.0, "max_sm_mhz": 1590, "window_s": 15.0, "settle_s": 3.0, "interval_s": 0.5,
        "caps": list(grid.DEFAULT_CAPS), "idle": {"power_avg_w": idle, "sm_mhz_avg": 300.0, "reasons_seen": ["gpu_idle"]},
        "kernels": {},
    }
    for name, by_cap in made_up.items():
        rows = []
        for cap, (rel, w, p95, mhz, reasons) in by_cap.items():
            p = grid.plan(cap, wpc[name], grid.T4_LIMITS)
            thr = rel * peak[name]
            rows.append({**p.as_dict(), "throughput": thr, "power_avg_w": w, "power_p95_w": p95,
                         "sm_mhz_avg": float(mhz), "mem_mhz_avg": 5000.0, "temp_max_c": 57.0,
                         "reasons_seen": list(reasons), "power_cap_event": bool(reasons),
                         "energy_per_unit_j": w / thr, "bitwise_equal_to_first_cap": True,
                         "trace": _trace(30, idle, w, 1590.0, mhz if mhz < 1590 else None, 1.5)})
        doc["kernels"][name] = {"kind": kinds[name], "unit": units[name], "warps_per_cta": wpc[name],
                                "description": "synthetic", "rows": rows}
    return doc
