"""ctypes binding of kernels/int4.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "int4"


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    f = lib.t4_int4_dequant
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                  ctypes.c_int, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return lib


def int4_dequant(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int, out: torch.Tensor,
                 max_blocks: int = 0) -> None:
    lib = _lib()
    st = lib.t4_int4_dequant(ptr(packed), ptr(scales), ptr(out), packed.numel(), group_size, max_blocks,
                             stream(packed.device))
    _build.check_status(lib, st, "t4_int4_dequant")
