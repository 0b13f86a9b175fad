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
