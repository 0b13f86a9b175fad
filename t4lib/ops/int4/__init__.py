"""Signed INT4 dequantization with LOP3 (the first kernel family).

``int4_dequant(packed, scales=None, group_size=128)``:
``packed`` [W] int32 (8 values per word, see ``reference``), optional
``scales`` [8W / group_size] fp16 -> [8W] fp16, ``out[i] = q[i] * scales[i // group_size]``.
Bit-exact between the CUDA kernel and the reference.
"""
from __future__ import annotations

import torch

from .._dispatch import check, check_grid_cap, check_group_scales, use_cuda
from . import binding, reference

__all__ = ["int4_dequant", "pack_int4", "unpack_int4"]


def _validate(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int) -> None:
    check("packed", packed, dtype=torch.int32, ndim=1)
    check_group_scales("packed", packed, packed.numel() * 8, scales, group_size, 8)


@torch.library.custom_op("t4lib::int4_dequant", mutates_args=())
def _int4_dequant_cuda(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int,
                       max_blocks: int) -> torch.Tensor:
    out = torch.empty(packed.numel() * 8, dtype=torch.float16, device=packed.device)
    binding.int4_dequant(packed, scales, group_size, out, max_blocks)
    return out


@_int4_dequant_cuda.register_fake
def _(packed, scales, group_size, max_blocks):
    return packed.new_empty(packed.numel() * 8, dtype=torch.float16)


def int4_dequant(packed: torch.Tensor, scales: torch.Tensor | None = None, group_size: int = 128,
                 backend: str = "auto", max_blocks: int | None = None) -> torch.Tensor:
    """Dequantize packed signed INT4 to fp16 (see module docstring).

    ``max_blocks`` caps the CUDA grid (occupancy pacing, ``t4lib.pacing``);
    the result does not depend on it.
    """
    _validate(packed, scales, group_size)
    check_grid_cap("max_blocks", max_blocks)
    if use_cuda(backend, binding.FAMILY, packed.device):
        return _int4_dequant_cuda(packed, scales, group_size, max_blocks or 0)
    return reference.int4_dequant(packed, scales, group_size)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[N] integers in [-8, 7] (N % 8 == 0) -> [N/8] int32 in the LOP3 order."""
    check("values", values, dtype=(torch.int8, torch.int16, torch.int32, torch.int64), ndim=1, contiguous=False)
    if values.numel() % 8:
        raise ValueError(f"values length must be a multiple of 8, got {values.numel()}")
    if values.numel() and (values.min() < -8 or values.max() > 7):
        raise ValueError("values must lie in [-8, 7] for signed INT4")
    return reference.pack_int4(values.contiguous())


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """[W] int32 words in the LOP3 order -> [8W] int8 in [-8, 7] (inverse of :func:`pack_int4`)."""
    check("packed", packed, dtype=torch.int32, ndim=1, contiguous=False)
    return reference.unpack_int4(packed)
