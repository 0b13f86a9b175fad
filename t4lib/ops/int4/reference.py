"""Pure-PyTorch reference for signed INT4 packing and dequantization.

Format: 8 signed values in [-8, 7] per int32 word, two's complement nibbles.
Values v0..v7 sit in nibble slots [0, 4, 1, 5, 2, 6, 3, 7] (slot k = bits
4k..4k+3), the order in which the LOP3 dequant emits fp16 pairs.
"""
from __future__ import annotations

import torch

# SLOT_OF_VALUE[j] = nibble slot that holds value j of a word.
SLOT_OF_VALUE = (0, 4, 1, 5, 2, 6, 3, 7)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[N] int8 in [-8, 7] (N % 8 == 0) -> [N/8] int32."""
    v = values.reshape(-1, 8).to(torch.int64) & 0xF
    word = torch.zeros(v.shape[0], dtype=torch.int64, device=values.device)
    for j, slot in enumerate(SLOT_OF_VALUE):
        word |= v[:, j] << (4 * slot)
    return (word - ((word >> 31) & 1) * (1 << 32)).to(torch.int32)  # reinterpret as signed int32


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """[W] int32 -> [8W] int8 in [-8, 7]."""
    w = packed.to(torch.int64) & 0xFFFFFFFF
    cols = [((w >> (4 * slot)) & 0xF) for slot in SLOT_OF_VALUE]
    nib = torch.stack(cols, dim=1).reshape(-1)
    return (nib - ((nib & 8) << 1)).to(torch.int8)  # sign-extend bit 3


def int4_dequant(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int) -> torch.Tensor:
    """[W] int32 (+ [8W/group_size] fp16 scales) -> [8W] fp16.

    out[i] = fp16(q[i]) * scales[i // group_size], the product rounded once in
    fp16, as the kernel's ``__hmul2`` does.
    """
    q = unpack_int4(packed).to(torch.float32)
    if scales is None:
        return q.to(torch.float16)
    s = scales.to(torch.float32).repeat_interleave(group_size)
    return (q * s).to(torch.float16)
