"""The qwen35 file's NextN block as a drafter: multi-token prediction (MTP) for the decode engine.

Qwen3.5 ships one extra full-attention block trained to predict the token after next. From the main
model's final hidden state ``hidden[t]`` (after ``output_norm``, as the output head reads it) and the
token ``t + 1``::

    x      = eh_proj([RMSNorm(embed(token[t+1])) * enorm | RMSNorm(hidden[t]) * hnorm])    # [2H] -> [H]
    x      = Block(x) at position t        (attention with its own KV cache, SwiGLU FFN)
    out    = RMSNorm(x) * shared_head_norm;  logits = head(out)                               # the model's head

``argmax(logits)`` is a draft of token ``t + 2``; feeding ``out`` back as the hidden state drafts the
next one. The transformers-layer version of the same block is :class:`.mtp_reference.Qwen35MTP` (the
oracle); the block itself is :class:`t4lib.models.qwen35.model.MTPHead`. :meth:`Qwen35Engine.generate(..., mtp=gamma) <t4lib.models.qwen35.engine.Qwen35Engine.generate>`
verifies the drafts; :class:`MTPDrafter` is the engine's drafter behind
:class:`t4lib.speculative.drafters.Drafter`'s interface.
"""
from __future__ import annotations

from t4lib.decoding.drafter import Drafter

__all__ = ["MTPDrafter"]


class MTPDrafter(Drafter):
    """The NextN block of a :class:`~t4lib.models.qwen35.engine.Qwen35Engine` as a :class:`Drafter`.

    An MTP draft depends on the target's hidden state, not only on the tokens: the engine runs the block
    over every position it verifies (so its KV cache stays complete) and leaves the first draft, with the
    block's output state, in device buffers. ``propose(contexts, k)`` then returns that draft followed by
    ``k - 1`` more, each from one more step of the block on its own previous output; it serves only the engine
    that owns it, batch 1. Greedy (argmax) drafts."""

    name = "mtp"

    def __init__(self, engine):
        if engine.model.mtp is None:
            raise ValueError("the model has no NextN/MTP block (the GGUF's nextn_predict_layers is 0, or it was "
                             "loaded with mtp=False)")
        self.engine = engine

    def propose(self, contexts: list[list[int]], k: int) -> list[list[int]]:
        if len(contexts) != 1:
            raise ValueError(f"MTP drafts serve batch 1, got {len(contexts)} contexts")
        return [self.engine._mtp_drafts(k)]
