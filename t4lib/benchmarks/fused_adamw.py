"""Benchmark of the fused weight-gradient GEMM + AdamW at Qwen2.5-0.5B Linear shapes.

Ways to take one AdamW step of a weight ``W [N, K]`` from ``dY [T, N]`` and ``X [T, K]``:

* ``fused``: :func:`fused_adamw_`, dW never in memory;
* ``unfused`` (a): the same GEMM core writing dW fp32, then a separate AdamW kernel;
* ``fused_ws``: the same fused kernel with software warp specialization (producer/consumer warps);
* ``wgrad_only`` and ``step_only``: the two kernels of (a) timed alone, to show where time goes;
* ``torch_fused`` (b): what a user picks instead: cuBLAS ``torch.mm(dY^T, X, out_dtype=float32)``
  (fp16 in, fp32 out) into ``p.grad``, then ``torch.optim.AdamW(fused=True, capturable=True)``
  (capturable so the step joins the CUDA graph the harness times). It updates the fp32 master
  only; casting an fp16 working copy would cost it one more pass.

Shapes are ``NxK`` (out_features x in_features). On a Hopper GPU cuBLAS runs instructions
sm_75 code cannot use (wgmma, TMA), while the t4lib kernels are compute_75 PTX JIT-compiled by
the driver: the ratio against (b) on an H200 says nothing about a T4, where cuBLAS has only
Turing's mma. Entry points: ``run(out_dir)`` writes ``fused_adamw.json``; ``--ncu-probe`` launches
each kernel once per probed shape for Nsight Compute (DRAM bytes per parameter).
"""
from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import torch

from t4lib.benchmarks import ncu_log_figures
from t4lib.core import timing, hw, results
from t4lib.ops.fused_adamw import BYTES_PER_PARAM, adamw_, fused_adamw_, unfused_adamw_, weight_grad

SOURCE = "t4lib.benchmarks.fused_adamw"
# (N, K) of Qwen2.5-0.5B's projections: q/o 896x896, k/v 128x896, gate/up 4864x896, down 896x4864
SHAPES = [(896, 896), (128, 896), (4864, 896), (896, 4864)]
TOKENS = [2048, 8192]
NCU_PROBES = [(4864, 896, 2048), (896, 896, 8192)]  # (N, K, T)
HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
NCU_METRICS = ",".join(["dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"] +
                       [f"smsp__warp_issue_stalled_{s}_per_warp_active.pct" for s in timing.STALLS])
NCU_CMD = (f"ncu --clock-control none --cache-control all --print-units base --metrics {NCU_METRICS} "
           f"--kernel-name regex:'fused_adamw_gemm_kernel|fused_adamw_ws_kernel|adamw_update_kernel' "
           f"python3 -m t4lib.benchmarks.fused_adamw --ncu-probe")


def _state(N, K, dev="cuda"):
    master = torch.randn(N, K, device=dev) * 0.02
    return master, torch.zeros_like(master), torch.zeros_like(master), master.half()


def _inputs(T, N, K, dev="cuda"):
    return torch.randn(T, N, device=dev).half(), torch.randn(T, K, device=dev).half()


