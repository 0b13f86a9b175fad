"""Self-calibrating dispatch: which candidate runs for which layer and shape key.

No hand-written table. For one shape key (device capability, dtype, B, S, D,
H, layers, causal, mask kind; see ``model.shape_key``) the calibration, on
the device at hand:

1. computes the reference output on calibration inputs (seeds distinct from
   the benchmark's);
2. probes each *base* mode in every layer (``packed_fused``, ``fused``,
   ``packed``; ``ref`` is bit-identical by construction and always allowed)
   and keeps the fastest-by-construction one whose end-to-end output passes
   the strict rule with a margin (every element spends at most ``margin`` of
   its tolerance: headroom for inputs not seen);
3. replaces the last ``k`` layers by SDPA for ``k = 1, 2, ...`` and stops at
   the first depth that breaks the rule: fp16 rounding differences in early
   layers are carried and amplified by every later residual layer, so depth
   is searched from the output end;
4. builds the candidate plans (reference-order eager, reference-order CUDA
   graph, the accepted base and SDPA suffix, eager and graph), checks each end
   to end again, times the passing ones against the reference, and keeps the
   lowest median whose p90 is not worse than the reference's (none: the
   reference path).

The chosen entries form a :class:`Plan`, saved as JSON with the device's
signature; loading it on another device (or another torch/CUDA version)
is a stale plan: by default a warning and an empty plan, so every key falls
back to the reference path (``on_stale="error"`` raises
:class:`StalePlanError`). Keys a plan does not hold run the reference path.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, asdict
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .. import results
from . import rule as _rule
from . import timing
from .model import BaselineTransformer, OptimizedTransformer, describe

PLAN_SCHEMA = 1
BASE_MODES = ("packed_fused", "fused", "packed")   # probed in this order; "ref" always passes


class StalePlanError(RuntimeError):
    """A plan file was calibrated on another device or software stack."""


@dataclass
class PlanEntry:
    """``layers``: one mode per layer, or None for the reference path."""
    layers: list[str] | None
    graph: bool = False
    name: str = ""
    info: dict = field(default_factory=dict)

    @classmethod
    def reference(cls, **info) -> "PlanEntry":
        return cls(None, False, "reference", dict(info))

    def __post_init__(self):
        if not self.name:
            self.name = "reference" if self.layers is None else describe(self.layers, self.graph)


def device_signature(device=None) -> dict:
    """What a plan is valid for: device name and capability, torch and CUDA versions."""
    dev = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    sig = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        sig.update(name=p.name, capability=f"sm{p.major}{p.minor}")
    else:
        sig.update(name=dev.type, capability=dev.type)
    return sig


class Plan:
    """Shape key -> :class:`PlanEntry`, for one device signature."""

    def __init__(self, device: dict | None = None, entries: dict[str, PlanEntry] | None = None):
        self.device = dict(device) if device is not None else device_signature()
        self.entries: dict[str, PlanEntry] = dict(entries or {})
        self.stale_from: dict | None = None

    def lookup(self, key: str) -> PlanEntry | None:
        return self.entries.get(key)

    def add(self, key: str, entry: PlanEntry) -> None:
        self.entries[key] = entry

    def to_json(self) -> dict:
        return {"schema": PLAN_SCHEMA, "device": self.device,
                "entries": {k: asdict(e) for k, e in self.entries.items()}}

    def save(self, path) -> Path:
        return results.write_json(path, self.to_json())

    @classmethod
    def from_json(cls, doc: Any, where: str = "plan") -> "Plan":
        if not isinstance(doc, dict) or doc.get("schema") != PLAN_SCHEMA:
            raise ValueError(f"{where}: not a calibration plan (schema {PLAN_SCHEMA} expected)")
        dev, ents = doc.get("device"), doc.get("entries")
        if not isinstance(dev, dict) or not isinstance(ents, dict):
            raise ValueError(f"{where}: 'device' and 'entries' must be objects")
        entries = {}
        for k, e in ents.items():
            try:
                entries[k] = PlanEntry(layers=e["layers"], graph=bool(e.get("graph", False)),
                                       name=e.get("name", ""), info=e.get("info", {}))
            except (KeyError, TypeError):
                raise ValueError(f"{where}: entry {k!r} is malformed") from None
        return cls(dev, entries)

    @classmethod
    def load(cls, path, *, device=None, on_stale: str = "warn") -> "Plan":
        """Load a plan; ``on_stale`` ("warn" | "error" | "ignore") says what to
        do when it was made for another device signature ("warn": an empty plan
        for this device, so every key runs the reference path)."""
        if on_stale not in ("warn", "error", "ignore"):
            raise ValueError(f"on_stale must be 'warn', 'error' or 'ignore', got {on_stale!r}")
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"plan file {path}: not JSON: {e}") from None
        plan = cls.from_json(doc, where=f"plan file {path}")
        here = device_signature(device)
        if on_stale != "ignore" and plan.device != here:
            msg = (f"plan file {path} was calibrated for {plan.device}, this device is {here}; "
                   f"re-run the calibration")
            if on_stale == "error":
                raise StalePlanError(msg)
            warnings.warn(msg + " (using the reference path for every key)", RuntimeWarning, stacklevel=2)
            stale = cls(here)
            stale.stale_from = plan.device
            return stale
        return plan


# ----------------------------------------------------------------------------- calibration

@dataclass
class CalibrationConfig:
    margin: float = 0.5          # max tolerance usage accepted on calibration inputs
    warmup: int = 5
    reps: int = 20
    rounds: int = 1
    graphs: bool | None = None   # None: on CUDA only
    base_modes: tuple = BASE_MODES
    sdpa: bool = True


def suffix_search(n_layers: int, passes: Callable[[int], bool]) -> tuple[int, list[int]]:
    """Largest ``k`` such that ``passes(j)`` holds for every ``j = 1..k``
    (stops at the first failing depth). Returns ``(k, depths probed)``."""
    k, probed = 0, []
    for j in range(1, n_layers + 1):
        probed.append(j)
        if not passes(j):
            break
        k = j
    return k, probed


class _Probe:
    """End-to-end strict check of one plan entry against reference outputs."""

    def __init__(self, opt: OptimizedTransformer, inputs, refs, margin: float):
        self.opt, self.inputs, self.refs, self.margin = opt, inputs, refs, margin
        self.records: list[dict] = []

    def __call__(self, entry: PlanEntry, stage: str) -> bool:
        worst = None
        err = None
        try:
            for (x, m), r in zip(self.inputs, self.refs):
                res = _rule.compare(self.opt.run_entry(entry, x, m), r, "strict")
                if worst is None or res.failures > worst.failures or (
                        res.failures == worst.failures and res.max_usage > worst.max_usage):
                    worst = res
        except Exception as e:  # a candidate that cannot run is a rejected candidate
            err = f"{type(e).__name__}: {e}"
        ok = err is None and worst.within(self.margin)
        rec = {"stage": stage, "plan": entry.name, "layers": entry.layers, "graph": entry.graph, "accepted": ok}
        if err:
            rec["error"] = err[:400]
        else:
            rec.update(failures=worst.failures, total=worst.total, max_abs=worst.max_abs,
                       max_usage=worst.max_usage)
            if not ok:
                rec["why"] = (f"{worst.failures} of {worst.total} elements fail the strict rule"
                              if worst.failures else
                              f"passes, but spends {worst.max_usage:.3g} of the tolerance (margin {self.margin})")
        self.records.append(rec)
        return ok


def calibrate_shape(ref: BaselineTransformer, opt: OptimizedTransformer, inputs: Sequence[tuple],
                    config: CalibrationConfig | None = None, progress=None) -> tuple[str, PlanEntry, dict]:
    """Calibrate one shape key. ``inputs``: calibration ``(x, mask)`` pairs of
    that shape. Returns ``(key, entry, report)``; ``report`` lists every probe
    (accepted or not, and why) and the timings."""
    cfg = config or CalibrationConfig()
    x0, m0 = inputs[0]
    L = opt.n_layers
    kind = opt.mask_kind(m0)
    for x, m in inputs[1:]:
        if opt.mask_kind(m) != kind:
            raise ValueError("calibration inputs must share one mask kind")
    key = opt.key_for(x0, kind)
    graphs = (x0.is_cuda if cfg.graphs is None else cfg.graphs) and x0.is_cuda
    with torch.no_grad():
        refs = [ref(x, m) for x, m in inputs]
    probe = _Probe(opt, inputs, refs, cfg.margin)

    base = "ref"
    for mode in cfg.base_modes:
        if probe(PlanEntry([mode] * L), "base"):
            base = mode
            break
    k = 0
    if cfg.sdpa:
        k, _ = suffix_search(L, lambda j: probe(PlanEntry([base] * (L - j) + ["sdpa"] * j), f"sdpa-suffix"))
    fast = [base] * (L - k) + ["sdpa"] * k

    cands = [PlanEntry(["ref"] * L, False)]
    if graphs:
        cands.append(PlanEntry(["ref"] * L, True))
    if fast != ["ref"] * L:
        cands.append(PlanEntry(fast, False))
        if graphs:
            cands.append(PlanEntry(fast, True))
    if k and base != "ref":  # also the base without SDPA, in case SDPA does not pay at this shape
        cands.append(PlanEntry([base] * L, graphs))
    passing = [c for c in cands if probe(c, "candidate")]

    cases = {"reference": (lambda: ref(x0, m0))}
    for c in passing:
        cases[c.name] = (lambda c=c: opt.run_entry(c, x0, m0))
    with torch.no_grad():
        t = timing.time_alternating(cases, warmup=cfg.warmup, reps=cfg.reps, rounds=cfg.rounds,
                                    device=x0.device)
    ref_t = t["reference"]
    timings = {n: {"median_s": v["median_s"], "p90_s": v["p90_s"]} for n, v in t.items()}
    best, why = None, "no candidate beat the reference's median with a p90 no worse than its p90"
    for c in passing:
        s = t[c.name]
        if s["p90_s"] <= ref_t["p90_s"] and s["median_s"] < ref_t["median_s"] and (
                best is None or s["median_s"] < t[best.name]["median_s"]):
            best = c
    if best is None:
        entry = PlanEntry.reference(why=why)
    else:
        entry = PlanEntry(best.layers, best.graph, info={
            "median_s": t[best.name]["median_s"], "p90_s": t[best.name]["p90_s"],
            "reference_median_s": ref_t["median_s"], "reference_p90_s": ref_t["p90_s"]})
    report = {"key": key, "base": base, "sdpa_depth": k, "chosen": entry.name, "probes": probe.records,
              "timings": timings, "margin": cfg.margin, "calibration_inputs": len(inputs)}
    if progress:
        progress(f"{key}: {entry.name} (base {base}, sdpa suffix {k})")
    return key, entry, report
