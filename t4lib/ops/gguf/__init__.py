"""GGUF block formats on the GPU: bulk dequantization and fused dequant-GEMV.

``gguf_dequant(raw, ggml_type, shape, out_dtype=torch.float32)``: raw block bytes
(uint8) -> values; fp32 output is bit-exact with ``gguf.quants.dequantize``.
``gguf_gemv(raw, ggml_type, x, N, K)``: ``y [M, N] = x [M, K] @ W^T`` with ``W``
``[N, K]`` in GGUF blocks (a GGUF tensor of shape ``[K, N]`` in ggml order), fp16
in and out, fp32 accumulation (M <= 8). Formats: Q8_0, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_NL, IQ4_XS, IQ3_S.
"""
from __future__ import annotations

import math

import torch

from .._dispatch import check, same_device, use_cuda
from . import binding, reference
from .reference import FORMATS, TYPE_OF

__all__ = ["gguf_dequant", "gguf_gemv", "FORMATS", "TYPE_OF", "type_id", "nbytes"]

MAX_M = 8


def type_id(ggml_type) -> int:
    """A ggml type given as int, name ('Q4_K') or gguf.GGMLQuantizationType -> supported id."""
    t = getattr(ggml_type, "value", ggml_type)
    if isinstance(t, str):
        if t.upper() not in TYPE_OF:
            raise ValueError(f"unsupported GGUF tensor type {t!r}; supported: {sorted(TYPE_OF)}")
        t = TYPE_OF[t.upper()]
    if isinstance(t, bool) or not isinstance(t, int) or t not in FORMATS:
        name = getattr(ggml_type, "name", ggml_type)
        raise ValueError(f"unsupported GGUF tensor type {name!r}; supported: {sorted(TYPE_OF)}")
    return t


def nbytes(ggml_type, n_values: int) -> int:
    name, nv, nb = FORMATS[type_id(ggml_type)]
    if n_values % nv:
        raise ValueError(f"{name} holds values in blocks of {nv}; {n_values} is not a multiple")
    return n_values // nv * nb


def _check_raw(raw, t, n_values):
    check("raw", raw, dtype=torch.uint8, contiguous=True)
    want = nbytes(t, n_values)
    if raw.numel() != want:
        raise ValueError(f"raw has {raw.numel()} bytes but {n_values} {FORMATS[t][0]} values need {want}")


def gguf_dequant(raw: torch.Tensor, ggml_type, shape, out_dtype: torch.dtype = torch.float32,
                 backend: str = "auto", max_blocks: int | None = None) -> torch.Tensor:
    """Dequantize GGUF blocks; see the module docstring. ``shape`` in numpy order."""
    t = type_id(ggml_type)
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    _check_raw(raw, t, n)
    if out_dtype not in (torch.float32, torch.float16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.float16, got {out_dtype}")
    if use_cuda(backend, binding.FAMILY, raw.device):
        out = torch.empty(shape, dtype=out_dtype, device=raw.device)
        binding.dequant(t, raw, n // FORMATS[t][1], out, max_blocks or 0)
        return out
    return reference.dequantize(raw, t, shape).to(out_dtype).to(raw.device)


def gguf_gemv(raw: torch.Tensor, ggml_type, x: torch.Tensor, N: int, K: int, backend: str = "auto",
              max_ctas: int | None = None) -> torch.Tensor:
    """y [M, N] fp16 = x [M, K] fp16 @ W^T, W [N, K] in GGUF blocks (fp32 accumulation)."""
    t = type_id(ggml_type)
    check("x", x, dtype=torch.float16, ndim=2, align=16)
    M = x.shape[0]
    if x.shape[1] != K:
        raise ValueError(f"x must have K={K} columns, got shape {tuple(x.shape)}")
    if not 1 <= M <= MAX_M:
        raise ValueError(f"x must have 1..{MAX_M} rows for the GEMV, got {M}")
    if K % FORMATS[t][1]:
        raise ValueError(f"K={K} is not a multiple of the {FORMATS[t][0]} block size {FORMATS[t][1]}")
    _check_raw(raw, t, N * K)
    same_device(raw=raw, x=x)
    if use_cuda(backend, binding.FAMILY, x.device):
        y = torch.empty(M, N, dtype=torch.float16, device=x.device)
        binding.gemv(t, raw, x, y, M, N, K, max_ctas or 0)
        return y
    return reference.gemv(raw, t, x, N, K)
