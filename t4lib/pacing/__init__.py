"""Power-aware occupancy pacing.

A passively cooled 70 W T4 lowers its SM clock when a sustained load reaches
the power limit. Capping how many warps of a kernel are resident per SM
(by capping the grid of a persistent, grid-stride kernel) lowers the power it
draws; a controller picks, from a measured sweep, the cap with the most
sustained throughput that stays under a power budget without a power-cap
clock event. Nothing here changes GPU settings.

* ``grid``: cap -> CTAs (``ctas_for_cap``, ``plan``, ``device_limits``)
* ``kernels``: the paced kernel slots (INT4 dequant, W4A16 GEMM; ``register``)
* ``sweep``: ``run_sweep`` (sustained windows under the NVML sampler)
* ``controller``: ``choose``, ``binding_budget``, ``launch_kwargs``
* ``recorded``: ``load_sweep``, ``find_recorded``, ``synthetic_sweep`` (labelled)
* ``projection``: T4 projection (ESTIMATED)
* ``report``: ``table``, ``to_figures``, ``plot``, ``save``, ``clock_finding``

Entry point: ``python -m t4lib.pacing sweep --out results/<device-slug>/``.
"""
from __future__ import annotations

from .controller import Decision, binding_budget, check_budget, choose, launch_kwargs, T4_BUDGET_W
from .grid import DEFAULT_CAPS, SMLimits, T4_LIMITS, check_cap, ctas_for_cap, device_limits, plan
from .recorded import find_recorded, load_sweep, synthetic_sweep, validate_sweep

__all__ = ["Decision", "binding_budget", "check_budget", "choose", "launch_kwargs", "T4_BUDGET_W", "DEFAULT_CAPS",
           "SMLimits", "T4_LIMITS", "check_cap", "ctas_for_cap", "device_limits", "plan", "find_recorded",
           "load_sweep", "synthetic_sweep", "validate_sweep", "run", "run_sweep"]


def run_sweep(*args, **kwargs):
    """See ``t4lib.pacing.sweep.run_sweep``."""
    from .sweep import run_sweep as _run
    return _run(*args, **kwargs)


def run(out_dir, window_s: float | None = 15.0, kernels=("int4_dequant", "w4a16_gemm")) -> list[dict]:
    """Benchmark entry point: sweep on the current GPU, save ``out_dir/pacing_sweep.json``
    and the plots, return the figures."""
    from . import report

    sweep = run_sweep(kernels, window_s=window_s)
    _, figs = report.save(sweep, out_dir)
    return figs
