"""Drafters: propose up to ``k`` tokens for each sequence of a batch.

One interface (:class:`t4lib.decoding.drafter.Drafter`): ``propose(contexts, k) -> list[list[int]]`` where
``contexts[b]`` is every token of sequence ``b`` so far (prompt + generated, the last one
not yet verified). A drafter may return fewer than ``k`` tokens (none at all when it has
no guess); the engine then verifies fewer positions. When the engine samples it calls
``propose_sampled(contexts, k, sampler, generator) -> (drafts, qs)``: ``qs[b]`` is the ``[len(d), V]``
distribution each draft token was drawn from, or None for a deterministic drafter (``q`` one-hot: the
default, which calls ``propose``); :func:`t4lib.decoding.sampling.speculative_accept` then applies the
acceptance rule. A multi-token-prediction head plugs in as another ``Drafter``.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from t4lib.decoding.drafter import Drafter
from t4lib.decoding.tokens import eos_ids, vocab_size
from t4lib.serving import StaticEngine
from t4lib.speculative.engine import SpeculativeEngine


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: find the longest n-gram (``max_ngram`` down to ``min_ngram``) that ends
    the context and occurred earlier in it; propose the ``k`` tokens that followed its most recent
    earlier occurrence. No match: no draft."""

    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, eos_token_id: int | list[int] | None = None):
        if not isinstance(min_ngram, int) or min_ngram < 1:
            raise ValueError(f"min_ngram must be an int >= 1, got {min_ngram!r}")
        if not isinstance(max_ngram, int) or max_ngram < min_ngram:
            raise ValueError(f"max_ngram must be an int >= min_ngram ({min_ngram}), got {max_ngram!r}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.eos_token_id = eos_ids(eos_token_id, None)

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """The draft for one context (see the class docstring). The search runs in C: the tokens as int32
        bytes and ``bytes.rfind`` of the suffix's bytes, keeping matches that start on a token boundary
        (about 10 us for a few hundred tokens, several times faster than NumPy windows per n)."""
        L = len(tokens)
        if L < 2:
            return []
        b = np.asarray(tokens, dtype=np.int32).tobytes()
        end = 4 * (L - 1)  # an occurrence must end before the last token, so at least one token follows it
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            needle = b[4 * (L - n):]
            i = b.rfind(needle, 0, end)
            while i > 0 and i % 4:  # a match across token boundaries: look further left
                i = b.rfind(needle, 0, i + len(needle) - 1)
            if i >= 0:
                start = i // 4 + n
                return self._cut_at_eos([int(t) for t in tokens[start:start + k]], self.eos_token_id)
        return []

    def propose(self, contexts, k):
        return [self.lookup(c, k) for c in contexts]

    def propose_device(self, tokens: torch.Tensor, n: torch.Tensor, k: int):
        """:meth:`lookup` for every row at once, in tensor operations (so it can run inside a CUDA graph):
        ``tokens [B, S]`` holds each row's context in its first ``n[b]`` slots (the rest is scratch).
        Returns ``draft [B, k]`` and ``dlen [B]``: row ``b`` proposes ``draft[b, :dlen[b]]``, the same
        tokens as ``lookup(tokens[b, :n[b]], k)``. An n-gram occurrence ending at slot ``e`` is the run of
        slots ``e, e-1, ..`` equal to the context's last tokens; the longest run (at most ``max_ngram``,
        shorter than the context) wins, the latest ``e`` among equals."""
        B, S = tokens.shape
        M, dev = self.max_ngram, tokens.device
        padded = torch.nn.functional.pad(tokens, (M - 1, 0), value=-1)   # slot e - j of window e, j < M
        windows = padded.unfold(1, M, 1)                                   # [B, S, M]: slots e-M+1 .. e
        suffix = padded.gather(1, (n - 1)[:, None] + torch.arange(M, device=dev))   # slots n-M .. n-1
        run = (windows == suffix[:, None, :]).flip(-1).cumprod(-1).sum(-1)          # [B, S]
        e = torch.arange(S, device=dev)
        run = torch.minimum(run, (n - 1)[:, None]) * (e[None] <= (n - 2)[:, None])  # ends before the last token
        run = torch.where(run >= self.min_ngram, run, 0)
        best = (run * S + e[None]).amax(1)
        start = best % S + 1
        found = best >= self.min_ngram * S
        draft = tokens.gather(1, (start[:, None] + torch.arange(k, device=dev)).clamp(max=S - 1))
        dlen = torch.where(found, (n - start).clamp(0, k), 0)
        if self.eos_token_id:   # up to and including the first EOS (compared to each id: no host copy in a graph)
            j = torch.arange(k, device=dev)
            is_eos = functools.reduce(torch.logical_or, [draft == e for e in self.eos_token_id])
            first = torch.where(is_eos & (j < dlen[:, None]), j, k).amin(1)
            dlen = torch.minimum(dlen, first + 1)
        return draft, dlen


class _NoDraft(Drafter):
    name = "none"

    def propose(self, contexts, k):
        return [[] for _ in contexts]


def _plain_decoder(model, max_len: int, max_batch_size: int, k_max: int, **engine_kw):
    """A :class:`t4lib.speculative.SpeculativeEngine` of ``model`` that never drafts: a ragged batch's prefill
    (one CUDA graph per prompt bucket) and then chunks of up to ``k_max`` plain greedy steps per host round trip
    (one graph replayed), with no verify graphs."""
    class PlainDecoder(SpeculativeEngine):
        def _graph_steps(self, st):
            return [self._plain_graph_step(st)]

    return PlainDecoder(model, _NoDraft(), max_len=max_len, max_batch_size=max_batch_size, ks=(k_max,),
                        adaptive=False, plain_chunk=k_max, **engine_kw)


class DraftModelDrafter(Drafter):
    """A smaller causal LM with the target's tokenizer. Greedy proposals decode every context of the batch at
    once (:func:`_plain_decoder`: the prompt-bucket prefill graph, then ``k - 1`` plain steps in one chunk: two
    host round trips per proposal, on a GPU all graph replays); the draft cache is not kept between proposals,
    so each re-reads its context, as one prefill graph replay. When the engine samples, a
    :class:`t4lib.serving.StaticEngine` draws the drafts with the engine's temperature, top-k and top-p, returning the
    draft distribution ``q`` of each token (from the logits it sampled from), seeded from the caller's generator
    (``StaticEngine`` seeds torch's global generator). ``max_batch_size``: the most contexts per proposal (the
    decoder allocates a cache per batch size actually used); ``k_max``: the longest draft."""

    name = "draft_model"

    def __init__(self, model: nn.Module, max_len: int = 1024, eos_token_id: int | list[int] | None = None,
                 max_batch_size: int = 64, k_max: int = 8, **engine_kw):
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"draft model must be a Hugging Face causal LM, got {type(model).__name__}")
        if not isinstance(k_max, int) or isinstance(k_max, bool) or k_max < 1:
            raise ValueError(f"k_max must be an int >= 1, got {k_max!r}")
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.max_len, self.k_max = max_len, k_max
        self.engine = StaticEngine(model, max_len=max_len, **engine_kw)   # sampled drafts
        self.decoder = _plain_decoder(model, max_len, max_batch_size, k_max, **engine_kw)   # greedy drafts
        self.eos_token_id = eos_ids(eos_token_id, vocab_size(model))

    def propose(self, contexts, k):
        k = min(k, self.k_max)
        n = min(k, self.max_len - max(len(c) for c in contexts)) if contexts else 0
        if n < 1:   # the longest context leaves no room: draft nothing
            return [[] for _ in contexts]
        r = self.decoder.generate_with_stats([list(c) for c in contexts], n, eos_token_id=list(self.eos_token_id) or None)
        return [list(map(int, d)) for d in r.new_tokens]   # cut after EOS by the decoder

    def propose_sampled(self, contexts, k, sampler, generator):
        out, qs = [], []
        for c in contexts:
            budget = min(k, self.engine.max_len - len(c))
            if budget < 1:
                out.append([])
                qs.append(None)
                continue
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
            r = self.engine.generate_with_stats(torch.tensor([c], dtype=torch.long), budget, do_sample=True,
                                                temperature=sampler.temperature, top_k=sampler.top_k,
                                                top_p=sampler.top_p, seed=seed, output_logits=True)
            d = self._cut_at_eos(r.new_tokens[0].tolist(), self.eos_token_id)
            out.append(d)
            qs.append(sampler.probs(r.logits[0, :len(d)]))
        return out, qs
