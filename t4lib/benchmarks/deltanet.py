"""Benchmark of the fused Gated DeltaNet decode step at the 27B shape (both
launch shapes, against fla's fused recurrent kernel when installed).

:func:`decode_step` returns figures and metadata; the 27B decode-components run
that writes ``qwen35_deltanet.json`` (this step, the GGUF GEMVs, a whole layer)
is :mod:`t4lib.benchmarks.qwen35_components`.
"""
from __future__ import annotations

import torch

from t4lib.core import timing, hw, results
from t4lib.ops.deltanet import SPLITS, VARIANTS, gated_deltanet_decode, reference, state_bytes

SOURCE = "t4lib.benchmarks.deltanet"
H, HK, D = 48, 16, 128   # value heads, key heads, head dim of the 27B model


def _fla():
    try:
        # optional: the fla baseline, skipped without it
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
    res = timing.compare(cases, baseline=baseline, bytes_moved=nbytes, rounds=3, iters=10 if quick else 30)
    figs = timing.to_figures(res, f"deltanet_decode/B{B}", SOURCE)
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
