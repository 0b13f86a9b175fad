"""Drafters: propose up to ``k`` tokens for each sequence of a batch.

One interface (:class:`Drafter`): ``propose(contexts, k) -> list[list[int]]`` where
``contexts[b]`` is every token of sequence ``b`` so far (prompt + generated, the last one
not yet verified). A drafter may return fewer than ``k`` tokens (none at all when it has
no guess); the engine then verifies fewer positions. When the engine samples it calls
``propose_sampled(contexts, k, sampler, generator) -> (drafts, qs)``: ``qs[b]`` is the ``[len(d), V]``
distribution each draft token was drawn from, or None for a deterministic drafter (``q`` one-hot: the
default, which calls ``propose``); :func:`t4lib.speculative.sampling.speculative_accept` then applies the
acceptance rule. A multi-token-prediction head plugs in as another ``Drafter``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


class Drafter:
    """Base class; subclasses implement :meth:`propose`."""

    name = "drafter"

    def propose(self, contexts: list[list[int]], k: int) -> list[list[int]]:
        raise NotImplementedError

    def propose_sampled(self, contexts: list[list[int]], k: int, sampler, generator: torch.Generator):
        """Drafts and the distributions they were drawn from; deterministic drafters: ``q`` one-hot (None)."""
        return self.propose(contexts, k), [None] * len(contexts)

    @staticmethod
    def _cut_at_eos(draft: list[int], eos_token_id: int | None) -> list[int]:
        """No draft across an end of sequence: keep tokens up to and including the first EOS."""
        if eos_token_id is not None and eos_token_id in draft:
            return draft[:draft.index(eos_token_id) + 1]
        return draft


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: find the longest n-gram (``max_ngram`` down to ``min_ngram``) that ends
    the context and occurred earlier in it; propose the ``k`` tokens that followed its most recent
    earlier occurrence. No match: no draft."""

    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, eos_token_id: int | None = None):
        if not isinstance(min_ngram, int) or min_ngram < 1:
            raise ValueError(f"min_ngram must be an int >= 1, got {min_ngram!r}")
        if not isinstance(max_ngram, int) or max_ngram < min_ngram:
            raise ValueError(f"max_ngram must be an int >= min_ngram ({min_ngram}), got {max_ngram!r}")
        self.max_ngram, self.min_ngram, self.eos_token_id = max_ngram, min_ngram, eos_token_id

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        t = np.asarray(tokens, dtype=np.int64)
        L = len(t)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            # windows starting at 0 .. L-n-1 (the suffix itself excluded), each followed by >= 1 token
            win = np.lib.stride_tricks.sliding_window_view(t[:L - 1], n)
            hits = np.flatnonzero((win == t[L - n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n
                return self._cut_at_eos(t[start:start + k].tolist(), self.eos_token_id)
        return []

    def propose(self, contexts, k):
        return [self.lookup(c, k) for c in contexts]


class DraftModelDrafter(Drafter):
    """A smaller causal LM with the target's tokenizer, decoded by a :class:`t4lib.serving.StaticEngine`
    (static cache, CUDA-graph steps on a GPU): greedily, or, when the engine samples, with the engine's
    temperature and top-k, returning the draft distribution ``q`` of each token (from the logits the draft
    engine sampled it from). Each proposal re-reads the context (one prefill of the draft model) and
    decodes ``k`` tokens. Sampled proposals seed the draft engine from the caller's generator
    (``StaticEngine`` seeds torch's global generator)."""

    name = "draft_model"

    def __init__(self, model: nn.Module, max_len: int = 1024, eos_token_id: int | None = None, **engine_kw):
        from ..serving import StaticEngine
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"draft model must be a Hugging Face causal LM, got {type(model).__name__}")
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.engine = StaticEngine(model, max_len=max_len, **engine_kw)
        self.eos_token_id = eos_token_id

    def propose(self, contexts, k):
        out = []
        for c in contexts:  # rows differ in length; the StaticEngine takes one length per call
            budget = min(k, self.engine.max_len - len(c))
            if budget < 1:
                out.append([])
                continue
            ids = torch.tensor([c], dtype=torch.long)
            r = self.engine.generate(ids, budget)
            out.append(self._cut_at_eos(r.new_tokens[0].tolist(), self.eos_token_id))
        return out

    def propose_sampled(self, contexts, k, sampler, generator):
        out, qs = [], []
        for c in contexts:
            budget = min(k, self.engine.max_len - len(c))
            if budget < 1:
                out.append([])
                qs.append(None)
                continue
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
            r = self.engine.generate(torch.tensor([c], dtype=torch.long), budget, do_sample=True,
                                     temperature=sampler.temperature, top_k=sampler.top_k, seed=seed,
                                     output_logits=True)
            d = self._cut_at_eos(r.new_tokens[0].tolist(), self.eos_token_id)
            out.append(d)
            qs.append(sampler.probs(r.logits[0, :len(d)]))
        return out, qs
