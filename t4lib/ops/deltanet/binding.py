"""ctypes binding of kernels/deltanet.cu (validated tensors in, launch on the current stream)."""
from __future__ import annotations

import ctypes

import torch

from ... import _build
from .._dispatch import ptr, stream

FAMILY = "deltanet"
HEAD_ORDER_CODE = {"hf": 0, "gguf": 1}


def _lib() -> ctypes.CDLL:
    lib = _build.load(FAMILY)
    f = lib.t4_deltanet_decode
    f.argtypes = [ctypes.c_void_p] * 15 + [ctypes.c_int] * 7 + [ctypes.c_float, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return lib


def deltanet_decode(qkv, z, alpha, beta, conv_state, conv_state_out, state, conv_w, ssm_a, dt_bias, ssm_norm,
                    out, ws_o, ws_ss, ws_cnt, num_k_heads: int, head_order: str, split: int, eps: float) -> None:
    lib = _lib()
    B, H = state.shape[0], state.shape[1]
    st = lib.t4_deltanet_decode(
        ptr(qkv), ptr(z), ptr(alpha), ptr(beta), ptr(conv_state), ptr(conv_state_out), ptr(state), ptr(conv_w),
        ptr(ssm_a), ptr(dt_bias), ptr(ssm_norm), ptr(out), ptr(ws_o), ptr(ws_ss), ptr(ws_cnt),
        B, H, num_k_heads, HEAD_ORDER_CODE[head_order], split, int(qkv.dtype == torch.float16),
        int(out.dtype == torch.float16), float(eps), stream(qkv.device))
    _build.check_status(lib, st, "t4_deltanet_decode")
