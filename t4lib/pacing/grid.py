"""Cap -> launch grid: the pacing knob.

A cap ``c`` in (0, 1] is a fraction of the SM's maximum resident warps. A
kernel launched with ``warps_per_cta`` warps per CTA gets

    ctas_per_sm = max(1, floor(c * max_warps_per_sm / warps_per_cta))
    ctas        = ctas_per_sm * num_sms

CTAs in its (persistent, grid-stride) grid, so at most ``ctas_per_sm`` of its
CTAs can be resident on one SM at a time. Because a CTA is indivisible, the
warp fraction actually reached, ``ctas_per_sm * warps_per_cta /
max_warps_per_sm``, can exceed the cap at small caps (a 256-thread CTA is 25%
of a T4 SM's 32 warps, so a 12.5% cap gives 25% there). The kernel's own
register and shared-memory use may also bound residency below the cap; the
grid is then an upper bound that does not bind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict

#: The caps the sweep runs by default (fractions of max warps per SM).
DEFAULT_CAPS = (0.125, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class SMLimits:
    """What the mapping needs to know about a device."""
    name: str
    num_sms: int
    max_warps_per_sm: int


#: Tesla T4 (TU104, sm_75): 40 SMs, 1024 threads = 32 warps per SM.
T4_LIMITS = SMLimits("Tesla T4", 40, 32)


def check_cap(cap: float, name: str = "cap") -> float:
    """Return ``cap`` as a float or raise ValueError naming it when outside (0, 1]."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)):
        raise TypeError(f"{name} must be a number in (0, 1], got {type(cap).__name__}")
    c = float(cap)
    if not math.isfinite(c) or not 0.0 < c <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1] (a fraction of max warps per SM), got {cap!r}")
    return c


def device_limits(device: int | str | None = None) -> SMLimits:
    """SM count and max warps per SM of a CUDA device (torch device properties).

    Raises RuntimeError when there is no CUDA device.
    """
    import torch  # deferred: grid itself is torch-free (the t4lib.pacing package loads torch anyway)

    if not torch.cuda.is_available():
        raise RuntimeError("device_limits() needs a CUDA device; without one use T4_LIMITS or pass SMLimits "
                           "explicitly to ctas_for_cap")
    p = torch.cuda.get_device_properties(torch.device("cuda", 0) if device is None else device)
    return SMLimits(p.name, p.multi_processor_count, p.max_threads_per_multi_processor // 32)


def ctas_per_sm(cap: float, warps_per_cta: int, limits: SMLimits) -> int:
    """Resident CTAs per SM allowed by ``cap`` (at least 1)."""
    c = check_cap(cap)
    if not isinstance(warps_per_cta, int) or isinstance(warps_per_cta, bool) or warps_per_cta < 1:
        raise ValueError(f"warps_per_cta must be a positive int, got {warps_per_cta!r}")
    if warps_per_cta > limits.max_warps_per_sm:
        raise ValueError(f"warps_per_cta={warps_per_cta} exceeds the {limits.max_warps_per_sm} warps an SM of "
                         f"{limits.name} holds")
    # the small epsilon keeps exact products (0.5 * 32 / 8 = 2) from flooring down through rounding error
    return max(1, math.floor(c * limits.max_warps_per_sm / warps_per_cta + 1e-9))


def ctas_for_cap(cap: float, warps_per_cta: int, limits: SMLimits | None = None) -> int:
    """Grid size (CTAs) for occupancy cap ``cap``; ``limits`` default to the current CUDA device."""
    limits = limits or device_limits()
    return ctas_per_sm(cap, warps_per_cta, limits) * limits.num_sms


@dataclass(frozen=True)
class GridPlan:
    cap: float
    warps_per_cta: int
    ctas_per_sm: int
    ctas: int
    warp_fraction: float   # ctas_per_sm * warps_per_cta / max_warps_per_sm: what the grid allows
    device: str

    def as_dict(self) -> dict:
        return asdict(self)


def plan(cap: float, warps_per_cta: int, limits: SMLimits | None = None) -> GridPlan:
    """The grid for ``cap`` with the warp fraction it really allows."""
    limits = limits or device_limits()
    k = ctas_per_sm(cap, warps_per_cta, limits)
    return GridPlan(cap=float(cap), warps_per_cta=warps_per_cta, ctas_per_sm=k, ctas=k * limits.num_sms,
                    warp_fraction=k * warps_per_cta / limits.max_warps_per_sm, device=limits.name)
