"""GEMV layout of GGUF weights: a byte permutation of the GGUF blocks (same
number of bytes) that lets the fused dequant-GEMV issue only aligned,
coalesced 16-byte loads.

GGUF blocks are 34 (Q8_0), 110 (Q3_K), 136 (IQ4_XS), 144 (Q4_K), 176 (Q5_K) or
210 (Q6_K) bytes long:
most are not 16-byte aligned and each mixes scales with quants. The GEMV
template (kernels/gemv.cuh) gives lane ``l`` of a warp chunk ``c0 + l`` of a
row, so the fast layout stores, for each 16-byte piece ``i`` of a 64-value
chunk, one *plane*: ``plane_i[n, c]`` (16 bytes) for row ``n`` and chunk ``c``.
A warp's load of plane ``i`` then reads 512 contiguous bytes. The per-block
scale fields go to separate small arrays, read once per chunk (4 lanes share
a 256-value super-block's header).

Sections, in this order, each ``N * ...`` bytes (``nc = K / 64`` chunks and
``nb = K / 256`` super-blocks per row); every section starts 16-byte aligned
except the last, fp16 one:

* ``Q4_K``   (144 B / 256): QA, QB ``[N, nc, 16]``: the 32 quant bytes of the
  chunk as stored (byte ``i``: low nibble = value ``i``, high nibble = value
  ``32 + i`` of the chunk); HD ``[N, nb, 16]``: the block header (d, dmin,
  12 bytes of 6-bit scales/mins) as stored.
* ``Q5_K``   (176 B / 256): QA, QB, HD as Q4_K (from Q5_K's 128 low-nibble
  bytes and 16-byte header); HB ``[N, nc, 8]``: the chunk's 64 fifth bits,
  word ``s`` (0, 1) bit ``8k + 2ww + e`` = value ``32e + 16s + 4ww + k`` of the
  chunk, so one shift and one mask put 4 values' fifth bits at bit 4 of
  their bytes.
* ``Q3_K``   (110 B / 256): QA ``[N, nc, 16]``: the 2-bit quants, word ``w``
  bits ``8k + 2j``, ``8k + 2j + 1`` = value ``16w + 4j + k``; HB ``[N, nc, 8]``:
  the third bits (hmask), word ``s`` bit ``8k + jj`` = value ``32s + 4jj + k``;
  SC ``[N, nb, 12]`` the 6-bit scales as stored; D ``[N, nb]`` fp16.
* ``Q6_K``   (210 B / 256): QA, QB ``[N, nc, 16]``: low 4 bits, byte ``i`` =
  value ``i`` | value ``32 + i`` << 4; QC ``[N, nc, 16]``: high 2 bits, word
  ``w`` byte ``k``: bits 0-1 value ``8w+k``, 2-3 value ``32+8w+k``, 4-5 value
  ``8w+4+k``, 6-7 value ``32+8w+4+k``; SC ``[N, nb, 16]`` int8 scales as
  stored; D ``[N, nb]`` fp16.
* ``IQ4_XS`` (136 B / 256): QA, QB ``[N, nc, 16]``: the 64 codebook indices of
  the chunk, two per byte in value order (low nibble first); HD ``[N, nb, 8]``:
  d, the high scale bits and the low scale nibbles as stored.
* ``Q8_0``   (34 B / 32): QA..QD ``[N, nc, 16]``: the 64 int8 quants of the
  chunk (two blocks) in value order; D ``[N, K / 32]`` fp16.

:func:`pack` and :func:`unpack` are exact inverses (tested), and
:func:`dequantize` reads the packed layout directly with the arithmetic of the
CUDA trait, bit-exact with ``gguf.quants.dequantize`` (tested on CPU).
"""
from __future__ import annotations

import torch

from .reference import FORMATS, IQ4_VALUES, _k_scale_min

# ggml type id -> name, for the formats with a GEMV layout
PACKED = {8: "Q8_0", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 23: "IQ4_XS"}
CHUNK = 64


def supports(ggml_type: int, K: int) -> bool:
    """Whether the GEMV layout exists for this type and row length."""
    return ggml_type in PACKED and K % CHUNK == 0 and K % FORMATS[ggml_type][1] == 0


