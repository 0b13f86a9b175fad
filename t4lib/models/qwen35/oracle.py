"""The transformers oracle for the qwen35 engine: a tiny random ``Qwen3_5ForCausalLM``,
its GGUF, and the comparison of logits and greedy tokens.

``check(out_dir=None)`` runs the two checks the tests run (F32 weights against
the original model; every GGUF format against transformers on the dequantized
weights), 64 greedy tokens each, on CPU, and writes
``results/cpu/qwen35_engine_oracle.json`` when ``out_dir`` is given.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from t4lib.models.qwen35.convert import (
    gguf_to_hf_state_dict, hf_to_gguf, hf_to_gguf_tensors, kind_of, random_blocks_for,
)
from t4lib.core import results
from t4lib.models.qwen35.engine import Qwen35Engine
from t4lib.models.qwen35.model import Qwen35Model
from t4lib.models.qwen35.mtp_reference import Qwen35MTP

__all__ = ["tiny_config", "random_hf", "random_mtp", "hf_run", "quantized_gguf", "rel_err", "check", "check_mtp",
           "without_fla", "fla_importable", "BLOCK_TYPES", "GGUFPY_TYPES"]

SOURCE = "t4lib.models.qwen35.oracle"
PROMPT = [5, 17, 90, 3, 42, 64, 7, 81]
# Formats of the quantized file: every GGUF format the engine runs, F16, and Q8_0 through gguf-py
BLOCK_TYPES = {"attn_qkv": "Q4_K", "attn_gate": "Q5_K", "ssm_out": "Q6_K", "ffn_gate": "IQ4_XS", "ffn_up": "Q3_K",
               "ffn_down": "IQ3_S", "attn_q": "IQ4_NL", "attn_output": "Q4_K", "output": "Q6_K"}
GGUFPY_TYPES = {"attn_k": "Q8_0", "attn_v": "Q8_0", "token_embd": "Q8_0", "ssm_beta": "F16"}


def tiny_config(tied: bool = False, layers: int = 4, interval: int = 2):
    """Qwen3.5 text config at tiny size: both layer kinds, 4 query over 2 KV heads (GQA),
    4 value over 2 key heads in the Gated DeltaNet (so the GGUF head tiling matters),
    every matrix's K a multiple of 256 (so every GGUF format fits)."""
    from transformers import Qwen3_5TextConfig  # optional: the oracle is transformers' model

    cfg = Qwen3_5TextConfig(
        vocab_size=96, hidden_size=256, intermediate_size=256, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=4, full_attention_interval=interval,
        max_position_embeddings=256, tie_word_embeddings=tied,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25})
    cfg._attn_implementation = "eager"
    return cfg


def random_hf(cfg, seed: int = 0):
    """A ``Qwen3_5ForCausalLM`` with every parameter random (norm weights too, so the
    converter's +1 and head reordering are visible) and peaked logits."""
    from transformers import Qwen3_5ForCausalLM  # optional: the oracle is transformers' model

    torch.manual_seed(seed)
    m = Qwen3_5ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if n.endswith("linear_attn.norm.weight"):
                p.copy_(1 + 0.1 * r)
            elif "norm" in n:
                p.copy_(0.1 * r)
            elif n.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.05, 2.0, generator=g).log())
            elif n.endswith("dt_bias") or "conv1d" in n:
                p.copy_(0.5 * r)
            elif "embed" in n:
                p.copy_(r)
            else:
                p.copy_(0.06 * r)
    return m


def random_mtp(cfg, seed: int = 0):
    """A :class:`~.mtp_reference.Qwen35MTP` with every parameter random (norms too, so the converter's +1 shows)."""
    torch.manual_seed(seed)
    mtp = Qwen35MTP(cfg).eval()
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for n, p in mtp.named_parameters():
            p.copy_((0.1 if "norm" in n else 0.06) * torch.randn(p.shape, generator=g))
    return mtp


