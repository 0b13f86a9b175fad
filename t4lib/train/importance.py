"""Rollout/training mismatch correction: truncated or masked importance sampling.

The rollout engine samples completions from ``pi_roll`` (an fp16, INT4 or
CP-Hybrid copy of the policy); the loss is computed under ``pi_old`` (the
trainer's own policy at the time of sampling). Their per-token log-ratio
``d_t = log pi_old(y_t) - log pi_roll(y_t)`` (completion tokens only) gives the
weight each completion's loss is multiplied by, exactly as TRL does for vLLM
(``vllm_importance_sampling_mode``):

* ``sequence_truncate``: ``w = clamp(exp(sum_t d_t), C_min, C_max)``   shape ``[B, 1]``
* ``sequence_mask``:     ``w = exp(sum_t d_t)`` if inside ``[C_min, C_max]`` else 0
* ``token_truncate`` / ``token_mask``: the same per token, ``w_t`` from ``exp(d_t)``, shape ``[B, T]``

``C_min = None`` means no lower bound, ``C_max = None`` no upper one (TRL's defaults:
``sequence_mask``, ``C_max = 3``).
The metrics use TRL's names so a TRL user reads them as usual.
"""
from __future__ import annotations

import math

import torch

MODES = ("sequence_truncate", "sequence_mask", "token_truncate", "token_mask")


def check_mode(mode: str, clip_min, clip_max) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if clip_max is not None and not clip_max > 0:
        raise ValueError(f"clip_max must be None or > 0, got {clip_max!r}")
    if clip_min is not None and not 0 <= clip_min <= (clip_max if clip_max is not None else math.inf):
        raise ValueError(f"clip_min must be None or in [0, clip_max={clip_max}], got {clip_min!r}")


def importance_weights(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
                       mode: str = "sequence_truncate", clip_min: float | None = None,
                       clip_max: float | None = 3.0) -> torch.Tensor:
    """Importance weights of rollout tokens (see module docstring).

    ``old_logps``, ``sampling_logps``: ``[B, T]`` log-probabilities of the sampled
    tokens under the trainer's policy and under the rollout policy; ``mask``:
    ``[B, T]`` 1 on completion tokens. NaN sampling log-probs count as no
    mismatch. Returns ``[B, 1]`` (sequence modes) or ``[B, T]`` (token modes), fp32.
    """
    check_mode(mode, clip_min, clip_max)
    for n, t in (("old_logps", old_logps), ("sampling_logps", sampling_logps), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{n} must be a [B, T] tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if old_logps.shape != sampling_logps.shape or old_logps.shape != mask.shape:
        raise ValueError(f"old_logps {list(old_logps.shape)}, sampling_logps {list(sampling_logps.shape)} and mask "
                         f"{list(mask.shape)} must have one shape")
    diff = torch.nan_to_num((old_logps.float() - sampling_logps.float()) * mask.float(), nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return ratio.clamp(min=clip_min if clip_min is not None else 0.0, max=clip_max)
    lo = clip_min if clip_min is not None else -math.inf
    hi = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)


def mismatch_metrics(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
                     weights: torch.Tensor | None = None) -> dict[str, float]:
    """TRL's mismatch metrics: ``sampling/sampling_logp_difference/{mean,max}`` (|d_t| over completion
    tokens) and, given ``weights``, ``sampling/importance_sampling_ratio/{min,mean,max}``; also the
    names are TRL's."""
    m = mask.bool()
    delta = (old_logps.float() - sampling_logps.float()).abs()[m]
    delta = delta[~torch.isnan(delta)]
    out = {"sampling/sampling_logp_difference/mean": delta.mean().item() if delta.numel() else 0.0,
           "sampling/sampling_logp_difference/max": delta.max().item() if delta.numel() else 0.0}
    if weights is not None:
        flat = weights.flatten() if weights.shape[-1] == 1 else weights[m]
        if flat.numel():
            out.update({"sampling/importance_sampling_ratio/min": flat.min().item(),
                        "sampling/importance_sampling_ratio/mean": flat.mean().item(),
                        "sampling/importance_sampling_ratio/max": flat.max().item()})
    return out


def token_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean per-token ``KL(p || q)`` of two ``[..., V]`` logit tensors (over ``mask`` positions)."""
    lp, lq = p_logits.float().log_softmax(-1), q_logits.float().log_softmax(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    if mask is not None:
        kl = kl[mask.bool()]
    return kl.mean().item()
