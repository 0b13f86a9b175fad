"""Qwen3.5's multi-token-prediction (MTP / NextN) block in transformers' own layers: the oracle of the
engine's :class:`~.mtp.MTPHead` and the module the small copy model trains.

Qwen3.5 checkpoints carry one MTP block under ``mtp.*`` that transformers' ``Qwen3_5ForCausalLM`` loads
no part of. Given the main model's final hidden state at position ``t`` (after its last norm) and the
embedding of token ``t + 1``, it predicts token ``t + 2``::

    x   = fc([pre_fc_norm_embedding(embed(token[t+1])) | pre_fc_norm_hidden(hidden[t])])   # 2H -> H
    x   = full-attention decoder layer (attention + SwiGLU FFN, its own KV cache), at position t
    out = norm(x);  logits = lm_head(out)                                                    # the shared head

Drafting more than one token feeds ``out`` back as the next hidden state. Parameter names are the
checkpoint's (``mtp.fc.weight``, ``mtp.pre_fc_norm_embedding.weight``, ``mtp.pre_fc_norm_hidden.weight``,
``mtp.layers.0.*``, ``mtp.norm.weight``), so :func:`t4lib.models.qwen35.convert.hf_to_gguf` writes them as
the file's NextN block.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["Qwen35MTP", "mtp_layer_config", "causal_mask"]


def mtp_layer_config(cfg):
    """A copy of the text config whose one layer is full attention (the MTP block's decoder layer)."""
    c = copy.deepcopy(cfg)
    c.num_hidden_layers = 1
    c.layer_types = ["full_attention"]
    return c


def causal_mask(T: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Additive causal mask [1, 1, T, T] for transformers' eager attention."""
    m = torch.full((T, T), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    return m[None, None]


class Qwen35MTP(nn.Module):
    """The MTP block (see the module docstring). ``forward(next_tokens [B, T], hidden [B, T, H], embed,
    rotary, positions [B, T] or [3, B, T]) -> out [B, T, H]``: ``hidden`` is the main model's final (normed)
    hidden state at ``positions``, ``next_tokens`` the token after each; ``lm_head(out)`` gives the logits of the
    token after that. ``embed`` and ``rotary`` are the main model's ``embed_tokens`` and ``rotary_emb``."""

    def __init__(self, cfg):
        super().__init__()
        # optional: the reference is transformers' own layer
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(H, eps=eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(H, eps=eps)
        self.layers = nn.ModuleList([Qwen3_5DecoderLayer(mtp_layer_config(cfg), layer_idx=0)])
        self.norm = Qwen3_5RMSNorm(H, eps=eps)

    def forward(self, next_tokens: torch.Tensor, hidden: torch.Tensor, embed: nn.Module, rotary: nn.Module,
                positions: torch.Tensor) -> torch.Tensor:
        e = self.pre_fc_norm_embedding(embed(next_tokens))
        x = self.fc(torch.cat([e, self.pre_fc_norm_hidden(hidden)], dim=-1))
        if positions.dim() == 2:   # text positions in all three rotary sections (the form older versions need)
            positions = positions[None].expand(3, -1, -1)
        pe = rotary(x, positions)
        x = self.layers[0](x, position_embeddings=pe, attention_mask=causal_mask(x.shape[1], x.dtype, x.device))
        return self.norm(x)

    def state_dict_with_prefix(self) -> dict:
        """Parameters under the checkpoint's ``mtp.`` prefix."""
        return {f"mtp.{k}": v for k, v in self.state_dict().items()}
