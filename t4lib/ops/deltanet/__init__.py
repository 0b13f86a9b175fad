"""Gated DeltaNet decode step for qwen35 linear-attention layers (one token, batch B).

``gated_deltanet_decode(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm,
num_k_heads=16, head_order="hf")`` -> ``out [B, H*128]`` (fp16 by default), ready for ``ssm_out``.

``state`` [B, H, 128, 128] fp32 is updated in place; ``conv_state`` [B, 3, C] is
shifted in place, or written to ``conv_state_out`` when given. The math, shapes
and head orders are those of :mod:`.reference`. The CUDA kernel fuses conv,
gates, the state update with the single-pass shortcut
``o = decay (S^T q) + delta (k . q)`` and the output gate; ``variant`` picks
its launch shape: ``"head"`` (one CTA per value head and batch row) or
``"split"`` (each head's 128 value columns split over several CTAs), an
explicit CTAs-per-head count 1, 2, 4 or 8, or ``"auto"`` (the default: the
launch shape measured fastest, :func:`auto_split`).
"""
from __future__ import annotations

import torch

from .._dispatch import check, same_device, use_cuda
from . import binding, reference
from .reference import HEAD_ORDERS, key_head_index

__all__ = ["gated_deltanet_decode", "HEAD_ORDERS", "key_head_index", "VARIANTS", "auto_split", "state_bytes"]

KERNEL_HEAD_DIM = 128
SPLITS = (1, 2, 4, 8)
VARIANTS = {"head": 1, "split": 4}


def auto_split(B: int) -> int:
    """CTAs per head for ``variant="auto"``: two, at every batch size. On the H200
    at the 27B shape (results/nvidia-h200/qwen35_deltanet.json) two CTAs per head
    were fastest at B = 1 (5.53 us; one per head 5.87, four 5.78) and at B = 4
    (10.20 us; 10.56, 10.47). The lab (tools/deltanet_lab round 5) had them
    within 0.2 us of one CTA per head at B = 2 and 4, either way."""
    return 2


_WS: dict = {}


def state_bytes(B: int, H: int, Dk: int = 128, Dv: int = 128) -> int:
    """DRAM bytes of one step's state traffic: S read once and written once (fp32)."""
    return 2 * 4 * B * H * Dk * Dv


def _split_of(variant, B: int) -> int:
    if variant == "auto":
        return auto_split(B)
    if isinstance(variant, str):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be 'auto', one of {tuple(VARIANTS)} or a split in {SPLITS}, "
                             f"got {variant!r}")
        return VARIANTS[variant]
    if isinstance(variant, bool) or not isinstance(variant, int) or variant not in SPLITS:
        raise ValueError(f"variant must be 'auto', one of {tuple(VARIANTS)} or a split in {SPLITS}, got {variant!r}")
    return variant


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def _validate(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, num_k_heads, head_order,
              out_dtype, conv_state_out):
    check("qkv", qkv, dtype=(torch.float16, torch.float32), ndim=2)
    check("state", state, dtype=torch.float32, ndim=4)
    if isinstance(num_k_heads, bool) or not isinstance(num_k_heads, int) or num_k_heads <= 0:
        raise ValueError(f"num_k_heads must be a positive int, got {num_k_heads!r}")
    if head_order not in HEAD_ORDERS:
        raise ValueError(f"head_order must be one of {HEAD_ORDERS}, got {head_order!r}")
    if out_dtype not in (torch.float16, torch.float32):
        raise TypeError(f"out_dtype must be torch.float16 or torch.float32, got {out_dtype}")
    B, C = qkv.shape
    Bs, H, Dk, Dv = state.shape
    HK = num_k_heads
    if Bs != B:
        raise ValueError(f"state must have batch {B} (from qkv), got shape {tuple(state.shape)}")
    if H % HK:
        raise ValueError(f"mismatched head counts: state has {H} value heads, not a multiple of "
                         f"num_k_heads={HK}")
    if C != 2 * HK * Dk + H * Dv:
        raise ValueError(f"mismatched head counts: qkv has {C} channels but 2*num_k_heads*Dk + H*Dv = "
                         f"2*{HK}*{Dk} + {H}*{Dv} = {2 * HK * Dk + H * Dv} (H, Dk, Dv from state)")
    dt = qkv.dtype
    check("z", z, dtype=dt, ndim=2)
    check("alpha", alpha, dtype=dt, ndim=2)
    check("beta", beta, dtype=dt, ndim=2)
    check("conv_state", conv_state, dtype=dt, ndim=3)
    check("conv_w", conv_w, dtype=torch.float32, ndim=2)
    check("ssm_a", ssm_a, dtype=torch.float32, ndim=1)
    check("dt_bias", dt_bias, dtype=torch.float32, ndim=1)
    check("ssm_norm", ssm_norm, dtype=torch.float32, ndim=1)
    want = {"z": (z, (B, H * Dv)), "alpha": (alpha, (B, H)), "beta": (beta, (B, H)),
            "conv_state": (conv_state, (B, 3, C)), "conv_w": (conv_w, (C, reference.CONV_TAPS)),
            "ssm_a": (ssm_a, (H,)), "dt_bias": (dt_bias, (H,)), "ssm_norm": (ssm_norm, (Dv,))}
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if conv_state_out is not None:
        check("conv_state_out", conv_state_out, dtype=dt, ndim=3)
        if tuple(conv_state_out.shape) != (B, 3, C):
            raise ValueError(f"conv_state_out must have shape {(B, 3, C)}, got {tuple(conv_state_out.shape)}")
        if _overlap(conv_state_out, conv_state):
            raise ValueError("conv_state_out must not overlap conv_state (pass conv_state_out=None to update "
                             "conv_state in place)")
    same_device(qkv=qkv, z=z, alpha=alpha, beta=beta, conv_state=conv_state, state=state, conv_w=conv_w,
                ssm_a=ssm_a, dt_bias=dt_bias, ssm_norm=ssm_norm, conv_state_out=conv_state_out)
    return B, H, Dk, Dv


