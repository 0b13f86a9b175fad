"""Benchmarks of the serving engine on random-weight Qwen2.5-shaped models (GPU):
decode at batch 1 (Qwen2.5-0.5B and 7B shapes), StaticEngine fp16 / W4A16 / W4A8
against Hugging Face ``generate`` with a static cache, and batched sampling at the
Qwen2.5-1.5B shape, StaticEngine W4A16 against fp16 (GRPO-style groups; the batch
rows go through ``ops.w4a16.matmul``'s small-M GEMM).

Every figure times a fixed number of new tokens (``StaticEngine.generate_with_stats``, no stop at EOS; the
Hugging Face baseline with ``min_new_tokens``), so a figure means the same whatever the model would say.

``run(out_dir)`` writes ``w4a16_serving.json`` and ``w4a16_serve_batch.json`` under
``out_dir`` (``python -m t4lib bench serving``). The kernels alone are timed in
:mod:`t4lib.benchmarks.w4a16`.
"""
from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import torch

from t4lib.benchmarks import out_folder, print_figures
from t4lib.core import hw, results, timing
from t4lib.models.shapes import QWEN25_05B, QWEN25_7B, QWEN25_15B
from t4lib.quant import quantize_model, set_activations, weight_bytes
from t4lib.serving.engine import StaticEngine, hf_generate
from t4lib.serving.fuse import fuse_projections, unfuse_projections

SOURCE = "t4lib.benchmarks.serving"
QWEN05 = QWEN25_05B
QWEN7B = QWEN25_7B


def build_random_model(cfg_kw: dict, dev="cuda"):
    """A random-weight Qwen2 causal LM built directly in fp16 on ``dev``."""
    from transformers import AutoModelForCausalLM, Qwen2Config  # optional: transformers (the train extra)

    cfg = Qwen2Config(**cfg_kw)
    torch.manual_seed(0)
    with torch.device(dev):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float16)
    return m.eval()


def _engine_meta(r) -> dict:
    """How a StaticEngine result was decoded (graph, compiled, and why not)."""
    return dict(graph=r.graph, graph_error=r.graph_error, compiled=r.compiled, compile_error=r.compile_error,
                prefill_graph=r.prefill_graph)


