"""W4A16 weight quantizers.

The format (symmetric signed INT4 words in LOP3 nibble order with fp16 per-group
scales along K; :class:`QuantizedWeight`, the row packing, ``check_group_size``)
lives with its op family in :mod:`t4lib.ops.w4a16.format` and is re-exported here.

Quantizers:

* :func:`quantize_rtn` -- round to nearest: ``s = absmax(group) / 7.5``
  (so ``-absmax -> -8`` and ``+absmax -> 7`` with error at most ``s/2``).
* :func:`quantize_gptq` -- GPTQ (Frantar et al., 2022): quantizes columns in
  order and spreads each column's rounding error over the not yet quantized
  columns through the inverse Hessian ``H = 2 X^T X`` of calibration inputs
  ``X``, with per-group scales chosen when a group starts. The output is the
  same format, so every kernel and :class:`~t4lib.quant.QuantLinear` take it
  unchanged.
"""
from __future__ import annotations

import torch

from t4lib.ops.w4a16.format import (
    GROUP_SIZES, QMAX, QMIN, QuantizedWeight, check_group_size, pack_int4_rows, unpack_int4_rows,
)

_RTN_DIV = 7.5  # s = absmax / 7.5: -absmax -> -8, +absmax -> 7


def _check_weight(weight, group_size) -> tuple[int, int]:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype not in (torch.float16, torch.float32, torch.bfloat16):
        raise TypeError(f"weight must be float16, bfloat16 or float32, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [N, K], got shape {list(weight.shape)}")
    N, K = weight.shape
    if N < 1:
        raise ValueError(f"weight must have at least one row (output feature), got shape {list(weight.shape)}")
    check_group_size(group_size, K)
    if not torch.isfinite(weight).all():
        raise ValueError("weight contains NaN or Inf")
    return N, K


def _group_scales(wg: torch.Tensor) -> torch.Tensor:
    """[..., group] fp32 -> [...] fp16 scale, absmax / 7.5 rounded to fp16, at least fp16's smallest subnormal
    (never 0: a scale that rounds to 0 would dequantize a tiny but non-zero group to zeros)."""
    s = (wg.abs().amax(dim=-1) / _RTN_DIV).to(torch.float16)
    return s.clamp_min(2.0 ** -24)


def rtn_codes(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The round-to-nearest rule, unpacked and unchecked: ``weight [N, K]`` -> ``(q [N, K] int8 in
    [-8, 7], scales [N, K/group_size] fp16)``. :func:`quantize_rtn` validates, then packs these."""
    N, K = weight.shape
    w = weight.detach().to(torch.float32).reshape(N, K // group_size, group_size)
    s = _group_scales(w)
    q = torch.clamp(torch.round(w / s.to(torch.float32)[..., None]), QMIN, QMAX).to(torch.int8)
    return q.reshape(N, K), s


def quantize_rtn(weight: torch.Tensor, group_size: int = 128) -> QuantizedWeight:
    """Round-to-nearest: ``weight [N, K]`` (fp16/bf16/fp32, any device) -> :class:`QuantizedWeight`."""
    N, K = _check_weight(weight, group_size)
    q, s = rtn_codes(weight, group_size)
    return QuantizedWeight(pack_int4_rows(q), s.contiguous(), N, K, group_size)


def quantize_gptq(weight: torch.Tensor, hessian: torch.Tensor, group_size: int = 128, *, damp: float = 0.01,
                  block: int = 128) -> QuantizedWeight:
    """GPTQ with per-group scales (no activation reordering).

    ``hessian [K, K]``: ``sum_i x_i x_i^T`` over calibration inputs (any
    positive scale; see :class:`HessianAccumulator`). ``damp`` adds
    ``damp * mean(diag H)`` to the diagonal. Columns whose input never fired
    (zero diagonal) are quantized by RTN. Runs on the weight's device in fp32.
    """
    N, K = _check_weight(weight, group_size)
    if not isinstance(hessian, torch.Tensor) or tuple(hessian.shape) != (K, K):
        raise ValueError(f"hessian must be a [K, K] = [{K}, {K}] tensor, got "
                         f"{list(hessian.shape) if isinstance(hessian, torch.Tensor) else type(hessian).__name__}")
    if block % group_size:
        raise ValueError(f"block={block} must be a multiple of group_size={group_size}")
    dev = weight.device
    W = weight.detach().to(torch.float32).clone()
    H = hessian.detach().to(device=dev, dtype=torch.float32).clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    H += damp * torch.mean(torch.diag(H)) * torch.eye(K, device=dev)
    try:
        L = torch.linalg.cholesky(H)
        Hinv = torch.cholesky_inverse(L)
        U = torch.linalg.cholesky(Hinv, upper=True)  # rows of the upper factor drive the updates
    except RuntimeError as e:  # not positive definite even after damping
        raise ValueError(f"hessian is not positive definite after damping ({e}); increase damp") from None

    Q = torch.zeros(N, K, dtype=torch.int8, device=dev)
    S = torch.zeros(N, K // group_size, dtype=torch.float16, device=dev)
    for b0 in range(0, K, block):
        b1 = min(b0 + block, K)
        W1 = W[:, b0:b1].clone()
        Err = torch.zeros_like(W1)
        for i in range(b1 - b0):
            col = b0 + i
            if col % group_size == 0:  # choose the group's scale from the (error-updated) weights
                # block (128) is a multiple of group_size, so the group lies inside W1
                S[:, col // group_size] = _group_scales(W1[:, i:i + group_size])
            s = S[:, col // group_size].to(torch.float32)
            w = W1[:, i]
            q = torch.clamp(torch.round(w / s), QMIN, QMAX)
            Q[:, col] = q.to(torch.int8)
            d = U[col, col]
            err = (w - q * s) / d
            W1[:, i:] -= err[:, None] * U[col, col:b1][None, :]
            Err[:, i] = err
        W[:, b1:] -= Err @ U[b0:b1, b1:]
    return QuantizedWeight(pack_int4_rows(Q), S.contiguous(), N, K, group_size)


class HessianAccumulator:
    """Running ``H = sum x x^T`` of the inputs of one Linear (forward hook)."""

    def __init__(self, K: int, device):
        self.H = torch.zeros(K, K, dtype=torch.float32, device=device)
        self.n = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().reshape(-1, x.shape[-1]).to(torch.float32)
        self.H.addmm_(x.t(), x)
        self.n += x.shape[0]


def output_error(weight: torch.Tensor, qw: QuantizedWeight, x: torch.Tensor) -> float:
    """Relative output error ``||x W^T - x W_deq^T|| / ||x W^T||`` (fp32)."""
    w = weight.to(torch.float32)
    ref = x.to(torch.float32) @ w.t()
    got = x.to(torch.float32) @ qw.dequantize(torch.float32).to(x.device).t()
    return float((ref - got).norm() / ref.norm().clamp_min(1e-30))


def rtn_max_error(weight: torch.Tensor, qw: QuantizedWeight) -> float:
    """max |W - W_deq| / scale over all entries (RTN guarantees <= 0.5 plus fp16 rounding)."""
    s = qw.scales.to(torch.float32).repeat_interleave(qw.group_size, dim=1)
    return float(((weight.to(torch.float32) - qw.dequantize(torch.float32)).abs() / s).max())


__all__ = ["GROUP_SIZES", "QuantizedWeight", "quantize_rtn", "quantize_gptq", "HessianAccumulator",
           "pack_int4_rows", "unpack_int4_rows", "check_group_size", "output_error"]
