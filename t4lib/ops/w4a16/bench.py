"""W4A16 benchmark: GEMV and prefill GEMM against cuBLAS fp16 (and bitsandbytes NF4
when installed), and decode serving of Qwen2.5-0.5B- and 7B-shaped models (random
weights) against Hugging Face ``generate`` with a static cache.

Shapes are written ``KxN`` (in_features x out_features), e.g. ``5120x17408`` is
a 5120 -> 17408 projection. ``bytes_moved`` for the quantized kernels is what
they read and write: packed weights + scales + x + y (x counted as fp16 for
the int8-activation cases too: their int8 x is half that, under 0.2% of the
bytes at these shapes). ``w4a8_gemv`` is the public op with
``activations="int8"`` (quantize x, then the DP4A GEMV: two kernels);
``w4a8_gemv_kernel`` the GEMV kernel alone on x quantized beforehand, as
when one quantized x feeds several projections. Entry point:
``run(out_dir)`` writes ``w4a16_gemv.json``, ``w4a16_gemm.json`` and
``w4a16_serving.json`` under ``out_dir`` and returns all figures.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from ... import bench, hw, results
from ..int8_activations import empty_blocks
from . import binding, gemm, gemv
from .format import QuantizedWeight

SOURCE = "t4lib.ops.w4a16.bench"
GEMV_SHAPES = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896), (896, 896), (1536, 8960),
               (8960, 1536)]
GEMV_MULTI_M = [(2, 5120, 17408), (4, 5120, 17408), (8, 5120, 17408), (2, 896, 4864), (4, 896, 4864),
                (8, 896, 4864)]
GEMM_SHAPES = [(5120, 17408), (896, 4864)]
GEMM_M = [4, 8, 16, 32, 64, 128, 512]

QWEN05 = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
              num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
              tie_word_embeddings=True, rope_theta=1000000.0)
QWEN7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
              num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
              tie_word_embeddings=False, rope_theta=1000000.0)


def _bnb():
    try:
        import bitsandbytes as bnb  # noqa: F401
        return bnb
    except Exception:
        return None


def _rand_qw(N, K, g=128, dev="cuda"):
    q = torch.randint(-2 ** 31, 2 ** 31 - 1, (N, K // 8), dtype=torch.int32, device=dev)
    s = (torch.rand(N, K // g, device=dev) * 0.01 + 0.001).half()
    return q, s


def _qbytes(M, K, N, g=128):
    return N * K // 2 + N * (K // g) * 2 + M * K * 2 + M * N * 2


def _x8_set(M, K, N, dev="cuda"):
    """x quantized by the library's kernel, the weight, an output buffer: the W4A8 GEMV kernel's inputs."""
    x = torch.randn(M, K, device=dev).half()
    xq, xs = empty_blocks(M, K, dev)
    binding.quantize_x8(x, xq, xs)
    return xq, xs, *_rand_qw(N, K), torch.empty(M, N, dtype=torch.float16, device=dev)


def gemv_cases(M, K, N, with_bnb=True):
    dev = "cuda"
    cases = {
        "cublas_fp16": (lambda x, w: F.linear(x, w),
                        lambda: (torch.randn(M, K, device=dev).half(), torch.randn(N, K, device=dev).half() * 0.02)),
        "w4a16_gemv": (lambda x, q, s: gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda"),
                       lambda: (torch.randn(M, K, device=dev).half(), *_rand_qw(N, K))),
        "w4a8_gemv": (lambda x, q, s: gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda", activations="int8"),
                      lambda: (torch.randn(M, K, device=dev).half(), *_rand_qw(N, K))),
        "w4a8_gemv_kernel": (lambda xq, xs, q, s, y: binding.gemv_x8(xq, xs, q, s, 128, y), lambda: _x8_set(M, K, N)),
    }
    bnb = _bnb() if with_bnb else None
    if bnb is not None:
        import bitsandbytes.functional as bf

        def make_nf4():
            w = torch.randn(N, K, device=dev).half() * 0.02
            packed, state = bf.quantize_4bit(w, quant_type="nf4")
            del w
            return torch.randn(M, K, device=dev).half(), packed, state

        cases["bnb_nf4"] = (lambda x, p, st: bnb.matmul_4bit(x, p.t(), quant_state=st), make_nf4)
    return cases


def _gemv_section(figs, errors, quick):
    it = 10 if quick else 20
    for (K, N) in GEMV_SHAPES:
        name = f"w4a16_gemv/M1/{K}x{N}"
        try:
            try:
                res = bench.compare(gemv_cases(1, K, N), "cublas_fp16", bytes_moved=_qbytes(1, K, N), rounds=3,
                                    iters=it)
            except Exception as e:  # bitsandbytes failing must not cost the other cases
                if _bnb() is None:
                    raise
                errors.append(f"{name} with bnb_nf4: {type(e).__name__}: {e}; rerun without it")
                res = bench.compare(gemv_cases(1, K, N, with_bnb=False), "cublas_fp16", bytes_moved=_qbytes(1, K, N),
                                    rounds=3, iters=it)
            figs += bench.to_figures(res, name, SOURCE)
            fp16_bytes = N * K * 2 + K * 2 + N * 2
            st = res["cases"]["cublas_fp16"]
            figs.append(results.figure(f"{name}/cublas_fp16/frac_copy_bw_own_bytes",
                                       fp16_bytes / st["median_s"] / res["copy_bw_Bps"], "fraction", "ARITHMETIC",
                                       SOURCE, note=f"cuBLAS reads its fp16 weight: {fp16_bytes} bytes / median "
                                                    f"time / copy bandwidth"))
            if "bnb_nf4" in res["cases"]:
                for case in ("w4a16_gemv", "w4a8_gemv"):
                    figs.append(results.figure(f"{name}/{case}/speedup_vs_bnb_nf4",
                                               res["cases"]["bnb_nf4"]["median_s"] / res["cases"][case]["median_s"],
                                               "x", "ARITHMETIC", SOURCE,
                                               note=f"median bnb NF4 / median {case}, same run"))
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {e}")
    if _bnb() is None:
        errors.append("bitsandbytes not importable: NF4 cases skipped")
    for (M, K, N) in GEMV_MULTI_M:
        name = f"w4a16_gemv/M{M}/{K}x{N}"
        try:
            res = bench.compare(gemv_cases(M, K, N, with_bnb=False), "cublas_fp16", bytes_moved=_qbytes(M, K, N),
                                rounds=3, iters=it)
            figs += bench.to_figures(res, name, SOURCE)
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {e}")


def _gemm_section(figs, errors, quick):
    from ..int4 import int4_dequant

    dev = "cuda"
    for (K, N) in GEMM_SHAPES:
        for M in GEMM_M[:3] if quick else GEMM_M:
            name = f"w4a16_gemm/M{M}/{K}x{N}"
            try:
                def deq_cublas(x, q, s):
                    w = int4_dequant(q.view(-1), s.view(-1), 128, backend="cuda").view(N, K)
                    return F.linear(x, w)

                cases = {
                    "dequant_then_cublas": (deq_cublas, lambda: (torch.randn(M, K, device=dev).half(),
                                                                 *_rand_qw(N, K))),
                    "cublas_fp16": (lambda x, w: F.linear(x, w), lambda: (torch.randn(M, K, device=dev).half(),
                                                                          torch.randn(N, K, device=dev).half())),
                    "w4a16_gemm": (lambda x, q, s: gemm(x, QuantizedWeight(q, s, N, K, 128), backend="cuda"),
                                   lambda: (torch.randn(M, K, device=dev).half(), *_rand_qw(N, K))),
                }
                res = bench.compare(cases, "dequant_then_cublas", bytes_moved=_qbytes(M, K, N), flops=2 * M * N * K,
                                    rounds=3, iters=10, max_sets=16)
                figs += bench.to_figures(res, name, SOURCE)
            except Exception as e:
                errors.append(f"{name}: {type(e).__name__}: {e}")


def build_random_model(cfg_kw: dict, dev="cuda"):
    """A random-weight Qwen2 causal LM built directly in fp16 on ``dev``."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**cfg_kw)
    torch.manual_seed(0)
    with torch.device(dev):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float16)
    return m.eval()


