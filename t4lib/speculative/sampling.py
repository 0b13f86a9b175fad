"""The speculative-sampling acceptance rule (Leviathan et al. 2023; Chen et al. 2023).

Given target probabilities ``p [k+1, V]`` at each verified position, draft probabilities
``q [k, V]`` and the drafted tokens ``x [k]`` (``x_i ~ q_i``): accept ``x_i`` with probability
``min(1, p_i(x_i) / q_i(x_i))``, in order; at the first rejection sample a replacement from
``normalize(max(p_i - q_i, 0))`` and stop; if all ``k`` are accepted, sample a bonus token from
``p_k``. Every emitted token is then distributed exactly as ``p`` (tested with a chi-square
test against the closed form). A deterministic drafter (prompt lookup) has one-hot ``q``.
"""
from __future__ import annotations

import torch


def speculative_accept(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor,
                       generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Returns (emitted tokens, number of drafts accepted); ``len(emitted) == accepted + 1``."""
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != q.shape[0] + 1 or p.shape[1] != q.shape[1]:
        raise ValueError(f"p must be [k+1, V] and q [k, V], got p {list(p.shape)} and q {list(q.shape)}")
    if draft.dim() != 1 or draft.shape[0] != q.shape[0]:
        raise ValueError(f"draft must be [k] with k = {q.shape[0]}, got {list(draft.shape)}")
    p, q = p.double(), q.double()
    k = draft.shape[0]
    u = torch.rand(k, generator=generator, dtype=torch.float64)
    out = []
    for i in range(k):
        x = int(draft[i])
        if u[i] * q[i, x] <= p[i, x]:  # u < p/q without dividing by a zero q
            out.append(x)
            continue
        resid = (p[i] - q[i]).clamp_min(0)
        s = resid.sum()
        resid = resid / s if s > 0 else p[i]
        out.append(int(torch.multinomial(resid, 1, generator=generator)))
        return out, i
    out.append(int(torch.multinomial(p[k], 1, generator=generator)))
    return out, k
