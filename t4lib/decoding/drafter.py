"""The drafter interface every speculative engine takes: ``propose(contexts, k)`` returns up to
``k`` proposed tokens per sequence (see :mod:`t4lib.speculative.drafters` for the drafters)."""
from __future__ import annotations

import torch


class Drafter:
    """Base class; subclasses implement :meth:`propose`."""

    name = "drafter"

    def propose(self, contexts: list[list[int]], k: int) -> list[list[int]]:
        raise NotImplementedError

    def propose_sampled(self, contexts: list[list[int]], k: int, sampler, generator: torch.Generator):
        """Drafts and the distributions they were drawn from; deterministic drafters: ``q`` one-hot (None)."""
        return self.propose(contexts, k), [None] * len(contexts)

    @staticmethod
    def _cut_at_eos(draft: list[int], eos: tuple[int, ...]) -> list[int]:
        """No draft across an end of sequence: keep tokens up to and including the first of the ``eos`` ids."""
        hit = next((i for i, t in enumerate(draft) if t in eos), None)
        return draft if hit is None else draft[:hit + 1]
