"""A static KV cache with one write position per sequence (rollback = moving a position).

Hugging Face's ``StaticCache`` writes every row of a batch at the same slots. Speculative
decoding at batch > 1 advances each sequence by its own accepted count, so this cache
keeps ``pos [B]`` (the next free slot of each row) on the device: a forward of ``q``
tokens writes row ``b`` at slots ``pos[b] .. pos[b] + q - 1`` and attends to slots
``<= pos[b] + i`` (the 4D mask of :func:`causal_row_mask`). Rejected draft tokens stay in
the cache past ``pos[b]`` and are masked until overwritten: nothing is copied or cropped
(the gpt-fast design). Slots: ``max_len + k_max + 1`` so a verify of ``k_max + 1`` tokens
at the last position still fits.

Duck-types the part of ``transformers.Cache`` a Qwen2/Llama attention layer calls
(``update``), so it works across transformers versions whose cache classes differ.
"""
from __future__ import annotations

import torch


class RowStaticCache:
    """``keys/values[layer]`` of shape ``[B, H_kv, slots, D]``; ``pos [B]`` long (device)."""

    is_compileable = True

    def __init__(self, config, batch_size: int, slots: int, device, dtype):
        n_kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (batch_size, n_kv, slots, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.pos = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.slots = slots
        for t in self.keys + self.values + [self.pos]:
            if device.type == "cuda":  # fixed addresses: lets torch.compile treat them as static buffers
                torch._dynamo.mark_static_address(t)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """Write ``[B, H, q, D]`` at ``pos[b] + arange(q)`` of each row; return the whole layer."""
        # index_copy_ rather than scatter_ with a per-element index: on an H200 the compiled batch-1 forward of
        # tiny-gpu took 0.324 ms against 0.357 ms with scatter_ (results/nvidia-h200/labs/spec_step_lab.json).
        # Several rows write through a flat view, one index per (row, head, token).
        B, H, q, D = key_states.shape
        k, v = self.keys[layer_idx], self.values[layer_idx]
        steps = torch.arange(q, device=self.pos.device)
        if B == 1:
            idx = self.pos[:1] + steps
            k.index_copy_(2, idx, key_states.to(k.dtype))
            v.index_copy_(2, idx, value_states.to(v.dtype))
            return k, v
        rows = torch.arange(B * H, device=self.pos.device).view(B, H, 1) * self.slots
        idx = (rows + (self.pos.view(B, 1, 1) + steps.view(1, 1, q))).view(-1)
        k.view(-1, D).index_copy_(0, idx, key_states.reshape(-1, D).to(k.dtype))
        v.view(-1, D).index_copy_(0, idx, value_states.reshape(-1, D).to(v.dtype))
        return k, v

    # what masking/generation utilities may ask of a cache
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        return self.slots

    def __len__(self):
        return len(self.keys)


def causal_row_mask(pos: torch.Tensor, q: int, slots: int, dtype) -> torch.Tensor:
    """Additive mask ``[B, 1, q, slots]``: 0 where slot ``j <= pos[b] + i``, the dtype's minimum elsewhere."""
    j = torch.arange(slots, device=pos.device)
    i = torch.arange(q, device=pos.device)
    keep = j[None, None, None, :] <= (pos[:, None, None, None] + i[None, None, :, None])
    zero = torch.zeros((), dtype=dtype, device=pos.device)
    return torch.where(keep, zero, torch.full((), torch.finfo(dtype).min, dtype=dtype, device=pos.device))
