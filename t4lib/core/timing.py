"""Timing harness: CUDA events over CUDA-graph replay with cold L2.

``compare`` times several implementations of one operation in the same
process. For each case it makes enough independent input sets that together
they exceed ``l2_factor`` x the L2 size, captures one CUDA graph that calls the
case once per set (so every call finds its inputs evicted from L2), and times
graph replays with CUDA events. Rounds alternate the order of the cases so
drift (clocks, temperature) hits all of them alike. Figures come back as
ratios against the baseline measured in the same run and as a fraction of the
copy bandwidth measured in the same process, beside a T4 roofline projection
(ESTIMATED).
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Callable

import torch

from t4lib.core import graphs, hw, results

Case = tuple[Callable[..., Any], Callable[[], tuple]]


def wall_time(fn: Callable[[], Any], reps: int = 3) -> float:
    """Median wall-clock seconds of ``fn()`` over ``reps`` calls, the GPU synchronised before and after
    each: for end-to-end work (generation, a training step) where host time is part of the cost."""
    ts = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


class TokenTimes:
    """A ``generate`` streamer that stamps the host time at which each new token reaches it (``generate`` copies
    each step's tokens to the CPU before ``put``, which waits for the GPU); its first ``put`` is the prompt.
    ``times[-1] - times[0]`` is the decode time of ``len(times) - 1`` tokens, measured within one run: a rate
    from it is never negative, unlike the difference of two runs' wall times."""

    def __init__(self):
        self.times: list[float] = []
        self._prompt = True

    def put(self, value) -> None:
        if self._prompt:
            self._prompt = False
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def _nbytes(args: tuple) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def _percentiles(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)

    def q(p):
        k = (len(s) - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"median_s": q(0.5), "p10_s": q(0.1), "p90_s": q(0.9)}


class _Timed:
    """One case prepared for timing: rotating input sets and a captured graph."""

    def __init__(self, fn, make_args, l2_factor: float, max_sets: int, use_graph: bool, warmup: int):
        first = make_args()
        per_set = max(_nbytes(first), 1)
        n = max(1, min(max_sets, math.ceil(l2_factor * hw.l2_bytes() / per_set)))
        self.sets = [first] + [make_args() for _ in range(n - 1)]
        self.fn, self.graph = fn, None
        for _ in range(warmup):
            fn(*first)
        torch.cuda.synchronize()
        if use_graph:   # a capture-unsafe op (host sync, allocation): time eagerly, say why in graph_error
            g, self.graph_error = graphs.try_capture(lambda: [fn(*args) for args in self.sets], warmup=1)
            if g is not None:
                g.replay()
                torch.cuda.synchronize()
                self.graph = g

    def once(self) -> float:
        """Seconds per call, from one pass over all input sets."""
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if self.graph is not None:
            self.graph.replay()
        else:
            for args in self.sets:
                self.fn(*args)
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3 / len(self.sets)


def compare(cases: dict[str, Case], baseline: str, *, bytes_moved: int | None = None, flops: int | None = None,
            rounds: int = 3, iters: int = 30, warmup: int = 3, l2_factor: float = 2.0, max_sets: int = 64,
            use_graph: bool = True) -> dict[str, Any]:
    """Time ``cases`` (name -> (fn, make_args)) against ``cases[baseline]``.

    ``make_args()`` returns a fresh input set (tuple) each call. ``bytes_moved``
    is the DRAM traffic of one call of the operation (bytes a perfect kernel
    reads and writes), used for bandwidth and the T4 projection; ``flops``
    likewise for arithmetic rate. Returns ``{"cases": {name: stats}, ...}``.
    """
    if baseline not in cases:
        raise ValueError(f"baseline {baseline!r} is not among the cases {list(cases)}")
    if not torch.cuda.is_available():
        raise RuntimeError("bench.compare needs a CUDA device")
    copy_bw = hw.copy_bandwidth()
    timed = {name: _Timed(fn, mk, l2_factor, max_sets, use_graph, warmup) for name, (fn, mk) in cases.items()}
    samples: dict[str, list[float]] = {n: [] for n in cases}
    order = list(cases)
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            samples[name].extend(timed[name].once() for _ in range(iters))
    out: dict[str, Any] = {"baseline": baseline, "copy_bw_Bps": copy_bw, "bytes_moved": bytes_moved,
                           "flops": flops, "rounds": rounds, "iters": iters, "cases": {}}
    base_med = _percentiles(samples[baseline])["median_s"]
    for name, t in timed.items():
        st = _percentiles(samples[name])
        st.update(n_sets=len(t.sets), graph=t.graph is not None, speedup_vs_baseline=base_med / st["median_s"])
        if t.graph is None and use_graph:
            st["graph_error"] = t.graph_error or ""
        if bytes_moved:
            st["bandwidth_Bps"] = bytes_moved / st["median_s"]
            st["frac_copy_bw"] = st["bandwidth_Bps"] / copy_bw
        if flops:
            st["flops_per_s"] = flops / st["median_s"]
        out["cases"][name] = st
    if bytes_moved:
        out["t4_estimate_s"] = hw.t4_time_estimate(bytes_moved)
    return out


def to_figures(res: dict[str, Any], prefix: str, source: str) -> list[dict]:
    """Results figures for one ``compare`` result: MEASURED times, ARITHMETIC
    ratios and bandwidth fractions, ESTIMATED T4 time."""
    env = results.environment()
    figs = []
    base = res["baseline"]
    for name, st in res["cases"].items():
        p = f"{prefix}/{name}"
        figs.append(results.figure(f"{p}/time_median", st["median_s"] * 1e6, "us", "MEASURED", source, env=env,
                                   p10_us=st["p10_s"] * 1e6, p90_us=st["p90_s"] * 1e6, graph=st["graph"],
                                   n_sets=st["n_sets"]))
        if name != base:
            figs.append(results.figure(f"{p}/speedup_vs_{base}", st["speedup_vs_baseline"], "x", "ARITHMETIC",
                                       source, env=env, note=f"median time of {base} / median time of {name}, "
                                                              f"same process"))
        if "frac_copy_bw" in st:
            figs.append(results.figure(f"{p}/frac_copy_bw", st["frac_copy_bw"], "fraction", "ARITHMETIC", source,
                                       env=env, note=f"{res['bytes_moved']} bytes per call / median time / copy "
                                                     f"bandwidth {res['copy_bw_Bps'] / 1e9:.0f} GB/s measured "
                                                     f"in the same process"))
    if res.get("t4_estimate_s"):
        figs.append(results.figure(f"{prefix}/t4_projection", res["t4_estimate_s"] * 1e6, "us", "ESTIMATED", source,
                                   note=f"T4 roofline: {res['bytes_moved']} bytes / {hw.T4.sustained_bw / 1e9:.0f} "
                                        f"GB/s sustained (peak {hw.T4.peak_bw / 1e9:.0f} GB/s)"))
    return figs


def copy_bandwidth_figure(source: str) -> dict:
    return results.figure("copy_bandwidth", hw.copy_bandwidth() / 1e9, "GB/s", "MEASURED", source,
                          note="device-to-device copy_ of 1 GiB, read+write bytes / median time")


_NCU_METRIC = re.compile(r"^\s*([a-z0-9_]+__[\w.]+)\s+(\S+)\s+([\d,.]+)\s*$")
_NCU_GRID = re.compile(r"\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")


def ncu_kernels(text: str, kernel_re: str) -> list[tuple[re.Match, dict[str, tuple[str, float]]]]:
    """Nsight Compute's text report (``ncu --metrics ...``): per profiled kernel whose header matches
    ``kernel_re``, in launch order, ``(match, {metric: (unit, value)})``. ncu's own ``==PROF==`` lines
    name the kernels too and are skipped; metrics under another kernel's header are dropped."""
    rows, cur = [], None
    for line in text.splitlines():
        if line.startswith("=="):
            continue
        m = _NCU_METRIC.match(line)
        if m:
            if cur is not None:
                cur[m.group(1)] = (m.group(2), float(m.group(3).replace(",", "")))
            continue
        k = re.search(kernel_re, line)
        if k:
            cur = {}
            rows.append((k, cur))
        elif _NCU_GRID.search(line):
            cur = None
    return rows


#: the warp-stall reasons the warp-specialization benchmarks profile (ncu's smsp__warp_issue_stalled_* metrics)
STALLS = ("long_scoreboard", "barrier")


def ncu_stall_shares(metrics: dict[str, tuple[str, float]]) -> dict[str, float]:
    """``{"stall_<reason>_pct": value}`` from an ``ncu_kernels`` row's
    ``smsp__warp_issue_stalled_<reason>_per_warp_active.pct`` metrics."""
    out = {}
    for name, (_, value) in metrics.items():
        m = re.fullmatch(r"smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct", name)
        if m:
            out[f"stall_{m.group(1)}_pct"] = value
    return out


def stall_figures(family: str, kernels: tuple[str, str], shape: str, plain: dict, ws: dict, env: dict,
                  src: str) -> list[dict]:
    """Warp-stall shares (percent of active warp cycles) of a plain kernel and its warp-specialized twin
    (``kernels``: their names in the figures), and the twin's share over the plain one's, per stall reason of
    :data:`STALLS` that both :func:`ncu_stall_shares` rows carry."""
    figs = []
    for stall in STALLS:
        key = f"stall_{stall}_pct"
        if key not in plain or key not in ws:
            continue
        for name, row in zip(kernels, (plain, ws)):
            figs.append(results.figure(f"warp_specialized/{name}/{shape}/{stall}_stall_pct", row[key], "%",
                                       "MEASURED", src, env=env,
                                       note=f"smsp__warp_issue_stalled_{stall}_per_warp_active.pct: share of "
                                            f"active warp cycles stalled on it, all warps (producers too)"))
        if plain[key] > 0:
            figs.append(results.figure(f"warp_specialized/{family}/{shape}/{stall}_stall_ratio",
                                       ws[key] / plain[key], "x", "ARITHMETIC", src,
                                       note=f"warp-specialized / plain {stall} stall share (target for long "
                                            f"scoreboard: <= 0.5)"))
    return figs
