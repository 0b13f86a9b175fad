"""The pacing controller: pick an occupancy cap for a power budget.

Given a sweep (measured or loaded from ``results/``) and a budget in watts,
``choose`` returns the cap with the most sustained throughput among the caps
whose measured average power stays under the budget and during which NVML
reported no power-cap clock event (``sw_power_cap``, ``hw_power_brake_slowdown``).
It reports the choice and, for every cap, the evidence and why it was or was
not eligible. The controller only decides how the project's own kernels are
launched (their grid cap); it never touches GPU settings: no power limit, no
clock lock, nothing that needs write access to the driver.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, asdict
from typing import Any

from . import grid, kernels
from .sweep import POWER_CAP_REASONS

T4_BUDGET_W = 70.0


@dataclass
class Decision:
    kernel: str
    budget_w: float
    cap: float | None              # None: no cap meets the budget (explained no-op)
    reason: str
    throughput: float | None = None
    unit: str = ""
    power_avg_w: float | None = None
    unpaced_cap: float | None = None
    unpaced_throughput: float | None = None
    unpaced_power_avg_w: float | None = None
    frac_of_unpaced: float | None = None
    device: str = ""
    synthetic: bool = False
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rows(sweep: dict, kernel: str) -> list[dict]:
    ks = sweep.get("kernels", {})
    if kernel not in ks:
        raise ValueError(f"kernel {kernel!r} is not in this sweep (it has {sorted(ks)})")
    e = ks[kernel]
    if not e.get("rows"):
        raise ValueError(f"kernel {kernel!r} has no measured caps in this sweep: {e.get('skipped', 'no rows')}")
    return e["rows"]


def idle_power_w(sweep: dict) -> float | None:
    return (sweep.get("idle") or {}).get("power_avg_w")


def check_budget(budget_w: float, sweep: dict | None = None) -> float:
    """``budget_w`` as a float, or ValueError naming it (not a positive number, or at or
    below the idle power the sweep measured, which no cap can get under)."""
    if isinstance(budget_w, bool) or not isinstance(budget_w, (int, float)) or not math.isfinite(budget_w) \
            or budget_w <= 0:
        raise ValueError(f"budget_w must be a positive number of watts, got {budget_w!r}")
    idle = idle_power_w(sweep) if sweep else None
    if idle is not None and budget_w <= idle:
        raise ValueError(f"budget_w={budget_w:g} W is at or below the idle power of {sweep.get('device', 'the device')}"
                         f" ({idle:.1f} W measured with nothing running): no occupancy cap can meet it")
    return float(budget_w)


def choose(sweep: dict, kernel: str, budget_w: float = T4_BUDGET_W) -> Decision:
    """Most sustained throughput among caps with avg power < ``budget_w`` and no power-cap event."""
    budget_w = check_budget(budget_w, sweep)
    rows = sorted(_rows(sweep, kernel), key=lambda r: r["cap"])
    unit = sweep["kernels"][kernel].get("unit", "")
    evidence, eligible = [], []
    for r in rows:
        why = []
        p = r.get("power_avg_w")
        if p is None:
            why.append("no power reading")
        elif p >= budget_w:
            why.append(f"avg power {p:.1f} W >= budget {budget_w:g} W")
        fired = [x for x in r.get("reasons_seen", []) if x in POWER_CAP_REASONS]
        if fired:
            why.append("power-cap event: " + ", ".join(fired))
        ev = {"cap": r["cap"], "ctas": r.get("ctas"), "warp_fraction": r.get("warp_fraction"),
              "throughput": r["throughput"], "power_avg_w": p, "power_p95_w": r.get("power_p95_w"),
              "sm_mhz_avg": r.get("sm_mhz_avg"), "reasons_seen": r.get("reasons_seen", []),
              "eligible": not why, "why_not": "; ".join(why)}
        evidence.append(ev)
        if not why:
            eligible.append(ev)
    unpaced = max(rows, key=lambda r: r["cap"])
    d = Decision(kernel=kernel, budget_w=budget_w, cap=None, reason="", unit=unit,
                 unpaced_cap=unpaced["cap"], unpaced_throughput=unpaced["throughput"],
                 unpaced_power_avg_w=unpaced.get("power_avg_w"), device=sweep.get("device", ""),
                 synthetic=bool(sweep.get("synthetic")), evidence=evidence)
    if not eligible:
        d.reason = (f"no measured cap keeps average power under {budget_w:g} W without a power-cap event; "
                    "explained no-op: the kernels keep their default (unpaced) launch and the budget is "
                    "left to the driver's own power management")
        return d
    # most throughput; among equals (within 0.5%) the lower cap, which draws less
    best = max(e["throughput"] for e in eligible)
    pick = min((e for e in eligible if e["throughput"] >= 0.995 * best), key=lambda e: e["cap"])
    d.cap, d.throughput, d.power_avg_w = pick["cap"], pick["throughput"], pick["power_avg_w"]
    d.frac_of_unpaced = pick["throughput"] / unpaced["throughput"]
    d.reason = (f"cap {pick['cap']:g}: {d.frac_of_unpaced:.1%} of unpaced throughput at {pick['power_avg_w']:.1f} W "
                f"average (budget {budget_w:g} W), no power-cap event; {len(eligible)} of {len(rows)} caps eligible")
    return d


def binding_budget(sweep: dict, kernel: str = "int4_dequant", fraction: float = 0.5) -> float:
    """A budget that binds on the measured device: ``fraction`` of the unpaced
    kernel's measured average power (kept above idle power)."""
    rows = _rows(sweep, kernel)
    p = max(rows, key=lambda r: r["cap"]).get("power_avg_w")
    if p is None:
        raise ValueError(f"the sweep has no power reading for {kernel!r}")
    b = fraction * p
    idle = idle_power_w(sweep)
    if idle is not None and b <= idle:
        b = idle + 0.5 * (p - idle)  # halfway between idle and unpaced draw instead
    return b


def launch_kwargs(decision: Decision, limits: grid.SMLimits | None = None) -> dict[str, Any]:
    """How the chosen cap launches the kernel here: ``{"kwargs": {...}, "note": ...}``.

    Empty kwargs (the default launch) with a note when there is nothing to do:
    no cap met the budget, or there is no CUDA device to pace.
    """
    if decision.cap is None:
        return {"kwargs": {}, "note": decision.reason}
    if limits is None:
        try:
            limits = grid.device_limits()
        except RuntimeError:
            return {"kwargs": {}, "note": "no CUDA device: nothing to pace (kernels run on the CPU reference path)"}
    k = kernels.get(decision.kernel)
    p = grid.plan(decision.cap, k.warps_per_cta(), limits)
    return {"kwargs": {k.cap_kwarg: p.ctas}, "plan": p.as_dict(),
            "note": f"cap {decision.cap:g} -> {p.ctas} CTAs ({p.ctas_per_sm}/SM, {p.warp_fraction:.1%} of max warps) "
                    f"on {limits.name}"}
