"""Hugging Face Qwen3.5 (``Qwen3_5ForCausalLM``) <-> qwen35 GGUF.

``hf_to_gguf`` writes a qwen35 GGUF from a state dict and its
``Qwen3_5TextConfig`` with gguf-py's writer, transforming tensors as llama.cpp's
converter does for this architecture:

- the 1 of the zero-centred RMSNorms is added (every ``*norm.weight`` but the
  Gated DeltaNet's ``linear_attn.norm``);
- ``A_log`` becomes ``ssm_a = -exp(A_log)``; ``dt_bias`` becomes ``ssm_dt.bias``;
  the conv weight [C, 1, 4] is squeezed to [C, 4];
- value heads of the Gated DeltaNet go from grouped by key head (HF) to tiled
  (GGUF: head ``j * HK + k`` is HF head ``k * (H / HK) + j``), in the V rows of
  ``in_proj_qkv`` and the conv, the rows of ``in_proj_z``/``in_proj_a``/
  ``in_proj_b``, ``A_log``, ``dt_bias`` and the columns of ``out_proj``;
- the MTP block (``mtp.*``, when the state dict has one) becomes the NextN block
  after the main layers (``nextn_predict_layers`` = 1).

Matrices are stored as F32, F16 or any type gguf-py quantizes (Q8_0 among the
formats the engine runs); the other GGUF formats come in as ready blocks
(``blocks=``, e.g. from :func:`random_blocks_for`), whose dequantization the
oracle then loads back into transformers with :func:`gguf_to_hf_state_dict`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import torch

from t4lib.ops.gguf import FORMATS, TYPE_OF, gguf_dequant
from t4lib.ops.gguf import reference as gguf_ref
from t4lib.quant.gguf import GGUFFile

__all__ = ["hf_to_gguf", "hf_to_gguf_tensors", "gguf_to_hf_state_dict", "random_blocks_for", "kind_of",
           "reorder_v_heads"]

_LAYER = {  # HF suffix -> GGUF suffix
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight", "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.A_log": "ssm_a",
    "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}
_MTP = {  # HF (checkpoint) name of the MTP block -> GGUF suffix of its NextN block (the layer's own tensors: _LAYER)
    "mtp.fc.weight": "nextn.eh_proj.weight", "mtp.pre_fc_norm_embedding.weight": "nextn.enorm.weight",
    "mtp.pre_fc_norm_hidden.weight": "nextn.hnorm.weight", "mtp.norm.weight": "nextn.shared_head_norm.weight",
}
_ZERO_CENTRED = ("attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm", "output_norm", "nextn.enorm",
                 "nextn.hnorm", "nextn.shared_head_norm")


def kind_of(gguf_name: str) -> str:
    """'blk.3.attn_q.weight' -> 'attn_q'; 'token_embd.weight' -> 'token_embd'."""
    return re.sub(r"^blk\.\d+\.", "", gguf_name).removesuffix(".weight")


def _cfg(config, key):
    return config[key] if isinstance(config, dict) else getattr(config, key)


def reorder_v_heads(t: torch.Tensor, dim: int, k_heads: int, per_k: int, width: int, inverse: bool = False):
    """Value heads along ``dim`` (blocks of ``width``) from HF order (grouped by key head)
    to GGUF order (tiled), or back with ``inverse``."""
    shape = list(t.shape)
    dim = dim % len(shape)
    a, b = (per_k, k_heads) if inverse else (k_heads, per_k)
    t = t.reshape(*shape[:dim], a, b, width, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).contiguous().reshape(shape)


def _strip(name: str) -> str:
    return name.replace("model.language_model.", "model.")


def hf_to_gguf_tensors(state_dict: dict, config) -> dict[str, torch.Tensor]:
    """GGUF name -> fp32 tensor in GGUF order (numpy shape [rows, cols]). ``mtp.*`` tensors (the MTP block)
    become the NextN block ``blk.{num_hidden_layers}``: ``nextn.eh_proj``/``enorm``/``hnorm``/``shared_head_norm``
    and its full-attention layer's tensors under their usual names."""
    HK, H = _cfg(config, "linear_num_key_heads"), _cfg(config, "linear_num_value_heads")
    Dk, Dv = _cfg(config, "linear_key_head_dim"), _cfg(config, "linear_value_head_dim")
    r = H // HK
    nextn = _cfg(config, "num_hidden_layers")
    out = {}
    for name, t in state_dict.items():
        name = _strip(name)
        if name.startswith("model.visual."):
            continue
        t = t.detach().float().cpu()
        if name in _TOP:
            g = _TOP[name]
        elif name in _MTP:
            g = f"blk.{nextn}.{_MTP[name]}"
        elif name.startswith("mtp.layers."):
            m = re.match(r"mtp\.layers\.0\.(.+)$", name)
            if not m or m.group(1) not in _LAYER:
                raise ValueError(f"state_dict has an MTP tensor the qwen35 converter does not know: {name!r}")
            g = f"blk.{nextn}.{_LAYER[m.group(1)]}"
        elif name.startswith("mtp."):
            raise ValueError(f"state_dict has an MTP tensor the qwen35 converter does not know: {name!r}")
        else:
            m = re.match(r"model\.layers\.(\d+)\.(.+)$", name)
            if not m or m.group(2) not in _LAYER:
                raise ValueError(f"state_dict has a tensor the qwen35 converter does not know: {name!r}")
            g = f"blk.{m.group(1)}.{_LAYER[m.group(2)]}"
        k = kind_of(g)
        if k in ("attn_qkv", "ssm_conv1d"):
            if k == "ssm_conv1d":
                t = t.reshape(t.shape[0], -1)
            qk = 2 * HK * Dk
            t = torch.cat([t[:qk], reorder_v_heads(t[qk:], 0, HK, r, Dv)])
        elif k == "attn_gate":
            t = reorder_v_heads(t, 0, HK, r, Dv)
        elif k in ("ssm_alpha", "ssm_beta", "ssm_dt.bias"):
            t = reorder_v_heads(t, 0, HK, r, 1)
        elif k == "ssm_a":
            t = reorder_v_heads(-torch.exp(t), 0, HK, r, 1)
        elif k == "ssm_out":
            t = reorder_v_heads(t, 1, HK, r, Dv)
        if k in _ZERO_CENTRED:
            t = t + 1
        out[g] = t.contiguous()
    if _cfg(config, "tie_word_embeddings"):
        out.pop("output.weight", None)
    return out


