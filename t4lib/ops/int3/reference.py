"""Pure-PyTorch reference for signed INT3 bitplanes.

Format: a block of 32 signed values in [-4, 3] (two's complement, 3 bits) is
three int32 words, the bitplanes: bit ``i`` of plane ``p`` is bit ``p`` of
value ``i``. Blocks are consecutive: ``packed[3b + p]`` is plane ``p`` of
block ``b``, so N values take 3N/32 words (12 bytes per 32 values, 3 bits each).
"""
from __future__ import annotations

import torch

BLOCK = 32
PLANES = 3

_BIT = torch.arange(BLOCK, dtype=torch.int64)


def _to_i32(w: torch.Tensor) -> torch.Tensor:
    """int64 holding 32 bits -> int32 with those bits."""
    return (w - ((w >> 31) & 1) * (1 << 32)).to(torch.int32)


def pack_int3(values: torch.Tensor) -> torch.Tensor:
    """[N] integers in [-4, 3] (N % 32 == 0) -> [3N/32] int32 bitplanes."""
    v = values.reshape(-1, BLOCK).to(torch.int64) & 0x7  # [B, 32] 3-bit codes
    bit = _BIT.to(values.device)
    planes = [(((v >> p) & 1) << bit).sum(dim=1) for p in range(PLANES)]  # [B] each, disjoint bits
    return _to_i32(torch.stack(planes, dim=1).reshape(-1))


def unpack_int3(packed: torch.Tensor) -> torch.Tensor:
    """[3B] int32 bitplanes -> [32B] int8 in [-4, 3]."""
    w = (packed.to(torch.int64) & 0xFFFFFFFF).reshape(-1, PLANES)  # [B, 3]
    bit = _BIT.to(packed.device)
    code = sum((((w[:, p:p + 1] >> bit) & 1) << p) for p in range(PLANES))  # [B, 32]
    return (code - ((code & 4) << 1)).reshape(-1).to(torch.int8)  # sign-extend bit 2


def int3_dequant(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int) -> torch.Tensor:
    """[3B] int32 (+ [32B/group_size] fp16 scales) -> [32B] fp16.

    ``out[i] = fp16(q[i]) * scales[i // group_size]``, the product rounded once
    in fp16 as the kernel's ``__hmul2`` does.
    """
    q = unpack_int3(packed).to(torch.float32)
    if scales is None:
        return q.to(torch.float16)
    return (q * scales.to(torch.float32).repeat_interleave(group_size)).to(torch.float16)


# ---------------------------------------------------------------- bit-level mirror of the kernel
M32 = 0xFFFFFFFF


def _lop3(lut: int, a: int, b: int, c: int) -> int:
    """lop3.b32 on Python ints: bit k of the result is bit (4a+2b+c) of ``lut``
    with a, b, c the k-th bits (a selects 0xF0, b 0xCC, c 0xAA)."""
    out = 0
    for k in range(32):
        idx = (((a >> k) & 1) << 2) | (((b >> k) & 1) << 1) | ((c >> k) & 1)
        out |= ((lut >> idx) & 1) << k
    return out


def _prmt(a: int, b: int, sel: int) -> int:
    src = (a & M32) | ((b & M32) << 32)
    return sum(((src >> (8 * ((sel >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))


def _shift(x: int, s: int) -> int:
    return (x >> s) if s >= 0 else ((x << -s) & M32)


def dequant_int3x32_bitops(p0: int, p1: int, p2: int) -> list[int]:
    """The 32 fp16 bit patterns ``t4::dequant_int3x32`` computes, step by step
    (class words, lop3, prmt; the final hsub2 of 1028 done as integer subtract
    of the code, exact for these magic values). Used to test the algorithm on CPU."""
    w = []
    for r in range(4):
        a, b, c = _shift(p0, r), _shift(p1, r - 1), _shift(p2, r - 2)
        u = _lop3(0xE4, a, b, 0x11111111)
        w.append(_lop3(0xB1, u, c, 0x33333333))
    h = [_lop3(0xEA, w[j & 3] >> (4 * (j >> 2)), 0x00070007, 0x64006400) for j in range(16)]
    halves = [0] * 32
    for k in range(8):
        lo, hi = _prmt(h[2 * k], h[2 * k + 1], 0x5410), _prmt(h[2 * k], h[2 * k + 1], 0x7632)
        halves[2 * k], halves[2 * k + 1] = lo & 0xFFFF, lo >> 16
        halves[2 * k + 16], halves[2 * k + 17] = hi & 0xFFFF, hi >> 16
    return halves  # fp16 bits of 1028 + v (exponent 10, so the code is the low mantissa bits)
