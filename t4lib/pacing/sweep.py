"""Sustained sweep: each kernel at each occupancy cap for a window, with NVML.

For every (kernel, cap) the runner launches the kernel back to back for
``window_s`` seconds (keeping at most two batches queued, so the GPU never
idles and the host never runs far ahead) while ``t4lib.core.telemetry.Sampler``
records power, SM and memory clock, temperature and clock-event reasons.
The first ``settle_s`` seconds are discarded; throughput, power and clocks
are the averages over the rest of the window.

Why the window is what it is: the driver's power controller reacts within
about a second (NVML's power reading is itself averaged over about a second),
so power and SM clock settle within the first seconds of load; 15 s per cap
(3 s settle + 12 s measured) captures that with margin and keeps both
kernels x 4 caps under 3 minutes of GPU time. A passively cooled T4's
temperature keeps rising for minutes, and thermal slowdown comes from
that, so on a T4 the default window is 60 s (12 s settle): long enough for
the power-cap behaviour, not for full thermal equilibrium, which a user can
buy with a larger ``window_s``.
"""
from __future__ import annotations

import collections
import time
from typing import Any, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from t4lib.core import hw, telemetry
from t4lib.pacing import grid, kernels

#: NVML clock-event reasons that mean the power limit is acting.
POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
TRACE_POINTS = 120          # per cap, after downsampling
BATCH_SECONDS = 0.02        # host enqueues this much GPU work between checks


def default_window_s(device_name: str | None) -> float:
    """60 s on a T4 (slow thermal drift), 15 s elsewhere (GPU time is scarce)."""
    return 60.0 if device_name and "t4" in device_name.lower() else 15.0


def device_power_info(index: int = 0) -> dict[str, Any]:
    """Power limit (enforced and default) and max / current clocks from NVML."""
    try:
        pynvml, h = telemetry._nvml(index)
    except RuntimeError as e:
        return {"why": str(e)}

    def get(fn, *a, scale=1.0):
        try:
            v = fn(h, *a)
            return v / scale if scale != 1.0 else v
        except Exception:
            return None

    return {
        "power_limit_w": get(pynvml.nvmlDeviceGetEnforcedPowerLimit, scale=1000.0),
        "default_power_limit_w": get(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, scale=1000.0),
        "max_sm_mhz": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
        "max_mem_mhz": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM),
        "app_sm_mhz": get(pynvml.nvmlDeviceGetApplicationsClock, pynvml.NVML_CLOCK_SM),
    }


