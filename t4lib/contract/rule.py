"""The correctness rules every optimized output is judged by, element by element.

``strict`` (the acceptance gate)::

    |a - r| <= 1e-3   or   |a - r| <= 1e-2 * |r|

``judge`` (the looser rule of the benchmark's command line, reported beside
the strict one): ``atol = 2e-3``, ``rtol = 2e-2``.

Both sides are compared in float64, so the rule itself adds no rounding.
An element passes iff ``|a - r| <= max(atol, rtol * |r|)``; its *usage*
``|a - r| / max(atol, rtol * |r|)`` is the fraction of the tolerance it spends
(<= 1 passes). A NaN on either side fails, and so do infinities that are not equal on both
sides; equal infinities pass. The
calibration asks for a margin (usage <= ``margin`` < 1) so a plan accepted on
calibration inputs keeps headroom on inputs it has not seen.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict

import torch

RULES = {"strict": (1e-3, 1e-2), "judge": (2e-3, 2e-2)}


@dataclass
class RuleResult:
    rule: str
    atol: float
    rtol: float
    failures: int          # elements outside the tolerance (NaN counts as a failure)
    total: int
    max_abs: float         # largest |a - r| over finite pairs
    max_usage: float       # largest |a - r| / max(atol, rtol|r|); inf when a NaN is present
    worst_index: tuple     # where max_usage occurs

    @property
    def passed(self) -> bool:
        return self.failures == 0

    def within(self, margin: float) -> bool:
        """Passed with ``max_usage <= margin`` (margin 1.0 is the plain rule)."""
        return self.failures == 0 and self.max_usage <= margin

    def as_dict(self) -> dict:
        d = asdict(self)
        d["worst_index"] = list(self.worst_index)
        d["passed"] = self.passed
        return d


def tolerances(rule) -> tuple[str, float, float]:
    """``"strict"``, ``"judge"`` or ``(atol, rtol)`` -> (name, atol, rtol)."""
    if isinstance(rule, str):
        if rule not in RULES:
            raise ValueError(f"rule must be one of {sorted(RULES)} or (atol, rtol), got {rule!r}")
        return (rule, *RULES[rule])
    try:
        atol, rtol = (float(v) for v in rule)
    except (TypeError, ValueError):
        raise ValueError(f"rule must be one of {sorted(RULES)} or (atol, rtol), got {rule!r}") from None
    if atol < 0 or rtol < 0:
        raise ValueError(f"rule tolerances must be >= 0, got atol={atol}, rtol={rtol}")
    return (f"atol={atol:g},rtol={rtol:g}", atol, rtol)


def compare(actual: torch.Tensor, reference: torch.Tensor, rule="strict", *, chunk: int = 1 << 24) -> RuleResult:
    """Judge ``actual`` against ``reference`` under ``rule`` (see module docstring).

    Shapes and dtypes must match exactly (an fp32 or int64 output does not meet an
    fp16 contract, and a complex one would lose its imaginary part in the float64
    comparison); the tensors may live on any device (the work is done on
    ``reference``'s device, ``chunk`` elements at a time).
    """
    name, atol, rtol = tolerances(rule)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1 (elements compared at a time), got {chunk!r}")
    if not isinstance(actual, torch.Tensor) or not isinstance(reference, torch.Tensor):
        raise TypeError("actual and reference must be tensors")
    for arg, t in (("actual", actual), ("reference", reference)):
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{arg} must be a real numeric tensor, got {t.dtype}")
    if actual.dtype != reference.dtype:
        raise TypeError(f"actual has dtype {actual.dtype} but the contract (reference) is {reference.dtype}")
    if actual.shape != reference.shape:
        raise ValueError(f"actual has shape {tuple(actual.shape)} but reference has {tuple(reference.shape)}")
    a = actual.detach().reshape(-1)
    r = reference.detach().reshape(-1)
    if a.device != r.device:
        a = a.to(r.device)
    n = r.numel()
    failures, max_abs, max_usage, worst = 0, 0.0, 0.0, 0
    for lo in range(0, n, chunk):
        ac = a[lo:lo + chunk].double()
        rc = r[lo:lo + chunk].double()
        diff = (ac - rc).abs()
        same_inf = torch.isinf(ac) & torch.isinf(rc) & (ac == rc)
        diff = torch.where(same_inf, torch.zeros_like(diff), diff)
        bad_nan = torch.isnan(diff) | torch.isinf(diff)   # NaN, or infinities that differ
        tol = torch.clamp(rtol * rc.abs(), min=atol)
        usage = torch.where(tol > 0, diff / tol.clamp_min(1e-300), torch.where(diff > 0, torch.full_like(diff, float("inf")), diff))
        usage = torch.where(bad_nan, torch.full_like(usage, float("inf")), usage)
        failures += int(((usage > 1) | bad_nan).sum())
        finite = torch.where(bad_nan | torch.isinf(diff), torch.zeros_like(diff), diff)
        if finite.numel():
            max_abs = max(max_abs, float(finite.max()))
            u, i = usage.max(dim=0)
            if lo == 0 or float(u) > max_usage:
                max_usage, worst = float(u), lo + int(i)
    idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(worst), tuple(reference.shape))) if n else ()
    return RuleResult(name, atol, rtol, failures, n, max_abs, max_usage, idx)


def strict(actual, reference) -> RuleResult:
    return compare(actual, reference, "strict")


def judge(actual, reference) -> RuleResult:
    return compare(actual, reference, "judge")
