"""CUDA-graph capture, once for every engine, benchmark and timer.

Capture records work without running it, so whatever the recorded call needs (kernels built and
loaded, cuBLAS's algorithm choices, workspaces, packed layouts) must exist first: ``fn`` runs
``warmup`` times on a side stream, as ``torch.cuda.graph`` requires, and is then recorded.
``reset`` puts the state the call reads (a cache position, a counter) back before each warm-up
run and before recording, so the graph records the call from that state.

Capture is an optimisation: :func:`try_capture` returns ``(None, why)`` instead of raising, so a
caller runs the same call eagerly and says why (a host sync or an allocation inside ``fn``).
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

import torch


def capture(fn: Callable[[], Any], *, warmup: int = 2, warm_up: Callable[[], Any] | None = None,
            reset: Callable[[], Any] | None = None, pool=None, device=None) -> tuple[torch.cuda.CUDAGraph, Any]:
    """``(graph, output)``: ``fn`` recorded in a CUDA graph (``output`` is what the recorded call returned:
    static tensors the graph rewrites on each replay). ``warm_up`` runs instead of ``fn`` during the warm-up
    (for a call whose warm-up must restore state itself); ``pool``: a graph memory pool to share; ``device``:
    the CUDA device to capture on (default: the current one). Raises whatever warm-up or capture raised."""
    warm = warm_up or fn
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                if reset is not None:
                    reset()
                warm()
        torch.cuda.current_stream().wait_stream(side)
        if reset is not None:
            reset()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):   # records; runs nothing
            out = fn()
    return graph, out


def try_capture(fn: Callable[[], Any], *, what: str | None = None, **kw) -> tuple[torch.cuda.CUDAGraph | None, str | None]:
    """``(graph, None)``, or ``(None, why)`` when warm-up or capture failed (the device is synchronized, so
    the failed capture leaves nothing in flight). ``what``: when given, a RuntimeWarning says
    "<what> graph capture failed, running eagerly (<why>)"."""
    try:
        graph, _ = capture(fn, **kw)
        return graph, None
    except Exception as e:  # capture-unsafe code: the caller runs it eagerly
        why = f"{type(e).__name__}: {e}"
        torch.cuda.synchronize()
        if what:
            warnings.warn(f"{what} graph capture failed, running eagerly ({why})", RuntimeWarning)
        return None, why
