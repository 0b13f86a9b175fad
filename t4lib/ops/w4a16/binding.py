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
    lib.t4_w4a16_gemm_splits.argtypes = [_I, _I, _I]
    lib.t4_w4a16_gemm_splits.restype = _I
    lib.t4_w4a16_gemm.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemm.restype = _I
    lib.t4_w4a16_gemm_ws.argtypes = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemm_ws.restype = _I
    lib.t4_w4a16_quantize_x8.argtypes = [_P, _P, _P, _I, _I, _I, _P]
    lib.t4_w4a16_quantize_x8.restype = _I
    lib.t4_w4a16_gemv_x8.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_gemv_x8.restype = _I
    lib.t4_w4a16_mma_config.argtypes = [_I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_mma_config.restype = _I
    lib.t4_w4a16_mma.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _I, _I, _P]
    lib.t4_w4a16_mma.restype = _I
    return lib


def gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int, out: torch.Tensor,
         max_ctas: int = 0) -> None:
    """out [M, N] = x [M, K] @ W_deq^T, M = 1..8."""
    lib = _lib()
    M, K = x.shape
    N = qweight.shape[0]
    st = lib.t4_w4a16_gemv(ptr(qweight), ptr(scales), ptr(x), ptr(out), M, N, K, group_size, max_ctas,
                           stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_gemv")


def quantize_x8(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, max_ctas: int = 0) -> None:
    """x [M, K] fp16 -> q [M, K] int8 (INT4 nibble order), s [M, K/32, 2] int32 (d as fp32 bits, sum)."""
    lib = _lib()
    M, K = x.shape
    st = lib.t4_w4a16_quantize_x8(ptr(x), ptr(q), ptr(s), M, K, max_ctas, stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_quantize_x8")


def gemv_x8(q: torch.Tensor, s: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
            out: torch.Tensor, max_ctas: int = 0) -> None:
    """out [M, N] = x~ @ (q_w * s_w)^T with x~ the int8 activations of :func:`quantize_x8` (W4A8)."""
    lib = _lib()
    M, K = q.shape
    N = qweight.shape[0]
    st = lib.t4_w4a16_gemv_x8(ptr(qweight), ptr(scales), ptr(q), ptr(s), ptr(out), M, N, K, group_size, max_ctas,
                              stream(q.device))
    _build.check_status(lib, st, "t4_w4a16_gemv_x8")


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


def gemm_ws(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int, out: torch.Tensor,
            max_ctas: int = 0) -> None:
    """out [M, N] = x [M, K] @ W_deq^T through the warp-specialized WMMA kernel (one split, no workspace)."""
    lib = _lib()
    M, K = x.shape
    N = qweight.shape[0]
    st = lib.t4_w4a16_gemm_ws(ptr(qweight), ptr(scales), ptr(x), ptr(out), M, N, K, group_size, max_ctas,
                              stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_gemm_ws")


@functools.lru_cache(maxsize=4096)
def mma_config(M: int, N: int, K: int, device_index: int, r: int = 0, splits: int = 0) -> tuple[int, int]:
    """(R, splits) of the MMA GEMM for this shape on that device; ``r``/``splits`` > 0 force them."""
    out = (ctypes.c_int * 2)()
    with torch.cuda.device(device_index):
        lib = _lib()
        st = lib.t4_w4a16_mma_config(M, N, K, r, splits, out)
    _build.check_status(lib, st, "t4_w4a16_mma_config")
    return int(out[0]), int(out[1])


def mma(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, N: int, group_size: int, out: torch.Tensor,
        max_ctas: int = 0, r: int = 0, splits: int = 0, variant: int = 0) -> None:
    """out [M, N] = x [M, K] @ W_deq^T, M = 1..64, from the tensor-core layout (layout.py);
    ``r``/``splits`` > 0 force the launch configuration (measurement labs), 0 = the library's choice.
    ``variant`` > 0: measurement variants of kernels/w4a16.cu (1 loads only, 2 no MMA: ``out`` meaningless;
    3 / 4: 2 / 6 register stages instead of 4; 5: the other accumulator-set count, M <= 16)."""
    lib = _lib()
    M, K = x.shape
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    R, S = mma_config(M, N, K, dev, r, splits)
    ws = torch.empty(S * M * N, dtype=torch.float32, device=x.device) if S > 1 else None
    st = lib.t4_w4a16_mma(ptr(tiles), ptr(scales), ptr(x), ptr(out), ptr(ws), M, N, K, group_size, R, S, max_ctas,
                          variant, stream(x.device))
    _build.check_status(lib, st, "t4_w4a16_mma")