def _mm_fp32_out(dy, x):
    """cuBLAS dY^T X with fp16 inputs and fp32 output (fp16 output then a cast where torch lacks it)."""
    if _MM_MODE["out_dtype"]:
        try:
            return torch.mm(dy.t(), x, out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            _MM_MODE["out_dtype"] = False
    return torch.mm(dy.t(), x).float()


_MM_MODE = {"out_dtype": True}  # False once torch.mm(..., out_dtype=) is refused: fp16 output, then a cast


def cases(T, N, K, ws: bool = True):
    def fused(dy, x, master, m, v, w16):
        fused_adamw_(dy, x, master, m, v, w16, step=1, backend="cuda", **HP)

    def unfused(dy, x, master, m, v, w16, ws):
        unfused_adamw_(dy, x, master, m, v, w16, step=1, workspace=ws, backend="cuda", **HP)

    def make_torch():
        p = torch.nn.Parameter(torch.randn(N, K, device="cuda") * 0.02)
        opt = torch.optim.AdamW([p], fused=True, capturable=True, **HP)
        return (*_inputs(T, N, K), p, opt)

    def torch_fused(dy, x, p, opt):
        p.grad = _mm_fp32_out(dy, x)
        opt.step()

    def fused_ws(dy, x, master, m, v, w16):
        fused_adamw_(dy, x, master, m, v, w16, step=1, backend="cuda", warp_specialized=True, **HP)

    def wgrad_only(dy, x, ws):
        weight_grad(dy, x, out=ws, backend="cuda")

    def step_only(g, master, m, v, w16):
        adamw_(g, master, m, v, w16, step=1, backend="cuda", **HP)

    out = {
        "unfused": (unfused, lambda: (*_inputs(T, N, K), *_state(N, K), torch.empty(N, K, device="cuda"))),
        # the two halves of (a), timed alone: where the fused kernel's time goes
        "wgrad_only": (wgrad_only, lambda: (*_inputs(T, N, K), torch.empty(N, K, device="cuda"))),
        "step_only": (step_only, lambda: (torch.randn(N, K, device="cuda"), *_state(N, K))),
        "fused": (fused, lambda: (*_inputs(T, N, K), *_state(N, K))),
        "fused_ws": (fused_ws, lambda: (*_inputs(T, N, K), *_state(N, K))),
        "torch_fused": (torch_fused, make_torch),
    }
    if not ws:
        del out["fused_ws"]
    return out


def _shape_figures(T, N, K, quick, ws=True):
    label = f"fused_adamw/{N}x{K}xT{T}"
    params, in_bytes = N * K, T * (N + K) * 2
    res = timing.compare(cases(T, N, K, ws), "unfused", bytes_moved=in_bytes + BYTES_PER_PARAM["fused"] * params,
                        flops=2 * T * N * K, rounds=3, iters=5 if quick else 10, max_sets=32)
    figs = timing.to_figures(res, label, SOURCE)
    c = res["cases"]
    figs.append(results.figure(f"{label}/speedup_vs_unfused", c["unfused"]["median_s"] / c["fused"]["median_s"], "x",
                               "ARITHMETIC", SOURCE, note="median time of (a) the same GEMM core writing dW fp32 + a "
                                                          "separate AdamW kernel / median time of the fused kernel, "
                                                          "same process, cold L2"))
    figs.append(results.figure(f"{label}/speedup_vs_torch_fused",
                               c["torch_fused"]["median_s"] / c["fused"]["median_s"], "x", "ARITHMETIC", SOURCE,
                               note="median time of (b) cuBLAS torch.mm(dY^T, X, out_dtype=fp32) + "
                                    "torch.optim.AdamW(fused=True, capturable=True) / median time of the fused kernel, "
                                    "same process; on Hopper cuBLAS uses wgmma/TMA, which sm_75 code cannot"))
    if ws:
        figs.append(results.figure(f"warp_specialized/fused_adamw/{N}x{K}xT{T}/speedup_vs_plain",
                                   c["fused"]["median_s"] / c["fused_ws"]["median_s"], "x", "ARITHMETIC", SOURCE,
                                   note="median time of the plain fused kernel / the warp-specialized one, same "
                                        "process"))
    figs.append(results.figure(f"{label}/dram_bytes_per_param", BYTES_PER_PARAM["fused"], "bytes", "ARITHMETIC",
                               SOURCE, note=f"optimizer-state streams of the fused kernel's access pattern: read "
                                            f"master, m, v (12), write them and the fp16 copy (14); unfused (a): "
                                            f"{BYTES_PER_PARAM['unfused']} (dW written and read back). Inputs dY, X "
                                            f"read once would add {in_bytes / params:.2f} bytes per parameter here"))
    # T4 projection: the larger of the byte time and the tensor-core time (ESTIMATED roofline)
    t4 = {}
    for case in ("fused", "unfused"):
        nbytes = in_bytes + BYTES_PER_PARAM[case] * params
        t4[case] = max(hw.t4_time_estimate(nbytes), 2 * T * N * K / hw.T4.fp16_tensor_flops)
        figs.append(results.figure(f"{label}/{case}/t4_roofline", t4[case] * 1e6, "us", "ESTIMATED", SOURCE,
                                   note=f"max({nbytes} bytes / {hw.T4.sustained_bw / 1e9:.0f} GB/s, 2TNK flops / "
                                        f"{hw.T4.fp16_tensor_flops / 1e12:.0f} TFLOP/s) on a T4"))
    figs.append(results.figure(f"{label}/t4_roofline_speedup_vs_unfused", t4["unfused"] / t4["fused"], "x",
                               "ESTIMATED", SOURCE, note="ratio of the two T4 roofline times above (a bound where "
                                                         "the bytes dominate; 1 where the tensor cores do)"))
    return figs


def ncu_probe(ws: bool = True) -> None:
    """Launch fused, unfused (GEMM core + AdamW kernel), then fused warp-specialized, once per probed shape."""
    for N, K, T in NCU_PROBES:
        dy, x = _inputs(T, N, K)
        st = _state(N, K)
        dw = torch.empty_like(st[0])
        torch.cuda.synchronize()
        print(f"probe {N}x{K}xT{T}", flush=True)
        fused_adamw_(dy, x, *st, step=1, backend="cuda", **HP)
        unfused_adamw_(dy, x, *st, step=2, workspace=dw, backend="cuda", **HP)
        if ws:
            fused_adamw_(dy, x, *st, step=3, backend="cuda", warp_specialized=True, **HP)
        torch.cuda.synchronize()


_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9,
          "ns": 1e-9, "nsecond": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3}


