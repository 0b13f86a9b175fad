"""ctypes binding of kernels/fused_adamw.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes
import functools

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "fused_adamw"
_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
_SCALARS = ("decay", "w1", "b2", "w2", "bc2_sqrt", "eps", "neg_step")  # the launchers' float arguments, in order


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    lib.t4_fused_adamw_gemm.argtypes = [_P] * 6 + [_I] * 3 + [_F] * 7 + [_I, _P]
    lib.t4_fused_adamw_gemm.restype = _I
    lib.t4_fused_adamw_gemm_ws.argtypes = lib.t4_fused_adamw_gemm.argtypes
    lib.t4_fused_adamw_gemm_ws.restype = _I
    lib.t4_fused_adamw_wgrad.argtypes = [_P, _P, _P, _I, _I, _I, _I, _P]
    lib.t4_fused_adamw_wgrad.restype = _I
    lib.t4_fused_adamw_step.argtypes = [_P] * 5 + [_L] + [_F] * 7 + [_I, _P]
    lib.t4_fused_adamw_step.restype = _I
    return lib


def _floats(scalars: dict) -> list[ctypes.c_float]:
    return [_F(scalars[k]) for k in _SCALARS]


def fused(dy: torch.Tensor, x: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
          w16: torch.Tensor, scalars: dict, max_ctas: int = 0, warp_specialized: bool = False) -> None:
    """AdamW on master/exp_avg/exp_avg_sq/w16 [N, K] with g = dy[T, N]^T @ x[T, K], dW never stored."""
    lib = _lib()
    T, N = dy.shape
    K = x.shape[1]
    fn = lib.t4_fused_adamw_gemm_ws if warp_specialized else lib.t4_fused_adamw_gemm
    st = fn(ptr(dy), ptr(x), ptr(master), ptr(exp_avg), ptr(exp_avg_sq), ptr(w16), T, N, K, *_floats(scalars),
            max_ctas, stream(dy.device))
    _build.check_status(lib, st, "t4_fused_adamw_gemm" + ("_ws" if warp_specialized else ""))


def wgrad(dy: torch.Tensor, x: torch.Tensor, out: torch.Tensor, max_ctas: int = 0) -> None:
    """out [N, K] fp32 = dy[T, N]^T @ x[T, K] (the same GEMM core, dW written)."""
    lib = _lib()
    T, N = dy.shape
    K = x.shape[1]
    st = lib.t4_fused_adamw_wgrad(ptr(dy), ptr(x), ptr(out), T, N, K, max_ctas, stream(dy.device))
    _build.check_status(lib, st, "t4_fused_adamw_wgrad")


def step(grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
         w16: torch.Tensor, scalars: dict, max_ctas: int = 0) -> None:
    """The separate AdamW kernel: the same update from grad [N, K] fp32 in global memory."""
    lib = _lib()
    st = lib.t4_fused_adamw_step(ptr(grad), ptr(master), ptr(exp_avg), ptr(exp_avg_sq), ptr(w16), master.numel(),
                                 *_floats(scalars), max_ctas, stream(master.device))
    _build.check_status(lib, st, "t4_fused_adamw_step")