def hf_run(m, prompt=PROMPT, new: int = 64):
    """transformers' greedy decode: (prompt logits [T, V], new-token logits [new, V], new tokens)."""
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        prompt_logits = m(ids).logits[0]
        out = m.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    return prompt_logits, torch.cat(out.logits), out.sequences[0, len(prompt):].tolist()


def quantized_gguf(m, cfg, path, seed: int = 0) -> Path:
    """``m`` written with :data:`BLOCK_TYPES` (random blocks of each tensor's scale) and
    :data:`GGUFPY_TYPES` (gguf-py's quantizer)."""
    tens = hf_to_gguf_tensors(m.state_dict(), cfg)
    blocks = {n: (BLOCK_TYPES[kind_of(n)],
                  random_blocks_for(BLOCK_TYPES[kind_of(n)], *t.shape, float(t.std()), seed=seed + i))
              for i, (n, t) in enumerate(tens.items()) if kind_of(n) in BLOCK_TYPES}
    return hf_to_gguf(m.state_dict(), cfg, path, types=GGUFPY_TYPES, blocks=blocks)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def fla_importable() -> bool:
    return importlib.util.find_spec("fla") is not None


def without_fla(name: str, **kwargs) -> dict:
    """``name`` (``check`` or ``check_mtp``) run in a child process that cannot import fla; its JSON result.

    Where fla is installed, transformers hands Qwen3.5's Gated DeltaNet to fla's Triton kernels, CPU tensors
    included, and Triton cannot read those ("cannot be accessed from Triton (cpu tensor?)"). The oracle is a CPU
    reference, so it runs where ``import fla`` fails and transformers takes its PyTorch path."""
    if name not in ("check", "check_mtp"):
        raise ValueError(f"name must be 'check' or 'check_mtp', got {name!r}")
    code = ("import json, sys; sys.modules['fla'] = None\n"
            "from t4lib.models.qwen35 import oracle\n"
            "print(json.dumps(getattr(oracle, sys.argv[1])(**json.loads(sys.argv[2]))))")
    root = str(results.REPO_ROOT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run([sys.executable, "-c", code, name, json.dumps(kwargs)], capture_output=True, text=True,
                       env=env, cwd=root)
    if r.returncode != 0:
        raise RuntimeError(f"oracle.{name} without fla failed in its child process:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def check(out_dir: str | Path | None = None, new: int = 64) -> dict:
    """Both oracle checks (see the module docstring); returns their figures by name. Where fla is installed
    they run in a child process without it (:func:`without_fla`)."""
    if fla_importable():
        return without_fla("check", out_dir=None if out_dir is None else str(out_dir), new=new)
    from transformers import Qwen3_5ForCausalLM  # optional: the oracle is transformers' model

    cfg = tiny_config()
    tmp = Path(tempfile.mkdtemp())
    rows = {}
    m = random_hf(cfg)
    f32 = hf_to_gguf(m.state_dict(), cfg, tmp / "f32.gguf")
    ref_f32 = hf_run(m, new=new)
    q = random_hf(cfg, seed=1)
    qpath = quantized_gguf(q, cfg, tmp / "quant.gguf")
    oracle = Qwen3_5ForCausalLM(cfg).eval()
    oracle.load_state_dict(gguf_to_hf_state_dict(qpath, cfg))
    ref_q = hf_run(oracle, new=new)
    for label, path, ref in (("f32_weights", f32, ref_f32), ("all_formats", qpath, ref_q)):
        for dtype, dname in ((torch.float32, "fp32"), (torch.float16, "fp16")):
            r = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=len(PROMPT) + new, dtype=dtype).generate(
                PROMPT, new, return_logits=True)
            same = sum(a == b for a, b in zip(r.tokens, ref[2]))
            rows[f"{label}/{dname}"] = {"prefill_rel_err": rel_err(r.prompt_logits, ref[0]),
                                        "decode_rel_err": rel_err(r.logits, ref[1]), "identical": same,
                                        "tokens": new}
    if out_dir is not None:
        figs = []
        desc = {"f32_weights": "F32 weights, against the original model",
                "all_formats": "Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS/IQ3_S/IQ4_NL/Q8_0/F16 weights, against transformers "
                               "on the dequantized weights"}
        for key, row in rows.items():
            label, dname = key.split("/")
            note = (f"tiny qwen35 (4 layers: 2 Gated DeltaNet, 2 attention; GQA 4/2, DeltaNet 4 value over 2 key "
                    f"heads) vs transformers Qwen3_5ForCausalLM fp32 eager, {desc[label]}; engine activations "
                    f"{dname}, prompt {len(PROMPT)} tokens, {new} greedy tokens, reference ops on CPU")
            for stat in ("prefill_rel_err", "decode_rel_err"):
                figs.append(results.figure(f"qwen35_engine/oracle/{key}/{stat}", row[stat], "max|d|/max|logit|",
                                           "MEASURED", SOURCE, note=note))
            figs.append(results.figure(f"qwen35_engine/oracle/{key}/greedy_identical_fraction",
                                       row["identical"] / row["tokens"], "fraction", "MEASURED", SOURCE, note=note))
        worst = min(r["identical"] / r["tokens"] for r in rows.values())
        figs.append(results.figure("qwen35_engine/oracle/greedy_identical_fraction", worst, "fraction", "ARITHMETIC",
                                   SOURCE, note="the smallest of the four greedy_identical_fraction figures above"))
        results.write(Path(out_dir) / "qwen35_engine_oracle.json", figs, checks=rows)
    return rows


def check_mtp(new: int = 48, gammas=(1, 2, 3)) -> dict:
    """The NextN block against its transformers-layer oracle on a random tiny model with F32 weights: the
    prompt run as one multi-row forward (the verify path) against transformers' prefill logits, the block's
    logits over those rows against :class:`~.mtp_reference.Qwen35MTP`, and greedy tokens with ``mtp=gamma``
    against plain greedy (fp32 engine, CPU). Where fla is installed it runs without it (:func:`without_fla`)."""
    if fla_importable():
        out = without_fla("check_mtp", new=new, gammas=list(gammas))
        out["identical"] = {int(g): ok for g, ok in out["identical"].items()}  # JSON made the keys strings
        return out
    cfg = tiny_config()
    m, mtp = random_hf(cfg), random_mtp(cfg)
    sd = dict(m.state_dict())
    sd.update(mtp.state_dict_with_prefix())
    path = hf_to_gguf(sd, cfg, Path(tempfile.mkdtemp()) / "mtp.gguf")
    model = Qwen35Model.from_gguf(path)
    eng = Qwen35Engine(model, max_len=len(PROMPT) + new + 8, dtype=torch.float32, cuda_graph=False)
    ids, pos = torch.tensor(PROMPT), torch.arange(len(PROMPT))
    h = model.embed(ids)
    for b in model.blocks:
        h = b(h, pos, torch.float32)
    x = eng.fns.norm(h, model.output_norm, cfg.rms_norm_eps, torch.float32)
    with torch.no_grad():
        out = m.model(ids[None])
        ref = m.lm_head(out.last_hidden_state)[0]
        ref_mtp = m.lm_head(mtp(ids[None, 1:], out.last_hidden_state[:, :-1], m.model.embed_tokens,
                                m.model.rotary_emb, pos[None, :-1]))[0]
    model.mtp.allocate(len(PROMPT), torch.float32, "cpu")
    logits, _ = model.mtp(ids[1:], x[:-1], pos[:-1], model.embed, model.head, torch.float32)
    plain = eng.generate(PROMPT, new).tokens
    return {"rows_rel_err": rel_err(model.head(x), ref), "nextn_rel_err": rel_err(logits, ref_mtp),
            "identical": {g: eng.generate(PROMPT, new, mtp=g).tokens == plain for g in gammas}, "tokens": new}
