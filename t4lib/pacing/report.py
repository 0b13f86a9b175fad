"""Sweep -> results figures, table, plots, and the saved ``pacing_sweep.json``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from t4lib.core import results
from t4lib.pacing import controller, projection
from t4lib.pacing.recorded import SWEEP_FILE

_SCALE = {"B": (1e9, "GB/s", "J/GB"), "FLOP": (1e12, "TFLOP/s", "J/TFLOP")}
SOURCE = "t4lib.pacing (python -m t4lib.pacing sweep)"


def table(sweep: dict) -> list[dict[str, Any]]:
    """One row per (kernel, cap), in display units."""
    rows = []
    for name, e in sweep["kernels"].items():
        if not e.get("rows"):
            rows.append({"kernel": name, "cap": None, "note": e.get("skipped", "no rows")})
            continue
        div, tu, eu = _SCALE.get(e["unit"], (1.0, e["unit"] + "/s", "J/" + e["unit"]))
        best = max(r["throughput"] for r in e["rows"])
        for r in e["rows"]:
            rows.append({
                "kernel": name, "cap": r["cap"], "CTAs": r.get("ctas"), "warp frac": r.get("warp_fraction"),
                f"throughput": round(r["throughput"] / div, 3), "unit": tu,
                "rel. to best": round(r["throughput"] / best, 3),
                "power avg W": _r(r.get("power_avg_w")), "power p95 W": _r(r.get("power_p95_w")),
                "SM MHz avg": _r(r.get("sm_mhz_avg"), 0), "mem MHz avg": _r(r.get("mem_mhz_avg"), 0),
                "temp max C": _r(r.get("temp_max_c"), 0),
                f"energy": _r(r["energy_per_unit_j"] * div, 3) if r.get("energy_per_unit_j") else None,
                "energy unit": eu, "reasons": ",".join(r.get("reasons_seen", [])) or "-",
                "bitwise equal": r.get("bitwise_equal_to_first_cap"),
            })
    return rows


def _r(v, nd=1):
    return None if v is None else round(float(v), nd)


def clock_finding(sweep: dict, kernel: str, tol_mhz: float = 15.0) -> str:
    """Plain statement of whether the cap changed the SM clock for ``kernel``."""
    rows = sweep["kernels"][kernel].get("rows") or []
    clk = [(r["cap"], r.get("sm_mhz_avg")) for r in rows if r.get("sm_mhz_avg") is not None]
    if not clk:
        return f"{kernel}: no clock readings"
    lo, hi = min(c for _, c in clk), max(c for _, c in clk)
    each = ", ".join(f"cap {c:g}: {m:.0f} MHz" for c, m in clk)
    fired = sorted({x for r in rows for x in r.get("reasons_seen", []) if x != "gpu_idle"})
    verdict = (f"the cap changed the average SM clock by {hi - lo:.0f} MHz" if hi - lo > tol_mhz
               else f"no cap changed the SM clock (spread {hi - lo:.0f} MHz <= {tol_mhz:g} MHz)")
    return f"{kernel} on {sweep.get('device')}: {verdict} ({each}); clock-event reasons: {', '.join(fired) or 'none'}"


def to_figures(sweep: dict, source: str = SOURCE) -> list[dict]:
    """MEASURED per-cap figures (with the device's power limit and clocks), ARITHMETIC
    energies and controller decisions, ESTIMATED T4 projections."""
    if sweep.get("synthetic"):
        raise ValueError("refusing to turn a synthetic sweep into results figures: it is not a measurement")
    base_env = {"device": sweep["device"], "driver": sweep.get("driver") or "n/a", "torch": sweep.get("torch") or "n/a"}
    limit = {"power_limit_w": sweep.get("power_limit_w"), "default_power_limit_w": sweep.get("default_power_limit_w"),
             "max_sm_mhz": sweep.get("max_sm_mhz"), "max_mem_mhz": sweep.get("max_mem_mhz")}
    figs = []
    idle = sweep.get("idle") or {}
    if idle.get("power_avg_w") is not None:
        figs.append(results.figure("pacing/idle_power", idle["power_avg_w"], "W", "MEASURED", source,
                                   env={**base_env, "clocks": {"sm_mhz_avg": idle.get("sm_mhz_avg"), **limit},
                                        "throttle": idle.get("reasons_seen", [])}))
    for name, e in sweep["kernels"].items():
        if not e.get("rows"):
            continue
        div, tu, eu = _SCALE.get(e["unit"], (1.0, e["unit"] + "/s", "J/" + e["unit"]))
        for r in e["rows"]:
            env = {**base_env, "clocks": {"sm_mhz_avg": r.get("sm_mhz_avg"), "mem_mhz_avg": r.get("mem_mhz_avg"),
                                          **limit},
                   "throttle": r.get("reasons_seen", [])}
            p = f"pacing/{name}/cap{r['cap']:g}"
            extra = {"cap": r["cap"], "ctas": r.get("ctas"), "window_s": sweep.get("window_s"),
                     "settle_s": sweep.get("settle_s")}
            figs.append(results.figure(f"{p}/throughput", r["throughput"] / div, tu, "MEASURED", source, env=env,
                                       **extra))
            for key, unit, label in (("power_avg_w", "W", "power_avg"), ("power_p95_w", "W", "power_p95"),
                                     ("sm_mhz_avg", "MHz", "sm_clock_avg"), ("temp_max_c", "C", "temp_max")):
                if r.get(key) is not None:
                    figs.append(results.figure(f"{p}/{label}", r[key], unit, "MEASURED", source, env=env, **extra))
            if r.get("energy_per_unit_j"):
                figs.append(results.figure(f"{p}/energy", r["energy_per_unit_j"] * div, eu, "ARITHMETIC", source,
                                           env=env, note="measured average power / measured sustained throughput"))
        clk = [r["sm_mhz_avg"] for r in e["rows"] if r.get("sm_mhz_avg") is not None]
        if clk:
            figs.append(results.figure(f"pacing/{name}/sm_clock_spread_across_caps", max(clk) - min(clk), "MHz",
                                       "ARITHMETIC", source, env={**base_env, "clocks": limit, "throttle": []},
                                       note="max - min over caps of the measured average SM clock; "
                                            + clock_finding(sweep, name)))
        budgets = [("t4_budget", controller.T4_BUDGET_W)]
        try:
            budgets.append(("binding_budget", controller.binding_budget(sweep, "int4_dequant")))
        except ValueError:
            pass
        for label, b in budgets:
            try:
                d = controller.choose(sweep, name, b)
            except ValueError as ex:
                figs.append(results.figure(f"pacing/{name}/{label}/chosen_cap", 0.0, "fraction of max warps (0: none)",
                                           "ARITHMETIC", source, env={**base_env, "clocks": limit, "throttle": []},
                                           note=f"controller not applicable, budget {b:.1f} W: {ex}", budget_w=b))
                continue
            figs.append(results.figure(
                f"pacing/{name}/{label}/chosen_cap", d.cap if d.cap is not None else 0.0, "fraction of max warps (0: none)",
                "ARITHMETIC", source, env={**base_env, "clocks": limit, "throttle": []},
                note=f"controller on this sweep, budget {b:.1f} W: {d.reason}", budget_w=b,
                frac_of_unpaced=d.frac_of_unpaced, power_avg_w=d.power_avg_w))
    proj = projection.project(sweep)
    for name, pr in proj.items():
        tu = "GB/s" if name == "int4_dequant" else "TFLOP/s"
        div = 1e9 if name == "int4_dequant" else 1e12
        for r in pr["rows"]:
            extra = {k: r[k] for k in ("sm_mhz", "power_w", "bound") if k in r}
            figs.append(results.figure(f"pacing/{name}/t4_projection/cap{r['cap']:g}", r["throughput"] / div, tu,
                                       "ESTIMATED", source, note=pr["note"], cap=r["cap"], **extra))
        for which in ("paced", "unpaced"):
            w = pr[which]
            how = ("the most throughput among caps whose modelled clock stays at 1590 MHz (no power cap)"
                   if which == "paced" else "the largest cap")
            figs.append(results.figure(f"pacing/{name}/t4_projection/{which}", w["throughput"] / div, tu,
                                       "ESTIMATED", source, note=f"{pr['note']}; {which} = {how}", cap=w["cap"]))
    return figs


def plot(sweep: dict, out_dir: str | Path | None = None, show: bool = False) -> list[Path]:
    """Power and SM clock over time per cap (one figure per kernel), and throughput
    and power vs cap. Saves PNGs under ``out_dir`` when given."""
    import matplotlib.pyplot as plt  # headless machines fall back to Agg by themselves

    tag = "SYNTHETIC, not measured" if sweep.get("synthetic") else f"MEASURED on {sweep.get('device')}"
    saved, figs = [], []
    names = [n for n, e in sweep["kernels"].items() if e.get("rows")]
    for name in names:
        e = sweep["kernels"][name]
        fig, ax = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
        for r in e["rows"]:
            tr = r.get("trace") or {}
            ax[0].plot(tr.get("t", []), tr.get("power_w", []), label=f"cap {r['cap']:g}")
            ax[1].plot(tr.get("t", []), tr.get("sm_mhz", []), label=f"cap {r['cap']:g}")
        if sweep.get("power_limit_w"):
            ax[0].axhline(sweep["power_limit_w"], ls="--", c="k", lw=0.8, label="power limit")
        if sweep.get("settle_s"):
            for a in ax:
                a.axvline(sweep["settle_s"], ls=":", c="gray", lw=0.8)
        ax[0].set_ylabel("power (W)")
        ax[1].set_ylabel("SM clock (MHz)")
        ax[1].set_xlabel("time in window (s); dotted: end of settle period")
        ax[0].legend(fontsize=8, ncol=3)
        ax[0].set_title(f"{name} ({e['kind']}): power and SM clock per cap [{tag}]", fontsize=9)
        fig.tight_layout()
        figs.append((f"pacing_{name}_traces.png", fig))
    if names:
        fig, ax = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
        for a, name in zip(ax[0], names):
            rows = sorted(sweep["kernels"][name]["rows"], key=lambda r: r["cap"])
            best = max(r["throughput"] for r in rows)
            caps = [r["cap"] for r in rows]
            a.plot(caps, [r["throughput"] / best for r in rows], "o-", label="throughput / best")
            a.set_xscale("log", base=2)
            a.set_xticks(caps, [f"{c:g}" for c in caps])
            a.set_ylim(0, 1.1)
            a.set_xlabel("occupancy cap (fraction of max warps/SM)")
            a.set_ylabel("sustained throughput / best")
            b = a.twinx()
            b.plot(caps, [r.get("power_avg_w") or float("nan") for r in rows], "s--", c="tab:red", label="avg W")
            b.set_ylabel("average power (W)", color="tab:red")
            a.set_title(f"{name} [{tag}]", fontsize=9)
        fig.tight_layout()
        figs.append(("pacing_throughput_vs_cap.png", fig))
    for fname, fig in figs:
        if out_dir is not None:
            p = Path(out_dir) / fname
            p.parent.mkdir(parents=True, exist_ok=True)
            results.save_figure(fig, p, dpi=110)
            saved.append(p)
        if not show:
            plt.close(fig)
    return saved


def save(sweep: dict, out_dir: str | Path, source: str = SOURCE) -> tuple[Path, list[dict]]:
    """Write ``out_dir/pacing_sweep.json`` (figures + the sweep with traces) and the PNGs."""
    figs = to_figures(sweep, source)
    path = results.write(Path(out_dir) / SWEEP_FILE, figs, pacing=sweep,
                         clock_findings=[clock_finding(sweep, n) for n, e in sweep["kernels"].items() if e.get("rows")])
    try:
        plot(sweep, out_dir)
    except ImportError as e:  # matplotlib is in the notebooks extra
        print(f"plots skipped: {e}")
    return path, figs


def format_table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> str:
    """Plain-text table of dict rows (no pandas needed)."""
    if not rows:
        return "(empty)"
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))

    def s(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    cells = [[s(r.get(c)) for c in cols] for r in rows]
    w = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w[i]) for i, c in enumerate(cols)), "  ".join("-" * x for x in w)]
    lines += ["  ".join(v.rjust(w[i]) for i, v in enumerate(row)) for row in cells]
    return "\n".join(lines)
