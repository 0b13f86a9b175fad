"""Pure-PyTorch reference for FP8 E4M3 emulation on fp16 (integer bit ops).

E4M3 byte ``s eeee mmm``: exponent bias 7, subnormals at ``e == 0``, no
infinities, ``0x7F``/``0xFF`` NaN, largest finite 448. These functions mirror
the CUDA helpers in ``kernels/common.cuh`` step by step, on int32 tensors, so
they run anywhere; PyTorch's own ``torch.float8_e4m3fn`` conversion is the
independent oracle the tests compare them with.
"""
from __future__ import annotations

import torch

MAX_FINITE = 448.0
NAN_BYTES = (0x7F, 0xFF)


def _u16_to_f16(bits: torch.Tensor) -> torch.Tensor:
    """int32 holding 16 bits -> fp16 with those bits."""
    return ((bits & 0xFFFF) - ((bits & 0x8000) << 1)).to(torch.int16).view(torch.float16)


def _f16_to_u16(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


def fp8_e4m3_decode(data: torch.Tensor, scales: torch.Tensor | None = None, group_size: int = 128) -> torch.Tensor:
    """[N] uint8 E4M3 bytes (+ [N/group_size] fp16 scales) -> [N] fp16.

    Bits: fp16 = sign << 15 | (eeeemmm) << 7, then times 2^8 (exact). With
    scales, ``out[i] = decode(b[i]) * scales[i // group_size]`` rounded once in
    fp16, as the kernel's ``__hmul2`` does. NaN bytes give fp16 NaN.
    """
    b = data.to(torch.int32)
    em = b & 0x7F
    h = ((b & 0x80) << 8) | (em << 7)
    h = h | (((em << 7) + 0x80) & 0x4000)  # em == 0x7F -> fp16 exponent 31: NaN
    x = _u16_to_f16(h).to(torch.float32) * 256.0  # exact in fp32, exact back in fp16
    if scales is not None:
        x = x.to(torch.float16).to(torch.float32) * scales.to(torch.float32).repeat_interleave(group_size)
    return x.to(torch.float16)


def fp8_e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """[N] fp16 -> [N] uint8 E4M3, round to nearest even, saturating to +-448
    (+-inf too); NaN -> 0x7F | sign. Mirrors ``t4::half_to_fp8_e4m3``."""
    h = _f16_to_u16(x)
    s = (h >> 8) & 0x80
    a = h & 0x7FFF
    n = ((a + 0x3F + ((a >> 7) & 1)) >> 7) - 0x40  # normal: RNE drop 7 bits, rebias 15 -> 7
    mag = _u16_to_f16(a).to(torch.float32) * 512.0   # subnormal: units of 2^-9, exact
    d = torch.round(mag).to(torch.int32)             # torch.round is round-half-to-even
    r = torch.where(a < 0x2400, d, n)
    r = torch.where(a > 0x5F00, torch.full_like(r, 0x7E), r)
    r = torch.where(a > 0x7C00, torch.full_like(r, 0x7F), r)
    return (r | s).to(torch.uint8)
