"""W4A16 benchmark: GEMV and the small-M / prefill kernels against cuBLAS fp16 (and
bitsandbytes NF4 when installed). The engines built on them (decode serving against
Hugging Face ``generate``, batched sampling W4A16 against fp16) are benchmarked in
:mod:`t4lib.benchmarks.serving`.

The GEMM section times, at every shape of ``MMA_SHAPES`` and every M of ``MMA_M``,
cuBLAS on fp16 weights (the baseline) and each W4A16 kernel in its range (GEMV,
MMA GEMM, WMMA GEMM, dequantize-then-cuBLAS) in one process.

Shapes are written ``KxN`` (in_features x out_features), e.g. ``5120x17408`` is
a 5120 -> 17408 projection. ``bytes_moved`` for the quantized kernels is what
they read and write: packed weights + scales + x + y (x counted as fp16 for
the int8-activation cases too: their int8 x is half that, under 0.2% of the
bytes at these shapes). ``w4a8_gemv`` is the public op with
``activations="int8"`` (quantize x, then the DP4A GEMV: two kernels);
``w4a8_gemv_kernel`` the GEMV kernel alone on x quantized beforehand, as
when one quantized x feeds several projections. Entry point:
``run(out_dir)`` writes ``w4a16_gemv.json`` and ``w4a16_gemm.json`` under
``out_dir`` and returns all figures.
"""
from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from t4lib.benchmarks import out_folder, print_figures
from t4lib.core import results, timing
from t4lib.ops.int4 import int4_dequant
from t4lib.ops.int8_activations import empty_blocks
from t4lib.ops.w4a16 import GEMV_MAX_M, MMA_MAX_M, binding, gemm, gemv, matmul_kernel, mma
from t4lib.ops.w4a16.format import QuantizedWeight

SOURCE = "t4lib.benchmarks.w4a16"
GEMV_SHAPES = [(5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896), (896, 896), (1536, 8960),
               (8960, 1536)]
GEMV_MULTI_M = [(2, 5120, 17408), (4, 5120, 17408), (8, 5120, 17408), (2, 896, 4864), (4, 896, 4864),
                (8, 896, 4864)]
GEMM_SHAPES = [(5120, 17408), (896, 4864)]
GEMM_M = [4, 8, 16, 32, 64, 128, 512]
# Small-M sweep (issue 23): the 14B/27B-like, 1.5B and 0.5B projections, both directions.
MMA_SHAPES = [(5120, 17408), (17408, 5120), (1536, 8960), (8960, 1536), (896, 4864), (4864, 896)]
MMA_M = [1, 2, 4, 8, 16, 32, 64, 128]



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
        import bitsandbytes.functional as bf  # optional: bitsandbytes (no extra declares it), only when _bnb() found it

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
                res = timing.compare(gemv_cases(1, K, N), "cublas_fp16", bytes_moved=_qbytes(1, K, N), rounds=3,
                                    iters=it)
            except Exception as e:  # bitsandbytes failing must not cost the other cases
                if _bnb() is None:
                    raise
                errors.append(f"{name} with bnb_nf4: {type(e).__name__}: {e}; rerun without it")
                res = timing.compare(gemv_cases(1, K, N, with_bnb=False), "cublas_fp16", bytes_moved=_qbytes(1, K, N),
                                    rounds=3, iters=it)
            figs += timing.to_figures(res, name, SOURCE)
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
            res = timing.compare(gemv_cases(M, K, N, with_bnb=False), "cublas_fp16", bytes_moved=_qbytes(M, K, N),
                                rounds=3, iters=it)
            figs += timing.to_figures(res, name, SOURCE)
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {e}")


def _fp16_w(N, K, dev="cuda"):
    return torch.randn(N, K, device=dev).half() * 0.02


