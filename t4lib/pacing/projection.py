"""T4 projection (ESTIMATED) of paced and unpaced sustained throughput.

Memory-bound kernel (INT4 bulk dequant), per cap ``c``:

    resident warps/SM  w(c) = ctas_per_sm(c) * 8           (256-thread CTAs, T4: 32 warps/SM)
    read bytes in flight    = 40 SMs * w(c) * 32 threads * 16 B  (4 words of 4 B per thread, kUnroll=4)
    read bandwidth (Little) = bytes in flight / DRAM latency     (latency_ns, assumed 600 ns loaded)
    total bandwidth         = read bandwidth * (bytes moved / bytes read)
    throughput(c)           = min(260 GB/s sustained, total bandwidth)

The SM clock does not enter: a streaming kernel is bound by DRAM, which the
T4's power management does not slow (it lowers the graphics clock first).

Compute-bound kernel (W4A16 WMMA GEMM), per cap ``c``:

    u(c)        tensor-core busy fraction: the measured device's throughput at cap c
                over its best throughput (1 for every cap without a sweep)
    P(c, f)     = P_idle + P_dyn * u(c) * (f / 1590 MHz)^3    (dynamic power ~ f V^2, V ~ f)
    f(c)        = the largest f <= 1590 MHz with P(c, f) <= 70 W, at least 585 MHz (base)
    throughput  = 65 TFLOP/s * eff * u(c) * f(c) / 1590 MHz

with P_idle (idle draw), P_dyn (the dynamic power a fully busy TU104 would
draw at 1590 MHz with no power limit) and eff (the kernel's fraction of
tensor-core peak at full occupancy) stated as assumptions in every figure.
In this model capping occupancy raises the clock but never raises
throughput (under the power limit f ~ u^(-1/3), so u * f ~ u^(2/3) still grows
with u). Dynamic energy per FLOP falls with the clock (~ f^2), but the idle
draw is spread over fewer FLOPs, so whether pacing lowers total energy per
FLOP depends on P_idle and on u(cap); the projection reports both.
"""
from __future__ import annotations

from typing import Any

from .. import hw
from . import grid

T4 = hw.T4
MEM_ASSUMPTIONS = {"latency_ns": 600.0, "read_bytes_in_flight_per_thread": 16, "warps_per_cta": 8,
                   "bytes_moved_per_byte_read": (4 + 16 + 2 / 16) / (4 + 2 / 16)}
GEMM_ASSUMPTIONS = {"p_idle_w": 10.0, "p_dyn_w": 90.0, "eff": 0.5, "warps_per_cta": 4}


def memory_bound(caps=grid.DEFAULT_CAPS, **assume: float) -> list[dict[str, Any]]:
    a = {**MEM_ASSUMPTIONS, **assume}
    out = []
    for c in caps:
        p = grid.plan(c, int(a["warps_per_cta"]), grid.T4_LIMITS)
        warps = p.ctas_per_sm * p.warps_per_cta
        inflight = T4.sms * warps * 32 * a["read_bytes_in_flight_per_thread"]
        little = inflight / (a["latency_ns"] * 1e-9) * a["bytes_moved_per_byte_read"]
        out.append({"cap": c, "warp_fraction": p.warp_fraction, "little_Bps": little,
                    "throughput": min(T4.sustained_bw, little), "unit": "B/s",
                    "bound": "bandwidth" if little >= T4.sustained_bw else "occupancy"})
    return out


def compute_bound(caps=grid.DEFAULT_CAPS, rel_throughput: dict[float, float] | None = None,
                  budget_w: float | None = None, **assume: float) -> list[dict[str, Any]]:
    a = {**GEMM_ASSUMPTIONS, **assume}
    budget = T4.tdp_watts if budget_w is None else budget_w
    out = []
    for c in caps:
        u = 1.0 if rel_throughput is None else rel_throughput[c]
        head = budget - a["p_idle_w"]
        if head <= 0:
            f = T4.base_mhz
        else:
            f = T4.boost_mhz * min(1.0, (head / (a["p_dyn_w"] * u)) ** (1 / 3))
            f = max(float(T4.base_mhz), f)
        power = a["p_idle_w"] + a["p_dyn_w"] * u * (f / T4.boost_mhz) ** 3
        thr = T4.fp16_tensor_flops * a["eff"] * u * f / T4.boost_mhz
        out.append({"cap": c, "u": u, "sm_mhz": f, "power_w": power, "throughput": thr,
                    "energy_per_tflop_j": power / thr * 1e12, "unit": "FLOP/s"})
    return out


def project(sweep: dict | None = None, caps=grid.DEFAULT_CAPS) -> dict[str, Any]:
    """Both projections; the compute-bound one takes its occupancy curve from ``sweep``
    (the W4A16 GEMM's measured throughput per cap, relative to its best) when present."""
    rel = None
    rows = ((sweep or {}).get("kernels", {}).get("w4a16_gemm") or {}).get("rows") or []
    if rows and {r["cap"] for r in rows} >= set(caps):
        best = max(r["throughput"] for r in rows)
        rel = {r["cap"]: r["throughput"] / best for r in rows}
    mem, gemm = memory_bound(caps), compute_bound(caps, rel)
    return _paced({
        "int4_dequant": {"rows": mem, "note": (
            "ESTIMATED T4 model: min(260 GB/s sustained, Little's law: 40 SMs x resident warps x 32 threads x 16 B "
            f"of reads in flight / {MEM_ASSUMPTIONS['latency_ns']:.0f} ns assumed loaded DRAM latency x "
            f"{MEM_ASSUMPTIONS['bytes_moved_per_byte_read']:.2f} bytes moved per byte read); SM clock assumed "
            "irrelevant to a DRAM-bound stream")},
        "w4a16_gemm": {"rows": gemm, "note": (
            "ESTIMATED T4 model: 65 TFLOP/s fp16 tensor peak x eff {eff} x u(cap) x f/1590 MHz, with f the largest "
            "clock <= 1590 MHz (>= 585 MHz) such that P_idle {p_idle_w:g} W + P_dyn {p_dyn_w:g} W x u x (f/1590)^3 "
            "<= 70 W; u(cap) = {u}; P_idle, P_dyn and eff are assumptions, not measurements".format(
                **GEMM_ASSUMPTIONS, u=("measured relative throughput per cap on " + sweep.get("device", "?"))
                if rel else "1 at every cap (no sweep)"))},
    })


def _paced(proj: dict[str, Any]) -> dict[str, Any]:
    """Add the paced choice under the model: the most throughput among caps whose modelled
    clock stays at boost (no power-cap event), lower cap on ties; unpaced is the largest cap."""
    for p in proj.values():
        rows = p["rows"]
        ok = [r for r in rows if r.get("sm_mhz", T4.boost_mhz) >= T4.boost_mhz - 1e-6] or rows[:1]
        best = max(r["throughput"] for r in ok)
        pick = min((r for r in ok if r["throughput"] >= 0.995 * best), key=lambda r: r["cap"])
        unp = max(rows, key=lambda r: r["cap"])
        p["paced"] = {"cap": pick["cap"], "throughput": pick["throughput"]}
        p["unpaced"] = {"cap": unp["cap"], "throughput": unp["throughput"]}
    return proj