def _workspace(device: torch.device, n_heads: int):
    key = (device, n_heads)
    ws = _WS.get(key)
    if ws is None:
        ws = (torch.empty(n_heads * KERNEL_HEAD_DIM, dtype=torch.float32, device=device),
              torch.empty(n_heads * max(SPLITS), dtype=torch.float32, device=device),
              torch.zeros(n_heads, dtype=torch.int32, device=device))
        _WS[key] = ws
    return ws


@torch.library.custom_op("t4lib::gated_deltanet_decode",
                         mutates_args=("state", "conv_state_out", "out", "ws_o", "ws_ss", "ws_cnt"))
def _decode_cuda(qkv: torch.Tensor, z: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                 conv_state: torch.Tensor, state: torch.Tensor, conv_w: torch.Tensor, ssm_a: torch.Tensor,
                 dt_bias: torch.Tensor, ssm_norm: torch.Tensor, conv_state_out: torch.Tensor, out: torch.Tensor,
                 ws_o: torch.Tensor, ws_ss: torch.Tensor, ws_cnt: torch.Tensor, num_k_heads: int, head_order: str,
                 split: int, eps: float) -> None:
    binding.deltanet_decode(qkv, z, alpha, beta, conv_state, conv_state_out, state, conv_w, ssm_a, dt_bias,
                            ssm_norm, out, ws_o, ws_ss, ws_cnt, num_k_heads, head_order, split, eps)


@_decode_cuda.register_fake
def _(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, conv_state_out, out, ws_o, ws_ss,
      ws_cnt, num_k_heads, head_order, split, eps):
    return None


def gated_deltanet_decode(qkv: torch.Tensor, z: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                          conv_state: torch.Tensor, state: torch.Tensor, conv_w: torch.Tensor, ssm_a: torch.Tensor,
                          dt_bias: torch.Tensor, ssm_norm: torch.Tensor, *, num_k_heads: int,
                          head_order: str = "hf", eps: float = 1e-6, out_dtype: torch.dtype = torch.float16,
                          conv_state_out: torch.Tensor | None = None, out: torch.Tensor | None = None,
                          variant="auto", backend: str = "auto") -> torch.Tensor:
    """One decode step; see the module docstring and :mod:`.reference` for the math.

    qkv [B, C], z [B, H*Dv], alpha/beta [B, H], conv_state [B, 3, C] (all fp16 or
    all fp32); state [B, H, Dk, Dv] fp32 (updated in place); conv_w [C, 4],
    ssm_a/dt_bias [H], ssm_norm [Dv] fp32. Returns out [B, H*Dv] in ``out_dtype``.
    The CUDA path needs Dk = Dv = 128. With the split variant the kernel uses a
    per-device workspace: do not run two steps with the same batch*heads
    concurrently on different streams.
    """
    B, H, Dk, Dv = _validate(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, num_k_heads,
                             head_order, out_dtype, conv_state_out)
    split = _split_of(variant, B)
    if out is not None:
        check("out", out, dtype=out_dtype, ndim=2)
        if tuple(out.shape) != (B, H * Dv):
            raise ValueError(f"out must have shape {(B, H * Dv)}, got {tuple(out.shape)}")
        same_device(qkv=qkv, out=out)
    kernel_ok = Dk == KERNEL_HEAD_DIM and Dv == KERNEL_HEAD_DIM
    if backend == "cuda" and not kernel_ok:
        raise ValueError(f"the CUDA kernel needs head dims Dk = Dv = {KERNEL_HEAD_DIM}, got state "
                         f"{tuple(state.shape)}")
    if kernel_ok and use_cuda(backend, binding.FAMILY, qkv.device):
        if out is None:
            out = torch.empty(B, H * Dv, dtype=out_dtype, device=qkv.device)
        in_place = conv_state_out is None
        cs_out = torch.empty_like(conv_state) if in_place else conv_state_out
        ws_o, ws_ss, ws_cnt = _workspace(qkv.device, B * H)
        _decode_cuda(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, cs_out, out, ws_o,
                     ws_ss, ws_cnt, num_k_heads, head_order, split, float(eps))
        if in_place:
            conv_state.copy_(cs_out)
        return out
    res, new_conv, new_state = reference.gated_deltanet_decode(
        qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, num_k_heads=num_k_heads,
        head_order=head_order, eps=eps, out_dtype=out_dtype)
    state.copy_(new_state)
    (conv_state if conv_state_out is None else conv_state_out).copy_(new_conv)
    if out is not None:
        out.copy_(res)
        return out
    return res
