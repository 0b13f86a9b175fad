"""The qwen35 file's NextN block as a drafter: multi-token prediction (MTP) for the decode engine.

Qwen3.5 ships one extra full-attention block trained to predict the token after next. From the main
model's final hidden state ``hidden[t]`` (after ``output_norm``, as the output head reads it) and the
token ``t + 1``::

    x      = eh_proj([RMSNorm(embed(token[t+1])) * enorm | RMSNorm(hidden[t]) * hnorm])    # [2H] -> [H]
    x      = Block(x) at position t        (attention with its own KV cache, SwiGLU FFN)
    out    = RMSNorm(x) * shared_head_norm;  logits = head(out)                               # the model's head

``argmax(logits)`` is a draft of token ``t + 2``; feeding ``out`` back as the hidden state drafts the
next one. The transformers-layer version of the same block is :class:`.mtp_reference.Qwen35MTP` (the
oracle). :meth:`Qwen35Engine.generate(..., mtp=gamma) <t4lib.models.qwen35.engine.Qwen35Engine.generate>`
verifies the drafts; :class:`MTPDrafter` is the engine's drafter behind
:class:`t4lib.speculative.drafters.Drafter`'s interface.
"""
from __future__ import annotations

import torch

from ...speculative.drafters import Drafter
from .model import EAGER, Block, Linear, Qwen35Config, StepFunctions

__all__ = ["MTPHead", "MTPDrafter"]


class MTPHead:
    """The NextN block's weights and its KV cache (see the module docstring)."""

    def __init__(self, cfg: Qwen35Config, eh_proj: Linear, enorm, hnorm, block: Block, shared_head_norm):
        self.cfg, self.eh_proj, self.enorm, self.hnorm = cfg, eh_proj, enorm, hnorm
        self.block, self.shared_head_norm = block, shared_head_norm

    def linears(self):
        return [self.eh_proj] + self.block.linears()

    @property
    def nbytes(self) -> int:
        """Bytes of the block's own weights (the embedding row and the head it shares are not counted)."""
        small = [self.enorm, self.hnorm, self.shared_head_norm, self.block.attn_norm, self.block.post_norm,
                 self.block.mixer.q_norm, self.block.mixer.k_norm]
        return sum(lin.nbytes for lin in self.linears()) + sum(t.numel() * t.element_size() for t in small)

    def allocate(self, max_len: int, dtype: torch.dtype, device) -> None:
        self.block.mixer.allocate(1, max_len, dtype, device)

    def reset(self) -> None:
        self.block.mixer.reset()

    def __call__(self, tokens: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor, embed, head: Linear,
                 dtype: torch.dtype, fns: StepFunctions | None = None):
        """tokens [R] long (token t + 1 of each row), hidden [R, H] (the main model's normed hidden state at t,
        compute dtype), pos [R] long (t) -> (logits [R, vocab] fp32, out [R, H] in ``dtype``: the next
        draft step's hidden state)."""
        fns = fns or EAGER
        eps = self.cfg.eps
        x = torch.cat([fns.norm(embed(tokens), self.enorm, eps, dtype), fns.norm(hidden, self.hnorm, eps, dtype)],
                      dim=-1)
        h = self.block(self.eh_proj(x).float(), pos, dtype, fns)   # the residual stream is fp32, as in the model
        out = fns.norm(h, self.shared_head_norm, eps, dtype)
        return head(out).float(), out


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
