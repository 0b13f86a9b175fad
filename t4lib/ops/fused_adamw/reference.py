"""Reference semantics of the fused weight-gradient GEMM + AdamW (pure PyTorch, any device).

For a Linear layer ``y = x @ W^T`` with ``dY [T, N]`` (gradient of y over T tokens) and
``X [T, K]`` (its input), both fp16::

    g = dY^T @ X                      [N, K], fp32 accumulation of the fp16 products
    p = p * (1 - lr * wd)             decoupled weight decay
    m = lerp(m, g, 1 - beta1)         first moment
    v = v * beta2 + (1 - beta2) g^2   second moment
    p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - beta_i^step
    w16 = fp16(p)                     the working copy the forward pass uses

on the fp32 master ``p [N, K]`` and fp32 moments, in place. The operations, their order and
the scalar derivations (in double, as Python floats) are those of ``torch.optim.AdamW``'s
single-tensor implementation, so the reference reproduces it exactly on the same gradient. The
kernels round every operation once in the same order (no FMA contraction), so they agree with it
to an ulp or so per step; the GEMM differs from an fp32 matmul only in summation order.
"""
from __future__ import annotations

import torch

__all__ = ["weight_grad", "adamw_scalars", "adamw_", "fused_adamw_"]


def weight_grad(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dW [N, K] fp32 = dy[T, N]^T @ x[T, K] (fp16 inputs, fp32 products and sums)."""
    return dy.float().t() @ x.float()


def adamw_scalars(lr: float, betas: tuple[float, float], eps: float, weight_decay: float, step: int) -> dict:
    """The per-step scalars, derived as torch.optim.AdamW derives them (Python floats)."""
    beta1, beta2 = betas
    bc1 = 1 - beta1 ** step
    bc2 = 1 - beta2 ** step
    return {"decay": 1 - lr * weight_decay, "w1": 1 - beta1, "b2": beta2, "w2": 1 - beta2,
            "bc2_sqrt": bc2 ** 0.5, "eps": eps, "neg_step": -(lr / bc1)}


def adamw_(grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
           w16: torch.Tensor, *, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
           step: int) -> None:
    """One AdamW step from ``grad`` (fp32, shape of ``master``), in place; ``w16`` gets fp16(master)."""
    s = adamw_scalars(lr, betas, eps, weight_decay, step)
    if weight_decay != 0:
        master.mul_(s["decay"])
    exp_avg.lerp_(grad, s["w1"])
    exp_avg_sq.mul_(s["b2"]).addcmul_(grad, grad, value=s["w2"])
    denom = (exp_avg_sq.sqrt() / s["bc2_sqrt"]).add_(eps)
    master.addcdiv_(exp_avg, denom, value=s["neg_step"])
    w16.copy_(master)


def fused_adamw_(dy: torch.Tensor, x: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor,
                 exp_avg_sq: torch.Tensor, w16: torch.Tensor, **hp) -> None:
    """``weight_grad`` then ``adamw_``: what the fused kernel computes (dW is a temporary here)."""
    adamw_(weight_grad(dy, x), master, exp_avg, exp_avg_sq, w16, **hp)
