"""ctypes binding of kernels/gguf.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "gguf"


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    f = lib.t4_gguf_dequant
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                  ctypes.c_void_p]
    f.restype = ctypes.c_int
    g = lib.t4_gguf_gemv
    g.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 4 + [
        ctypes.c_void_p]
    g.restype = ctypes.c_int
    gp = lib.t4_gguf_gemv_packed
    gp.argtypes = g.argtypes
    gp.restype = ctypes.c_int
    qx = lib.t4_gguf_quantize_x8
    qx.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    qx.restype = ctypes.c_int
    gx = lib.t4_gguf_gemv_packed_x8
    gx.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    gx.restype = ctypes.c_int
    return lib


def dequant(ggml_type: int, raw: torch.Tensor, n_blocks: int, out: torch.Tensor, max_blocks: int = 0) -> None:
    lib = _lib()
    st = lib.t4_gguf_dequant(ggml_type, ptr(raw), ptr(out), n_blocks, int(out.dtype == torch.float16), max_blocks,
                             stream(raw.device))
    _build.check_status(lib, st, "t4_gguf_dequant")


def gemv(ggml_type: int, raw: torch.Tensor, x: torch.Tensor, y: torch.Tensor, M: int, N: int, K: int,
         max_ctas: int = 0) -> None:
    lib = _lib()
    st = lib.t4_gguf_gemv(ggml_type, ptr(raw), ptr(x), ptr(y), M, N, K, max_ctas, stream(x.device))
    _build.check_status(lib, st, "t4_gguf_gemv")


def gemv_packed(ggml_type: int, packed: torch.Tensor, x: torch.Tensor, y: torch.Tensor, M: int, N: int, K: int,
                max_ctas: int = 0) -> None:
    """W in the GEMV layout of :mod:`.packing` (16-byte aligned)."""
    lib = _lib()
    st = lib.t4_gguf_gemv_packed(ggml_type, ptr(packed), ptr(x), ptr(y), M, N, K, max_ctas, stream(x.device))
    _build.check_status(lib, st, "t4_gguf_gemv_packed")


def quantize_x8(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, max_ctas: int = 0) -> None:
    """x [M, K] fp16 -> q [M, K] int8 (value order), s [M, K/32, 2] int32 (d as fp32 bits, sum)."""
    lib = _lib()
    M, K = x.shape
    st = lib.t4_gguf_quantize_x8(ptr(x), ptr(q), ptr(s), M, K, max_ctas, stream(x.device))
    _build.check_status(lib, st, "t4_gguf_quantize_x8")


def gemv_packed_x8(ggml_type: int, packed: torch.Tensor, q: torch.Tensor, s: torch.Tensor, y: torch.Tensor, M: int,
                   N: int, K: int, max_ctas: int = 0) -> None:
    """y [M, N] = x~ @ W^T with x~ the int8 activations of :func:`quantize_x8`, W in the GEMV layout."""
    lib = _lib()
    st = lib.t4_gguf_gemv_packed_x8(ggml_type, ptr(packed), ptr(q), ptr(s), ptr(y), M, N, K, max_ctas,
                                    stream(q.device))
    _build.check_status(lib, st, "t4_gguf_gemv_packed_x8")
