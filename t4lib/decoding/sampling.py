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
    """``temperature > 0``; ``top_k``: keep the k largest logits (0: all); ``top_p``: keep the smallest set of
    most likely tokens whose probability reaches ``top_p`` (1.0: all)."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not 0 < self.temperature < float("inf"):
            raise ValueError(f"temperature must be a finite number > 0 when sampling, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: no top-k cut), got {self.top_k!r}")
        check_top_p(self.top_p)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``[..., V]`` logits -> ``[..., V]`` float32 probabilities."""
        return torch.softmax(scaled_logits(logits, self.temperature, self.top_k, self.top_p), dim=-1)


def check_top_p(top_p) -> None:
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must be a number in (0, 1] (1: no nucleus cut), got {top_p!r}")


def scaled_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float = 1.0) -> torch.Tensor:
    """The sampling distribution's logits, every engine's rule (Hugging Face's warpers, in their order):
    fp32 ``logits [..., V] / temperature``; the entries below the ``top_k``-th largest set to -inf (``top_k``
    0: none); then, with ``top_p < 1``, the tokens outside the nucleus: sorted ascending, a token is dropped
    while the cumulative probability up to it is ``<= 1 - top_p`` (the most likely token always kept).
    Capture-safe (no host sync).

    The logits are shifted by their row maximum before the division (the distribution is unchanged): the
    largest becomes 0 and the others are <= 0, so a temperature small enough to overflow ``logits /
    temperature`` gives ``-inf`` for the others and the distribution tends to the greedy token, never NaN.
    A temperature below float32's smallest normal number (which a GPU may flush to 0) is that limit."""
    x = logits.float()
    x = x - x.amax(dim=-1, keepdim=True)
    if isinstance(temperature, (int, float)) and temperature < torch.finfo(torch.float32).tiny:
        x = torch.where(x == 0, x, torch.full_like(x, float("-inf")))
    else:
        x = x / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=False)
        drop = sorted_x.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        drop[..., -1:] = False
        x = x.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return x


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's repetition penalty (Keskar et al. 2019) on fp32 ``logits [B, V]``: where ``seen [B, V]``
    (a token of the prompt or already generated), a positive logit is divided by ``penalty`` and a negative one
    multiplied. Capture-safe."""
    x = logits.float()
    return torch.where(seen, torch.where(x < 0, x * penalty, x / penalty), x)


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
    if not isinstance(draft, torch.Tensor) or draft.dim() != 1 or draft.shape[0] != k:
        raise ValueError(f"draft must be a [k] tensor with k = {k}, got "
                         f"{list(draft.shape) if isinstance(draft, torch.Tensor) else type(draft).__name__}")
    if draft.dtype.is_floating_point or draft.dtype.is_complex or draft.dtype == torch.bool:
        raise TypeError(f"draft must hold integer token ids, got {draft.dtype}")
    if k and not (0 <= int(draft.min()) and int(draft.max()) < p.shape[1]):
        raise ValueError(f"draft token ids must be in [0, {p.shape[1]}) (the vocabulary of p), got "
                         f"{draft.tolist()}")
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
