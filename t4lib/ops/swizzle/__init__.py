"""16-byte XOR swizzle for shared-memory tiles (``t4::swizzle16`` in common.cuh).

- ``swizzle_offsets(rows, row_chunks, device)``: [rows * row_chunks] int32,
  the stored chunk index of every (row, chunk) (a KAT of the device helper
  against ``reference.swizzle16``).
- ``swizzle_transpose(tile)``: [32, 8, 4] int32 (a 32 x 8 tile of 16-byte
  chunks) -> [8, 32, 4], written into swizzled shared memory row-wise and read
  back column-wise on the GPU.
- ``bench_cycles(layout, warps=1, iters=4096)``: clock64 cycles per 16-byte
  column-wise access for ``naive`` (128-byte rows), ``padded`` (144-byte rows)
  or ``swizzled``; ``warps=1`` is the dependent-chain latency mode, more warps
  the independent-load throughput mode (GPU only).
- ``reference``: the same layouts in Python and the analytical bank model.
"""
from __future__ import annotations

import torch

from .._dispatch import check, use_cuda
from . import binding, reference
from .reference import LAYOUTS, bank_conflicts, conflict_table, swizzle16, wavefronts

__all__ = ["swizzle_offsets", "swizzle_transpose", "bench_cycles", "swizzle16", "wavefronts", "bank_conflicts",
           "conflict_table", "LAYOUTS", "ROW_CHUNKS"]

ROW_CHUNKS = (2, 4, 8, 16)
TILE_SHAPE = (32, 8, 4)


def swizzle_offsets(rows: int, row_chunks: int, device: str | torch.device = "cpu",
                    backend: str = "auto") -> torch.Tensor:
    if not isinstance(rows, int) or rows <= 0:
        raise ValueError(f"rows must be a positive int, got {rows!r}")
    if row_chunks not in ROW_CHUNKS:
        raise ValueError(f"row_chunks must be one of {ROW_CHUNKS}, got {row_chunks!r}")
    device = torch.device(device)
    if use_cuda(backend, binding.FAMILY, device):
        out = torch.full((rows * row_chunks,), -1, dtype=torch.int32, device=device)
        binding.offsets(out, rows, row_chunks)
        return out
    return torch.tensor(reference.swizzle16_offsets(rows, row_chunks), dtype=torch.int32, device=device)


def swizzle_transpose(tile: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    check("tile", tile, dtype=torch.int32, ndim=3, align=16)
    if tuple(tile.shape) != TILE_SHAPE:
        raise ValueError(f"tile must have shape {TILE_SHAPE} (32 rows of 8 16-byte chunks), got {tuple(tile.shape)}")
    if use_cuda(backend, binding.FAMILY, tile.device):
        out = torch.full((8, 32, 4), -1, dtype=torch.int32, device=tile.device)
        binding.transpose(tile, out)
        return out
    return reference.swizzle_transpose(tile)


def bench_cycles(layout: str, warps: int = 1, iters: int = 4096, device: str | torch.device = "cuda") -> float:
    """Cycles per column-wise 16-byte access (clock64; see module docstring)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not isinstance(warps, int) or not 1 <= warps <= 32:
        raise ValueError(f"warps must be an int in 1..32, got {warps!r}")
    if not isinstance(iters, int) or iters <= 0:
        raise ValueError(f"iters must be a positive int, got {iters!r}")
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"bench_cycles needs a CUDA device, got {device}")
    cycles = torch.zeros(1, dtype=torch.int64, device=device)
    sink = torch.zeros(32 * warps, dtype=torch.int32, device=device)
    binding.bench(LAYOUTS.index(layout), cycles, sink, iters, warps)
    c = float(cycles.item())
    return c / iters if warps == 1 else c / (iters * 8 * warps)
