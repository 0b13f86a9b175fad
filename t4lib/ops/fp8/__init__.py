"""FP8 E4M3 emulation on fp16 (sm_75 has no FP8).

``fp8_e4m3_decode(data, scales=None, group_size=128)``: ``data`` [N] uint8
E4M3 bytes (N % 8 == 0), optional ``scales`` [N / group_size] fp16 -> [N]
fp16, ``out[i] = e4m3(data[i]) * scales[i // group_size]``; bytes 0x7F/0xFF
give NaN, the other 254 decode exactly (``torch.float8_e4m3fn`` agrees bit for
bit).

``fp8_e4m3_encode(x)``: [N] fp16 -> [N] uint8, round to nearest even,
saturating to +-448 (+-inf too), NaN -> 0x7F | sign; equals
``x.float().clamp(-448, 448).to(torch.float8_e4m3fn)`` for every fp16 value.
"""
from __future__ import annotations

import torch

from .._dispatch import check, check_grid_cap, check_group_scales, use_cuda
from . import binding, reference
from .reference import MAX_FINITE, NAN_BYTES

__all__ = ["fp8_e4m3_decode", "fp8_e4m3_encode", "MAX_FINITE", "NAN_BYTES"]

VEC = 8  # values per kernel thread step; lengths must be a multiple


def _check_len(name: str, t: torch.Tensor) -> None:
    if t.numel() % VEC:
        raise ValueError(f"{name} length must be a multiple of {VEC}, got {t.numel()}")


def _validate_decode(data: torch.Tensor, scales: torch.Tensor | None, group_size: int) -> None:
    check("data", data, dtype=torch.uint8, ndim=1, align=8)
    _check_len("data", data)
    check_group_scales("data", data, data.numel(), scales, group_size, VEC)


@torch.library.custom_op("t4lib::fp8_e4m3_decode", mutates_args=())
def _decode_cuda(data: torch.Tensor, scales: torch.Tensor | None, group_size: int, max_blocks: int) -> torch.Tensor:
    out = torch.empty(data.numel(), dtype=torch.float16, device=data.device)
    binding.fp8_e4m3_decode(data, scales, group_size, out, max_blocks)
    return out


@_decode_cuda.register_fake
def _(data, scales, group_size, max_blocks):
    return data.new_empty(data.numel(), dtype=torch.float16)


@torch.library.custom_op("t4lib::fp8_e4m3_encode", mutates_args=())
def _encode_cuda(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.numel(), dtype=torch.uint8, device=x.device)
    binding.fp8_e4m3_encode(x, out)
    return out


@_encode_cuda.register_fake
def _(x):
    return x.new_empty(x.numel(), dtype=torch.uint8)


def fp8_e4m3_decode(data: torch.Tensor, scales: torch.Tensor | None = None, group_size: int = 128,
                    backend: str = "auto", max_blocks: int | None = None) -> torch.Tensor:
    """E4M3 bytes -> fp16 (see module docstring)."""
    _validate_decode(data, scales, group_size)
    check_grid_cap("max_blocks", max_blocks)
    if use_cuda(backend, binding.FAMILY, data.device):
        return _decode_cuda(data, scales, group_size, max_blocks or 0)
    return reference.fp8_e4m3_decode(data, scales, group_size)


def fp8_e4m3_encode(x: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """fp16 -> E4M3 bytes (see module docstring)."""
    check("x", x, dtype=torch.float16, ndim=1, align=16)
    _check_len("x", x)
    if use_cuda(backend, binding.FAMILY, x.device):
        return _encode_cuda(x)
    return reference.fp8_e4m3_encode(x)
