"""GGUF block formats on the GPU: bulk dequantization and fused dequant-GEMV.

``gguf_dequant(raw, ggml_type, shape, out_dtype=torch.float32)``: raw block bytes
(uint8) -> values; fp32 output is bit-exact with ``gguf.quants.dequantize``.
``gguf_gemv(raw, ggml_type, x, N, K)``: ``y [M, N] = x [M, K] @ W^T`` with ``W``
``[N, K]`` in GGUF blocks (a GGUF tensor of shape ``[K, N]`` in ggml order), fp16
in and out, fp32 accumulation (M <= 8). Formats: Q8_0, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_NL, IQ4_XS, IQ3_S.

GEMV layout: on the CUDA path, Q8_0, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
weights (K a multiple of 64) are read from an aligned copy in the layout of
:mod:`.packing` (a byte permutation of the blocks: same size, 16-byte coalesced
loads). The copy is made once per weight tensor, on first use, and kept while
that tensor lives; it is made again if the tensor is modified in place through
PyTorch (its version counter changes). Writes that bypass PyTorch's version
counter (raw pointers) are not seen: call :func:`clear_gemv_cache` after them.
``layout="gguf"`` forces the kernel that reads the GGUF blocks as stored.
IQ4_NL and IQ3_S have no GEMV layout and always take that kernel, which
decodes values from byte loads: on an H200 it read 0.13-0.20 of copy bandwidth
at M = 1 (results/nvidia-h200/qwen35_deltanet.json, measured when Q3_K and Q5_K
took it too: there they were slower than fp16 weights through cuBLAS).
To keep only the aligned copy on the device (half the weight memory), pack
once with :func:`pack_for_gemv` and call :func:`gguf_gemv_packed`.

Int8 activations (``activations="int8"``, opt-in; default ``"fp16"``): x is
quantized per block of 32 values of a row to int8 with an fp32 scale
(llama.cpp's q8_1, :mod:`t4lib.ops.int8_activations`), and the GEMV takes
exact integer dot products (DP4A) of the quants with it, scaled per block in
fp32. The result is ``y = fp16(x~ @ W^T)`` to fp32 accuracy, with
``x~ = dequantize(quantize(x))`` and ``W`` the fp32 dequantized weight (not
rounded to fp16); it differs from the fp16 result by at most
:func:`t4lib.ops.int8_activations.error_bound` (half a grid step per
activation) plus the fp16 rounding of W and y. Formats: those with a GEMV
layout (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, K a multiple of 64 and of the
block); IQ4_NL, IQ3_S, ``layout="gguf"`` or a K without the layout raise
ValueError. On the CUDA path it is two launches on the current stream
(quantize x, then the GEMV), capturable in a CUDA graph.
"""
from __future__ import annotations

import math
import weakref

import torch

from .. import int8_activations as a8
from .._dispatch import check, check_grid_cap, same_device, use_cuda
from . import binding, packing, reference
from .reference import FORMATS, TYPE_OF

__all__ = ["gguf_dequant", "gguf_gemv", "gguf_gemv_packed", "pack_for_gemv", "clear_gemv_cache", "FORMATS", "TYPE_OF",
           "type_id", "nbytes"]

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


def _check_dims(**dims) -> None:
    """Every dimension a positive int (a product of negatives can still match the byte count)."""
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def _check_raw(raw, t, n_values):
    check("raw", raw, dtype=torch.uint8, contiguous=True)
    want = nbytes(t, n_values)
    if raw.numel() != want:
        raise ValueError(f"raw has {raw.numel()} bytes but {n_values} {FORMATS[t][0]} values need {want}")


