"""Sampling for speculative decoding: the target's (and a draft model's) token distribution, and the
speculative-sampling acceptance rule (Leviathan et al. 2023; Chen et al. 2023).

:class:`Sampler` turns logits into the distribution a sampled token is drawn from,
``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits (ties at the k-th kept),
the distribution ``t4lib.serving.StaticEngine`` samples from with the same settings.

:func:`speculative_accept`: given target probabilities ``p [k+1, V]`` at each verified position, draft
probabilities ``q [k, V]`` and the drafted tokens ``x [k]`` (``x_i ~ q_i``): accept ``x_i`` with
probability ``min(1, p_i(x_i) / q_i(x_i))``, in order; at the first rejection sample a replacement from
``normalize(max(p_i - q_i, 0))`` and stop; if all ``k`` are accepted, sample a bonus token from ``p_k``.
Every emitted token is then distributed exactly as ``p`` (tested with a chi-square test against the
closed form). A deterministic drafter (prompt lookup) has one-hot ``q`` (pass ``q=None``): accept with
probability ``p_i(x_i)``, else resample from ``p_i`` with ``x_i`` removed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampler:
    """``temperature > 0``; ``top_k``: keep the k largest logits (0: all)."""
    temperature: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not self.temperature > 0:
            raise ValueError(f"temperature must be a number > 0 when sampling, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: no top-k cut), got {self.top_k!r}")

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``[..., V]`` logits -> ``[..., V]`` float32 probabilities."""
        x = logits.float() / self.temperature
        if self.top_k and self.top_k < x.shape[-1]:
            kth = torch.topk(x, self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        return torch.softmax(x, dim=-1)


def sample(p: torch.Tensor, generator: torch.Generator | None = None) -> list[int]:
    """One token per row of ``p [B, V]`` (host-side, ``generator`` on the CPU)."""
    return torch.multinomial(p.detach().double().cpu(), 1, generator=generator)[:, 0].tolist()


def speculative_accept(p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor,
                       generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Returns (emitted tokens, number of drafts accepted); ``len(emitted) == accepted + 1``.
    ``q=None``: the drafts are deterministic (one-hot ``q``)."""
    if q is not None and (p.dim() != 2 or q.dim() != 2 or p.shape[0] != q.shape[0] + 1 or p.shape[1] != q.shape[1]):
        raise ValueError(f"p must be [k+1, V] and q [k, V], got p {list(p.shape)} and q {list(q.shape)}")
    if p.dim() != 2:
        raise ValueError(f"p must be [k+1, V], got {list(p.shape)}")
    k = p.shape[0] - 1
    if draft.dim() != 1 or draft.shape[0] != k:
        raise ValueError(f"draft must be [k] with k = {k}, got {list(draft.shape)}")
    p = p.detach().double().cpu()
    q = None if q is None else q.detach().double().cpu()
    u = torch.rand(k, generator=generator, dtype=torch.float64)
    out = []
    for i in range(k):
        x = int(draft[i])
        qx = 1.0 if q is None else q[i, x]
        if u[i] * qx <= p[i, x]:  # u < p/q without dividing by a zero q
            out.append(x)
            continue
        if q is None:
            resid = p[i].clone()
            resid[x] = 0.0                   # max(p - onehot(x), 0)
        else:
            resid = (p[i] - q[i]).clamp_min(0)
        s = resid.sum()
        resid = resid / s if s > 0 else p[i]
        out.append(int(torch.multinomial(resid, 1, generator=generator)))
        return out, i
    out.append(int(torch.multinomial(p[k], 1, generator=generator)))
    return out, k