def downsample(samples: list[dict], t0: float = 0.0, points: int = TRACE_POINTS) -> dict[str, list]:
    """Bin-average a Sampler trace to at most ``points`` points (times relative to ``t0``)."""
    keys = ("power_w", "sm_mhz", "mem_mhz", "temp_c")
    if not samples:
        return {"t": [], **{k: [] for k in keys}}
    t = np.array([s["t"] for s in samples]) - t0
    edges = np.linspace(t[0], t[-1] + 1e-9, min(points, len(samples)) + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    out: dict[str, list] = {"t": []}
    for k in keys:
        out[k] = []
    for b in range(len(edges) - 1):
        m = idx == b
        if not m.any():
            continue
        out["t"].append(round(float(t[m].mean()), 3))
        for k in keys:
            v = [samples[i][k] for i in np.nonzero(m)[0] if samples[i][k] is not None]
            out[k].append(None if not v else round(float(np.mean(v)), 2))
    return out


def summarize_samples(samples: list[dict], t_from: float, t_to: float) -> dict[str, Any]:
    """Averages over samples with ``t_from <= t <= t_to``."""
    win = [s for s in samples if t_from <= s["t"] <= t_to]

    def col(k):
        return np.array([s[k] for s in win if s[k] is not None], dtype=float)

    p, sm, mem, tc = col("power_w"), col("sm_mhz"), col("mem_mhz"), col("temp_c")
    counts = collections.Counter(r for s in win for r in s["reasons"])
    n = len(win)
    return {
        "n_samples": n,
        "power_avg_w": float(p.mean()) if p.size else None,
        "power_p95_w": float(np.percentile(p, 95)) if p.size else None,
        "sm_mhz_avg": float(sm.mean()) if sm.size else None,
        "sm_mhz_min": float(sm.min()) if sm.size else None,
        "mem_mhz_avg": float(mem.mean()) if mem.size else None,
        "temp_max_c": float(tc.max()) if tc.size else None,
        "reasons_seen": sorted(counts),
        "reason_fraction": {r: round(c / n, 4) for r, c in sorted(counts.items())} if n else {},
    }


def idle_power(seconds: float = 2.0, interval: float = 0.05) -> dict[str, Any]:
    """Power and clocks with nothing of ours running (after a synchronize)."""
    torch.cuda.synchronize()
    time.sleep(0.5)
    with telemetry.Sampler(interval) as s:
        time.sleep(seconds)
    if not s.samples:
        return {"why": s.why or "no samples"}
    out = summarize_samples(s.samples, 0.0, float("inf"))
    out["seconds"] = seconds
    return out


def _sustain(call, ctas: int, work_per_call: float, window_s: float, settle_s: float,
             interval: float) -> dict[str, Any]:
    """Run ``call(ctas)`` back to back for ``window_s`` under the sampler."""
    # calibrate: calls per batch so one batch is ~BATCH_SECONDS of GPU work
    call(ctas)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(3):
        call(ctas)
    b.record()
    b.synchronize()
    t_call = max(a.elapsed_time(b) / 3e3, 1e-7)
    batch = int(min(1000, max(1, round(BATCH_SECONDS / t_call))))

    inflight: collections.deque = collections.deque()
    done: list[float] = []  # host time at which each batch was seen complete
    with telemetry.Sampler(interval) as s:
        t0 = time.perf_counter()
        t0_sampler = getattr(s, "_t0", t0)
        while True:
            for _ in range(batch):
                call(ctas)
            ev = torch.cuda.Event()
            ev.record()
            inflight.append(ev)
            while len(inflight) > 2:
                inflight.popleft().synchronize()
                done.append(time.perf_counter() - t0)
            if time.perf_counter() - t0 >= window_s:
                break
        while inflight:
            inflight.popleft().synchronize()
            done.append(time.perf_counter() - t0)
    shift = t0 - t0_sampler  # sampler times are relative to its own start
    samples = [dict(x, t=x["t"] - shift) for x in s.samples]
    d = np.array(done)
    after = d[d > settle_s]
    before = d[d <= settle_s]
    start = before[-1] if before.size else 0.0
    measured_s = float(after[-1] - start) if after.size else float(d[-1])
    n_batches = int(after.size) if after.size else int(d.size)
    throughput = n_batches * batch * work_per_call / measured_s
    stats = summarize_samples(samples, start, float(after[-1]) if after.size else float(d[-1]))
    # throughput over time, in ~TRACE_POINTS bins of completions
    edges = np.linspace(0.0, float(d[-1]) + 1e-9, min(TRACE_POINTS, max(2, d.size // 2)) + 1)
    counts, _ = np.histogram(d, bins=edges)
    tp_trace = {"t": [round(float(x), 3) for x in (edges[:-1] + edges[1:]) / 2],
                "value": [float(c * batch * work_per_call / (edges[1] - edges[0])) for c in counts]}
    temp0 = next((x["temp_c"] for x in samples if x["temp_c"] is not None), None)
    return {
        "calls": int(d.size * batch), "batch_calls": batch, "call_s": t_call, "window_s": float(d[-1]),
        "settle_s": settle_s, "measured_s": measured_s, "throughput": throughput,
        **stats, "temp_start_c": temp0, "sampler_why": s.why,
        "energy_per_unit_j": (stats["power_avg_w"] / throughput) if stats["power_avg_w"] else None,
        "power_cap_event": any(r in POWER_CAP_REASONS for r in stats["reasons_seen"]),
        "trace": downsample(samples), "throughput_trace": tp_trace,
    }


def run_sweep(kernel_names: Iterable[str] = ("int4_dequant", "w4a16_gemm"),
              caps: Iterable[float] = grid.DEFAULT_CAPS, window_s: float | None = None,
              settle_s: float | None = None, size: str = "gpu", interval: float = 0.05,
              progress: bool = True) -> dict[str, Any]:
    """Sweep every kernel over every cap; returns the sweep document (see module doc).

    A kernel that is unavailable or fails is recorded with ``skipped`` and the
    reason; the others still run. Raises RuntimeError without a CUDA device.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("the pacing sweep needs a CUDA device (none found); without one, load a recorded "
                           "sweep with t4lib.pacing.load_sweep and run the controller on it")
    caps = [grid.check_cap(c, "caps[]") for c in caps]
    if not caps:
        raise ValueError("caps must name at least one cap")
    names = list(kernel_names)
    for n in names:
        kernels.get(n)
    limits = grid.device_limits()
    info = hw.device_info()
    window_s = float(window_s) if window_s is not None else default_window_s(limits.name)
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    settle_s = float(settle_s) if settle_s is not None else window_s / 5
    if not 0 <= settle_s < window_s:
        raise ValueError(f"settle_s must lie in [0, window_s={window_s}), got {settle_s}")
    doc: dict[str, Any] = {
        "kind": "pacing_sweep", "synthetic": False, "device": limits.name, "driver": info.get("driver"),
        "torch": info["torch"], "capability": info.get("capability"),
        "limits": {"num_sms": limits.num_sms, "max_warps_per_sm": limits.max_warps_per_sm},
        **device_power_info(), "window_s": window_s, "settle_s": settle_s, "interval_s": interval,
        "caps": caps, "order": "kernels one after another; within a kernel, caps in the order given",
        "idle": idle_power(interval=interval), "kernels": {},
    }
    bar = None
    if progress:
        bar = tqdm(total=len(names) * len(caps), desc="pacing sweep")
    for name in names:
        k = kernels.get(name)
        why = k.why_unavailable()
        entry: dict[str, Any] = {"kind": k.kind, "unit": k.unit, "description": k.description}
        doc["kernels"][name] = entry
        if why:
            entry["skipped"] = why
            if bar:
                bar.update(len(caps))
            continue
        try:
            wpc = k.warps_per_cta()
            wl = k.build(torch.device("cuda"), size)
            entry.update(warps_per_cta=wpc, shape=wl.shape, work_per_call=wl.work_per_call, rows=[])
            first = None
            for c in caps:
                p = grid.plan(c, wpc, limits)
                out = wl.call(p.ctas)
                torch.cuda.synchronize()
                if first is None:
                    first = out
                equal = bool(torch.equal(out, first))
                del out
                row = {**p.as_dict(), "bitwise_equal_to_first_cap": equal}
                row.update(_sustain(wl.call, p.ctas, wl.work_per_call, window_s, settle_s, interval))
                entry["rows"].append(row)
                if bar:
                    bar.set_postfix(kernel=name, cap=c, W=f"{row['power_avg_w'] or 0:.0f}",
                                    MHz=f"{row['sm_mhz_avg'] or 0:.0f}")
                    bar.update(1)
            del first, wl
            torch.cuda.empty_cache()
        except Exception as e:  # one kernel failing must not lose the other's data
            if entry.get("rows"):
                entry["error"] = f"stopped after {len(entry['rows'])} caps: {type(e).__name__}: {e}"
            else:
                entry.pop("rows", None)
                entry["skipped"] = f"failed: {type(e).__name__}: {e}"
            if bar:
                bar.update(len(caps) - len(entry.get("rows", [])))
    if bar:
        bar.close()
    return doc