def gguf_dequant(raw: torch.Tensor, ggml_type, shape, out_dtype: torch.dtype = torch.float32,
                 backend: str = "auto", max_blocks: int | None = None) -> torch.Tensor:
    """Dequantize GGUF blocks; see the module docstring. ``shape`` in numpy order."""
    t = type_id(ggml_type)
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from None
    if not shape:
        raise ValueError("shape must have at least one dimension")
    _check_dims(**{f"shape[{i}]": d for i, d in enumerate(shape)})
    n = math.prod(shape)
    _check_raw(raw, t, n)
    if out_dtype not in (torch.float32, torch.float16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.float16, got {out_dtype}")
    if use_cuda(backend, binding.FAMILY, raw.device):
        out = torch.empty(shape, dtype=out_dtype, device=raw.device)
        binding.dequant(t, raw, n // FORMATS[t][1], out, max_blocks or 0)
        return out
    return reference.dequantize(raw, t, shape).to(out_dtype).to(raw.device)


# id(raw) -> (weakref to raw, (type, N, K, data_ptr, device, version), packed copy)
_GEMV_CACHE: dict[int, tuple] = {}


def clear_gemv_cache() -> None:
    """Drop every cached GEMV-layout copy (they are rebuilt on next use)."""
    _GEMV_CACHE.clear()


def _gemv_layout(raw: torch.Tensor, t: int, N: int, K: int) -> torch.Tensor:
    """The GEMV-layout copy of ``raw`` (see the module docstring), cached per tensor."""
    try:
        version = raw._version
    except RuntimeError:  # inference tensors have no version counter: do not cache
        return packing.pack(raw, t, N, K).contiguous()
    key = id(raw)
    meta = (t, N, K, raw.data_ptr(), str(raw.device), version)
    ent = _GEMV_CACHE.get(key)
    if ent is not None and ent[0]() is raw and ent[1] == meta:
        return ent[2]
    packed = packing.pack(raw, t, N, K).contiguous()
    if packed.data_ptr() % 16:
        raise RuntimeError("the GEMV-layout copy is not 16-byte aligned")  # never for a fresh CUDA allocation

    def drop(ref, key=key):
        cur = _GEMV_CACHE.get(key)
        if cur is not None and cur[0] is ref:
            del _GEMV_CACHE[key]

    _GEMV_CACHE[key] = (weakref.ref(raw, drop), meta, packed)
    return packed


def _require_gemv_layout(t: int, K: int, prefix: str = "") -> None:
    if not packing.supports(t, K):
        raise ValueError(f"{prefix}{FORMATS[t][0]} with K={K} has no GEMV layout "
                         f"({', '.join(packing.PACKED.values())} with K a multiple of {packing.CHUNK})")


def _check_gemv_io(x: torch.Tensor, out: torch.Tensor | None, N: int, K: int) -> int:
    """Checks of the activations and the optional output shared by both GEMV entry points; returns M."""
    check("x", x, dtype=torch.float16, ndim=2, align=16)
    M = x.shape[0]
    if x.shape[1] != K:
        raise ValueError(f"x must have K={K} columns, got shape {tuple(x.shape)}")
    if not 1 <= M <= MAX_M:
        raise ValueError(f"x must have 1..{MAX_M} rows for the GEMV, got {M}")
    if out is not None:
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (M, N) or out.dtype != torch.float16:
            got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"out must be float16 of shape ({M}, {N}), got {got}")
        check("out", out)
        same_device(out=out, x=x)
    return M


def _check_int8(t: int, K: int, layout: str) -> None:
    """activations="int8" needs an int8 trait, i.e. the GEMV layout."""
    if layout == "gguf" or not packing.supports(t, K):
        why = " with layout='gguf'" if layout == "gguf" else f" with K={K}" if t in packing.PACKED else ""
        raise ValueError(f"activations='int8' is not supported for {FORMATS[t][0]}{why}: it needs the GEMV "
                         f"layout ({', '.join(packing.PACKED.values())} with K a multiple of {packing.CHUNK})")


def _gemv_x8_cuda(t: int, packed: torch.Tensor, x: torch.Tensor, y: torch.Tensor, M: int, N: int, K: int,
                  max_ctas: int) -> None:
    """Quantize x to int8 blocks, then the int8-activation GEMV: two launches on the current stream."""
    q, s = a8.empty_blocks(M, K, x.device)
    binding.quantize_x8(x, q, s, max_ctas)
    binding.gemv_packed_x8(t, packed, q, s, y, M, N, K, max_ctas)


def _finish(y: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The reference result, written into ``out`` when one was given."""
    if out is None:
        return y
    out.copy_(y)
    return out


def gguf_gemv(raw: torch.Tensor, ggml_type, x: torch.Tensor, N: int, K: int, backend: str = "auto",
              max_ctas: int | None = None, layout: str = "auto", out: torch.Tensor | None = None,
              activations: str = "fp16") -> torch.Tensor:
    """y [M, N] fp16 = x [M, K] fp16 @ W^T, W [N, K] in GGUF blocks (fp32 accumulation).

    ``layout`` (CUDA path): "auto" reads the GEMV-layout copy where the format
    has one, "packed" requires it, "gguf" reads the blocks as stored. ``out``:
    optional [M, N] fp16 contiguous tensor on x's device to write y into.
    ``activations``: "fp16", or "int8" (see the module docstring; GEMV-layout formats only)."""
    t = type_id(ggml_type)
    a8.check_activations(activations)
    if layout not in ("auto", "packed", "gguf"):
        raise ValueError(f"layout must be 'auto', 'packed' or 'gguf', got {layout!r}")
    if layout == "packed":
        _require_gemv_layout(t, K, prefix="layout='packed': ")
    if activations == "int8":
        _check_int8(t, K, layout)
    M = _check_gemv_io(x, out, N, K)
    check_grid_cap("max_ctas", max_ctas)
    if K % FORMATS[t][1]:
        raise ValueError(f"K={K} is not a multiple of the {FORMATS[t][0]} block size {FORMATS[t][1]}")
    _check_raw(raw, t, N * K)
    same_device(raw=raw, x=x)
    if use_cuda(backend, binding.FAMILY, x.device):
        y = out if out is not None else torch.empty(M, N, dtype=torch.float16, device=x.device)
        if activations == "int8":
            _gemv_x8_cuda(t, _gemv_layout(raw, t, N, K), x, y, M, N, K, max_ctas or 0)
        elif layout != "gguf" and packing.supports(t, K):
            binding.gemv_packed(t, _gemv_layout(raw, t, N, K), x, y, M, N, K, max_ctas or 0)
        else:
            binding.gemv(t, raw, x, y, M, N, K, max_ctas or 0)
        return y
    if activations == "int8":
        return _finish(reference.gemv_x8(raw, t, x, N, K), out)
    return _finish(reference.gemv(raw, t, x, N, K), out)


def pack_for_gemv(raw: torch.Tensor, ggml_type, N: int, K: int) -> torch.Tensor:
    """GGUF bytes of W [N, K] -> the GEMV layout of :mod:`.packing` (same size, same device)."""
    t = type_id(ggml_type)
    _check_dims(N=N, K=K)
    _check_raw(raw, t, N * K)
    _require_gemv_layout(t, K)
    return packing.pack(raw, t, N, K).contiguous()


def gguf_gemv_packed(packed: torch.Tensor, ggml_type, x: torch.Tensor, N: int, K: int, backend: str = "auto",
                     max_ctas: int | None = None, out: torch.Tensor | None = None,
                     activations: str = "fp16") -> torch.Tensor:
    """As :func:`gguf_gemv` with W given in the GEMV layout (from :func:`pack_for_gemv`)."""
    t = type_id(ggml_type)
    a8.check_activations(activations)
    if activations == "int8":
        _check_int8(t, K, "packed")
    _require_gemv_layout(t, K)
    check("packed", packed, dtype=torch.uint8, contiguous=True, align=16)
    want = nbytes(t, N * K)
    if packed.numel() != want:
        raise ValueError(f"packed has {packed.numel()} bytes but {N * K} {FORMATS[t][0]} values need {want}")
    M = _check_gemv_io(x, out, N, K)
    check_grid_cap("max_ctas", max_ctas)
    same_device(packed=packed, x=x)
    if use_cuda(backend, binding.FAMILY, x.device):
        y = out if out is not None else torch.empty(M, N, dtype=torch.float16, device=x.device)
        if activations == "int8":
            _gemv_x8_cuda(t, packed, x, y, M, N, K, max_ctas or 0)
        else:
            binding.gemv_packed(t, packed, x, y, M, N, K, max_ctas or 0)
        return y
    ref_gemv = reference.gemv_x8 if activations == "int8" else reference.gemv
    return _finish(ref_gemv(packing.unpack(packed.cpu(), t, N, K), t, x, N, K), out)
