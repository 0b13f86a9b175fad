"""ctypes binding of kernels/swizzle.cu (microbenchmark, offsets and round-trip KAT kernels)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "swizzle"


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    lib.t4_swizzle_bench.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_void_p]
    lib.t4_swizzle_offsets.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.t4_swizzle_transpose.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    for f in (lib.t4_swizzle_bench, lib.t4_swizzle_offsets, lib.t4_swizzle_transpose):
        f.restype = ctypes.c_int
    return lib


def bench(layout: int, cycles: torch.Tensor, sink: torch.Tensor, iters: int, warps: int) -> None:
    lib = _lib()
    st = lib.t4_swizzle_bench(layout, ptr(cycles), ptr(sink), iters, warps, stream(cycles.device))
    _build.check_status(lib, st, "t4_swizzle_bench")


def offsets(out: torch.Tensor, rows: int, row_chunks: int) -> None:
    lib = _lib()
    st = lib.t4_swizzle_offsets(ptr(out), rows, row_chunks, stream(out.device))
    _build.check_status(lib, st, "t4_swizzle_offsets")


def transpose(tile: torch.Tensor, out: torch.Tensor) -> None:
    lib = _lib()
    st = lib.t4_swizzle_transpose(ptr(tile), ptr(out), stream(tile.device))
    _build.check_status(lib, st, "t4_swizzle_transpose")
