"""The W4A16 benchmarks' CPU side: the matmul sweep's rows and target verdicts, and the warp-specialized GEMM's
Nsight Compute stall figures (from a made-up log and from the recorded H200 log). Kept apart from the kernels'
GPU tests, so that a change to a benchmark does not reach the GPU ledger."""


def test_sweep_rows_and_target_verdicts_from_figures():
    from t4lib.benchmarks import w4a16 as bench

    def fig(v):
        return {"value": v, "device": "GPU"}

    figs = {}
    for M, t_mma in ((2, 10.0), (16, 20.0)):
        p = f"w4a16_gemm/M{M}/5120x17408"
        figs.update({f"{p}/cublas_fp16/time_median": fig(48.0), f"{p}/w4a16_mma/time_median": fig(t_mma),
                     f"{p}/w4a16_mma/speedup_vs_cublas_fp16": fig(48.0 / t_mma),
                     f"{p}/w4a16_mma/frac_copy_bw": fig(0.5)})
    rows = bench.matmul_sweep(figs)
    assert [(r["M"], r["kernel"], r["speedup"]) for r in rows] == [(2, "w4a16_mma", 4.8), (16, "w4a16_mma", 2.4)]
    lines = bench.target_verdicts(rows)
    assert lines[0].startswith("17408x5120 / 5120x17408, M = 2..16, >= 3.0x cuBLAS fp16: MISSED (worst 2.40x")
    assert lines[1].endswith("not measured")
def test_ws_ncu_log_parsing():
    from t4lib.benchmarks import w4a16_ws as wb

    log = ""
    for _ in wb.NCU_PROBES:
        log += """  (anonymous namespace)::w4a16_gemm_kernel<64>(const __half *, const unsigned char *) (196, 1, 1)x(128, 1, 1)
    smsp__warp_issue_stalled_barrier_per_warp_active.pct       %        4.5
    smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct  %     20.0
  (anonymous namespace)::w4a16_gemm_ws_kernel(const __half *, const unsigned char *) (196, 1, 1)x(192, 1, 1)
    smsp__warp_issue_stalled_barrier_per_warp_active.pct       %        30.0
    smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct  %     8.0
"""
    # ncu's progress lines name the kernels too; a kernel outside the probe keeps its metrics to itself
    prof = '==PROF== Profiling "w4a16_gemm_kernel": 0%....50%....100% - 1 pass\n'
    other = "  flush_kernel(int) (1, 1, 1)x(32, 1, 1)\n    smsp__warp_issue_stalled_barrier_per_warp_active.pct  %  99\n"
    rows = wb.parse_ncu(prof + log + other)
    assert [r["kernel"] for r in rows] == ["plain", "ws"] * len(wb.NCU_PROBES)
    assert rows[1] == rows[-1] == {"kernel": "ws", "stall_barrier_pct": 30.0, "stall_long_scoreboard_pct": 8.0}
    figs = {f["name"]: f["value"] for f in wb.figures_from_ncu_log(log)}
    M, K, N = wb.NCU_PROBES[0]
    assert figs[f"warp_specialized/w4a16_gemm/{M}x{K}x{N}/long_scoreboard_stall_ratio"] == 0.4
    assert figs[f"warp_specialized/w4a16_gemm_ws_kernel/{M}x{K}x{N}/barrier_stall_pct"] == 30.0
    # a log cut short after the plain kernel gives no figures for that shape
    assert not wb.figures_from_ncu_log(log.split("w4a16_gemm_ws_kernel")[0])


def test_ncu_figures_from_the_recorded_h200_log():
    """The run's own Nsight Compute log (with its ==PROF== lines) gives both probes' stall shares."""
    from pathlib import Path

    from t4lib.benchmarks import w4a16_ws as wb

    log = Path(__file__).parents[1] / "results" / "nvidia-h200" / "logs" / "ncu_w4a16_ws.log"
    rows = wb.parse_ncu(log.read_text())
    assert [r["kernel"] for r in rows] == ["plain", "ws"] * len(wb.NCU_PROBES)
    assert all(0 < r["stall_long_scoreboard_pct"] < 100 and 0 < r["stall_barrier_pct"] < 100 for r in rows)
    names = {f["name"] for f in wb.figures_from_ncu_log(log.read_text())}
    for M, K, N in wb.NCU_PROBES:
        assert f"warp_specialized/w4a16_gemm/{M}x{K}x{N}/long_scoreboard_stall_ratio" in names