def serve_compare(label: str, cfg_kw: dict, new_tokens: int = 128, prompt_len: int = 16, hf_baseline: bool = True):
    """Figures for one model shape: HF static-cache generate (fp16) against StaticEngine fp16 and W4A16.

    The W4A16 engine is measured three ways, each adding one step: graph capture
    only; + torch.compile of the step; + fused q/k/v and gate/up projections
    (the configuration reported as ``engine_w4a16``). HF's decode rate is
    ``(new_tokens - 1)`` over the time from its first new token to its last within one run
    (``timing.TokenTimes``), so the decode figures compare like with like and can never come out negative.
    """

    figs = []
    env = results.environment()
    m = build_random_model(cfg_kw)
    ids = torch.randint(0, cfg_kw["vocab_size"], (1, prompt_len), device="cuda")
    fp16_bytes = weight_bytes(m)
    max_len = prompt_len + new_tokens + 8

    def fig(name, value, unit, tag="MEASURED", **kw):
        if tag == "MEASURED":
            kw["env"] = env
        figs.append(results.figure(f"{label}/{name}", value, unit, tag, SOURCE, **kw))

    def engine(**kw):
        # each engine compiles as it would in a process of its own: the compiles of earlier engines and sections
        # must not use up dynamo's recompile limit for StaticEngine._forward (past it, the step runs uncompiled)
        torch._dynamo.reset()
        eng = StaticEngine(m, max_len=max_len, **kw)
        eng.generate_with_stats(ids, 8)  # compile, capture, warm up
        return eng

    if hf_baseline:
        hf_generate(m, ids, new_tokens)  # warm-up: same cache length, so the compiled forward is reused
        t_hf = timing.wall_time(lambda: hf_generate(m, ids, new_tokens))
        spans = []
        for _ in range(3):   # the decode time within one run: first new token to last, never two runs' difference
            stamps = timing.TokenTimes()
            hf_generate(m, ids, new_tokens, streamer=stamps)
            spans.append(stamps.times[-1] - stamps.times[0])
        decode_s = sorted(spans)[1]
        hf_decode = (new_tokens - 1) / decode_s
        fig("hf_static/tokens_per_s", new_tokens / t_hf, "tokens/s",
            note=f"model.generate(cache_implementation='static'), greedy, {new_tokens} new tokens after "
                 f"{prompt_len}, end to end")
        fig("hf_static/decode_tokens_per_s", hf_decode, "tokens/s", "ARITHMETIC",
            note=f"(new_tokens - 1) / the time from the first new token to the last within one run (a streamer "
                 f"stamping each token), median of 3 runs: {decode_s * 1e3:.1f} ms, MEASURED")
    fuse_projections(m)
    eng = engine()
    r16 = eng.generate_with_stats(ids, new_tokens)
    fig("engine_fp16/decode_tokens_per_s", r16.decode_tokens_per_s, "tokens/s", note="compiled, fused projections",
        **_engine_meta(r16))
    del eng
    unfuse_projections(m)
    quantize_model(m)  # RTN g128 on the GPU, lm_head and embeddings fp16
    q_bytes = weight_bytes(m)
    torch.cuda.empty_cache()
    for name, kw, note in (("engine_w4a16_graph_only", dict(compile=False), "CUDA graph, no torch.compile, separate "
                                                                             "projections"),
                           ("engine_w4a16_unfused", {}, "CUDA graph of the compiled step, separate projections")):
        eng = engine(**kw)
        r = eng.generate_with_stats(ids, new_tokens)
        fig(f"{name}/decode_tokens_per_s", r.decode_tokens_per_s, "tokens/s", note=note, **_engine_meta(r))
        del eng
    fuse_projections(m)
    eng = engine()
    t_e2e = timing.wall_time(lambda: eng.generate_with_stats(ids, new_tokens))
    r = eng.generate_with_stats(ids, new_tokens)
    fig("engine_w4a16/tokens_per_s", new_tokens / t_e2e, "tokens/s",
        note=f"end to end like the HF figure ({'graph-replayed' if r.prefill_graph else 'eager'} prefill + decode)",
        **_engine_meta(r))
    fig("engine_w4a16/decode_tokens_per_s", r.decode_tokens_per_s, "tokens/s",
        note="CUDA graph of the compiled step, fused q/k/v and gate/up projections")
    fig("engine_w4a16/ttft", r.ttft_s * 1e3, "ms", prompt_len=prompt_len, prefill_graph=r.prefill_graph,
        note=f"{'graph-replayed' if r.prefill_graph else 'eager'} prefill + first choice")
    fig("engine_w4a16/peak_mem", r.peak_mem_bytes / 2 ** 20, "MiB")
    fig("weight_mem_fp16", fp16_bytes / 2 ** 20, "MiB")
    fig("weight_mem_w4a16", q_bytes / 2 ** 20, "MiB")
    fig("weight_mem_cut", 1 - q_bytes / fp16_bytes, "fraction", "ARITHMETIC",
        note="1 - W4A16 bytes / fp16 bytes of all parameters and buffers (embeddings and lm_head stay fp16 under "
             "the default policy)")
    fig("engine_w4a16/frac_copy_bw", r.frac_copy_bw, "fraction", "ARITHMETIC",
        note=f"bandwidth achieved: {r.bytes_per_step:.4g} bytes per decode step (all Linear weights incl. lm_head "
             f"+ mean KV cache) x decode steps/s / copy bandwidth")
    fig("engine_w4a16/t4_projection_decode", 1.0 / hw.t4_time_estimate(r.bytes_per_step), "tokens/s", "ESTIMATED",
        note="T4 roofline: bytes per decode step / 260 GB/s")
    del eng
    set_activations(m, "int8")  # W4A8: the decode GEMVs on int8 activations (other numerics)
    eng = engine()
    r8 = eng.generate_with_stats(ids, new_tokens)
    fig("engine_w4a8/decode_tokens_per_s", r8.decode_tokens_per_s, "tokens/s",
        note="as engine_w4a16 with activations='int8' on every QuantLinear (decode GEMVs W4A8)", **_engine_meta(r8))
    fig("engine_w4a8/frac_copy_bw", r8.frac_copy_bw, "fraction", "ARITHMETIC",
        note=f"bandwidth achieved: {r8.bytes_per_step:.4g} bytes per decode step x decode steps/s / copy bandwidth")
    fig("engine_w4a8/greedy_token_agreement_with_w4a16", (r8.new_tokens == r.new_tokens).float().mean().item(),
        "fraction", note="share of the greedy tokens equal to W4A16's, position by position (random weights: "
                         "one early difference changes every later token)")
    if hf_baseline:
        fig("engine_w4a8/decode_speedup_vs_hf_static", r8.decode_tokens_per_s / hf_decode, "x", "ARITHMETIC",
            note="decode tokens/s of StaticEngine W4A8 / HF static-cache generate (fp16), same process")
    set_activations(m, "fp16")
    if hf_baseline:
        fig("engine_w4a16/decode_speedup_vs_hf_static", r.decode_tokens_per_s / hf_decode, "x", "ARITHMETIC",
            note="decode tokens/s of StaticEngine W4A16 / HF static-cache generate (fp16), same process")
        fig("engine_w4a16/speedup_vs_hf_static", t_hf / t_e2e, "x", "ARITHMETIC",
            note="end-to-end time of HF static-cache generate (fp16) / StaticEngine W4A16, same prompt and token "
                 "count, same process")
    del eng, m
    torch.cuda.empty_cache()
    return figs


