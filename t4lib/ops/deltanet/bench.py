"""Benchmarks of issue 'qwen35 Gated DeltaNet decode': the fused decode step at
the 27B shape (both launch shapes, against fla's fused recurrent kernel when
installed), the GGUF dequant-GEMV at the FFN shapes, and a whole 27B-shape
DeltaNet layer (GGUF projections + step) end to end.

``run(out_dir)`` writes ``out_dir/qwen35_deltanet.json`` and returns its figures.
Each part is guarded: a failure is recorded as a note and the rest still runs.
"""
from __future__ import annotations

import traceback
from pathlib import Path

import torch

from ... import bench, hw, results
from . import SPLITS, VARIANTS, gated_deltanet_decode, reference, state_bytes

SOURCE = "t4lib.ops.deltanet.bench"
H, HK, D, HIDDEN, FFN = 48, 16, 128, 5120, 17408


def _fla():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        return fused_recurrent_gated_delta_rule, None
    except Exception as e:  # not installed or broken here
        return None, f"{type(e).__name__}: {e}"


def decode_step(B: int, quick: bool = False) -> tuple[list[dict], dict]:
    dev = "cuda"
    L = reference.random_layer(H, HK, seed=1, device=dev)
    seeds = iter(range(10_000))

    def make():
        s = next(seeds)
        X = reference.random_step(B, H, HK, seed=s, dtype=torch.float16, device=dev)
        S = reference.random_state(B, H, HK, seed=s, dtype=torch.float16, device=dev)
        out = torch.empty(B, H * D, dtype=torch.float16, device=dev)
        return (X["qkv"], X["z"], X["alpha"], X["beta"], S["conv_state"], torch.empty_like(S["conv_state"]),
                S["state"], out)

    def ours(variant):
        def fn(qkv, z, a, b, cs, cs_out, st, out):
            gated_deltanet_decode(qkv, z, a, b, cs, st, L["conv_w"], L["ssm_a"], L["dt_bias"], L["ssm_norm"],
                                  num_k_heads=HK, head_order="gguf", conv_state_out=cs_out, out=out,
                                  variant=variant, backend="cuda")
        return fn

    cases = {f"t4lib_{name}": (ours(name), make) for name in VARIANTS}
    for split in SPLITS:  # the named variants, plus every other split
        if split not in VARIANTS.values():
            cases[f"t4lib_split{split}"] = (ours(split), make)
    fla_fn, fla_err = _fla()
    meta = {"B": B, "fla": "measured" if fla_fn else f"skipped ({fla_err})"}
    if fla_fn is not None:
        def make_fla():
            g = torch.Generator(device=dev).manual_seed(next(seeds))
            q = torch.randn(B, 1, H, D, device=dev, dtype=torch.float16, generator=g)
            k = torch.randn(B, 1, H, D, device=dev, dtype=torch.float16, generator=g)
            v = torch.randn(B, 1, H, D, device=dev, dtype=torch.float16, generator=g)
            gg = -torch.rand(B, 1, H, device=dev, generator=g)
            beta = torch.rand(B, 1, H, device=dev, dtype=torch.float16, generator=g)
            st = 0.05 * torch.randn(B, H, D, D, device=dev, generator=g)
            return q, k, v, gg, beta, st

        def run_fla(q, k, v, gg, beta, st):
            fla_fn(q=q, k=k, v=v, g=gg, beta=beta, initial_state=st, output_final_state=True,
                   use_qk_l2norm_in_kernel=True)

        cases["fla_fused_recurrent"] = (run_fla, make_fla)
        meta["fla_note"] = ("fla's fused_recurrent_gated_delta_rule does the recurrence only (q/k/v already "
                            "convolved, heads expanded to 48, no output gate); ours also does conv, gates and the "
                            "gated RMSNorm")
    # Floors in the same harness: the step reads and writes the state once, as a copy_ of it
    # does; a one-element kernel is the launch cost inside a graph.
    nbytes = state_bytes(B, H, D, D)
    cases["floor_copy_state"] = (lambda dst, src: dst.copy_(src),
                                 lambda: (torch.empty(nbytes // 8, device=dev), torch.empty(nbytes // 8, device=dev)))
    cases["floor_one_element_kernel"] = (lambda t: t.add_(1), lambda: (torch.zeros(1, device=dev),))
    meta["floor_note"] = ("floor_copy_state: torch copy_ of a state-sized fp32 buffer (the same bytes read and "
                          "written); floor_one_element_kernel: launch cost of one kernel inside a CUDA graph")
    baseline = "fla_fused_recurrent" if fla_fn else "t4lib_head"
    res = bench.compare(cases, baseline=baseline, bytes_moved=nbytes, rounds=3, iters=10 if quick else 30)
    figs = bench.to_figures(res, f"deltanet_decode/B{B}", SOURCE)
    ours_t = {n: st["median_s"] for n, st in res["cases"].items() if n.startswith("t4lib")}
    best = min(ours_t, key=ours_t.get)
    figs.append(results.figure(f"deltanet_decode/B{B}/{best}/frac_of_copy_floor",
                               res["cases"]["floor_copy_state"]["median_s"] / ours_t[best], "fraction", "ARITHMETIC",
                               SOURCE, note="median time of a state-sized copy_ / median time of the fastest launch "
                                            "shape, same run"))
    meta.update(fastest=best, state_bytes=nbytes, t4_floor_us=hw.t4_time_estimate(nbytes) * 1e6)
    figs.append(results.figure(f"deltanet_decode/B{B}/fastest_variant_time", ours_t[best] * 1e6, "us", "ARITHMETIC",
                               SOURCE, note=f"minimum over launch shapes: {best}", variant=best))
    return figs, meta


GEMV_FORMATS = ("Q4_K", "Q6_K", "IQ4_XS", "Q8_0", "Q5_K", "Q3_K")  # read in the GEMV layout
RAW_GEMV_FORMATS = ("IQ4_NL", "IQ3_S")  # no GEMV layout: read as GGUF stores them


def dequant_gemv(quick: bool = False) -> tuple[list[dict], dict]:
    from ..gguf import FORMATS, gguf_dequant, gguf_gemv, packing, reference as gref, type_id

    dev = "cuda"
    figs, meta = [], {}
    for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
        for fmt in GEMV_FORMATS + RAW_GEMV_FORMATS:
            t = type_id(fmt)
            nv, nb = FORMATS[t][1], FORMATS[t][2]
            base_raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).to(dev)
            w16 = gguf_dequant(base_raw, t, (N, K), out_dtype=torch.float16)
            def make():  # distinct weight copies so each call reads cold weights
                return (base_raw.clone(), torch.randn(1, K, device=dev, dtype=torch.float16))

            def make16():
                return (w16.clone(), torch.randn(1, K, device=dev, dtype=torch.float16))

            cases = {"gguf_gemv": (lambda raw, x: gguf_gemv(raw, t, x, N, K, backend="cuda"), make),
                     "cublas_fp16": (lambda w, x: x @ w.t(), make16)}
            if packing.supports(t, K):  # int8 activations (other numerics): quantize x, then the DP4A GEMV
                cases["gguf_gemv_int8"] = (lambda raw, x: gguf_gemv(raw, t, x, N, K, backend="cuda",
                                                                    activations="int8"), make)
            nbytes = N * K // nv * nb + 2 * K + 2 * N
            res = bench.compare(cases, baseline="cublas_fp16", bytes_moved=nbytes, rounds=3,
                                iters=10 if quick else 20, max_sets=16)
            prefix = f"gguf_gemv/{fmt}/N{N}_K{K}"
            figs += bench.to_figures(res, prefix, SOURCE)
            meta[prefix] = {"weight_bytes": N * K // nv * nb,
                            "layout": "gemv" if packing.supports(t, K) else "gguf",  # as gguf_gemv chooses
                            "note": "cublas_fp16 reads 2 bytes per weight; its frac_copy_bw uses the GGUF bytes"}
            del base_raw, w16
            torch.cuda.empty_cache()
    return figs, meta


def full_layer(B: int = 1, quick: bool = False) -> tuple[list[dict], dict]:
    from ...models.qwen35 import DeltaNetLayer

    dev = "cuda"
    layers = [DeltaNetLayer.random(seed=s, device=dev) for s in range(2)]
    it = iter(range(10_000))

    def make():
        lay = layers[next(it) % len(layers)]
        lay.reset(B, dev)
        return (torch.randn(B, HIDDEN, device=dev, dtype=torch.float16), lay)

    def make_one():
        lay = layers[0]
        lay.reset(B, dev)
        return (torch.randn(B, HIDDEN, device=dev, dtype=torch.float16), lay)

    cases = {"layer_split": (lambda x, lay: lay.step(x, backend="cuda", variant="split"), make),
             "layer_head": (lambda x, lay: lay.step(x, backend="cuda", variant="head"), make)}
    lay = layers[0]
    nbytes = lay.weight_bytes + state_bytes(B, H, D, D)
    res = bench.compare(cases, baseline="layer_head", bytes_moved=nbytes, rounds=3, iters=10 if quick else 20,
                        max_sets=2)
    meta = {"layer_bytes": nbytes, "weight_bytes": lay.weight_bytes,
            "formats": {"attn_qkv": "Q4_K", "attn_gate": "Q4_K", "ssm_out": "Q6_K", "alpha/beta": "fp16"},
            "note": "two layers alternate (their weights together exceed L2 only partly: H200 L2 is 60 MB)"}
    return bench.to_figures(res, f"deltanet_layer/B{B}", SOURCE), meta


def run(out_dir: str | Path, quick: bool = False) -> list[dict]:
    """All parts; writes ``out_dir/qwen35_deltanet.json``."""
    figs = [bench.copy_bandwidth_figure(SOURCE)]
    meta: dict = {"errors": {}}
    parts = [("decode_B1", lambda: decode_step(1, quick)), ("decode_B4", lambda: decode_step(4, quick)),
             ("gemv", lambda: dequant_gemv(quick)), ("layer_B1", lambda: full_layer(1, quick))]
    for name, fn in parts:
        try:
            f, m = fn()
            figs += f
            meta[name] = m
        except Exception as e:  # one failure must not kill the rest
            meta["errors"][name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        torch.cuda.empty_cache()
    results.write(Path(out_dir) / "qwen35_deltanet.json", figs, **meta)
    return figs
