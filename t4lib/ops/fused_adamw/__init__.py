"""Fused weight-gradient GEMM + AdamW: a Linear layer's weight update without dW in memory.

``fused_adamw_(dy, x, master, exp_avg, exp_avg_sq, w16, step=..., lr=...)``: ``dy [T, N]`` and
``x [T, K]`` fp16 (the output gradient and the input of ``y = x @ W^T`` over T tokens); the fp32
master weight and moments ``[N, K]`` and the fp16 working copy ``w16 [N, K]`` are updated in
place with ``g = dy^T @ x`` (fp32 accumulation on WMMA m16n16k16 tensor cores) by
``torch.optim.AdamW``'s rule (:mod:`.reference` spells it out). The gradient stays in the SM:
per parameter the kernel reads master, m, v (12 bytes) and writes them and the fp16 copy (14).

``weight_grad`` (the same GEMM core writing dW fp32) and ``adamw_`` (a separate elementwise
AdamW kernel) are the unfused path: 8 more bytes per parameter (dW written, then read), and
what gradient accumulation or global-norm clipping need, since those must see dW before the
update. ``unfused_adamw_`` chains them (benchmark baseline (a)).

``warp_specialized=True``: the same computation with software warp specialization (sm_75 has no
cp.async or TMA): 2 producer warps copy dY/X stages into a 2-stage shared-memory ring with plain
loads and stores, 4 consumer warps run the WMMAs, a named barrier (``bar.sync`` with an id per
slot, on both sides) hands each stage over. Bit-identical to the plain kernel.

``max_ctas`` caps the grid (every kernel is grid-stride: the bits do not depend on it);
``backend`` is ``"auto"|"cuda"|"reference"`` as for every op.
"""
from __future__ import annotations

import math
import numbers

import torch

from .._dispatch import check, check_grid_cap, same_device, use_cuda
from . import binding, reference

__all__ = ["fused_adamw_", "weight_grad", "adamw_", "unfused_adamw_", "check_hparams", "BYTES_PER_PARAM"]

# DRAM bytes per parameter of the optimizer-state streams (ARITHMETIC, from the access pattern):
# fused: read master, m, v (4 each), write them and the fp16 copy (4 + 4 + 4 + 2);
# unfused (a): the same plus dW written by the GEMM and read back by the AdamW kernel (4 + 4).
# The source's "28 -> 22" comes without a breakdown: 28 matches an optimizer that reads an fp32
# gradient and reads and writes fp32 master, m, v (4 + 12 + 12) with no fp16 copy; dropping the
# gradient read gives 24, so 22 needs 2 more bytes left out somewhere. Here the fp16 copy the
# forward pass reads is written (2 bytes); keeping no fp32 master (fp16 weights, fp32 moments)
# would give 20, at the cost of updates below fp16's resolution being lost.
BYTES_PER_PARAM = {"fused": 26, "unfused": 34}


def _number(name: str, v) -> float:
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(float(v)):
        raise TypeError(f"{name} must be a finite real number, got {v!r}")
    return float(v)


def check_hparams(lr, betas, eps, weight_decay, step=None) -> None:
    """ValueError/TypeError naming the argument unless lr > 0, 0 <= beta < 1, eps > 0,
    weight_decay >= 0 and step (when given) an int >= 1."""
    if _number("lr", lr) <= 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    for i, b in enumerate(betas):
        if not 0.0 <= _number(f"betas[{i}]", b) < 1.0:
            raise ValueError(f"betas[{i}] must be in [0, 1), got {b!r}")
    if _number("eps", eps) <= 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if _number("weight_decay", weight_decay) < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 1):
        raise ValueError(f"step must be an int >= 1 (the count including this update), got {step!r}")


def _check_state(master, exp_avg, exp_avg_sq, w16) -> tuple[int, int]:
    check("master", master, dtype=torch.float32, ndim=2)
    N, K = master.shape
    for name, t, dt in (("exp_avg", exp_avg, torch.float32), ("exp_avg_sq", exp_avg_sq, torch.float32),
                        ("w16", w16, torch.float16)):
        check(name, t, dtype=dt, ndim=2)
        if t.shape != master.shape:
            raise ValueError(f"{name} must have the shape of master {tuple(master.shape)}, got {tuple(t.shape)}")
    return N, K


def _check_inputs(dy, x, N: int, K: int) -> None:
    check("dy", dy, dtype=torch.float16, ndim=2, contiguous=False)
    check("x", x, dtype=torch.float16, ndim=2, contiguous=False)
    if dy.shape[0] != x.shape[0]:
        raise ValueError(f"dy and x must have the same number of tokens T (rows), got {dy.shape[0]} and {x.shape[0]}")
    if dy.shape[1] != N:
        raise ValueError(f"dy has {dy.shape[1]} columns but master has N={N} rows (out_features)")
    if x.shape[1] != K:
        raise ValueError(f"x has {x.shape[1]} columns but master has K={K} columns (in_features)")