QWEN15 = QWEN25_15B


def serve_batch_compare(label: str, cfg_kw: dict, batches=(8, 64), new_tokens: int = 64, prompt_len: int = 16,
                        compile: bool = False) -> list[dict]:
    """Batched sampling (GRPO-style groups): StaticEngine fp16 against StaticEngine W4A16 on one random-weight
    model, same prompts, same run. Both engines fuse q/k/v and gate/up and replay a CUDA graph per decode step
    (``compile``: also torch.compile the step). W4A16 decode at batch B runs the B-row projections through
    ``ops.w4a16.matmul`` (the MMA GEMM for B = 2..64). Figures: per-sequence and total decode tokens/s and
    their ratio ``engine_w4a16_over_fp16``."""

    figs, env = [], results.environment()
    m = build_random_model(cfg_kw)
    max_len = prompt_len + new_tokens + 8
    gen = torch.Generator(device="cuda").manual_seed(0)
    prompts = {B: torch.randint(0, cfg_kw["vocab_size"], (B, prompt_len), device="cuda", generator=gen)
               for B in batches}
    how = "CUDA graph + torch.compile" if compile else "CUDA graph of the eager step (no torch.compile)"

    def measure(tag):
        torch._dynamo.reset()  # as in serve_compare: a fresh recompile budget per engine
        eng = StaticEngine(m, max_len=max_len, compile=compile)
        out = {}
        for B in batches:
            kw = dict(do_sample=True, temperature=1.0, top_k=50, seed=0)
            eng.generate_with_stats(prompts[B], 8, **kw)  # capture, warm up
            r = eng.generate_with_stats(prompts[B], new_tokens, **kw)
            out[B] = r
            figs.append(results.figure(f"{label}/b{B}/engine_{tag}/decode_tokens_per_s", r.decode_tokens_per_s * B,
                                       "tokens/s", "MEASURED", SOURCE, env=env, graph=r.graph,
                                       compiled=r.compiled, graph_error=r.graph_error,
                                       note=f"all {B} sequences: B x decode steps / s; sampling (T=1, top-k 50), "
                                            f"{new_tokens} new tokens after {prompt_len}; {how}; fused q/k/v, "
                                            f"gate/up"))
            figs.append(results.figure(f"{label}/b{B}/engine_{tag}/frac_copy_bw", r.frac_copy_bw, "fraction",
                                       "ARITHMETIC", SOURCE, env=env,
                                       note="bytes one decode step must read (every Linear weight incl. lm_head, "
                                            "KV cache at the mean length) x steps/s / copy bandwidth: the share "
                                            "of the step the weight and cache bytes would take at copy bandwidth"))
        del eng
        torch.cuda.empty_cache()
        return out

    fuse_projections(m)
    r16 = measure("fp16")
    unfuse_projections(m)
    quantize_model(m)  # RTN g128 on the GPU, lm_head and embeddings fp16
    fuse_projections(m)
    r4 = measure("w4a16")
    for B in batches:
        figs.append(results.figure(f"{label}/b{B}/engine_w4a16_over_fp16",
                                   r4[B].decode_tokens_per_s / r16[B].decode_tokens_per_s, "x", "ARITHMETIC",
                                   SOURCE, env=env, note="decode tokens/s of StaticEngine W4A16 / StaticEngine fp16, "
                                                         "same model shape, prompts and run"))
        figs.append(results.figure(f"{label}/b{B}/engine_w4a16/t4_projection_decode",
                                   B / hw.t4_time_estimate(r4[B].bytes_per_step), "tokens/s", "ESTIMATED", SOURCE,
                                   note="T4 roofline: bytes per decode step (weights + KV) / 260 GB/s, x batch"))
    del m
    torch.cuda.empty_cache()
    return figs


