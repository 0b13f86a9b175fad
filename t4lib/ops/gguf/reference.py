"""Pure-PyTorch reference dequantization of GGUF block formats.

Each function maps raw blocks ``[n_blocks, bytes_per_block]`` uint8 to
``[n_blocks, values_per_block]`` float32, computing the same fp32 products in
the same order as gguf-py's ``gguf.quants.dequantize`` (and the CUDA traits in
kernels/gguf_blocks.cuh), so all three agree bit for bit. The IQ3_S grid is
read from kernels/gguf_blocks.cuh, the table the kernel uses.
"""
from __future__ import annotations

import functools
import re

import torch

from ... import _build

# ggml type id -> (name, values per block, bytes per block)
FORMATS = {
    8: ("Q8_0", 32, 34),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    23: ("IQ4_XS", 256, 136),
}
TYPE_OF = {name: t for t, (name, _, _) in FORMATS.items()}
IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# byte offsets of the fp16 scale fields of each format (for making valid random blocks)
F16_FIELDS = {"Q8_0": (0,), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,),
              "IQ3_S": (0,), "IQ4_XS": (0,)}


def _f16(b: torch.Tensor, off: int) -> torch.Tensor:
    """[n, 1] float32 from the little-endian fp16 at byte ``off`` of each block."""
    return b[:, off:off + 2].contiguous().view(torch.float16).float()


def _i(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.int32)


@functools.lru_cache(maxsize=None)
def iq3s_grid() -> torch.Tensor:
    """[512, 4] int32 magnitudes, parsed from kernels/gguf_blocks.cuh."""
    text = (_build.kernels_dir() / "gguf_blocks.cuh").read_text()
    body = re.search(r"kIQ3SGrid\[512\]\s*=\s*\{(.*?)\};", text, re.S).group(1)
    words = torch.tensor([int(w, 16) for w in re.findall(r"0x([0-9a-fA-F]{8})", body)], dtype=torch.int64)
    if words.numel() != 512:
        raise RuntimeError(f"IQ3_S grid in gguf_blocks.cuh has {words.numel()} entries, expected 512")
    return torch.stack([(words >> (8 * t)) & 0xFF for t in range(4)], dim=1).to(torch.int32)


def _k_scale_min(s: torch.Tensor):
    """[n, 12] K-quant scale bytes -> (sc, m) [n, 8] int32."""
    s = _i(s)
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc, mn


def q8_0(b):
    return b[:, 2:34].contiguous().view(torch.int8).float() * _f16(b, 0)


def q4_k(b):
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    d = (_f16(b, 0) * sc.float())[:, :, None]          # [n, 8, 1]
    dm = (_f16(b, 2) * mn.float())[:, :, None]
    qs = _i(b[:, 16:144]).reshape(n, 4, 1, 32) >> torch.tensor([0, 4]).reshape(1, 1, 2, 1)
    q = (qs & 0xF).reshape(n, 8, 32).float()
    return (d * q - dm).reshape(n, 256)


def q5_k(b):
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    d = (_f16(b, 0) * sc.float())[:, :, None]
    dm = (_f16(b, 2) * mn.float())[:, :, None]
    ql = (_i(b[:, 48:176]).reshape(n, 4, 1, 32) >> torch.tensor([0, 4]).reshape(1, 1, 2, 1)) & 0xF
    qh = (_i(b[:, 16:48]).reshape(n, 1, 1, 32) >> torch.arange(8).reshape(1, 8, 1, 1)) & 1
    q = (ql.reshape(n, 8, 32) | (qh.reshape(n, 8, 32) << 4)).float()
    return (d * q - dm).reshape(n, 256)


def q6_k(b):
    n = b.shape[0]
    d = (_f16(b, 208) * b[:, 192:208].contiguous().view(torch.int8).float())[:, :, None]  # [n, 16, 1]
    ql = (_i(b[:, 0:128]).reshape(n, 2, 1, 64) >> torch.tensor([0, 4]).reshape(1, 1, 2, 1)) & 0xF
    qh = (_i(b[:, 128:192]).reshape(n, 2, 1, 32) >> torch.tensor([0, 2, 4, 6]).reshape(1, 1, 4, 1)) & 3
    q = (ql.reshape(n, 256) | (qh.reshape(n, 256) << 4)) - 32
    return (d * q.reshape(n, 16, 16).float()).reshape(n, 256)


def q3_k(b):
    n = b.shape[0]
    s = _i(b[:, 96:108])
    lo = (s[:, None, 0:8] >> torch.tensor([0, 4]).reshape(1, 2, 1)).reshape(n, 16) & 0xF
    hi = (s[:, None, 8:12] >> torch.tensor([0, 2, 4, 6]).reshape(1, 4, 1)).reshape(n, 16) & 3
    sc = (lo | (hi << 4)) - 32
    d = (_f16(b, 108) * sc.float())[:, :, None]  # [n, 16, 1]
    ql = (_i(b[:, 32:96]).reshape(n, 2, 1, 32) >> torch.tensor([0, 2, 4, 6]).reshape(1, 1, 4, 1)) & 3
    qh = (_i(b[:, 0:32]).reshape(n, 1, 1, 32) >> torch.arange(8).reshape(1, 8, 1, 1)) & 1
    q = ql.reshape(n, 256) - ((qh.reshape(n, 256) ^ 1) << 2)
    return (d * q.reshape(n, 16, 16).float()).reshape(n, 256)


