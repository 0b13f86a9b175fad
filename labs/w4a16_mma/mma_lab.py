"""Launch-configuration and ablation lab of the W4A16 MMA GEMM (not part of the library).

    python labs/w4a16_mma/mma_lab.py OUT.json [--m 8 2 16 64 32 4] [--results SWEEP.json]

Run from the repository root on a GPU. Until this lab left the package it was the ``--lab`` mode of
``python3 -m t4lib.benchmarks.w4a16`` (and, before that, of ``t4lib.ops.w4a16.bench``); the records of this folder
name the command that ran them, each at its commit.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from t4lib.benchmarks.w4a16 import MMA_SHAPES, SOURCE, _qbytes, _rand_qw, gemm_cases
from t4lib.core import hw, results, timing
from t4lib.ops.w4a16 import binding, layout
from t4lib.ops.w4a16.format import QuantizedWeight


def mma_lab(out: str | Path, shapes=None, ms=(2, 4, 8, 16, 32, 64), command: str = "",
            results_out: str | Path | None = None) -> dict:
    """Launch-configuration and ablation lab of the MMA GEMM (a lab record, not a results file).

    Per shape and M, medians in us over CUDA-graph replay with cold L2, in one ``timing.compare``:
    cuBLAS fp16; the MMA GEMM as the library launches it (``w4a16_mma``) and with R (16-row tiles per item)
    and the K splits forced; for M-tile counts 1, 2 and 8: the same loads without the dequantization
    and MMAs (``loads_only``), without the MMAs (``no_mma``), with 2 or 6 register stages of weight
    loads instead of 4 (``stages2``, ``stages6``), with the other accumulator-set count (``other_chains``:
    one set instead of two for M <= 8 with R = 1, two instead of one otherwise); the WMMA GEMM and the GEMV.
    ``results_out``: also a results file of the library's cases (cuBLAS, the MMA GEMM,
    the GEMV, the WMMA GEMM) under the names of ``t4lib.benchmarks.w4a16``'s GEMM section."""
    shapes = shapes or MMA_SHAPES
    dev = torch.cuda.current_device()
    doc = {"device": torch.cuda.get_device_name(), "commit": results.git_commit()[0] or "0000000",
           "command": command, "date": results.now(),
           "note": "labs/w4a16_mma/mma_lab.py: medians in us, CUDA-graph replay, cold L2; frac = bytes of "
                   "the INT4 weight + scales + x + y / time / copy bandwidth; x_cublas = cuBLAS fp16 time / time",
           "copy_bw_GBps": hw.copy_bandwidth() / 1e9, "shapes": {}}
    figs = [timing.copy_bandwidth_figure(SOURCE)]
    library_cases = ("cublas_fp16", "w4a16_mma", "w4a16_gemv", "w4a16_gemm")
    for M in ms:  # M outer: a timeout leaves whole M rows
        for (K, N) in shapes:
            R, S = binding.mma_config(M, N, K, dev)

            def packed():
                return torch.randn(M, K, device="cuda").half(), layout.pack(QuantizedWeight(*_rand_qw(N, K), N, K,
                                                                                             128))

            def run_lw(r=0, splits=0, variant=0):
                def fn(x, lw):
                    out = torch.empty(M, N, dtype=torch.float16, device="cuda")
                    binding.mma(x, lw.tiles, lw.scales, N, 128, out, r=r, splits=splits, variant=variant)
                    return out
                return fn, packed

            cases = gemm_cases(M, K, N)  # w4a16_mma: the library's launch (R, splits recorded beside)
            cases[f"R{3 - R}"] = run_lw(r=3 - R)
            for s in sorted({1, max(1, S // 2), 2 * S}):
                if s != S:
                    cases[f"R{R}_S{s}"] = run_lw(r=R, splits=s)
            if (M + 7) // 8 in (1, 2, 8):
                cases["loads_only"] = run_lw(variant=1)
                cases["no_mma"] = run_lw(variant=2)
                cases["stages2"] = run_lw(variant=3)
                cases["stages6"] = run_lw(variant=4)
                if M <= 16:
                    cases["other_chains"] = run_lw(variant=5)
            key = f"{K}x{N}/M{M}"
            try:
                res = timing.compare(cases, "cublas_fp16", bytes_moved=_qbytes(M, K, N), rounds=2, iters=5,
                                    max_sets=32)
                base = res["cases"]["cublas_fp16"]["median_s"]
                doc["shapes"][key] = {"R": R, "splits": S, **{
                    c: {"us": round(st["median_s"] * 1e6, 2), "frac": round(st.get("frac_copy_bw", 0), 3),
                        "x_cublas": round(base / st["median_s"], 2)} for c, st in res["cases"].items()}}
                lib = {**res, "cases": {c: st for c, st in res["cases"].items() if c in library_cases}}
                figs += timing.to_figures(lib, f"w4a16_gemm/M{M}/{K}x{N}", SOURCE)
            except Exception as e:
                doc["shapes"][key] = {"error": f"{type(e).__name__}: {e}"}
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps(doc, indent=1) + "\n")  # after every shape: a timeout keeps the rest
            if results_out:
                results.write(results_out, figs, errors=[], shapes="KxN (in x out)",
                              note="library cases of the MMA lab run (labs/w4a16_mma/mma_lab.py)")
            torch.cuda.empty_cache()
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python labs/w4a16_mma/mma_lab.py")
    p.add_argument("out", help="the lab record to write")
    p.add_argument("--m", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    p.add_argument("--results", default=None, help="also a results file of the library cases")
    a = p.parse_args(argv)
    mma_lab(a.out, ms=a.m, results_out=a.results,
            command=" ".join(["python", "labs/w4a16_mma/mma_lab.py", *(argv if argv is not None else sys.argv[1:])]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
