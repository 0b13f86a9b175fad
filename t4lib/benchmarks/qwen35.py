"""Benchmark of the qwen35 engine at the 27B shape (GPU): tokens/s, bytes per
token, fraction of copy bandwidth, against transformers' ``Qwen3_5ForCausalLM``
with fp16 weights of the same shape in the same process, and the T4 projection.

The model has the dimensions of the source's 27B file (64 layers, 48 Gated
DeltaNet + 16 full attention, hidden 5120, FFN 17408, vocab 248320) and random
weights in a quant mix that uses every format the source lists (:func:`mix_27b`),
generated on the GPU (no file: the weights are the same bytes a file would hold).
transformers runs with flash-linear-attention when it is installed (the user's
choice for Qwen3.5; its version is recorded), greedy ``model.generate``, the same
prompt length and token count; its decode rate is ``(new - 1) / (t(new) - t(1))``.

Run on a GPU machine: ``python -m t4lib.benchmarks.qwen35 --out results/<device-slug>``
(writes ``qwen35_engine.json``; ``--quick`` for fewer tokens, ``--no-hf`` to skip the baseline,
``--checks-only`` for the CUDA-path checks alone).
"""
from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from t4lib.core import graphs, timing, hw, results
from t4lib.ops.deltanet import reference as dn_ref
from t4lib.ops.deltanet import state_bytes
from t4lib.ops.gguf import FORMATS, TYPE_OF
from t4lib.ops.gguf import reference as gguf_ref
from t4lib.models.qwen35.engine import Qwen35Engine
from t4lib.models.qwen35.model import (
    FLOAT_TYPES, AttentionMixer, Block, DeltaNetMixer, Embedding, Linear, Qwen35Config,
    Qwen35Model, StepFunctions,
)
from t4lib.models.qwen35.model import MTPHead
from t4lib.models.qwen35.split import StagePlan

SOURCE = "t4lib.benchmarks.qwen35"
LABEL = "qwen35_engine/27b-shape"
WEIGHT_STD = 0.02


def config_27b(n_layers: int = 64) -> Qwen35Config:
    """The source's 27B qwen35 dimensions (every fourth layer full attention)."""
    return Qwen35Config(vocab=248320, hidden=5120, ffn=17408, n_layers=n_layers,
                        layer_types=tuple("attention" if (i + 1) % 4 == 0 else "deltanet" for i in range(n_layers)),
                        attn_heads=24, attn_kv_heads=4, head_dim=256, rope_dim=64, rope_base=1e7, eps=1e-6,
                        ssm_k_heads=16, ssm_v_heads=48, ssm_k_dim=128, ssm_v_dim=128)


def mix_27b(kind: str, layer: int, n_layers: int = 64) -> str:
    """A dynamic quant mix in the style of the source's file, with each format it lists:
    IQ3_S, IQ4_XS, IQ4_NL, Q3_K-Q6_K, Q8_0, F32. First and last layers keep more bits."""
    edge = layer < 2 or layer >= n_layers - 2
    table = {
        "token_embd": "Q4_K", "output": "Q6_K",
        "attn_qkv": "Q5_K" if edge else "Q4_K", "attn_gate": "Q4_K", "ssm_out": "Q5_K" if edge else "Q4_K",
        "ssm_alpha": "F32", "ssm_beta": "F32",
        "attn_q": "Q4_K", "attn_k": "Q8_0", "attn_v": "Q8_0", "attn_output": "Q5_K",
        "ffn_gate": "Q4_K" if edge else ("IQ3_S" if layer % 4 == 1 else "IQ4_XS"),
        "ffn_up": "Q4_K" if edge else ("Q3_K" if layer % 4 == 1 else "IQ4_XS"),
        "ffn_down": "Q6_K" if edge else ("IQ4_NL" if layer % 8 == 5 else "IQ4_XS"),
    }
    return table[kind]


_SCALES: dict = {}