def gguf_to_hf_state_dict(path_or_file, config, mtp: bool = False) -> dict[str, torch.Tensor]:
    """The file's tensors dequantized to fp32 and mapped back to HF names and order
    (the inverse of :func:`hf_to_gguf_tensors`): transformers then runs on exactly the
    values the engine reads. The NextN block comes back as ``mtp.*`` with ``mtp=True``
    (for :class:`~.mtp_reference.Qwen35MTP`), else it is left out (``Qwen3_5ForCausalLM``
    has no MTP parameters)."""
    f = path_or_file if isinstance(path_or_file, GGUFFile) else GGUFFile(path_or_file)
    HK, H = _cfg(config, "linear_num_key_heads"), _cfg(config, "linear_num_value_heads")
    Dk, Dv = _cfg(config, "linear_key_head_dim"), _cfg(config, "linear_value_head_dim")
    r = H // HK
    inv_layer = {v: k for k, v in _LAYER.items()}
    inv_top = {v: k for k, v in _TOP.items()}
    inv_mtp = {v: k for k, v in _MTP.items()}
    n_main = int(f.key("block_count")) - int(f.key("nextn_predict_layers", 0) or 0)
    sd = {}
    for g in f.tensors:
        m = re.match(r"blk\.(\d+)\.(.+)$", g)
        if m and int(m.group(1)) >= n_main and (not mtp or int(m.group(1)) > n_main):
            continue   # NextN / MTP blocks (the first one with mtp=True)
        t = f.dequantize(g).float()
        k = kind_of(g)
        if k in _ZERO_CENTRED:
            t = t - 1
        if k in ("attn_qkv", "ssm_conv1d"):
            qk = 2 * HK * Dk
            t = torch.cat([t[:qk], reorder_v_heads(t[qk:], 0, HK, r, Dv, inverse=True)])
            if k == "ssm_conv1d":
                t = t[:, None, :]
        elif k == "attn_gate":
            t = reorder_v_heads(t, 0, HK, r, Dv, inverse=True)
        elif k in ("ssm_alpha", "ssm_beta", "ssm_dt.bias"):
            t = reorder_v_heads(t, 0, HK, r, 1, inverse=True)
        elif k == "ssm_a":
            t = torch.log(-reorder_v_heads(t, 0, HK, r, 1, inverse=True))
        elif k == "ssm_out":
            t = reorder_v_heads(t, 1, HK, r, Dv, inverse=True)
        if m and int(m.group(1)) == n_main:
            name = inv_mtp.get(m.group(2)) or f"mtp.layers.0.{inv_layer[m.group(2)]}"
        else:
            name = inv_top.get(g) or f"model.layers.{m.group(1)}.{inv_layer[m.group(2)]}"
        sd[name] = t.contiguous()
    if "output.weight" not in f.tensors:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