def _time(fn, reps=3):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def _engine_meta(r) -> dict:
    """How a StaticEngine result was decoded (graph, compiled, and why not)."""
    return dict(graph=r.graph, graph_error=r.graph_error, compiled=r.compiled, compile_error=r.compile_error)


def serve_compare(label: str, cfg_kw: dict, new_tokens: int = 128, prompt_len: int = 16, hf_baseline: bool = True):
    """Figures for one model shape: HF static-cache generate (fp16) against StaticEngine fp16 and W4A16.

    The W4A16 engine is measured three ways, each adding one step: graph capture
    only; + torch.compile of the step; + fused q/k/v and gate/up projections
    (the configuration reported as ``engine_w4a16``). HF's decode rate is
    ``(new_tokens - 1) / (t(new_tokens) - t(1))``: its end-to-end time minus its
    own prefill, so the decode figures compare like with like.
    """
    from ...quant import quantize_model, set_activations, weight_bytes
    from ...serving import StaticEngine, fuse_projections, hf_generate, unfuse_projections

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
        eng = StaticEngine(m, max_len=max_len, **kw)
        eng.generate(ids, 8)  # compile, capture, warm up
        return eng

    if hf_baseline:
        hf_generate(m, ids, new_tokens)  # warm-up: same cache length, so the compiled forward is reused
        t_hf = _time(lambda: hf_generate(m, ids, new_tokens))
        t_hf1 = _time(lambda: hf_generate(m, ids, 1))
        hf_decode = (new_tokens - 1) / (t_hf - t_hf1)
        fig("hf_static/tokens_per_s", new_tokens / t_hf, "tokens/s",
            note=f"model.generate(cache_implementation='static'), greedy, {new_tokens} new tokens after "
                 f"{prompt_len}, end to end")
        fig("hf_static/decode_tokens_per_s", hf_decode, "tokens/s", "ARITHMETIC",
            note=f"(new_tokens - 1) / (time for {new_tokens} new tokens - time for 1), both MEASURED "
                 f"({t_hf * 1e3:.1f} and {t_hf1 * 1e3:.1f} ms)")
    fuse_projections(m)
    eng = engine()
    r16 = eng.generate(ids, new_tokens)
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
        r = eng.generate(ids, new_tokens)
        fig(f"{name}/decode_tokens_per_s", r.decode_tokens_per_s, "tokens/s", note=note, **_engine_meta(r))
        del eng
    fuse_projections(m)
    eng = engine()
    t_e2e = _time(lambda: eng.generate(ids, new_tokens))
    r = eng.generate(ids, new_tokens)
    fig("engine_w4a16/tokens_per_s", new_tokens / t_e2e, "tokens/s",
        note="end to end like the HF figure (eager prefill + decode)", **_engine_meta(r))
    fig("engine_w4a16/decode_tokens_per_s", r.decode_tokens_per_s, "tokens/s",
        note="CUDA graph of the compiled step, fused q/k/v and gate/up projections")
    fig("engine_w4a16/ttft", r.ttft_s * 1e3, "ms", prompt_len=prompt_len, note="eager prefill")
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
    r8 = eng.generate(ids, new_tokens)
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


