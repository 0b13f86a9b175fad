"""Layer split over N pipeline stages (devices), by bytes rather than layer count.

A decode step runs the stages in turn and hands the hidden state over once per
boundary, so the stage that holds the most bytes sets the pace: the plan
minimises the largest fill (stage bytes over its device's capacity), keeping
layers contiguous. Stage 0 also holds the embedding, the last stage the final
norm and output head; each stage's bytes include its layers' caches.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StagePlan", "plan_stages", "device_capacities"]


@dataclass(frozen=True)
class StagePlan:
    ranges: tuple           # one range of main-layer indices per stage
    stage_bytes: tuple      # bytes each stage holds (weights + caches)
    capacities: tuple       # bytes each stage's device offers (None: unbounded)

    def device_of_layer(self, devices) -> list:
        """One device per main layer: ``devices[s]`` for the layers of stage ``s``."""
        return [devices[s] for s, r in enumerate(self.ranges) for _ in r]


def _check_sizes(name: str, xs) -> list[int]:
    out = []
    for i, x in enumerate(xs):
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(f"{name}[{i}] must be a non-negative int, got {x!r}")
        out.append(x)
    return out


def plan_stages(layer_bytes, n_stages: int, capacities=None, first_extra: int = 0, last_extra: int = 0) -> StagePlan:
    """Contiguous split of the layers (bytes ``layer_bytes[i]``, caches included) over
    ``n_stages`` stages that minimises the largest fill of a stage; ``capacities``:
    bytes per stage (None: equal and unbounded, then the largest stage is minimised).
    Raises ValueError when a stage cannot fit on its device."""
    sizes = _check_sizes("layer_bytes", list(layer_bytes))
    L = len(sizes)
    if isinstance(n_stages, bool) or not isinstance(n_stages, int) or not 1 <= n_stages <= max(L, 1):
        raise ValueError(f"n_stages must be an int in 1..{L} (one layer per stage at least), got {n_stages!r}")
    if L == 0:
        raise ValueError("layer_bytes is empty: nothing to split")
    if capacities is None:
        caps = [None] * n_stages
    else:
        caps = list(capacities)
        if len(caps) != n_stages:
            raise ValueError(f"capacities must give one size per stage ({n_stages}), got {len(caps)}")
        caps = [None if c is None else _check_sizes("capacities", [c])[0] for c in caps]
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)

    def load(s, a, b):  # bytes of stage s holding layers a..b-1
        return prefix[b] - prefix[a] + (first_extra if s == 0 else 0) + (last_extra if s == n_stages - 1 else 0)

    def fill(s, a, b):
        c = caps[s]
        x = load(s, a, b)
        return x / c if c else (float("inf") if c == 0 and x else x)

    INF = float("inf")
    # best[s][b]: the smallest largest fill placing layers 0..b-1 on stages 0..s
    best = [[INF] * (L + 1) for _ in range(n_stages)]
    cut = [[0] * (L + 1) for _ in range(n_stages)]
    for b in range(1, L + 1):
        best[0][b] = fill(0, 0, b)
    for s in range(1, n_stages):
        for b in range(s + 1, L + 1):
            for a in range(s, b):
                v = max(best[s - 1][a], fill(s, a, b))
                if v < best[s][b]:
                    best[s][b], cut[s][b] = v, a
    bounds, b = [], L
    for s in range(n_stages - 1, 0, -1):
        a = cut[s][b]
        bounds.append((a, b))
        b = a
    bounds.append((0, b))
    bounds.reverse()
    ranges = tuple(range(a, b) for a, b in bounds)
    stage_bytes = tuple(load(s, a, b) for s, (a, b) in enumerate(bounds))
    for s, (nb, c) in enumerate(zip(stage_bytes, caps)):
        if c is not None and nb > c:
            raise ValueError(f"the split does not fit: stage {s} (layers {ranges[s].start}..{ranges[s].stop - 1}) "
                             f"needs {nb} bytes but its device offers {c}; with {n_stages} stages the best plan "
                             f"fills the fullest device to {best[-1][L]:.2f}x. Use more or larger devices, a "
                             f"shorter cache, or smaller quant types")
    return StagePlan(ranges, stage_bytes, tuple(caps))


def device_capacities(devices, reserve: int = 1 << 30) -> list:
    """Free bytes on each CUDA device minus ``reserve`` (workspace, activations); None for CPU."""
    import torch  # planning a split needs no torch

    out = []
    for d in devices:
        d = torch.device(d)
        if d.type == "cuda":
            free, _ = torch.cuda.mem_get_info(d)
            out.append(max(0, free - reserve))
        else:
            out.append(None)
    return out