_DRAM_AND_TIME = {"dram__bytes_read.sum": "dram_read", "dram__bytes_write.sum": "dram_write",
                  "gpu__time_duration.sum": "time_s"}


def parse_ncu(text: str) -> list[dict]:
    """Per profiled kernel, in launch order: ``{"kernel", "dram_read", "dram_write", "time_s"}``."""
    rows = []
    kernels = r"\b(fused_adamw_gemm_kernel|fused_adamw_ws_kernel|adamw_update_kernel)\b(?:<([^>]*)>)?"
    for k, metrics in timing.ncu_kernels(text, kernels):
        name, targ = k.group(1), k.group(2)
        if name == "fused_adamw_gemm_kernel":  # the template argument says fused or the bare wgrad GEMM
            kind = "gemm" if targ is None else ("fused" if targ.strip() in ("true", "1", "(bool)1") else "wgrad")
        else:
            kind = "step" if name == "adamw_update_kernel" else "ws"
        row = {"kernel": kind, **timing.ncu_stall_shares(metrics)}
        for metric, (unit, value) in metrics.items():
            if metric in _DRAM_AND_TIME:
                row[_DRAM_AND_TIME[metric]] = value * _UNITS.get(unit.lower(), 1)
        rows.append(row)
    return rows


def figures_from_ncu_log(text: str) -> list[dict]:
    """MEASURED DRAM bytes per parameter of fused and unfused (a) at the probed shapes."""
    rows = [r for r in parse_ncu(text) if "dram_read" in r and "dram_write" in r]
    figs, env, i = [], results.environment(), 0
    src = f"{SOURCE} --ncu-probe under: {NCU_CMD}"
    for N, K, T in NCU_PROBES:
        group, ws = rows[i:i + 3], rows[i + 3] if i + 3 < len(rows) else {}
        i += 4
        if [r["kernel"] for r in group] not in (["fused", "wgrad", "step"], ["gemm", "gemm", "step"]):
            break  # per shape the probe launches fused, the unfused GEMM core and AdamW kernel, fused_ws
        params, in_bytes = N * K, T * (N + K) * 2
        label = f"fused_adamw/{N}x{K}xT{T}"
        tot = {"fused": group[0]["dram_read"] + group[0]["dram_write"],
               "unfused": sum(r["dram_read"] + r["dram_write"] for r in group[1:])}
        for case, b in tot.items():
            figs.append(results.figure(f"{label}/{case}/dram_bytes_per_param_measured", b / params, "bytes",
                                       "MEASURED", src, env=env, raw=group[:1] if case == "fused" else group[1:],
                                       note=f"Nsight Compute dram__bytes_read.sum + dram__bytes_write.sum / {params} "
                                            f"parameters, caches flushed before each kernel; includes dY and X "
                                            f"({in_bytes / params:.2f} bytes per parameter if read once); writes "
                                            f"still in L2 when the kernel ends are not counted"))
        if ws.get("kernel") == "ws":
            figs += timing.stall_figures("fused_adamw", ("fused_adamw_gemm", "fused_adamw_ws"), f"{N}x{K}xT{T}",
                                          group[0], ws, env, src)
        predicted = BYTES_PER_PARAM["unfused"] - BYTES_PER_PARAM["fused"]
        figs.append(results.figure(f"{label}/dram_bytes_saved_per_param", (tot["unfused"] - tot["fused"]) / params,
                                   "bytes", "ARITHMETIC", src,
                                   note=f"measured unfused (a) minus measured fused bytes per parameter (the access "
                                        f"pattern predicts {predicted}; writes still in L2 when a kernel ends are "
                                        f"not counted)"))
    return figs