def run(out_dir: str | Path, quick: bool = False, serving: bool = True) -> list[dict]:
    """Run every section (one failing section does not stop the others); write three results files."""
    out_dir = Path(out_dir)
    all_figs = []
    for fname, section in (("w4a16_gemv.json", _gemv_section), ("w4a16_gemm.json", _gemm_section)):
        figs, errors = [bench.copy_bandwidth_figure(SOURCE)], []
        try:
            section(figs, errors, quick)
        except Exception:
            errors.append(traceback.format_exc(limit=3))
        results.write(out_dir / fname, figs, errors=errors, shapes="KxN (in x out)")
        all_figs += figs
    if serving:
        figs, errors = [], []
        for label, cfg, n in (("serve/qwen2.5-0.5b-shape", QWEN05, 128), ("serve/qwen2.5-7b-shape", QWEN7B, 128)):
            try:
                figs += serve_compare(label, cfg, new_tokens=n // (2 if quick else 1))
            except Exception as e:
                errors.append(f"{label}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
                torch.cuda.empty_cache()
        results.write(out_dir / "w4a16_serving.json", figs, errors=errors,
                      note="random weights, batch 1, greedy; HF baseline is fp16 with a static cache")
        all_figs += figs
    return all_figs


# What the labs of tools/gemv_lab tried on the M = 1 GEMV (their records: results.load_labs):
# (approach, kind, lab file, shape, which cases count as the attempt, the library's case in that run).
# kind: "floor" (not a GEMV), "library numerics" (the same results as the library), "int8 activations" (other numerics).
_ATTEMPTS = [
    ("the same weight loads, no arithmetic (read floor)", "floor", "gemv_lab.json", "5120x17408", ("R2U4_RO/p1",),
     "lib"),
    ("a copy_ of the same byte count", "floor", "xs_lab.json", "5120x17408", ("copy_same_bytes",), "rowgroup"),
    ("x held in registers, no activation loads (best of 10)", "library numerics", "xs_lab.json", "5120x17408",
     "variants", "rowgroup"),
    ("3-8 register stages of loads (best of 15)", "library numerics", "stages_lab.json", "5120x17408", "variants",
     "R2U2ST2MB4"),
    ("dot products on the tensor cores (best of 3)", "library numerics", "mma_lab.json", "5120x17408", "variants", "lib"),
    ("K split forced to 4 (17408x5120)", "library numerics", "stages_split_lab.json", "17408x5120", ("R2U2ST2MB4/S4",),
     "R2U2ST2MB4/S1"),
    ("x quantized to int8, DP4A dot products (best of 8)", "int8 activations", "dp4a_lab.json", "5120x17408",
     "variants", "library"),
]


def recorded_gemv_attempts(labs: dict[str, dict]) -> list[dict]:
    """The recorded lab attempts at the M = 1 INT4 GEMV (MEASURED; ratios ARITHMETIC), each as its
    fastest case's median time beside the library's kernel timed in the same process:
    ``{"approach", "kind", "shape", "case", "us", "library_us", "ratio", "source"}``, ``ratio`` = us /
    library_us (above 1: slower than the library). ``labs``: lab records by name, as
    :func:`t4lib.results.load_labs` returns them (this module reads no file). "variants" means every
    variant the lab lists except the library's own tuning. Labs not in ``labs`` are left out."""
    rows = []
    for approach, kind, name, shape, cases, lib in _ATTEMPTS:
        doc = labs.get(name.removesuffix(".json"))
        if doc is None:
            continue
        timed = doc["gemv"][shape]
        if cases == "variants":
            cases = [v for v in doc["variants"].values() if v != lib and "/S" not in v]
        us, case = min((timed[c]["us"], c) for c in cases if c in timed)
        where = f"{doc['device']} lab {name} @ {str(doc.get('commit', '?'))[:7]}"
        rows.append({"approach": approach, "kind": kind, "shape": shape, "case": case, "us": us,
                     "library_us": timed[lib]["us"], "ratio": us / timed[lib]["us"], "source": where})
    return rows