def _scale_for(t: int) -> float:
    """The fp16 scale-field magnitude that gives dequantized values of std WEIGHT_STD."""
    if t not in _SCALES:
        nv = FORMATS[t][1]
        probe = gguf_ref.random_blocks(t, 4096 // nv * 8, seed=t, scale=0.01)
        s = float(gguf_ref.dequantize_blocks(probe, t).std())
        _SCALES[t] = 0.01 * WEIGHT_STD / s
    return _SCALES[t]


def random_raw(type_name: str, N: int, K: int, gen: torch.Generator, device) -> torch.Tensor:
    """Random valid GGUF blocks for W [N, K] (uint8, 1-D) generated on ``device``."""
    t = TYPE_OF[type_name]
    name, nv, nb = FORMATS[t]
    n = N * K // nv
    b = torch.randint(0, 256, (n, nb), dtype=torch.uint8, device=device, generator=gen)
    for off in gguf_ref.F16_FIELDS[name]:
        d = ((torch.rand(n, device=device, generator=gen) * 2 - 1) * _scale_for(t)).half()
        b[:, off:off + 2] = d.view(torch.uint8).view(n, 2)
    return b.reshape(-1)


def random_model(cfg: Qwen35Config, mix=mix_27b, device="cuda", seed: int = 0,
                 activations: str = "fp16", mtp: bool = False) -> Qwen35Model:
    """A :class:`Qwen35Model` of shape ``cfg`` with random weights in ``mix(kind, layer)`` types; ``mtp``: with a
    NextN block (a full-attention layer in the last layer's types, ``eh_proj`` Q8_0)."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    c = cfg

    def lin(kind, layer, N, K):
        tname = mix(kind, layer, c.n_layers) if layer >= 0 else mix(kind, 0, c.n_layers)
        if tname in FLOAT_TYPES.values():
            dt = torch.float32 if tname == "F32" else torch.float16
            w = (torch.randn(N, K, device=dev, generator=gen) * WEIGHT_STD).to(dt)
            return Linear(kind, w, 0 if tname == "F32" else 1, N, K)
        return Linear(kind, random_raw(tname, N, K, gen, dev), TYPE_OF[tname], N, K, activations)

    ones = lambda n: torch.ones(n, device=dev)  # noqa: E731

    def block(i, kind):
        if kind == "attention":
            qd, kd = c.attn_heads * c.head_dim, c.attn_kv_heads * c.head_dim
            mixer = AttentionMixer(c, lin("attn_q", i, 2 * qd, c.hidden), lin("attn_k", i, kd, c.hidden),
                                   lin("attn_v", i, kd, c.hidden), lin("attn_output", i, c.hidden, qd),
                                   ones(c.head_dim), ones(c.head_dim))
        else:
            H, vd = c.ssm_v_heads, c.ssm_v_heads * c.ssm_v_dim
            p = dn_ref.random_layer(H, c.ssm_k_heads, c.ssm_k_dim, c.ssm_v_dim, seed=seed + i, device=dev)
            mixer = DeltaNetMixer(c, lin("attn_qkv", i, c.conv_dim, c.hidden), lin("attn_gate", i, vd, c.hidden),
                                  lin("ssm_alpha", i, H, c.hidden), lin("ssm_beta", i, H, c.hidden),
                                  lin("ssm_out", i, c.hidden, vd), p["conv_w"].contiguous(), p["ssm_a"],
                                  p["dt_bias"], p["ssm_norm"])
        li = min(i, c.n_layers - 1)   # the NextN block takes the last layer's types
        return Block(i, ones(c.hidden), mixer, ones(c.hidden), lin("ffn_gate", li, c.ffn, c.hidden),
                     lin("ffn_up", li, c.ffn, c.hidden), lin("ffn_down", li, c.hidden, c.ffn), c.eps)

    blocks = [block(i, c.layer_types[i]) for i in range(c.n_layers)]
    et = mix("token_embd", 0, c.n_layers)
    embed = Embedding(random_raw(et, c.vocab, c.hidden, gen, dev), TYPE_OF[et], c.vocab, c.hidden)
    head = lin("output", -1, c.vocab, c.hidden)
    head_block = None
    if mtp:
        eh = Linear("nextn.eh_proj", random_raw("Q8_0", c.hidden, 2 * c.hidden, gen, dev), TYPE_OF["Q8_0"],
                    c.hidden, 2 * c.hidden, activations)
        head_block = MTPHead(c, eh, ones(c.hidden), ones(c.hidden), block(c.n_layers, "attention"), ones(c.hidden))
    return Qwen35Model(c, embed, blocks, ones(c.hidden), head, [dev] * c.n_layers, mtp=head_block)


def step_bytes(model: Qwen35Model, position: int) -> dict:
    """Bytes one decode step must move at ``position``: weights read once, the DeltaNet
    states read and written (fp32), the KV cache read up to ``position`` (fp16)."""
    c = model.cfg
    n_dn = sum(k == "deltanet" for k in c.layer_types)
    n_at = c.n_layers - n_dn
    state = n_dn * state_bytes(1, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim)
    kv = n_at * 2 * c.attn_kv_heads * (position + 1) * c.head_dim * 2
    w = model.bytes_per_token()
    return {"weights": w, "state": state, "kv": kv, "total": w + state + kv}


def hf_config_27b(cfg: Qwen35Config):
    from transformers import Qwen3_5TextConfig  # optional: the transformers peer

    return Qwen3_5TextConfig(
        vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.attn_heads, num_key_value_heads=cfg.attn_kv_heads, head_dim=cfg.head_dim,
        linear_key_head_dim=cfg.ssm_k_dim, linear_value_head_dim=cfg.ssm_v_dim,
        linear_num_key_heads=cfg.ssm_k_heads, linear_num_value_heads=cfg.ssm_v_heads, full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base,
                         "partial_rotary_factor": cfg.rope_dim / cfg.head_dim},
        tie_word_embeddings=False, max_position_embeddings=4096)


def _fla_version() -> str | None:
    try:
        import fla  # optional: only its version is recorded
        return getattr(fla, "__version__", "installed")
    except Exception:
        return None


def measure_engine(model: Qwen35Model, prompt: list, new: int, cuda_graph: bool = True, reps: int = 3,
                   compile: bool | None = None) -> dict:
    eng = Qwen35Engine(model, max_len=len(prompt) + new + 8, dtype=torch.float16, cuda_graph=cuda_graph,
                       compile=compile)
    eng.generate(prompt, 4)   # warm-up: packs layouts, builds kernels, captures the graphs
    runs = [eng.generate(prompt, new) for _ in range(reps)]
    rates = sorted(r.decode_tokens_per_s for r in runs)
    out = {"decode_tokens_per_s": rates[len(rates) // 2], "rates": rates, "tokens": runs[-1].tokens[:16],
           "prefill_s": runs[-1].prefill_s, "cuda_graphs": runs[-1].cuda_graphs, "graph_error": eng.graph_error,
           "compiled": eng.fns.compiled, "compile_error": eng.compile_error}
    del eng
    torch.cuda.empty_cache()
    return out


def hf_greedy_times(m, ids: torch.Tensor, new: int, reps: int = 3, **generate_kw) -> tuple[list[int], float]:
    """transformers' greedy ``generate`` of exactly ``new`` (>= 2) tokens after ``ids`` [1, T]: the new tokens (a
    first run, which also warms up: fla's Triton kernels compile there), and the decode time, the median over
    ``reps`` runs of the time from the first new token to the last within one run (``timing.TokenTimes``).
    Its decode rate is ``(new - 1) / decode_s``, positive and finite: a time measured within one run, never
    the difference of two runs."""
    if isinstance(new, bool) or not isinstance(new, int) or new < 2:
        raise ValueError(f"new must be an int >= 2 (a decode rate needs two tokens), got {new!r}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int, got {reps!r}")
    tokens, spans = None, []
    for run in range(reps + 1):
        stamps = timing.TokenTimes()
        with torch.no_grad():
            out = m.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, streamer=stamps,
                             **generate_kw)
        if len(stamps.times) != new:
            raise RuntimeError(f"generate streamed {len(stamps.times)} new tokens, not {new}")
        if run == 0:
            tokens = out[0, ids.shape[1]:].tolist()
        else:
            spans.append(stamps.times[-1] - stamps.times[0])
    decode_s = sorted(spans)[len(spans) // 2]
    if not decode_s > 0:
        raise RuntimeError(f"decode time {decode_s!r} s is not positive: the clock did not advance")
    return tokens, decode_s


def first_difference(tokens: list[int], ref_tokens: list[int], ref_logits: torch.Tensor) -> dict | None:
    """Where ``tokens`` first leave ``ref_tokens`` (None if never), and the reference's top-2 logit gap there over
    its max |logit|: near 0, a near-tie that a different rounding can flip."""
    j = next((k for k, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), None)
    if j is None:
        return None
    lg = ref_logits[j].float()
    top = lg.topk(2).values
    return {"position": j, "top2_gap": float((top[0] - top[1]) / lg.abs().max())}


def measure_hf(cfg: Qwen35Config, prompt: list, new: int, device="cuda", dtype=torch.float16) -> dict:
    """transformers' decode rate on a random model of shape ``cfg`` (weights in ``dtype``)."""
    from transformers import Qwen3_5ForCausalLM  # optional: the transformers peer

    hcfg = hf_config_27b(cfg)
    with torch.device(device):
        m = Qwen3_5ForCausalLM._from_config(hcfg, dtype=dtype).eval()
    _, decode_s = hf_greedy_times(m, torch.tensor([prompt], device=device), new, pad_token_id=0)
    out = {"decode_tokens_per_s": (new - 1) / decode_s, "decode_s": decode_s,
           "fp16_weight_bytes": sum(p.numel() * p.element_size() for p in m.parameters()),
           "attn_implementation": m.config._attn_implementation, "fla": _fla_version()}
    del m
    torch.cuda.empty_cache()
    return out


def graph_us(fn, reps: int = 50) -> float:
    """Microseconds per replay of ``fn`` captured in a CUDA graph (L2 warm between replays)."""
    g, _ = graphs.capture(fn, device=torch.device("cuda"))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / reps


def time_per_kind(model: Qwen35Model, position: int = 64, reps: int = 50, compile: bool = True) -> dict:
    """Microseconds per decode step of one layer of each kind and of the head, each captured
    in a CUDA graph and replayed ``reps`` times (L2 warm between replays of the same layer,
    so an underestimate of its share of a whole step), with their weight bytes; ``compile``:
    the step's elementwise parts torch.compile'd (:class:`StepFunctions`) or as written."""
    c = model.cfg
    fns = StepFunctions(compiled=compile)
    eng = Qwen35Engine(model, max_len=position + 8, dtype=torch.float16, cuda_graph=False)
    pos = torch.full((1,), position, dtype=torch.long, device="cuda")
    h = torch.randn(1, c.hidden, device="cuda")
    out = {}

    def timed(fn):
        return graph_us(fn, reps)

    def kernels(fn):
        """GPU kernels one call launches (torch.profiler)."""
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(e.device_type.name == "CUDA" and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")
                   for e in prof.events())

    for kind in ("deltanet", "attention"):
        blk = next(b for b in model.blocks if b.kind == kind)
        fn = lambda: blk(h, pos, torch.float16, fns)  # noqa: E731
        out[kind] = {"us": timed(fn), "kernels": kernels(fn),
                     "weight_bytes": sum(x.nbytes for x in blk.linears()), "layers": c.layer_types.count(kind)}
    out["head"] = {"us": timed(lambda: model.head(fns.norm(h, model.output_norm, c.eps, torch.float16))),
                   "weight_bytes": model.head.nbytes, "layers": 1}
    del eng
    return out


def gpu_checks(n_layers: int = 8, new: int = 32) -> dict:
    """Checks of the CUDA paths at the 27B widths with fewer layers (CPU tests cannot run them):
    CUDA graphs against eager, both with the compiled step functions (same tokens, logits within 1e-3 of
    max |logit|), compiled against uncompiled (same bound), two stages on
    one GPU against one stage (same tokens), the fp16 GEMV path against the fp32 yardstick
    (dequantized weights, logits within 2e-2), and MTP drafts (``mtp=1..3``, graph-captured verify of
    several rows) against plain greedy (same tokens)."""
    cfg = config_27b(n_layers)
    model = random_model(cfg, seed=1, mtp=True)
    prompt = list(range(1, 9))
    out = {}

    def gen(**kw):
        plan = kw.pop("plan", None)
        eng = Qwen35Engine(model, max_len=len(prompt) + new, plan=plan, **kw)
        r = eng.generate(prompt, new, return_logits=True)
        r.info["graph_error"] = eng.graph_error
        del eng
        return r

    g, e = gen(cuda_graph=True), gen(cuda_graph=False, compile=True)   # the graph alone differs
    u = gen(cuda_graph=True, compile=False)
    half = n_layers // 2
    two = gen(cuda_graph=True, plan=StagePlan((range(0, half), range(half, n_layers)), (0, 0), (None, None)))
    y = gen(dtype=torch.float32, cuda_graph=False)

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    out["graph_vs_eager"] = {"same_tokens": g.tokens == e.tokens, "rel_err": rel(g.logits, e.logits),
                             "graphs": g.cuda_graphs, "graph_error": g.info["graph_error"]}
    out["compiled_vs_uncompiled"] = {"same_tokens": g.tokens == u.tokens, "rel_err": rel(g.logits, u.logits),
                                     "compiled": g.info["compiled"], "compile_error": g.info["compile_error"]}
    out["two_stages_vs_one"] = {"same_tokens": two.tokens == g.tokens, "rel_err": rel(two.logits, g.logits),
                                "graphs": two.cuda_graphs}
    out["fp16_vs_fp32_yardstick"] = {"rel_err": rel(g.logits, y.logits),
                                     "same_tokens_fraction": sum(a == b for a, b in zip(g.tokens, y.tokens)) / new}
    eng = Qwen35Engine(model, max_len=len(prompt) + new + 8)
    ref = eng.generate(prompt, new, return_logits=True)
    mtp = {g: eng.generate(prompt, new, mtp=g) for g in (1, 2, 3)}

    out["mtp_vs_plain"] = {"same_tokens": all(r.tokens == ref.tokens for r in mtp.values()),
                           "graphs": all(r.cuda_graphs for r in mtp.values()),
                           "first_difference": {g: first_difference(r.tokens, ref.tokens, ref.logits)
                                                  for g, r in mtp.items()},
                           "accepted_histograms": {g: r.mtp["accepted_histogram"] for g, r in mtp.items()}}
    del eng
    out["passed"] = bool(out["mtp_vs_plain"]["same_tokens"]
                         and out["graph_vs_eager"]["same_tokens"] and out["graph_vs_eager"]["rel_err"] < 1e-3
                         and out["compiled_vs_uncompiled"]["rel_err"] < 1e-3 and out["two_stages_vs_one"]["same_tokens"]
                         and out["fp16_vs_fp32_yardstick"]["rel_err"] < 2e-2)
    del model
    torch.cuda.empty_cache()
    return out


def run(out_dir: str | Path, quick: bool = False, hf_baseline: bool = True, prompt_len: int = 16,
        new_tokens: int = 128) -> tuple[list[dict], dict]:
    """Everything above; writes ``out_dir/qwen35_engine.json``, returns (figures, metadata)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the qwen35 engine benchmark needs a CUDA device")
    if quick:
        new_tokens = 32
    env = results.environment()
    figs = [results.figure("copy_bandwidth", hw.copy_bandwidth() / 1e9, "GB/s", "MEASURED", SOURCE, env=env,
                           note="device-to-device copy_ of 1 GiB, read+write bytes / median time")]
    copy_bw = hw.copy_bandwidth()
    meta: dict = {"errors": {}, "prompt_len": prompt_len, "new_tokens": new_tokens}
    cfg = config_27b()
    prompt = torch.randint(0, cfg.vocab, (prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()

    def fig(name, value, unit, tag="MEASURED", **kw):
        if tag == "MEASURED":
            kw["env"] = env
        figs.append(results.figure(f"{LABEL}/{name}", value, unit, tag, SOURCE, **kw))

    try:
        meta["gpu_checks"] = gpu_checks()
    except Exception as e:
        meta["errors"]["gpu_checks"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
    ours = None
    try:
        t0 = time.perf_counter()
        model = random_model(cfg)
        torch.cuda.synchronize()
        meta["build_s"] = time.perf_counter() - t0
        sb = step_bytes(model, prompt_len + new_tokens // 2)
        meta["step_bytes"] = sb
        meta["mix"] = {k: sorted({mix_27b(k, i) for i in range(cfg.n_layers)}) for k in
                       ("token_embd", "output", "attn_qkv", "attn_gate", "ssm_out", "ssm_alpha", "attn_q", "attn_k",
                        "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
        fig("weight_bytes_per_token", sb["weights"], "bytes", "ARITHMETIC",
            note="bytes of every GGUF tensor the step reads (one embedding row), from the tensors' sizes")
        fig("bytes_per_token", sb["total"], "bytes", "ARITHMETIC",
            note=f"weights + Gated DeltaNet fp32 state read and written ({sb['state']} B) + KV cache read at the "
                 f"middle position ({sb['kv']} B)")
        for variant, kw in (("graph", {}), ("graph_uncompiled", {"compile": False}), ("eager", {"cuda_graph": False})):
            r = measure_engine(model, prompt, new_tokens, **kw)
            meta[f"engine_{variant}"] = r
            fig(f"engine_{variant}/decode_tokens_per_s", r["decode_tokens_per_s"], "tokens/s",
                note=f"greedy, {new_tokens} new tokens after {prompt_len}, fp16 activations, "
                     f"CUDA graphs {'on' if r['cuda_graphs'] else 'off'}, elementwise parts "
                     f"{'torch.compiled' if r['compiled'] else 'as written'}; median of 3 runs {r['rates']}")
        fig("compile_speedup", meta["engine_graph"]["decode_tokens_per_s"]
            / meta["engine_graph_uncompiled"]["decode_tokens_per_s"], "x", "ARITHMETIC",
            note="engine_graph over engine_graph_uncompiled: what fusing the elementwise parts gains")
        ours = meta["engine_graph"]["decode_tokens_per_s"]
        frac = sb["total"] * ours / copy_bw
        fig("frac_copy_bw", frac, "fraction", "ARITHMETIC",
            note="bytes_per_token x decode tokens/s (CUDA graphs) / copy bandwidth measured in this process; "
                 "target 0.60")
        for compiled, sub in ((True, "per_kind"), (False, "per_kind_uncompiled")):
            try:
                kinds = time_per_kind(model, compile=compiled)
                meta[sub] = kinds
                for kind, row in kinds.items():
                    fig(f"{sub}/{kind}/us", row["us"], "us",
                        note=f"one {kind} step in a CUDA graph, replayed (L2 warm), elementwise parts "
                             f"{'torch.compiled' if compiled else 'as written'}; {row['layers']} per token, "
                             f"{row['weight_bytes']} weight bytes each")
                    if "kernels" in row:
                        fig(f"{sub}/{kind}/kernels", row["kernels"], "kernels",
                            note=f"GPU kernels one {kind} step launches (torch.profiler, outside the graph)")
            except Exception as e:
                meta["errors"][sub] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
        for lin in (x for b in model.blocks for x in b.linears()):
            if lin.packed is not None:
                lin.activations = "int8"
        r8 = measure_engine(model, prompt, new_tokens)
        meta["engine_graph_int8"] = r8
        fig("engine_graph_int8/decode_tokens_per_s", r8["decode_tokens_per_s"], "tokens/s",
            note="as engine_graph with int8 activations in the GEMV-layout formats (other numerics, see "
                 "t4lib.ops.gguf)")
        fig("engine_graph_int8/frac_copy_bw", sb["total"] * r8["decode_tokens_per_s"] / copy_bw, "fraction",
            "ARITHMETIC", note="bytes_per_token x int8-activation tokens/s / copy bandwidth")
        t4 = hw.T4.sustained_bw / sb["total"]
        fig("t4_projection/decode_tokens_per_s", t4, "tokens/s", "ESTIMATED",
            note=f"{sb['total']} bytes per token / {hw.T4.sustained_bw / 1e9:.0f} GB/s sustained: two T4s with "
                 f"the layers split run their stages in turn, so one T4's bandwidth sets the rate; the source "
                 f"puts the ceiling near 14-18 tokens/s")
        del model
        torch.cuda.empty_cache()
    except Exception as e:
        meta["errors"]["engine"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
    if hf_baseline:
        try:
            h = measure_hf(cfg, prompt, new_tokens)
            meta["hf_fp16"] = h
            fig("hf_fp16/decode_tokens_per_s", h["decode_tokens_per_s"], "tokens/s", "ARITHMETIC",
                note=f"transformers Qwen3_5ForCausalLM fp16, model.generate greedy (dynamic cache, "
                     f"{h['attn_implementation']}, flash-linear-attention {h['fla'] or 'NOT installed'}): "
                     f"(new - 1) / (t({new_tokens}) - t(1)), both MEASURED "
                     f"({h['t_new_s'] * 1e3:.1f} and {h['t_1_s'] * 1e3:.1f} ms)")
            if ours:
                fig("speedup_vs_hf_fp16", ours / h["decode_tokens_per_s"], "x", "ARITHMETIC",
                    note="engine_graph decode tokens/s over transformers fp16 decode tokens/s; target 3x")
        except Exception as e:
            meta["errors"]["hf_fp16"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
    results.write(Path(out_dir) / "qwen35_engine.json", figs, **meta)
    return figs, meta


def write_checks(out_dir: str | Path) -> dict:
    """:func:`gpu_checks` alone, as figures in ``out_dir/qwen35_engine_gpu_checks.json``."""
    checks = gpu_checks()
    env = results.environment()
    note = "27B widths, 8 layers, random weights in the 27B mix, 32 greedy tokens; rel_err = max|d|/max|logit|"
    figs = [results.figure(f"qwen35_engine/gpu_checks/{k}/{stat}", float(v[stat]), unit, "MEASURED", SOURCE,
                           env=env, note=note)
            for k, v in checks.items() if isinstance(v, dict)
            for stat, unit in (("rel_err", "max|d|/max|logit|"), ("same_tokens", "bool"),
                               ("same_tokens_fraction", "fraction")) if stat in v]
    results.write(Path(out_dir) / "qwen35_engine_gpu_checks.json", figs, checks=checks)
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="output folder (default results/<device-slug>)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--checks-only", action="store_true",
                    help="only the CUDA-path checks (qwen35_engine_gpu_checks.json), no timing")
    a = ap.parse_args(argv)
    out = a.out or results.results_dir() / hw.device_slug()
    if a.checks_only:
        checks = write_checks(out)
        print("gpu_checks:", checks)
        return 0 if checks.get("passed") else 1
    figs, meta = run(out, quick=a.quick, hf_baseline=not a.no_hf)
    for f in figs:
        print(f"{f['name']:60s} {f['value']:.4g} {f['unit']} [{f['tag']}]")
    print("gpu_checks:", meta.get("gpu_checks"))
    print("errors:", meta["errors"] or "none")
    return 1 if meta["errors"] or not meta.get("gpu_checks", {}).get("passed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