def _section(path: Path, measures, note: str, figs: list[dict] | None = None) -> list[dict]:
    """Run each ``(label, measure)`` (a failing one is recorded in ``errors`` and the others still run),
    write their figures to ``path`` and return them."""
    figs, errors = list(figs or []), []
    for label, measure in measures:
        try:
            figs += measure()
        except Exception as e:
            errors.append(f"{label}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
            torch.cuda.empty_cache()
    results.write(path, figs, producer=__file__, errors=errors, note=note)
    return figs


def run(out_dir: str | Path, quick: bool = False, serving: bool = True, serve_batch: bool = True) -> list[dict]:
    """The chosen sections (a failing one does not stop the other); each writes its results file."""
    out_dir = Path(out_dir)
    all_figs = []
    if serve_batch:
        label = "serve/qwen2.5-1.5b-shape"
        n = 32 if quick else 64
        all_figs += _section(out_dir / "w4a16_serve_batch.json",   # the engine as users get it, then uncompiled
                             [(label, lambda: serve_batch_compare(label, QWEN15, new_tokens=n, compile=True)),
                              (f"{label}/uncompiled", lambda: serve_batch_compare(f"{label}/uncompiled", QWEN15,
                                                                                  new_tokens=n, compile=False))],
                             "random weights, Qwen2.5-1.5B shape, batched sampling, StaticEngine fp16 vs W4A16; "
                             "a fixed number of new tokens per row (generate_with_stats: no EOS stop)",
                             figs=[timing.copy_bandwidth_figure(SOURCE)])
    if serving:
        shapes = (("serve/qwen2.5-0.5b-shape", QWEN05, 128), ("serve/qwen2.5-7b-shape", QWEN7B, 128))
        all_figs += _section(out_dir / "w4a16_serving.json",
                             [(label, lambda label=label, cfg=cfg, n=n: serve_compare(
                                 label, cfg, new_tokens=n // (2 if quick else 1))) for label, cfg, n in shapes],
                             "random weights, batch 1, greedy; HF baseline is fp16 with a static cache; both decode "
                             "a fixed number of new tokens (no EOS stop: generate_with_stats, min_new_tokens)")
    return all_figs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m t4lib.benchmarks.serving")
    p.add_argument("--out", default=None, help="results folder (default results/<device-slug>)")
    p.add_argument("--sections", nargs="+", default=["serving", "serve_batch"], choices=["serving", "serve_batch"])
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    figs = run(out_folder(a.out), quick=a.quick, serving="serving" in a.sections, serve_batch="serve_batch" in a.sections)
    print_figures(figs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