def _check(raw: torch.Tensor, t: int, N: int, K: int):
    if not supports(t, K):
        raise ValueError(f"no GEMV layout for {FORMATS.get(t, (t,))[0]} with K={K} (needs one of "
                         f"{', '.join(PACKED.values())} and K a multiple of {CHUNK})")
    nb = FORMATS[t][2]
    want = N * K // FORMATS[t][1] * nb
    if raw.dtype != torch.uint8 or raw.numel() != want:
        raise ValueError(f"expected {want} uint8 bytes for {FORMATS[t][0]} [{N}, {K}], got {raw.numel()} {raw.dtype}")


def _i32(x):
    return x.to(torch.int32)


def _u8(x):
    return x.to(torch.uint8)


def pack(raw: torch.Tensor, ggml_type: int, N: int, K: int) -> torch.Tensor:
    """GGUF bytes of W [N, K] -> the GEMV layout (1-D uint8, same size, same device)."""
    t = ggml_type
    _check(raw, t, N, K)
    name = PACKED[t]
    nc = K // CHUNK
    r = raw.reshape(N, -1)
    if name == "Q8_0":
        b = r.reshape(N, K // 32, 34)
        q = b[:, :, 2:].reshape(N, nc, 4, 16).permute(2, 0, 1, 3)
        return torch.cat([q.reshape(-1), b[:, :, 0:2].reshape(-1)])
    nb = K // 256
    b = r.reshape(N, nb, FORMATS[t][2])
    if name in ("Q4_K", "Q5_K"):
        q0 = 16 if name == "Q4_K" else 48
        qs = b[:, :, q0:q0 + 128].reshape(N, nb, 4, 2, 16).permute(3, 0, 1, 2, 4)  # [half, N, nb, p, 16]
        parts = [qs.reshape(-1), b[:, :, 0:16].reshape(-1)]
        if name == "Q5_K":
            parts.append(_q5_hb(b[:, :, 16:48]).reshape(-1))
        return torch.cat(parts)
    if name == "Q3_K":
        return torch.cat([_q3_planes(*_q3_values_gguf(b)).reshape(-1), b[:, :, 96:108].reshape(-1),
                          b[:, :, 108:110].reshape(-1)])
    if name == "IQ4_XS":
        qs = _i32(b[:, :, 8:136]).reshape(N, nb, 8, 16)
        idx = torch.stack([qs & 0xF, qs >> 4], 3).reshape(N, nb, 256)  # value 32j + 16*nibble + i
        byte = idx[:, :, 0::2] | (idx[:, :, 1::2] << 4)           # [N, nb, 128]: byte i = values 2i, 2i+1
        planes = _u8(byte).reshape(N, nb, 4, 2, 16).permute(3, 0, 1, 2, 4)
        return torch.cat([planes.reshape(-1), b[:, :, 0:8].reshape(-1)])
    if name == "Q6_K":
        qlw = _i32(b[:, :, 0:128]).reshape(N, nb, 2, 64)
        ql = torch.stack([qlw & 0xF, qlw >> 4], 3)                         # value 128h + 64s + l
        qhw = _i32(b[:, :, 128:192]).reshape(N, nb, 2, 32)
        qh = torch.stack([(qhw >> sh) & 3 for sh in (0, 2, 4, 6)], 3)      # value 128h + 32s + l
        lo = ql.reshape(N, nb, 4, 64)   # [N, nb, p, value in chunk]
        hi = qh.reshape(N, nb, 4, 64)
        qlb = lo[..., 0:32] | (lo[..., 32:64] << 4)               # [N, nb, p, 32]
        h = hi.reshape(N, nb, 4, 2, 4, 2, 4)                      # [.., half32, w, sub4, k]: value 32*half + 8w + 4*sub + k
        qhb = h[:, :, :, 0, :, 0, :] | (h[:, :, :, 1, :, 0, :] << 2) | (h[:, :, :, 0, :, 1, :] << 4) | (h[:, :, :, 1, :, 1, :] << 6)
        qa = _u8(qlb).reshape(N, nb, 4, 2, 16).permute(3, 0, 1, 2, 4)
        qc = _u8(qhb).reshape(N, nb, 4, 16)
        return torch.cat([qa.reshape(-1), qc.reshape(-1), b[:, :, 192:208].reshape(-1), b[:, :, 208:210].reshape(-1)])
    raise AssertionError(name)


def _bits(x: torch.Tensor, shifts: torch.Tensor, width: int = 1) -> torch.Tensor:
    """``(x >> shifts) & (2**width - 1)`` in int32, shifts broadcast against x."""
    return (_i32(x) >> shifts.to(x.device)) & ((1 << width) - 1)


def _join(bits: torch.Tensor, shifts: torch.Tensor, dims) -> torch.Tensor:
    """OR of ``bits << shifts`` over ``dims`` (the fields are disjoint, so a sum)."""
    return (bits << shifts.to(bits.device)).sum(dims)


# Q5_K fifth bits: qh byte 16s + 4ww + k, bit 2p + e  <->  HB [p] word s, bit 8k + 2ww + e
_Q5_PE = (2 * torch.arange(4).reshape(4, 1, 1, 1, 1) + torch.arange(2))  # [p, s, ww, k, e]: qh bit 2p + e
_Q5_WWE = (2 * torch.arange(4).reshape(4, 1, 1) + torch.arange(2))       # [ww, k, e]: HB byte bit 2ww + e


def _q5_hb(qh: torch.Tensor) -> torch.Tensor:
    """Q5_K qh bytes [N, nb, 32] -> HB bytes [N, nb, 4 (p), 8 (4s + k)]."""
    N, nb = qh.shape[:2]
    bit = _bits(qh.reshape(N, nb, 1, 2, 4, 4, 1), _Q5_PE)  # [N, nb, p, s, ww, k, e]
    return _u8(_join(bit, _Q5_WWE, (4, 6))).reshape(N, nb, 4, 8)


def _q5_qh(hb: torch.Tensor, N: int, nb: int) -> torch.Tensor:
    """Inverse of :func:`_q5_hb`: HB section -> qh bytes [N, nb, 32]."""
    bit = _bits(hb.reshape(N, nb, 4, 2, 1, 4, 1), _Q5_WWE)  # [N, nb, p, s, ww, k, e]
    return _u8(_join(bit, _Q5_PE, (2, 6))).reshape(N, nb, 32)


def _q3_values_gguf(b: torch.Tensor):
    """Q3_K blocks [N, nb, 110] -> (2-bit quants, third bits) [N, nb, 256] int32 in value order."""
    N, nb = b.shape[:2]
    q2 = _bits(b[:, :, 32:96].reshape(N, nb, 2, 1, 32), torch.tensor([0, 2, 4, 6]).reshape(4, 1), 2)
    hb = _bits(b[:, :, 0:32].reshape(N, nb, 1, 32), torch.arange(8).reshape(8, 1))  # value 32 bit + l
    return q2.reshape(N, nb, 256), hb.reshape(N, nb, 256)  # q2: value 128h + 32sh + l


def _q3_planes(q2: torch.Tensor, hb: torch.Tensor) -> torch.Tensor:
    """Value-order quants -> QA [N, nc, 16] and HB [N, nc, 8] bytes, concatenated."""
    N, nb = q2.shape[:2]
    qa = _join(q2.reshape(N, nb, 4, 4, 4, 4), (2 * torch.arange(4)).reshape(4, 1), 4)  # [N, nb, p, w, k]
    hw = _join(hb.reshape(N, nb, 4, 2, 8, 4), torch.arange(8).reshape(8, 1), 4)        # [N, nb, p, s, k]
    return torch.cat([_u8(qa).reshape(-1), _u8(hw).reshape(-1)])


def _q3_values(s, N: int, nb: int):
    """Q3_K sections -> (2-bit quants, third bits) [N, nb, 256] int32 in value order."""
    q2 = _bits(s[0].reshape(N, nb, 4, 4, 1, 4), (2 * torch.arange(4)).reshape(4, 1), 2)  # [N, nb, p, w, j, k]
    hb = _bits(s[1].reshape(N, nb, 4, 2, 1, 4), torch.arange(8).reshape(8, 1))          # [N, nb, p, s, jj, k]
    return q2.reshape(N, nb, 256), hb.reshape(N, nb, 256)


def _sections(p: torch.Tensor, t: int, N: int, K: int) -> list[torch.Tensor]:
    nc, name = K // CHUNK, PACKED[t]
    plane = N * nc * 16
    if name == "Q8_0":
        sizes = [plane] * 4 + [N * K // 32 * 2]
    elif name == "Q4_K":
        sizes = [plane] * 2 + [N * K // 256 * 16]
    elif name == "Q5_K":
        sizes = [plane] * 2 + [N * K // 256 * 16, N * nc * 8]
    elif name == "Q3_K":
        sizes = [plane, N * nc * 8, N * K // 256 * 12, N * K // 256 * 2]
    elif name == "IQ4_XS":
        sizes = [plane] * 2 + [N * K // 256 * 8]
    else:
        sizes = [plane] * 3 + [N * K // 256 * 16, N * K // 256 * 2]
    return list(torch.split(p.reshape(-1), sizes))


def unpack(packed: torch.Tensor, ggml_type: int, N: int, K: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the GGUF bytes (1-D uint8)."""
    t = ggml_type
    _check(packed, t, N, K)
    name, nc = PACKED[t], K // CHUNK
    s = _sections(packed, t, N, K)
    if name == "Q8_0":
        q = torch.stack([x.reshape(N, nc, 16) for x in s[:4]], 2).reshape(N, K // 32, 32)
        return torch.cat([s[4].reshape(N, K // 32, 2), q], 2).reshape(-1)
    nb = K // 256
    if name in ("Q4_K", "Q5_K"):
        qs = torch.stack([x.reshape(N, nb, 4, 16) for x in s[:2]], 3).reshape(N, nb, 128)
        qh = [_q5_qh(s[3], N, nb)] if name == "Q5_K" else []
        return torch.cat([s[2].reshape(N, nb, 16), *qh, qs], 2).reshape(-1)
    if name == "Q3_K":
        q2, hb = _q3_values(s, N, nb)
        ql = _join(q2.reshape(N, nb, 2, 4, 32), torch.tensor([0, 2, 4, 6]).reshape(4, 1), 3)  # value 128h + 32sh + l
        hm = _join(hb.reshape(N, nb, 8, 32), torch.arange(8).reshape(8, 1), 2)                # value 32 bit + l
        return torch.cat([_u8(hm), _u8(ql).reshape(N, nb, 64), s[2].reshape(N, nb, 12), s[3].reshape(N, nb, 2)],
                         2).reshape(-1)
    if name == "IQ4_XS":
        byte = _i32(torch.stack([x.reshape(N, nb, 4, 16) for x in s[:2]], 3).reshape(N, nb, 128))
        idx = torch.stack([byte & 0xF, byte >> 4], 3).reshape(N, nb, 8, 2, 16)  # value 32j + 16*half + i
        qs = idx[:, :, :, 0, :] | (idx[:, :, :, 1, :] << 4)
        return torch.cat([s[2].reshape(N, nb, 8), _u8(qs).reshape(N, nb, 128)], 2).reshape(-1)
    lo, hi = _q6_values(s, N, nb)
    v = lo.reshape(N, nb, 256)
    hv = hi.reshape(N, nb, 256)
    ql = v.reshape(N, nb, 2, 2, 64)   # value 128h + 64s + l
    ql = ql[:, :, :, 0, :] | (ql[:, :, :, 1, :] << 4)
    qh = hv.reshape(N, nb, 2, 4, 32)  # value 128h + 32s + l
    qh = qh[:, :, :, 0] | (qh[:, :, :, 1] << 2) | (qh[:, :, :, 2] << 4) | (qh[:, :, :, 3] << 6)
    return torch.cat([_u8(ql).reshape(N, nb, 128), _u8(qh).reshape(N, nb, 64), s[3].reshape(N, nb, 16),
                      s[4].reshape(N, nb, 2)], 2).reshape(-1)


def _q6_values(s, N, nb):
    """Q6_K sections -> (low 4 bits, high 2 bits) [N, nb, 4, 64] int32 in value order."""
    qlb = _i32(torch.stack([x.reshape(N, nb, 4, 16) for x in s[:2]], 3).reshape(N, nb, 4, 32))
    lo = torch.cat([qlb & 0xF, qlb >> 4], 3)
    qc = _i32(s[2].reshape(N, nb, 4, 4, 4))  # [N, nb, p, w, k]
    # bits 0-1: value 8w+k, 2-3: 32+8w+k, 4-5: 8w+4+k, 6-7: 32+8w+4+k
    parts = [(qc >> sh) & 3 for sh in (0, 2, 4, 6)]
    h = torch.stack([torch.stack([parts[0], parts[2]], 4), torch.stack([parts[1], parts[3]], 4)], 3)
    hi = h.reshape(N, nb, 4, 64)  # [N, nb, p, half32, w, sub4, k]: value 32*half + 8w + 4*sub + k
    return lo, hi


def _f16(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.float16).float()


def dequantize(packed: torch.Tensor, ggml_type: int, N: int, K: int) -> torch.Tensor:
    """float32 [N, K] read straight from the GEMV layout, with the products of
    the CUDA trait (bit-exact with gguf-py; CPU reference for the layout)."""
    t = ggml_type
    packed = packed.cpu()
    _check(packed, t, N, K)
    name, nc = PACKED[t], K // CHUNK
    s = _sections(packed, t, N, K)
    if name == "Q8_0":
        q = torch.stack([x.reshape(N, nc, 16) for x in s[:4]], 2).reshape(N, K // 32, 32).view(torch.int8).float()
        return (q * _f16(s[4]).reshape(N, K // 32, 1)).reshape(N, K)
    nb = K // 256
    if name in ("Q4_K", "Q5_K"):
        hd = s[2].reshape(N * nb, 16)
        sc, mn = _k_scale_min(hd[:, 4:16])
        d = (_f16(hd[:, 0:2]) * sc.float()).reshape(N, nb, 4, 2, 1)    # sub-block 2p + half
        dm = (_f16(hd[:, 2:4]) * mn.float()).reshape(N, nb, 4, 2, 1)
        qb = _i32(torch.stack([x.reshape(N, nb, 4, 16) for x in s[:2]], 3).reshape(N, nb, 4, 1, 32))
        q = (qb >> torch.tensor([0, 4]).reshape(1, 1, 1, 2, 1)) & 0xF  # [N, nb, p, nibble, 32]
        if name == "Q5_K":  # fifth bit of value 64p + 32e + i: HB word i >> 4, bit 8(i & 3) + 2((i >> 2) & 3) + e
            bit = _bits(s[3].reshape(N, nb, 4, 2, 1, 4, 1), _Q5_WWE)  # [N, nb, p, s, ww, k, e]
            q = q | (bit.permute(0, 1, 2, 6, 3, 4, 5).reshape(N, nb, 4, 2, 32) << 4)
        return (d * q.float() - dm).reshape(N, K)
    if name == "Q3_K":
        q2, hb = _q3_values(s, N, nb)
        sb = _i32(s[2].reshape(N * nb, 12))
        lo = (sb[:, None, 0:8] >> torch.tensor([0, 4]).reshape(1, 2, 1)).reshape(-1, 16) & 0xF
        hi = (sb[:, None, 8:12] >> torch.tensor([0, 2, 4, 6]).reshape(1, 4, 1)).reshape(-1, 16) & 3
        d = (_f16(s[3]).reshape(-1, 1) * ((lo | (hi << 4)) - 32).float()).reshape(N, nb, 16, 1)
        q = q2 - ((hb ^ 1) << 2)
        return (d * q.reshape(N, nb, 16, 16).float()).reshape(N, K)
    if name == "IQ4_XS":
        hd = _i32(s[2].reshape(N, nb, 8))
        sh = hd[:, :, 2] | (hd[:, :, 3] << 8)
        sl = hd[:, :, 4] | (hd[:, :, 5] << 8) | (hd[:, :, 6] << 16) | (hd[:, :, 7] << 24)
        j = torch.arange(8)
        sc = ((sl[..., None] >> (4 * j)) & 0xF) | (((sh[..., None] >> (2 * j)) & 3) << 4)
        d = (_f16(s[2].reshape(N, nb, 8)[:, :, 0:2]) .reshape(N, nb, 1) * (sc - 32).float())[..., None]  # [N, nb, 8, 1]
        byte = _i32(torch.stack([x.reshape(N, nb, 4, 16) for x in s[:2]], 3).reshape(N, nb, 128))
        idx = torch.stack([byte & 0xF, byte >> 4], 3).reshape(N, nb, 8, 32)
        lv = torch.tensor(IQ4_VALUES, dtype=torch.float32)[idx.long()]
        return (d * lv).reshape(N, K)
    lo, hi = _q6_values(s, N, nb)
    q = ((lo | (hi << 4)) - 32).reshape(N, nb, 16, 16).float()
    d = (_f16(s[4]).reshape(N, nb, 1) * s[3].reshape(N, nb, 16).view(torch.int8).float())[..., None]
    return (d * q).reshape(N, K)
