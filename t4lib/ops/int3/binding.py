"""ctypes binding of kernels/int3.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "int3"


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    f = lib.t4_int3_dequant
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                  ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return lib


def int3_dequant(packed: torch.Tensor, scales: torch.Tensor | None, group_size: int, out: torch.Tensor,
                 max_blocks: int = 0, staged: bool = True) -> None:
    lib = _lib()
    st = lib.t4_int3_dequant(ptr(packed), ptr(scales), ptr(out), packed.numel() // 3, group_size, max_blocks,
                             int(staged), stream(packed.device))
    _build.check_status(lib, st, "t4_int3_dequant")