def _hp(lr, betas, eps, weight_decay, step) -> dict:
    check_hparams(lr, betas, eps, weight_decay, step)
    return dict(lr=float(lr), betas=(float(betas[0]), float(betas[1])), eps=float(eps),
                weight_decay=float(weight_decay), step=step)


def fused_adamw_(dy: torch.Tensor, x: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor,
                 exp_avg_sq: torch.Tensor, w16: torch.Tensor, *, step: int, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 max_ctas: int | None = None, backend: str = "auto", warp_specialized: bool = False) -> None:
    """One AdamW step of a Linear weight from ``g = dy[T, N]^T @ x[T, K]``, in place, dW never stored.

    ``warp_specialized=True`` runs the producer/consumer variant of the kernel (the same bits)."""
    hp = _hp(lr, betas, eps, weight_decay, step)
    if not isinstance(warp_specialized, bool):
        raise TypeError(f"warp_specialized must be a bool, got {warp_specialized!r}")
    N, K = _check_state(master, exp_avg, exp_avg_sq, w16)
    _check_inputs(dy, x, N, K)
    check_grid_cap("max_ctas", max_ctas)
    dev = same_device(dy=dy, x=x, master=master, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, w16=w16)
    if use_cuda(backend, binding.FAMILY, dev):
        binding.fused(dy.contiguous(), x.contiguous(), master, exp_avg, exp_avg_sq, w16,
                      reference.adamw_scalars(**hp), max_ctas or 0, warp_specialized)
    else:
        reference.fused_adamw_(dy, x, master, exp_avg, exp_avg_sq, w16, **hp)


def weight_grad(dy: torch.Tensor, x: torch.Tensor, *, out: torch.Tensor | None = None, max_ctas: int | None = None,
                backend: str = "auto") -> torch.Tensor:
    """dW [N, K] fp32 = dy[T, N]^T @ x[T, K] (fp16 in, fp32 accumulation); into ``out`` when given."""
    check("dy", dy, dtype=torch.float16, ndim=2, contiguous=False)
    check("x", x, dtype=torch.float16, ndim=2, contiguous=False)
    if dy.shape[0] != x.shape[0]:
        raise ValueError(f"dy and x must have the same number of tokens T (rows), got {dy.shape[0]} and {x.shape[0]}")
    check_grid_cap("max_ctas", max_ctas)
    N, K = dy.shape[1], x.shape[1]
    dev = same_device(dy=dy, x=x, out=out)
    if out is None:
        out = torch.empty(N, K, dtype=torch.float32, device=dev)
    else:
        check("out", out, dtype=torch.float32, ndim=2)
        if out.shape != (N, K):
            raise ValueError(f"out must have shape ({N}, {K}), got {tuple(out.shape)}")
    if use_cuda(backend, binding.FAMILY, dev):
        binding.wgrad(dy.contiguous(), x.contiguous(), out, max_ctas or 0)
    else:
        out.copy_(reference.weight_grad(dy, x))
    return out


def adamw_(grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
           w16: torch.Tensor, *, step: int, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
           weight_decay: float = 1e-2, max_ctas: int | None = None, backend: str = "auto") -> None:
    """One AdamW step from a gradient in memory (``grad`` fp32, shape of ``master``), in place."""
    hp = _hp(lr, betas, eps, weight_decay, step)
    _check_state(master, exp_avg, exp_avg_sq, w16)
    check("grad", grad, dtype=torch.float32, ndim=2)
    if grad.shape != master.shape:
        raise ValueError(f"grad must have the shape of master {tuple(master.shape)}, got {tuple(grad.shape)}")
    check_grid_cap("max_ctas", max_ctas)
    dev = same_device(grad=grad, master=master, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, w16=w16)
    if use_cuda(backend, binding.FAMILY, dev):
        binding.step(grad, master, exp_avg, exp_avg_sq, w16, reference.adamw_scalars(**hp), max_ctas or 0)
    else:
        reference.adamw_(grad, master, exp_avg, exp_avg_sq, w16, **hp)


def unfused_adamw_(dy: torch.Tensor, x: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor,
                   exp_avg_sq: torch.Tensor, w16: torch.Tensor, *, step: int, lr: float,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                   workspace: torch.Tensor | None = None, max_ctas: int | None = None,
                   backend: str = "auto") -> torch.Tensor:
    """``weight_grad`` into ``workspace`` then ``adamw_``: the same result as :func:`fused_adamw_`
    (bit for bit on the CUDA path) through a dW in memory, which it returns."""
    hp = _hp(lr, betas, eps, weight_decay, step)
    N, K = _check_state(master, exp_avg, exp_avg_sq, w16)
    _check_inputs(dy, x, N, K)
    g = weight_grad(dy, x, out=workspace, max_ctas=max_ctas, backend=backend)
    adamw_(g, master, exp_avg, exp_avg_sq, w16, max_ctas=max_ctas, backend=backend, **hp)
    return g