def iq4_nl(b):
    n = b.shape[0]
    q = (_i(b[:, 2:18]).reshape(n, 1, 16) >> torch.tensor([0, 4]).reshape(1, 2, 1)) & 0xF
    lv = torch.tensor(IQ4_VALUES, dtype=torch.float32)[q.reshape(n, 32).long()]
    return _f16(b, 0) * lv


def iq4_xs(b):
    n = b.shape[0]
    sh = _i(b[:, 2]) | (_i(b[:, 3]) << 8)
    lo = (_i(b[:, 4:8])[:, :, None] >> torch.tensor([0, 4]).reshape(1, 1, 2)).reshape(n, 8) & 0xF
    hi = (sh[:, None] >> (2 * torch.arange(8))[None]) & 3
    d = (_f16(b, 0) * ((lo | (hi << 4)) - 32).float())[:, :, None]  # [n, 8, 1]
    q = (_i(b[:, 8:136]).reshape(n, 8, 1, 16) >> torch.tensor([0, 4]).reshape(1, 1, 2, 1)) & 0xF
    lv = torch.tensor(IQ4_VALUES, dtype=torch.float32)[q.reshape(n, 8, 32).long()]
    return (d * lv).reshape(n, 256)


def iq3_s(b):
    n = b.shape[0]
    sc = (_i(b[:, 106:110])[:, :, None] >> torch.tensor([0, 4]).reshape(1, 1, 2)).reshape(n, 8) & 0xF
    db = (_f16(b, 0) * (1 + 2 * sc).float())[:, :, None]  # [n, 8, 1]
    qh = (_i(b[:, 66:74])[:, :, None] >> torch.arange(8).reshape(1, 1, 8)).reshape(n, 64) & 1
    idx = _i(b[:, 2:66]) | (qh << 8)
    grid = iq3s_grid()[idx.long()].reshape(n, 8, 32).float()
    sgn = (_i(b[:, 74:106])[:, :, None] >> torch.arange(8).reshape(1, 1, 8)).reshape(n, 8, 32) & 1
    sign = torch.where(sgn == 0, torch.tensor(1.0), torch.tensor(-1.0))
    return (db * grid * sign).reshape(n, 256)


_FNS = {"Q8_0": q8_0, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k, "IQ4_NL": iq4_nl,
        "IQ3_S": iq3_s, "IQ4_XS": iq4_xs}


def dequantize_blocks(blocks: torch.Tensor, ggml_type: int) -> torch.Tensor:
    """[n, bytes] uint8 -> [n, values] float32 (CPU tensors)."""
    name = FORMATS[ggml_type][0]
    return _FNS[name](blocks.cpu())


def dequantize(raw: torch.Tensor, ggml_type: int, shape) -> torch.Tensor:
    """Raw bytes of a tensor (uint8, any shape) -> float32 of ``shape`` (numpy order, last dim fastest)."""
    name, nv, nb = FORMATS[ggml_type]
    flat = raw.reshape(-1)
    out = dequantize_blocks(flat.reshape(-1, nb), ggml_type)
    return out.reshape(tuple(shape))


def gemv(w_raw: torch.Tensor, ggml_type: int, x: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """y [M, N] fp16 = x [M, K] fp16 @ dequant(W)^T, W rounded to fp16, fp32 accumulation."""
    w = dequantize(w_raw.cpu(), ggml_type, (N, K)).to(torch.float16).float()
    return (x.float().cpu() @ w.t()).to(torch.float16).to(x.device)


def gemv_x8(w_raw: torch.Tensor, ggml_type: int, x: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """Int8 activations: y [M, N] fp16 = x~ @ dequant(W)^T in fp32, x~ = q * d the int8 blocks of
    :func:`t4lib.ops.int8_activations.quantize` and W fp32 (not rounded to fp16)."""
    from .. import int8_activations as a8

    q, d, _ = a8.quantize(x.cpu())
    w = dequantize(w_raw.cpu(), ggml_type, (N, K))
    return (a8.dequantize(q, d) @ w.t()).to(torch.float16).to(x.device)


def random_blocks(ggml_type: int, n_blocks: int, *, seed: int = 0, scale: float = 0.01) -> torch.Tensor:
    """Random valid blocks: random bytes with every fp16 scale field finite
    (|d| ~ scale, random sign)."""
    name, nv, nb = FORMATS[ggml_type]
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (n_blocks, nb), dtype=torch.uint8, generator=g)
    for off in F16_FIELDS[name]:
        d = (torch.rand(n_blocks, generator=g) * 2 - 1) * scale
        b[:, off:off + 2] = d.to(torch.float16).view(torch.uint8).reshape(n_blocks, 2)
    return b