def run(out_dir: str | Path, quick: bool = False, ncu_log: str | Path | None = None, ws: bool = True) -> Path:
    figs, errors = [timing.copy_bandwidth_figure(SOURCE)], []
    for T in TOKENS:
        for N, K in SHAPES:
            try:
                figs += _shape_figures(T, N, K, quick, ws)
            except Exception as e:
                errors.append(f"{N}x{K}xT{T}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
            torch.cuda.empty_cache()
    if ncu_log and Path(ncu_log).is_file():
        figs += ncu_log_figures(ncu_log, figures_from_ncu_log, errors)
    mm = "torch.mm(out_dtype=float32)" if _MM_MODE["out_dtype"] else "torch.mm fp16 output, then .float()"
    return results.write(Path(out_dir) / "fused_adamw.json", figs, errors=errors, shapes="NxK (out x in), T tokens",
                         ncu_command=NCU_CMD, torch_fused_gemm=mm,
                         note="t4lib kernels are compute_75 PTX JIT-compiled on this GPU; cuBLAS runs native code")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="results folder (default results/<device-slug>)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ncu-log", default=None, help="output of NCU_CMD to turn into figures")
    ap.add_argument("--ncu-probe", action="store_true", help="launch the kernels once per probed shape and exit")
    ap.add_argument("--no-ws", action="store_true", help="leave the warp-specialized kernel out")
    a = ap.parse_args()
    if a.ncu_probe:
        ncu_probe(ws=not a.no_ws)
        return
    out = a.out or results.results_dir() / hw.device_slug()
    print(run(out, quick=a.quick, ncu_log=a.ncu_log, ws=not a.no_ws))


if __name__ == "__main__":
    main()


def correctness_check(backend: str = "reference", device: str = "cpu", T: int = 37, N: int = 19, K: int = 23,
                      steps: int = 10, seed: int = 0) -> dict:
    """``steps`` fused steps against autograd + ``torch.optim.AdamW`` (fp32) on the same data.

    Inputs are multiples of 1/8 in [-1/2, 1/2], so dW is exact in fp32 in any summation order and
    the comparison isolates the optimizer; tolerance rtol 1e-5, atol 1e-6 (the GPU tests' own)."""
    g = torch.Generator().manual_seed(seed)

    def exact(*shape):
        return (torch.randint(-4, 5, shape, generator=g).half() / 8).to(device)

    master = (torch.randn(N, K, generator=g) * 0.1).to(device)
    m, v, w16 = torch.zeros_like(master), torch.zeros_like(master), master.half()
    p = torch.nn.Parameter(master.clone())
    opt = torch.optim.AdamW([p], foreach=False, **HP)
    for s in range(1, steps + 1):
        dy, x = exact(T, N), exact(T, K)
        fused_adamw_(dy, x, master, m, v, w16, step=s, backend=backend, **HP)
        opt.zero_grad()
        (dy.float() * (x.float() @ p.t())).sum().backward()
        opt.step()
    st = opt.state[p]
    diffs = {name: (a - b).abs().max().item() for name, a, b in
             (("master", master, p.detach()), ("exp_avg", m, st["exp_avg"]), ("exp_avg_sq", v, st["exp_avg_sq"]))}
    ok = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in
             ((master, p.detach()), (m, st["exp_avg"]), (v, st["exp_avg_sq"])))
    return {"shape": (T, N, K), "steps": steps, "max_abs_diff": diffs, "passed": ok and torch.equal(w16, master.half())}


def summary_rows(path: str | Path) -> list[dict]:
    """One row per (shape, T) of a ``fused_adamw.json``: median times (us) and the two speedups."""
    figs = results.figures_by_name(path)
    rows = []
    for T in TOKENS:
        for N, K in SHAPES:
            label = f"fused_adamw/{N}x{K}xT{T}"
            if f"{label}/speedup_vs_unfused" not in figs:
                continue
            row = {"shape": f"{N}x{K}", "T": T}
            for case in ("fused", "fused_ws", "unfused", "wgrad_only", "step_only", "torch_fused"):
                if f"{label}/{case}/time_median" in figs:
                    row[f"{case}_us"] = figs[f"{label}/{case}/time_median"]["value"]
            for key in ("speedup_vs_unfused", "speedup_vs_torch_fused"):
                row[key] = figs[f"{label}/{key}"]["value"]
            rows.append(row)
    return rows
