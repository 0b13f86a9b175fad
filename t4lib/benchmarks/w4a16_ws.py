"""Warp specialization of the W4A16 prefill GEMM: the plain WMMA kernel against its producer/consumer
twin (``gemm(..., warp_specialized=True)``), with cuBLAS on fp16 weights as what a user would run
instead, at prefill sizes of Qwen2.5-0.5B and a 14B-like projection. Shapes ``MxKxN``.

The plain kernel's 4 warps each load, dequantize and multiply, overlapping the next tile's loads
with the current MMAs through registers. In the twin 2 producer warps load and dequantize into a
shared-memory ring while 4 consumer warps only multiply. Nsight Compute's stall shares
(``--ncu-probe`` under ``NCU_CMD``) say where the warps of each wait: on global loads (long
scoreboard) or on barriers. On a Hopper GPU cuBLAS runs instructions compute_75 code cannot
(wgmma, TMA), so the cuBLAS ratio says nothing about a T4.

``python3 -m t4lib.benchmarks.w4a16_ws [--ncu-log LOG]`` writes ``w4a16_gemm_ws.json``.
"""
from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from t4lib.benchmarks import ncu_log_figures
from t4lib.core import timing, hw, results
from t4lib.ops.w4a16 import gemm
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.ops.w4a16.format import QuantizedWeight

SOURCE = "t4lib.benchmarks.w4a16_ws"
SHAPES = [(512, 896, 4864), (512, 4864, 896), (2048, 896, 4864), (2048, 4864, 896), (512, 5120, 17408)]  # M, K, N
NCU_PROBES = [(2048, 896, 4864), (512, 5120, 17408)]
NCU_METRICS = ",".join(["gpu__time_duration.sum"] +
                       [f"smsp__warp_issue_stalled_{s}_per_warp_active.pct" for s in timing.STALLS])
NCU_CMD = (f"ncu --clock-control none --cache-control all --print-units base --metrics {NCU_METRICS} "
           f"--kernel-name regex:'w4a16_gemm_kernel|w4a16_gemm_ws_kernel' python3 -m t4lib.benchmarks.w4a16_ws "
           f"--ncu-probe")
GROUP = 128


def _inputs(M, K, N, dev="cuda"):
    return (torch.randn(M, K, device=dev).half(), *_rand_qw(N, K, GROUP, dev))


def cases(M, K, N) -> dict:
    qw = lambda q, s: QuantizedWeight(q, s, N, K, GROUP)  # noqa: E731
    return {
        "cublas_fp16": (lambda x, w: F.linear(x, w),
                        lambda: (torch.randn(M, K, device="cuda").half(), torch.randn(N, K, device="cuda").half())),
        "w4a16_gemm": (lambda x, q, s: gemm(x, qw(q, s), backend="cuda"), lambda: _inputs(M, K, N)),
        "w4a16_gemm_ws": (lambda x, q, s: gemm(x, qw(q, s), backend="cuda", warp_specialized=True),
                          lambda: _inputs(M, K, N)),
    }


def _shape_figures(M, K, N, quick) -> list[dict]:
    name = f"warp_specialized/w4a16_gemm/{M}x{K}x{N}"
    qbytes = _qbytes(M, K, N, GROUP)
    res = timing.compare(cases(M, K, N), "w4a16_gemm", bytes_moved=qbytes, flops=2 * M * N * K, rounds=3,
                        iters=5 if quick else 10, max_sets=32)
    figs = timing.to_figures(res, name, SOURCE)
    c = res["cases"]
    figs.append(results.figure(f"{name}/speedup_vs_plain", c["w4a16_gemm"]["median_s"] / c["w4a16_gemm_ws"]["median_s"],
                               "x", "ARITHMETIC", SOURCE, note="median plain WMMA kernel / median warp-specialized "
                                                               "kernel, same process (target: >= 1, no slower)"))
    figs.append(results.figure(f"{name}/ws_speedup_vs_cublas_fp16",
                               c["cublas_fp16"]["median_s"] / c["w4a16_gemm_ws"]["median_s"], "x", "ARITHMETIC",
                               SOURCE, note="median cuBLAS on fp16 weights / median warp-specialized kernel, same "
                                            "process; on Hopper cuBLAS uses wgmma/TMA, which sm_75 code cannot"))
    return figs


def ncu_probe() -> None:
    """Launch the plain kernel, then the warp-specialized one, once per probed shape."""
    for M, K, N in NCU_PROBES:
        x, q, s = _inputs(M, K, N)
        w = QuantizedWeight(q, s, N, K, GROUP)
        torch.cuda.synchronize()
        print(f"probe {M}x{K}x{N}", flush=True)
        gemm(x, w, backend="cuda")
        gemm(x, w, backend="cuda", warp_specialized=True)
        torch.cuda.synchronize()


def parse_ncu(text: str) -> list[dict]:
    """Per profiled kernel, in launch order: ``{"kernel": "plain" | "ws", "stall_<reason>_pct": ...}``."""
    rows = []
    for k, metrics in timing.ncu_kernels(text, r"\b(w4a16_gemm_ws_kernel|w4a16_gemm_kernel)\b"):
        rows.append({"kernel": "ws" if k.group(1) == "w4a16_gemm_ws_kernel" else "plain",
                     **timing.ncu_stall_shares(metrics)})
    return rows


def figures_from_ncu_log(text: str) -> list[dict]:
    """MEASURED stall shares of both kernels and their ratio, per probed shape."""
    rows, figs, env = parse_ncu(text), [], results.environment()
    src = f"{SOURCE} --ncu-probe under: {NCU_CMD}"
    for (M, K, N), pair in zip(NCU_PROBES, [rows[i:i + 2] for i in range(0, len(rows), 2)]):
        if [r["kernel"] for r in pair] != ["plain", "ws"]:
            break
        plain, ws = pair
        figs += timing.stall_figures("w4a16_gemm", ("w4a16_gemm_kernel", "w4a16_gemm_ws_kernel"), f"{M}x{K}x{N}",
                                     plain, ws, env, src)
    return figs


def run(out_dir: str | Path, quick: bool = False, ncu_log: str | Path | None = None) -> Path:
    figs, errors = [timing.copy_bandwidth_figure(SOURCE)], []
    for M, K, N in SHAPES[:2] if quick else SHAPES:
        try:
            figs += _shape_figures(M, K, N, quick)
        except Exception as e:
            errors.append(f"{M}x{K}x{N}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
        torch.cuda.empty_cache()
    if ncu_log:
        figs += ncu_log_figures(ncu_log, figures_from_ncu_log, errors)
    return results.write(Path(out_dir) / "w4a16_gemm_ws.json", figs, errors=errors, shapes="MxKxN",
                         ncu_command=NCU_CMD,
                         note="t4lib kernels are compute_75 PTX JIT-compiled on this GPU; cuBLAS runs native code")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m t4lib.benchmarks.w4a16_ws", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="results folder (default results/<device-slug>)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ncu-log", default=None, help="output of NCU_CMD to turn into figures")
    ap.add_argument("--ncu-probe", action="store_true", help="launch both kernels once per probed shape and exit")
    a = ap.parse_args(argv)
    if a.ncu_probe:
        ncu_probe()
        return 0
    out = Path(a.out) if a.out else results.results_dir() / hw.device_slug()
    print(run(out, quick=a.quick, ncu_log=a.ncu_log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
