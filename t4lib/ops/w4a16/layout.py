"""Tensor-core layout of a W4A16 weight: the same codes and scales as
:class:`.format.QuantizedWeight`, permuted so the small-M MMA kernel
(``t4_w4a16_mma`` in kernels/w4a16.cu) reads every weight byte with one
16-byte load per lane and no shared memory.

The kernel computes ``y^T = W_deq . x^T`` with ``mma.sync.m16n8k8``: the weight
is the 16 x 8 A operand. ``N`` is padded with zero rows to a multiple of 32
(``NT = ceil(N/32) * 2`` tiles of 16 rows) and ``K`` with zero columns to a
multiple of 64 (``KT = ceil(K/64)`` k-tiles).

* ``tiles [NT, KT, 32, 4] int32``: the 16 x 64 tile ``(nt, kt)`` is 512
  contiguous bytes; lane ``L = 4 g + t`` (g = 0..7, t = 0..3) owns its 16 bytes
  ``tiles[nt, kt, L]``. Inside a tile, lane ``t`` covers the 16 columns
  ``k = 64 kt + 16 t .. + 15`` of rows ``16 nt + g`` and ``16 nt + 8 + g``;
  word ``j`` holds 8 codes in the LOP3 nibble order of
  :mod:`t4lib.ops.int4.reference`: ``v[4e + 2h + p] = q[16 nt + 8h + g,
  64 kt + 16 t + 4 j + 2 e + p]`` for e, h, p in {0, 1}. (Each lane's MMA
  k-step ``2j + e`` takes the pair ``p``; the order of k inside a tile does not
  change the sum, and it makes a lane's activations 32 contiguous bytes.)
* ``scales [NT, G, 8, 2] fp16`` with ``G = KT * 64 / group_size``:
  ``scales[nt, grp, g] = (s[16 nt + g, grp], s[16 nt + 8 + g, grp])``, the
  pair a lane multiplies its two rows by (padding: 0).

:func:`pack` makes it (once per weight; :func:`t4lib.ops.w4a16.mma` caches it
per tensor), :func:`unpack` inverts it exactly. Memory: a second copy of the
weight (the row layout stays, the GEMV and the prefill GEMM read it).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..int4 import reference as int4_ref
from .format import QuantizedWeight, check_group_size

TILE_N, TILE_K, PAD_N = 16, 64, 32
# Row chunk packed at a time (bounds the int64 temporaries of the nibble shuffle).
_PACK_ROWS = 2048


def tile_counts(N: int, K: int, group_size: int) -> tuple[int, int, int]:
    """``(NT, KT, G)``: 16-row tiles (N padded to 32), 64-column k-tiles, scale groups per tile row."""
    NT = -(-N // PAD_N) * (PAD_N // TILE_N)
    KT = -(-K // TILE_K)
    return NT, KT, KT * TILE_K // group_size


@dataclass
class MmaWeight:
    """A :class:`QuantizedWeight` ``[N, K]`` in the tensor-core layout (see module docstring)."""

    tiles: torch.Tensor    # [NT, KT, 32, 4] int32
    scales: torch.Tensor   # [NT, G, 8, 2] fp16
    N: int
    K: int
    group_size: int = 128

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        check_group_size(self.group_size, self.K)
        NT, KT, G = tile_counts(self.N, self.K, self.group_size)
        if not isinstance(self.tiles, torch.Tensor) or self.tiles.dtype != torch.int32:
            raise TypeError(f"tiles must be an int32 tensor, got "
                            f"{getattr(self.tiles, 'dtype', type(self.tiles).__name__)}")
        if tuple(self.tiles.shape) != (NT, KT, 32, 4):
            raise ValueError(f"tiles must have shape [NT, KT, 32, 4] = [{NT}, {KT}, 32, 4] for N={self.N}, "
                             f"K={self.K}, got {list(self.tiles.shape)}")
        if not isinstance(self.scales, torch.Tensor) or self.scales.dtype != torch.float16:
            raise TypeError(f"scales must be a float16 tensor, got "
                            f"{getattr(self.scales, 'dtype', type(self.scales).__name__)}")
        if tuple(self.scales.shape) != (NT, G, 8, 2):
            raise ValueError(f"scales must have shape [NT, G, 8, 2] = [{NT}, {G}, 8, 2] for N={self.N}, "
                             f"K={self.K}, group_size={self.group_size}, got {list(self.scales.shape)}")
        if self.tiles.device != self.scales.device:
            raise ValueError(f"tiles and scales must be on one device, got {self.tiles.device} "
                             f"and {self.scales.device}")

    @property
    def device(self) -> torch.device:
        return self.tiles.device

    def dequantize(self, dtype: torch.dtype = torch.float16) -> torch.Tensor:
        """[N, K] ``fp16(q * s)``, cast to ``dtype`` (equal to the source weight's ``dequantize``)."""
        q, s = unpack(self)
        return QuantizedWeight(int4_ref.pack_int4(q.reshape(-1)).reshape(self.N, self.K // 8), s, self.N, self.K,
                               self.group_size).dequantize(dtype)


def pack(w: QuantizedWeight) -> MmaWeight:
    """The tensor-core layout of ``w`` (same device; see module docstring)."""
    if not isinstance(w, QuantizedWeight):
        raise TypeError(f"w must be a t4lib.quant.w4a16.QuantizedWeight, got {type(w).__name__}")
    w.validate()
    N, K, gs = w.N, w.K, w.group_size
    NT, KT, G = tile_counts(N, K, gs)
    dev = w.device
    tiles = torch.empty(NT, KT, 32, 4, dtype=torch.int32, device=dev)
    for r0 in range(0, NT * TILE_N, _PACK_ROWS):
        r1 = min(r0 + _PACK_ROWS, NT * TILE_N)
        q = torch.zeros(r1 - r0, KT * TILE_K, dtype=torch.int8, device=dev)
        if r0 < N:
            q[:min(r1, N) - r0, :K] = int4_ref.unpack_int4(w.qweight[r0:min(r1, N)].reshape(-1)).reshape(-1, K)
        # rows 16 nt + 8 h + g, columns 64 kt + 16 t + 4 j + 2 e + p -> (nt, kt, g, t, j, [e, h, p])
        q = q.reshape(-1, 2, 8, KT, 4, 4, 2, 2).permute(0, 3, 2, 4, 5, 6, 1, 7)
        tiles[r0 // TILE_N:r1 // TILE_N] = int4_ref.pack_int4(q.reshape(-1)).reshape(-1, KT, 32, 4)
    s = torch.zeros(NT * TILE_N, G, dtype=torch.float16, device=dev)
    s[:N, :K // gs] = w.scales
    scales = s.reshape(NT, 2, 8, G).permute(0, 3, 2, 1).contiguous()  # (nt, grp, g, h)
    return MmaWeight(tiles, scales, N, K, gs)


def unpack(lw: MmaWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack`: ``(q [N, K] int8, scales [N, K/group_size] fp16)``."""
    lw.validate()
    NT, KT, G = tile_counts(lw.N, lw.K, lw.group_size)
    q = int4_ref.unpack_int4(lw.tiles.reshape(-1)).reshape(NT, KT, 8, 4, 4, 2, 2, 2)  # (nt, kt, g, t, j, e, h, p)
    q = q.permute(0, 6, 2, 1, 3, 4, 5, 7).reshape(NT * TILE_N, KT * TILE_K)
    s = lw.scales.permute(0, 3, 2, 1).reshape(NT * TILE_N, G)
    return q[:lw.N, :lw.K].contiguous(), s[:lw.N, :lw.K // lw.group_size].contiguous()
