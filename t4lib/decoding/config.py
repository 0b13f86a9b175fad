"""What a ``generate`` call asks for, read as ``model.generate`` reads it: a ``transformers.GenerationConfig``
(default: the model's own ``generation_config``, so its EOS list, ``do_sample``, ``temperature``, ``top_k``,
``top_p`` and ``repetition_penalty`` apply), updated by keyword overrides (``max_new_tokens=...``,
``do_sample=...``), the keywords it does not know handed back to the engine.

Settings no engine here implements (beam search, several sequences per prompt, a minimum length, n-gram
and word bans, forced tokens, other logits processors) raise a ``ValueError`` naming them instead of being
ignored.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from t4lib.decoding.tokens import eos_ids

# GenerationConfig fields whose non-default values ask for something the engines do not do
UNSUPPORTED = ("num_beams", "num_beam_groups", "num_return_sequences", "min_new_tokens", "min_length",
               "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "suppress_tokens",
               "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id", "typical_p",
               "epsilon_cutoff", "eta_cutoff", "min_p", "guidance_scale", "stop_strings", "sequence_bias",
               "encoder_repetition_penalty", "penalty_alpha", "exponential_decay_length_penalty",
               "constraints", "force_words_ids", "renormalize_logits", "watermarking_config",
               "assistant_model", "prompt_lookup_num_tokens", "max_time")


@dataclass(frozen=True)
class Generation:
    """One call's settings, resolved (``eos``: the ids a row stops at; ``pad_token_id``: what fills a row after its
    EOS, the config's pad id, else its first EOS id, as ``model.generate`` does)."""
    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    eos: tuple[int, ...]
    pad_token_id: int
    return_dict_in_generate: bool
    output_logits: bool


def resolve(model, prompt_len: int, vocab: int, generation_config=None, **kwargs) -> tuple[Generation, dict]:
    """``(settings, the keywords GenerationConfig does not know)`` for a call on prompts of at most
    ``prompt_len`` tokens. Without ``max_new_tokens`` the config's ``max_length`` bounds prompt + new tokens, as in
    ``model.generate``."""
    from transformers import GenerationConfig  # optional: transformers (the train extra)

    if generation_config is None:
        generation_config = getattr(model, "generation_config", None) or GenerationConfig()
    if not isinstance(generation_config, GenerationConfig):
        raise TypeError(f"generation_config must be a transformers.GenerationConfig, got "
                        f"{type(generation_config).__name__}")
    gc = copy.deepcopy(generation_config)
    rest = gc.update(**kwargs)
    default = GenerationConfig()
    asked = [f"{n}={getattr(gc, n)!r}" for n in UNSUPPORTED
             if hasattr(gc, n) and getattr(gc, n) != getattr(default, n, None)]
    if asked:
        raise ValueError(f"generation_config asks for what this engine does not implement: {', '.join(asked)} "
                         "(greedy or sampled decoding with temperature, top_k, top_p and repetition_penalty, "
                         "EOS stops)")
    max_new = gc.max_new_tokens if gc.max_new_tokens is not None else (gc.max_length or 20) - prompt_len
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new!r}"
                         + ("" if gc.max_new_tokens is not None else
                            f" (max_length={gc.max_length} minus the prompt's {prompt_len} tokens)"))
    eos = eos_ids(gc.eos_token_id, vocab, "generation_config.eos_token_id")
    pad = gc.pad_token_id
    if isinstance(pad, (list, tuple)):
        pad = pad[0] if pad else None
    if pad is None:
        pad = eos[0] if eos else 0
    penalty = 1.0 if gc.repetition_penalty is None else float(gc.repetition_penalty)
    if not penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1.0: none), got {gc.repetition_penalty!r}")
    do_sample = bool(gc.do_sample)
    return Generation(
        max_new_tokens=max_new, do_sample=do_sample,
        temperature=float(gc.temperature if gc.temperature is not None else 1.0) if do_sample else 1.0,
        top_k=int(gc.top_k or 0) if do_sample else 0,
        top_p=float(gc.top_p if gc.top_p is not None else 1.0) if do_sample else 1.0,
        repetition_penalty=penalty, eos=eos, pad_token_id=int(pad),
        return_dict_in_generate=bool(gc.return_dict_in_generate), output_logits=bool(gc.output_logits),
    ), rest


def pad_after_eos(new, eos: tuple[int, ...], pad_token_id: int):
    """``(new [B, n] with every token after a row's first EOS set to ``pad_token_id``, cut to the longest row,
    lengths)``: the tokens ``model.generate`` returns after the prompt when each row stops at EOS."""
    n = new.shape[1]
    if not eos or n == 0:
        return new, [n] * new.shape[0]
    hit = torch.isin(new, torch.tensor(eos, device=new.device))
    first = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(hit[:, 0], n, dtype=torch.long))
    lengths = [min(int(f) + 1, n) for f in first]
    after = torch.arange(n, device=new.device)[None] > first[:, None]
    return new.masked_fill(after, pad_token_id)[:, :max(lengths)], lengths