def random_blocks_for(type_name: str, N: int, K: int, std: float, seed: int = 0) -> np.ndarray:
    """Random valid blocks of ``type_name`` for a [N, K] matrix whose dequantized values
    have standard deviation close to ``std``; uint8 [N, K / block * bytes per block]."""
    t = TYPE_OF[type_name]
    _, nv, nb = FORMATS[t]
    if K % nv:
        raise ValueError(f"K={K} is not a multiple of the {type_name} block of {nv} values")
    n = N * K // nv
    probe = gguf_ref.random_blocks(t, n, seed=seed, scale=0.01)
    s = float(gguf_dequant(probe.reshape(-1), t, (N, K)).std())
    b = gguf_ref.random_blocks(t, n, seed=seed, scale=0.01 * std / max(s, 1e-12))
    return b.numpy().reshape(N, K // nv * nb)


def hf_to_gguf(state_dict: dict, config, path: str | os.PathLike, types: dict | None = None,
               blocks: dict | None = None) -> Path:
    """Write a qwen35 GGUF. ``types``: GGUF kind ('attn_qkv', 'ffn_down', 'token_embd', ...)
    -> type name for matrices (default F32; vectors are always F32); ``blocks``: GGUF
    tensor name -> ready uint8 blocks (GGUF order) with their type name, as
    ``{name: (type_name, array)}``, written as they are."""
    import gguf  # optional (gguf extra): writing a GGUF file only

    types, blocks = dict(types or {}), dict(blocks or {})
    tensors = hf_to_gguf_tensors(state_dict, config)
    c = lambda k: _cfg(config, k)  # noqa: E731
    n_layers = c("num_hidden_layers")
    layer_types = c("layer_types")
    interval = next((i + 1 for i, lt in enumerate(layer_types) if lt == "full_attention"), n_layers + 1)
    expect = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if list(layer_types) != expect:
        raise ValueError(f"layer_types {list(layer_types)} are not a regular full_attention_interval pattern; "
                         "the qwen35 GGUF stores only the interval")
    rope = c("rope_parameters") or {}
    head_dim = c("head_dim")
    path = Path(path)
    n_nextn = int(any(n.startswith(f"blk.{n_layers}.") for n in tensors))   # the MTP block, when given
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_block_count(n_layers + n_nextn)
    if n_nextn:
        w.add_nextn_predict_layers(n_nextn)
    w.add_context_length(c("max_position_embeddings"))
    w.add_embedding_length(c("hidden_size"))
    w.add_feed_forward_length(c("intermediate_size"))
    w.add_head_count(c("num_attention_heads"))
    w.add_head_count_kv(c("num_key_value_heads"))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.25)))
    w.add_rope_freq_base(float(rope.get("rope_theta", 1e7)))
    w.add_rope_dimension_sections(list(rope.get("mrope_section", [11, 11, 10])) + [0])
    w.add_layer_norm_rms_eps(c("rms_norm_eps"))
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(c("linear_conv_kernel_dim"))
    w.add_ssm_state_size(c("linear_key_head_dim"))
    w.add_ssm_group_count(c("linear_num_key_heads"))
    w.add_ssm_time_step_rank(c("linear_num_value_heads"))
    w.add_ssm_inner_size(c("linear_value_head_dim") * c("linear_num_value_heads"))
    w.add_vocab_size(c("vocab_size"))
    for name, t in tensors.items():
        if name in blocks:
            tname, arr = blocks[name]
            qt = gguf.GGMLQuantizationType[tname]
            w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.uint8), raw_dtype=qt)
            continue
        arr = t.numpy().astype(np.float32)
        tname = types.get(kind_of(name), "F32") if arr.ndim == 2 else "F32"
        if tname == "F32":
            w.add_tensor(name, arr)
        elif tname == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            qt = gguf.GGMLQuantizationType[tname]
            try:
                q = gguf.quants.quantize(arr, qt)
            except NotImplementedError:
                raise ValueError(f"gguf-py has no quantizer for {tname} ({name}): pass its blocks "
                                 f"(blocks={{'{name}': ('{tname}', array)}}, e.g. from random_blocks_for)") from None
            w.add_tensor(name, q, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
