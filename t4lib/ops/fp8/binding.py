"""ctypes binding of kernels/fp8.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "fp8"


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    lib.t4_fp8_e4m3_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                                       ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.t4_fp8_e4m3_decode.restype = ctypes.c_int
    lib.t4_fp8_e4m3_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
    lib.t4_fp8_e4m3_encode.restype = ctypes.c_int
    return lib


def fp8_e4m3_decode(data: torch.Tensor, scales: torch.Tensor | None, group_size: int, out: torch.Tensor,
                    max_blocks: int = 0) -> None:
    lib = _lib()
    st = lib.t4_fp8_e4m3_decode(ptr(data), ptr(scales), ptr(out), data.numel(), group_size, max_blocks,
                                stream(data.device))
    _build.check_status(lib, st, "t4_fp8_e4m3_decode")


def fp8_e4m3_encode(x: torch.Tensor, out: torch.Tensor) -> None:
    lib = _lib()
    st = lib.t4_fp8_e4m3_encode(ptr(x), ptr(out), x.numel(), stream(x.device))
    _build.check_status(lib, st, "t4_fp8_e4m3_encode")