def gemm_cases(M, K, N, dequant_baseline: bool = False) -> dict:
    """Every kernel a user of ``M`` rows of ``x [M, K]`` against a ``[N, K]`` weight could run: cuBLAS on
    fp16 weights (the baseline), the W4A16 kernels in their M ranges, optionally dequantize-then-cuBLAS."""
    dev = "cuda"
    xq = lambda: (torch.randn(M, K, device=dev).half(), *_rand_qw(N, K))  # noqa: E731
    qw = lambda q, s: QuantizedWeight(q, s, N, K, 128)  # noqa: E731
    cases = {"cublas_fp16": (lambda x, w: F.linear(x, w), lambda: (torch.randn(M, K, device=dev).half(),
                                                                   _fp16_w(N, K)))}
    if M <= MMA_MAX_M:
        cases["w4a16_mma"] = (lambda x, q, s: mma(x, qw(q, s), backend="cuda"), xq)
    if M <= GEMV_MAX_M:
        cases["w4a16_gemv"] = (lambda x, q, s: gemv(x, qw(q, s), backend="cuda"), xq)
    if M >= 4:
        cases["w4a16_gemm"] = (lambda x, q, s: gemm(x, qw(q, s), backend="cuda"), xq)
    if dequant_baseline or M > MMA_MAX_M:  # above the MMA range it is what matmul runs
        def deq_cublas(x, q, s):
            return F.linear(x, int4_dequant(q.view(-1), s.view(-1), 128, backend="cuda").view(N, K))
        cases["dequant_then_cublas"] = (deq_cublas, xq)
    return cases


def _gemm_section(figs, errors, quick):
    """Every M of MMA_M (and GEMM_M at GEMM_SHAPES) at every MMA shape against cuBLAS fp16, same process."""
    shapes = MMA_SHAPES[:2] + MMA_SHAPES[4:] if quick else MMA_SHAPES
    for (K, N) in shapes:
        ms = sorted(set(MMA_M) | (set(GEMM_M) if (K, N) in GEMM_SHAPES else set()))
        for M in ([m for m in ms if m in (1, 4, 16, 64)] if quick else ms):
            name = f"w4a16_gemm/M{M}/{K}x{N}"
            try:
                res = timing.compare(gemm_cases(M, K, N, dequant_baseline=(K, N) in GEMM_SHAPES), "cublas_fp16",
                                    bytes_moved=_qbytes(M, K, N), flops=2 * M * N * K, rounds=3,
                                    iters=5 if quick else 10, max_sets=32)
                figs += timing.to_figures(res, name, SOURCE)
                cs = res["cases"]
                fp16_bytes = N * K * 2 + M * K * 2 + M * N * 2
                figs.append(results.figure(f"{name}/cublas_fp16/frac_copy_bw_own_bytes",
                                           fp16_bytes / cs["cublas_fp16"]["median_s"] / res["copy_bw_Bps"],
                                           "fraction", "ARITHMETIC", SOURCE,
                                           note=f"cuBLAS reads its fp16 weight: {fp16_bytes} bytes / median time / "
                                                f"copy bandwidth"))
                if "dequant_then_cublas" in cs:
                    for case in cs:
                        if case != "dequant_then_cublas":
                            figs.append(results.figure(
                                f"{name}/{case}/speedup_vs_dequant_then_cublas",
                                cs["dequant_then_cublas"]["median_s"] / cs[case]["median_s"], "x", "ARITHMETIC",
                                SOURCE, note=f"median dequant_then_cublas / median {case}, same run (an internal "
                                             f"baseline; the one that counts is cublas_fp16)"))
            except Exception as e:
                errors.append(f"{name}: {type(e).__name__}: {e}")
            torch.cuda.empty_cache()


