"""W4A16 weight format: symmetric signed INT4 with fp16 per-group scales along K.

A weight ``W [N, K]`` (N outputs, K inputs) is stored as

* ``qweight [N, K/8] int32``: word ``(n, j)`` holds ``q[n, 8j .. 8j+7]`` in the
  LOP3 nibble order of :mod:`t4lib.ops.int4.reference` (values v0..v7 in
  nibble slots 0, 4, 1, 5, 2, 6, 3, 7), so the kernels turn a word into four
  fp16 pairs with four ``lop3`` + four ``hsub2``;
* ``scales [N, K/group_size] fp16``.

``W_deq[n, k] = fp16(q[n, k] * scales[n, k // group_size])``, ``q`` in [-8, 7].
``group_size`` is 128 (default), 64 or 32; K must be a multiple of it (a clear
``ValueError`` otherwise: pad the layer or keep it fp16 in the policy).

The format lives with the op family that reads it; the quantizers that produce
it are in :mod:`t4lib.quant.w4a16` (which re-exports these names).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..int4 import reference as int4_ref

GROUP_SIZES = (32, 64, 128)
QMIN, QMAX = -8, 7


def check_group_size(group_size, K: int | None = None) -> None:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size!r}")
    if K is not None and K % group_size:
        raise ValueError(f"K={K} (in_features) is not a multiple of group_size={group_size}: pad the layer "
                         f"to a multiple of {group_size} or keep it fp16 in the quantization policy")


@dataclass
class QuantizedWeight:
    """Packed W4A16 weight (see module docstring). ``N``, ``K``: output and input features."""

    qweight: torch.Tensor   # [N, K/8] int32
    scales: torch.Tensor    # [N, K/group_size] fp16
    N: int
    K: int
    group_size: int = 128

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        check_group_size(self.group_size, self.K)
        if not isinstance(self.qweight, torch.Tensor) or self.qweight.dtype != torch.int32:
            raise TypeError(f"qweight must be an int32 tensor, got "
                            f"{getattr(self.qweight, 'dtype', type(self.qweight).__name__)}")
        if tuple(self.qweight.shape) != (self.N, self.K // 8):
            raise ValueError(f"qweight must have shape [N, K/8] = [{self.N}, {self.K // 8}], "
                             f"got {list(self.qweight.shape)}")
        if not isinstance(self.scales, torch.Tensor) or self.scales.dtype != torch.float16:
            raise TypeError(f"scales must be a float16 tensor, got "
                            f"{getattr(self.scales, 'dtype', type(self.scales).__name__)}")
        want = (self.N, self.K // self.group_size)
        if tuple(self.scales.shape) != want:
            raise ValueError(f"scales must have shape [N, K/group_size] = {list(want)} "
                             f"(group_size={self.group_size}), got {list(self.scales.shape)}")
        if self.qweight.device != self.scales.device:
            raise ValueError(f"qweight and scales must be on one device, got {self.qweight.device} "
                             f"and {self.scales.device}")

    @property
    def device(self) -> torch.device:
        return self.qweight.device

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() * 4 + self.scales.numel() * 2

    def to(self, device) -> "QuantizedWeight":
        return QuantizedWeight(self.qweight.to(device), self.scales.to(device), self.N, self.K, self.group_size)

    def unpack(self) -> torch.Tensor:
        """[N, K] int8 in [-8, 7]."""
        return unpack_int4_rows(self.qweight)

    def dequantize(self, dtype: torch.dtype = torch.float16) -> torch.Tensor:
        """[N, K] ``fp16(q * s)`` (the exact fp16 values the kernels compute with), cast to ``dtype``."""
        q = self.unpack().to(torch.float32)
        s = self.scales.to(torch.float32).repeat_interleave(self.group_size, dim=1)
        return (q * s).to(torch.float16).to(dtype)


def pack_int4_rows(q: torch.Tensor) -> torch.Tensor:
    """[N, K] integers in [-8, 7] (K % 8 == 0) -> [N, K/8] int32 in the LOP3 order."""
    N, K = q.shape
    return int4_ref.pack_int4(q.reshape(-1)).reshape(N, K // 8)


def unpack_int4_rows(qweight: torch.Tensor) -> torch.Tensor:
    """[N, K/8] int32 -> [N, K] int8."""
    N, W = qweight.shape
    return int4_ref.unpack_int4(qweight.reshape(-1)).reshape(N, W * 8)
