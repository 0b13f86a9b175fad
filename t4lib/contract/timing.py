"""The timing protocol of the contract benchmark.

* Latency of one ``forward`` call, timed with CUDA events (``time.perf_counter``
  on CPU): the stream is synchronized before each repetition, a start event is
  recorded, the call is made, an end event is recorded; the elapsed time is
  what one caller waits for, including the CPU launch overhead of an eager
  model (the GPU idles while the CPU enqueues) and any output copy.
* ``WARMUP`` = 20 untimed calls, then ``REPS`` = 100 timed ones, per case and
  round; ``ROUNDS`` = 3 rounds alternate the order (baseline, candidate, ... then
  reversed) so clock or thermal drift hits every case alike.
* ``PROCESSES`` = 3 independent Python processes measure every shape
  (:func:`spawn` runs a worker in a fresh interpreter), each with its own
  CUDA context, allocator and cuBLAS state; a shape's figure is the median of
  the per-process medians, and its p90 the median of the per-process p90s.
* Set-up (model construction, weight packing, graph capture, compilation),
  calibration and mask inspection are timed separately with
  :class:`Stopwatch` and never enter a latency sample. No candidate is timed
  before it has passed the strict rule (the caller's job: see ``bench``).
"""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from t4lib.core import results

WARMUP, REPS, ROUNDS, PROCESSES = 20, 100, 3, 3


def quantile(xs: list[float], p: float) -> float:
    """Linear-interpolated quantile of ``xs`` (p in [0, 1])."""
    if not xs:
        raise ValueError("quantile of an empty sample")
    s = sorted(xs)
    k = (len(s) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    """median, p10, p90, min, mean and count of a sample of seconds."""
    return {"median_s": quantile(xs, 0.5), "p10_s": quantile(xs, 0.1), "p90_s": quantile(xs, 0.9),
            "min_s": min(xs), "mean_s": sum(xs) / len(xs), "n": len(xs)}


def _device_of(device) -> Any:
    if device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def time_calls(fn: Callable[[], Any], reps: int, device=None) -> list[float]:
    """``reps`` latencies in seconds of ``fn()``, synchronizing before each."""
    dev = _device_of(device)
    out = []
    if dev.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            torch.cuda.synchronize(dev)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(dev)
        out = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def time_alternating(cases: dict[str, Callable[[], Any]], *, warmup: int = WARMUP, reps: int = REPS,
                     rounds: int = ROUNDS, device=None, progress: Callable[[str], None] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """Time every case ``rounds`` times, alternating the order each round.

    Returns ``{name: {"samples": [...seconds...], "rounds": [median per round],
    **summarize(samples)}}``; ``order`` (the call order, for tests) is kept
    under the key ``"_order"`` of the first case's entry.
    """
    if not cases:
        raise ValueError("cases must not be empty")
    if warmup < 0 or reps < 1 or rounds < 1:
        raise ValueError(f"need warmup >= 0, reps >= 1, rounds >= 1; got {warmup}, {reps}, {rounds}")
    dev = _device_of(device)
    names = list(cases)
    samples: dict[str, list[float]] = {n: [] for n in names}
    per_round: dict[str, list[float]] = {n: [] for n in names}
    order = []
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn = cases[name]
            for _ in range(warmup):
                fn()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t = time_calls(fn, reps, dev)
            samples[name].extend(t)
            per_round[name].append(quantile(t, 0.5))
            order.append(name)
            if progress:
                progress(f"round {r + 1}/{rounds} {name}: median {quantile(t, 0.5) * 1e3:.3f} ms")
    out = {n: {**summarize(samples[n]), "rounds": per_round[n], "samples": samples[n]} for n in names}
    out[names[0]]["_order"] = order
    return out


class Stopwatch:
    """Wall time of a block, synchronizing CUDA on entry and exit when present:
    ``with Stopwatch() as sw: ...; sw.seconds``."""

    def __init__(self, device=None):
        self.device = device
        self.seconds = float("nan")

    def _sync(self):
        dev = _device_of(self.device)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def __enter__(self):
        self._sync()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self._sync()
        self.seconds = time.perf_counter() - self.t0
        return False


# ----------------------------------------------------------------------------- processes

def spawn(target: str, payload: dict, *, timeout: float = 600.0, env: dict | None = None) -> dict:
    """Run ``target`` (``"package.module:function"``, called with ``payload``
    and returning a JSON-able dict) in a fresh Python process.

    Returns the function's result, or ``{"error": ..., "stderr_tail": ...}``
    when the process fails, times out or returns nothing; never raises for a
    worker failure, so one shape's crash does not stop the others.
    """
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="t4lib-contract-") as d:
        pin, pout = Path(d) / "in.json", Path(d) / "out.json"
        results.write_json(pin, payload, indent=None)
        e = dict(os.environ if env is None else env)
        e["PYTHONPATH"] = str(root) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "t4lib.contract.timing", target, str(pin), str(pout)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=e, cwd=str(root), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as ex:
            tail = (ex.stderr or "")[-4000:] if isinstance(ex.stderr, str) else ""
            return {"error": f"{target} timed out after {timeout:.0f} s", "stderr_tail": tail}
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not pout.exists():
            return {"error": f"{target} exited with status {proc.returncode}", "stderr_tail": proc.stderr[-4000:],
                    "process_wall_s": wall}
        res = json.loads(pout.read_text())
        res.setdefault("process_wall_s", wall)
        return res


def _main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m t4lib.contract.timing module:function in.json out.json", file=sys.stderr)
        return 2
    target, pin, pout = argv
    mod, _, fn = target.partition(":")
    func = getattr(importlib.import_module(mod), fn)
    res = func(json.loads(Path(pin).read_text()))
    results.write_json(pout, res, indent=None)  # whole or absent: the parent reads it only if it exists
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
