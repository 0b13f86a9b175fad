"""Token ids from a caller, checked before they reach a model: every engine and every calibration pass
takes them through here.

An id outside ``[0, vocab)`` indexes past the embedding table (on a GPU a device-side assert that poisons
the CUDA context); a float or bool "id" would be truncated silently. End-of-sequence ids come as an int or,
as Hugging Face configs hold them, a list of ints.
"""
from __future__ import annotations

import numbers

import torch
from torch import nn


def vocab_size(model: nn.Module) -> int:
    """Rows of ``model``'s input embedding (what an id indexes), else its config's ``vocab_size``."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    if isinstance(emb, nn.Embedding):
        return emb.num_embeddings
    return int(model.config.vocab_size)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_ids_tensor(ids, vocab: int, name: str = "input_ids") -> torch.Tensor:
    """``ids``, an int32/int64 tensor whose values all lie in ``[0, vocab)``; raises naming ``name``."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be an integer (int32/int64) tensor of token ids, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.numel() == 0:
        raise ValueError(f"{name} holds no token ids (shape {list(ids.shape)})")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name}: token ids must lie in [0, {vocab}) (the model's vocabulary), "
                         f"got values from {lo} to {hi}")
    return ids


def token_rows(input_ids, vocab: int, name: str = "input_ids") -> list[list[int]]:
    """Prompts as lists of ints: a ``[B, T]`` or ``[T]`` integer tensor, a list of token lists (ragged
    allowed) or one flat token list. Every row non-empty, every id an int in ``[0, vocab)``."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"{name} must be [B, T] with T >= 1, got shape {list(input_ids.shape)}")
        rows = check_ids_tensor(input_ids, vocab, name).tolist()
    elif isinstance(input_ids, (list, tuple)) and input_ids:
        rows = input_ids if all(isinstance(r, (list, tuple)) for r in input_ids) else [input_ids]
        for b, r in enumerate(rows):
            bad = [t for t in r if not _is_int(t)]
            if bad:
                raise TypeError(f"{name}[{b}]: token ids must be ints, got {bad[:3]!r}")
            if not r:
                raise ValueError(f"{name}[{b}] is empty: every prompt needs at least one token")
            out = [t for t in r if not 0 <= t < vocab]
            if out:
                raise ValueError(f"{name}[{b}]: token ids must lie in [0, {vocab}) (the model's vocabulary), "
                                 f"got {out[:3]}")
        rows = [[int(t) for t in r] for r in rows]
    else:
        raise TypeError(f"{name} must be a [B, T] integer tensor or a non-empty list of token lists, got "
                        f"{type(input_ids).__name__}")
    return rows


def eos_ids(eos_token_id, vocab: int | None, name: str = "eos_token_id") -> tuple[int, ...]:
    """``eos_token_id`` (None, an int, or a non-empty list/tuple of ints, as Hugging Face configs hold it) as
    a tuple of distinct ids in ``[0, vocab)`` (``vocab`` None: any id >= 0); empty for None."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.tolist()
    ids = [eos_token_id] if not isinstance(eos_token_id, (list, tuple)) else list(eos_token_id)
    if not ids or not all(_is_int(t) for t in ids):
        raise TypeError(f"{name} must be an int or a non-empty list of ints, got {eos_token_id!r}")
    bad = [t for t in ids if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        raise ValueError(f"{name}: ids must lie in [0, {vocab if vocab is not None else 'vocab'}) "
                         f"(the model's vocabulary), got {bad}")
    return tuple(int(t) for t in dict.fromkeys(ids))
