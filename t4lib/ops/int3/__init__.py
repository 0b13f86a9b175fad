"""Signed INT3 bitplane dequantization with LOP3.

``int3_dequant(packed, scales=None, group_size=128)``: ``packed`` [3B] int32,
B blocks of three bitplanes (bit ``i`` of plane ``p`` = bit ``p`` of value
``i``, values in [-4, 3]), optional ``scales`` [32B / group_size] fp16 ->
[32B] fp16, ``out[i] = q[i] * scales[i // group_size]``. Bit-exact between the
CUDA kernel and the reference. 3 bits per weight, 12 bytes per 32 values.
"""
from __future__ import annotations

import torch

from .._dispatch import check, check_grid_cap, check_group_scales, use_cuda
from . import binding, reference
from .reference import BLOCK, PLANES

__all__ = ["int3_dequant", "pack_int3", "unpack_int3", "BLOCK"]


def _validate(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int) -> None:
    check("packed", packed, dtype=torch.int32, ndim=1)
    if packed.numel() % 3:
        raise ValueError(f"packed length must be a multiple of 3 (three bitplanes per block of 32 values), "
                         f"got {packed.numel()}")
    check_group_scales("packed", packed, packed.numel() // 3 * BLOCK, scales, group_size, BLOCK)


@torch.library.custom_op("t4lib::int3_dequant", mutates_args=())
def _int3_dequant_cuda(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int, max_blocks: int,
                       staged: bool) -> torch.Tensor:
    out = torch.empty(packed.numel() // 3 * BLOCK, dtype=torch.float16, device=packed.device)
    binding.int3_dequant(packed, scales, group_size, out, max_blocks, staged)
    return out


@_int3_dequant_cuda.register_fake
def _(packed, scales, group_size, max_blocks, staged):
    return packed.new_empty(packed.numel() // 3 * BLOCK, dtype=torch.float16)


def int3_dequant(packed: torch.Tensor, scales: torch.Tensor | None = None, group_size: int = 128,
                 backend: str = "auto", max_blocks: int | None = None, staged: bool = True) -> torch.Tensor:
    """Dequantize INT3 bitplanes to fp16 (see module docstring).

    ``max_blocks`` caps the CUDA grid; ``staged`` picks the kernel's store path
    (through swizzled shared memory, or direct). Neither changes the result.
    """
    _validate(packed, scales, group_size)
    check_grid_cap("max_blocks", max_blocks)
    if use_cuda(backend, binding.FAMILY, packed.device):
        return _int3_dequant_cuda(packed, scales, group_size, max_blocks or 0, bool(staged))
    return reference.int3_dequant(packed, scales, group_size)


def pack_int3(values: torch.Tensor) -> torch.Tensor:
    """[N] integers in [-4, 3] (N % 32 == 0) -> [3N/32] int32 bitplanes."""
    check("values", values, dtype=(torch.int8, torch.int16, torch.int32, torch.int64), ndim=1, contiguous=False)
    if values.numel() % BLOCK:
        raise ValueError(f"values length must be a multiple of {BLOCK}, got {values.numel()}")
    if values.numel() and (values.min() < -4 or values.max() > 3):
        raise ValueError("values must lie in [-4, 3] for signed INT3")
    return reference.pack_int3(values.contiguous())


def unpack_int3(packed: torch.Tensor) -> torch.Tensor:
    """[3B] int32 bitplanes -> [32B] int8 in [-4, 3] (inverse of :func:`pack_int3`)."""
    check("packed", packed, dtype=torch.int32, ndim=1, contiguous=False)
    if packed.numel() % PLANES:
        raise ValueError(f"packed length must be a multiple of {PLANES} (one word per bitplane of a "
                         f"{BLOCK}-value block), got {packed.numel()}")
    return reference.unpack_int3(packed)
