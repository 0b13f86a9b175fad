"""ctypes binding of kernels/w4a16.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes
import functools

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "w4a16"
_P, _I = ctypes.c_void_p, ctypes.c_int


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    lib.t4_w4a16_gemv.argtypes = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemv.restype = _I
    lib.t4_w4a16_gemv_path.argtypes = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemv_path.restype = _I
    lib.t4_w4a16_gemv_auto_path.argtypes = [_I, _I, _I]
    lib.t4_w4a16_gemv_auto_path.restype = _I
    lib.t4_w4a16_gemm_splits.argtypes = [_I, _I, _I]
    lib.t4_w4a16_gemm_splits.restype = _I
    lib.t4_w4a16_gemm.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemm.restype = _I
    return lib


GEMV_PATHS = {"auto": 0, "lanes": 1, "mma": 2}


def gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int, out: torch.Tensor,
         max_ctas: int = 0, path: str = "auto") -> None:
    """out [M, N] = x [M, K] @ W_deq^T, M = 1..8. ``path``: "auto" (shape-chosen), "lanes" (the
    lane-per-chunk kernel) or "mma" (the tensor-core kernel; group_size 128 only)."""
    if path not in GEMV_PATHS:
        raise ValueError(f"path must be one of {sorted(GEMV_PATHS)}, got {path!r}")
    lib = _lib()
    M, K = x.shape
    N = qweight.shape[0]
    st = lib.t4_w4a16_gemv_path(ptr(qweight), ptr(scales), ptr(x), ptr(out), M, N, K, group_size, max_ctas,
                                GEMV_PATHS[path], stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_gemv")


@functools.lru_cache(maxsize=4096)
def gemv_auto_path(N: int, K: int, group_size: int, device_index: int) -> str:
    """"mma" or "lanes": the kernel path="auto" runs for this shape on that device."""
    with torch.cuda.device(device_index):
        return {1: "lanes", 2: "mma"}[int(_lib().t4_w4a16_gemv_auto_path(N, K, group_size))]


@functools.lru_cache(maxsize=4096)
def gemm_splits(M: int, N: int, K: int, device_index: int) -> int:
    with torch.cuda.device(device_index):
        return int(_lib().t4_w4a16_gemm_splits(M, N, K))


def gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int, out: torch.Tensor,
         max_ctas: int = 0) -> None:
    """out [M, N] = x [M, K] @ W_deq^T, any M (WMMA; split-K partials in an fp32 workspace)."""
    lib = _lib()
    M, K = x.shape
    N = qweight.shape[0]
    splits = gemm_splits(M, N, K, x.device.index if x.device.index is not None else torch.cuda.current_device())
    ws = torch.empty(splits * M * N, dtype=torch.float32, device=x.device) if splits > 1 else None
    st = lib.t4_w4a16_gemm(ptr(qweight), ptr(scales), ptr(x), ptr(out), ptr(ws), M, N, K, group_size, splits,
                           max_ctas, stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_gemm")
