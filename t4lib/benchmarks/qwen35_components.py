"""The 27B qwen35 decode components on the GPU: the fused Gated DeltaNet step
(:mod:`t4lib.benchmarks.deltanet`), the GGUF dequant-GEMV at the FFN shapes
(:mod:`t4lib.benchmarks.gguf`), and a whole 27B-shape DeltaNet layer (GGUF
projections + step) end to end.

``run(out_dir)`` writes ``out_dir/qwen35_deltanet.json`` and returns its figures
(``python -m t4lib bench deltanet``). Each part is guarded: a failure is recorded
as a note and the rest still runs. Without fla its baseline is recorded as not measured, and the
file keeps the figures against fla of the last run that had it.
"""
from __future__ import annotations

import traceback
from pathlib import Path

import torch

from t4lib.core import timing, results
from t4lib.ops.deltanet import state_bytes
from t4lib.benchmarks.deltanet import D, H, decode_step
from t4lib.benchmarks.gguf import HIDDEN, dequant_gemv
from t4lib.models.qwen35.deltanet import DeltaNetLayer

SOURCE = "t4lib.benchmarks.qwen35_components"


def full_layer(B: int = 1, quick: bool = False) -> tuple[list[dict], dict]:
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
    res = timing.compare(cases, baseline="layer_head", bytes_moved=nbytes, rounds=3, iters=10 if quick else 20,
                        max_sets=2)
    meta = {"layer_bytes": nbytes, "weight_bytes": lay.weight_bytes,
            "formats": {"attn_qkv": "Q4_K", "attn_gate": "Q4_K", "ssm_out": "Q6_K", "alpha/beta": "fp16"},
            "note": "two layers alternate (their weights together exceed L2 only partly: H200 L2 is 60 MB)"}
    return timing.to_figures(res, f"deltanet_layer/B{B}", SOURCE), meta


def run(out_dir: str | Path, quick: bool = False) -> list[dict]:
    """All parts; writes ``out_dir/qwen35_deltanet.json``."""
    figs = [timing.copy_bandwidth_figure(SOURCE)]
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
    skipped = [m["fla"] for m in meta.values() if isinstance(m, dict) and str(m.get("fla", "")).startswith("skipped")]
    if skipped:   # an error keeps the figures against fla of the last run that measured them (carried_over)
        meta["errors"]["fla"] = (f"flash-linear-attention baseline not measured, {skipped[0]}: the figures "
                                 "against it are kept from the last run that had it, marked carried_over")
    results.write(Path(out_dir) / "qwen35_deltanet.json", figs, **meta)
    return figs
