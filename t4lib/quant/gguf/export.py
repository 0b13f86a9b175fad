"""GGUF export of a Qwen2-architecture causal LM (a trained or LoRA-merged ``Qwen2ForCausalLM``), written with
gguf-py in llama.cpp's ``qwen2`` layout, and the way back: :func:`load_qwen2` rebuilds the model from such a
file through the project's own reader (:class:`t4lib.quant.gguf.GGUFFile`).

Tensor types (``ftype``):

* ``"Q8_0"``: every 2-D weight whose row length is a multiple of 32 in blocks of 32 int8 values with one
  fp16 scale (8.5 bits a weight); other 2-D weights F16;
* ``"F16"``: every 2-D weight in fp16;
* ``"F32"``: every tensor in fp32.

Norm weights and biases (1-D) are F32 in every case, as llama.cpp's converter writes them. The tokenizer
(a byte-level BPE: tokens, token types, merges), its special ids and chat template travel in the file
(``tokenizer.ggml.*``) so llama.cpp and other GGUF runtimes can use it alone.

Shapes here are numpy order (``[out, in]``, as torch's ``Linear.weight``); GGUF's ``ne`` lists them reversed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from t4lib.quant.gguf import GGUFError, GGUFFile, _gguf
from t4lib.quant.linear import QuantLinear

__all__ = ["export_qwen2", "load_qwen2", "FTYPES"]

FTYPES = ("Q8_0", "F16", "F32")

# Hugging Face Qwen2 parameter name (per layer) -> llama.cpp GGUF tensor name
_LAYER = {"input_layernorm.weight": "attn_norm.weight",
          "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
          "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
          "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
          "self_attn.o_proj.weight": "attn_output.weight",
          "post_attention_layernorm.weight": "ffn_norm.weight",
          "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
          "mlp.down_proj.weight": "ffn_down.weight"}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}
# llama.cpp's file types (general.file_type)
_FILE_TYPE = {"F32": 0, "F16": 1, "Q8_0": 7}


def _gguf_name(hf: str) -> str | None:
    if hf in _TOP:
        return _TOP[hf]
    parts = hf.split(".")
    if parts[:2] == ["model", "layers"] and len(parts) > 3:
        tail = ".".join(parts[3:])
        if tail in _LAYER:
            return f"blk.{int(parts[2])}.{_LAYER[tail]}"
    return None


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The float tensors to export; refuses what a plain Qwen2 model does not have (quantized layers, adapters
    not merged, another architecture), naming it."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) != "qwen2":
        raise ValueError(f"model must be a Qwen2-architecture causal LM (config.model_type 'qwen2'), got "
                         f"{type(model).__name__} with model_type {getattr(cfg, 'model_type', None)!r}")
    quant = {name: mod for name, mod in model.named_modules() if isinstance(mod, QuantLinear)}
    for name, mod in model.named_modules():
        if name in quant:
            continue
        if name and not isinstance(mod, (nn.Linear, nn.Embedding)) and len(list(mod.children())) == 0 \
                and any(True for _ in mod.parameters(recurse=False)) and "norm" not in type(mod).__name__.lower():
            raise ValueError(f"model: layer {name!r} is a {type(mod).__name__}, not a plain Linear: merge adapters "
                             "(peft: merge_and_unload()) and dequantize before exporting")
    state = {k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[0] not in quant}
    for name, mod in quant.items():  # a W4A16 layer exports its dequantized weight (exactly what it computes with)
        state[f"{name}.weight"] = mod.dequantize()
        if getattr(mod, "bias", None) is not None:
            state[f"{name}.bias"] = mod.bias
    if getattr(cfg, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    unknown = sorted(k for k in state if _gguf_name(k) is None and not k.endswith("rotary_emb.inv_freq"))
    if unknown:
        raise ValueError(f"model has tensors outside the qwen2 GGUF layout: {unknown[:10]}"
                         + (" ..." if len(unknown) > 10 else ""))
    return {k: v for k, v in state.items() if _gguf_name(k) is not None}


def _add_tokenizer(w, tokenizer, vocab_size: int, cfg) -> None:
    """``tokenizer.ggml.*`` for a byte-level BPE tokenizer, padded to ``vocab_size`` ids with unused entries
    (as llama.cpp's converter pads Qwen2.5's 151,665 tokens to its 151,936 embeddings)."""
    gguf = _gguf()
    doc = json.loads(tokenizer.backend_tokenizer.to_str()) if hasattr(tokenizer, "backend_tokenizer") else None
    if not doc or doc.get("model", {}).get("type") != "BPE":
        raise ValueError("tokenizer must be a fast byte-level BPE tokenizer (tokenizers' BPE model)")
    vocab = tokenizer.get_vocab()
    if len(vocab) > vocab_size:
        raise ValueError(f"tokenizer has {len(vocab)} tokens, the model embeds only {vocab_size}")
    by_id = {i: t for t, i in vocab.items()}
    added = {t.content: t.special for t in tokenizer.added_tokens_decoder.values()}
    tokens, types = [], []
    for i in range(vocab_size):
        t = by_id.get(i)
        if t is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif t in added:
            tokens.append(t)
            types.append(gguf.TokenType.CONTROL if added[t] else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(t)
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"].get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    bos = getattr(cfg, "bos_token_id", None)
    if bos is None:
        bos = tokenizer.bos_token_id
    if bos is not None:
        w.add_bos_token_id(int(bos))
    if tokenizer.eos_token_id is not None:
        w.add_eos_token_id(int(tokenizer.eos_token_id))
    if tokenizer.pad_token_id is not None:
        w.add_pad_token_id(int(tokenizer.pad_token_id))
    w.add_add_bos_token(False)
    if getattr(tokenizer, "chat_template", None):
        w.add_chat_template(tokenizer.chat_template)


@torch.no_grad()
def export_qwen2(model: nn.Module, path: str | os.PathLike, tokenizer=None, *, ftype: str = "Q8_0",
                 name: str | None = None) -> Path:
    """Write ``model`` (a ``Qwen2ForCausalLM`` with plain Linear layers: trained, or LoRA-merged with
    ``merge_and_unload()``; W4A16 :class:`QuantLinear` layers export their dequantized weights) to the GGUF file ``path`` in llama.cpp's ``qwen2`` layout; returns the path.

    ``ftype``: ``"Q8_0"`` (2-D weights whose rows are a multiple of 32 long, the rest F16), ``"F16"`` or
    ``"F32"``; 1-D tensors (norms, biases) are F32. ``tokenizer``: a fast byte-level BPE tokenizer to embed
    (tokens, merges, special ids, chat template); None writes weights only. A file is written to a temporary
    name and renamed: a failed export never leaves a partial ``path``."""
    gguf = _gguf()
    if ftype not in FTYPES:
        raise ValueError(f"ftype must be one of {FTYPES}, got {ftype!r}")
    state = _state(model)
    cfg = model.config
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), "qwen2")
    try:
        w.add_name(name or getattr(cfg, "_name_or_path", "") or "qwen2")
        w.add_file_type(_FILE_TYPE[ftype])
        w.add_block_count(cfg.num_hidden_layers)
        w.add_context_length(int(cfg.max_position_embeddings))
        w.add_embedding_length(cfg.hidden_size)
        w.add_feed_forward_length(cfg.intermediate_size)
        w.add_head_count(cfg.num_attention_heads)
        w.add_head_count_kv(cfg.num_key_value_heads)
        rope = getattr(cfg, "rope_theta", None)
        if rope is None:
            rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        w.add_rope_freq_base(float(rope))
        w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
        w.add_vocab_size(cfg.vocab_size)
        if tokenizer is not None:
            _add_tokenizer(w, tokenizer, cfg.vocab_size, cfg)
        for hf, t in state.items():
            a = t.detach().float().cpu().numpy()
            gname = _gguf_name(hf)
            if a.ndim == 1 or ftype == "F32":
                w.add_tensor(gname, a.astype(np.float32))
            elif ftype == "Q8_0" and a.shape[-1] % 32 == 0:
                q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
                w.add_tensor(gname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                w.add_tensor(gname, a.astype(np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_qwen2(path: str | os.PathLike, *, dtype=torch.float32, device="cpu"):
    """A ``Qwen2ForCausalLM`` rebuilt from a ``qwen2`` GGUF file: configuration from its metadata, weights
    dequantized by the project's reader (:meth:`GGUFFile.dequantize`, Q8_0 through :mod:`t4lib.ops.gguf`).
    GGUFError naming what is missing when the file is not a qwen2 model."""
    from transformers import Qwen2Config, Qwen2ForCausalLM  # optional (train extra)

    f = GGUFFile(path)
    if f.architecture != "qwen2":
        raise GGUFError(f"{f.path}: architecture {f.architecture!r}, load_qwen2 reads 'qwen2'")
    need = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
            "attention.head_count_kv", "context_length")
    missing = [k for k in need if f.key(k) is None]
    if missing:
        raise GGUFError(f"{f.path}: metadata qwen2.{missing[0]} missing")
    vocab = f.info("token_embd.weight").shape[0]
    tied = "output.weight" not in f.tensors
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=int(f.key("embedding_length")),
                      intermediate_size=int(f.key("feed_forward_length")), num_hidden_layers=int(f.key("block_count")),
                      num_attention_heads=int(f.key("attention.head_count")),
                      num_key_value_heads=int(f.key("attention.head_count_kv")),
                      max_position_embeddings=int(f.key("context_length")),
                      rope_theta=float(f.key("rope.freq_base", 10000.0)),
                      rms_norm_eps=float(f.key("attention.layer_norm_rms_epsilon", 1e-6)),
                      tie_word_embeddings=tied,
                      bos_token_id=f.metadata.get("tokenizer.ggml.bos_token_id"),
                      eos_token_id=f.metadata.get("tokenizer.ggml.eos_token_id"),
                      pad_token_id=f.metadata.get("tokenizer.ggml.padding_token_id"))
    model = Qwen2ForCausalLM(cfg)
    state = {}
    for hf in model.state_dict():
        g = _gguf_name(hf)
        if g is None or (tied and hf == "lm_head.weight"):
            continue
        if g not in f.tensors:
            raise GGUFError(f"{f.path}: tensor {g!r} (the model's {hf}) missing")
        state[hf] = f.dequantize(g)
    missing = [k for k in model.state_dict() if k not in state and _gguf_name(k) is not None
               and not (tied and k == "lm_head.weight")]
    if missing:
        raise GGUFError(f"{f.path}: no tensor for {missing[:5]}")
    model.load_state_dict(state, strict=False)
    return model.to(device=device, dtype=dtype).eval()