def run(out_dir: str | Path, quick: bool = False, gemv_section: bool = True, gemm_section: bool = True) -> list[dict]:
    """Run the chosen sections (one failing section does not stop the other); each writes its results
    file: w4a16_gemv.json, w4a16_gemm.json. The engines' benchmarks (w4a16_serving.json,
    w4a16_serve_batch.json) are :mod:`t4lib.benchmarks.serving`."""
    out_dir = Path(out_dir)
    all_figs = []
    for fname, section, on in (("w4a16_gemv.json", _gemv_section, gemv_section),
                               ("w4a16_gemm.json", _gemm_section, gemm_section)):
        if not on:
            continue
        figs, errors = [timing.copy_bandwidth_figure(SOURCE)], []
        try:
            section(figs, errors, quick)
        except Exception:
            errors.append(traceback.format_exc(limit=3))
        results.write(out_dir / fname, figs, errors=errors, shapes="KxN (in x out)")
        all_figs += figs
    return all_figs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m t4lib.benchmarks.w4a16")
    p.add_argument("--out", default=None, help="results folder (default results/<device-slug>)")
    p.add_argument("--sections", nargs="+", default=["gemv", "gemm"], choices=["gemv", "gemm"])
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    figs = run(out_folder(a.out), quick=a.quick, gemv_section="gemv" in a.sections, gemm_section="gemm" in a.sections)
    print_figures(figs)
    return 0


# Issue 23's speed targets for the kernel matmul picks: (shapes, M range, least speedup over cuBLAS fp16).
MMA_TARGETS = [(((5120, 17408), (17408, 5120)), (2, 16), 3.0), (((5120, 17408), (17408, 5120)), (32, 64), 2.0),
               (((1536, 8960), (8960, 1536)), (2, 16), 2.0), (((896, 4864), (4864, 896)), (1, 128), 1.0)]


_CASE_OF_KERNEL = {"gemv": "w4a16_gemv", "mma": "w4a16_mma", "gemm": "w4a16_gemm",
                   "dequant_cublas": "dequant_then_cublas"}


def matmul_sweep(figs: dict[str, dict], shapes=None, ms=None) -> list[dict]:
    """Rows of the small-M sweep from a ``w4a16_gemm.json`` (``{name: figure}``, as
    :func:`t4lib.core.results.figures_by_name` returns): per shape and M the cuBLAS fp16 time, the time of
    the kernel :func:`~t4lib.ops.w4a16.matmul` picks, its speedup and fraction of copy bandwidth, and the
    MMA GEMM's speedup where it was timed. Shapes or Ms without figures are left out."""
    rows = []
    for (K, N) in shapes or MMA_SHAPES:
        for M in ms or MMA_M:
            p = f"w4a16_gemm/M{M}/{K}x{N}"
            kern = _CASE_OF_KERNEL[matmul_kernel(M, N=N)]
            if f"{p}/{kern}/time_median" not in figs:
                continue
            mma_x = figs.get(f"{p}/w4a16_mma/speedup_vs_cublas_fp16")
            rows.append({"shape": f"{K}x{N}", "M": M, "kernel": kern,
                         "cublas_us": figs[f"{p}/cublas_fp16/time_median"]["value"],
                         "us": figs[f"{p}/{kern}/time_median"]["value"],
                         "speedup": figs[f"{p}/{kern}/speedup_vs_cublas_fp16"]["value"],
                         "frac_copy_bw": figs[f"{p}/{kern}/frac_copy_bw"]["value"],
                         "mma_speedup": mma_x["value"] if mma_x else None,
                         "device": figs[f"{p}/{kern}/time_median"]["device"]})
    return rows


def target_verdicts(rows: list[dict]) -> list[str]:
    """One line per target of MMA_TARGETS: met or missed, with the worst measured speedup and where."""
    out = []
    for shapes, (lo, hi), want in MMA_TARGETS:
        names = {f"{K}x{N}" for K, N in shapes}
        sel = [r for r in rows if r["shape"] in names and lo <= r["M"] <= hi]
        if not sel:
            out.append(f"{' / '.join(sorted(names))}, M = {lo}..{hi}, >= {want:.1f}x cuBLAS fp16: not measured")
            continue
        worst = min(sel, key=lambda r: r["speedup"])
        out.append(f"{' / '.join(sorted(names))}, M = {lo}..{hi}, >= {want:.1f}x cuBLAS fp16: "
                   f"{'met' if worst['speedup'] >= want else 'MISSED'} (worst {worst['speedup']:.2f}x, "
                   f"{worst['kernel']} at M={worst['M']} {worst['shape']}; {len(sel)} points)")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
