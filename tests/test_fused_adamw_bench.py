"""The fused AdamW benchmark's CPU side: Nsight Compute log parsing, the figures it derives, the summary rows
of a results file, the probe's launch order. Kept apart from the kernel's GPU tests, so that a change to the
benchmark does not reach the GPU ledger."""
import pytest
import torch


def test_ncu_log_parsing():
    from t4lib.benchmarks import fused_adamw as fb
    from t4lib.core import timing

    log = """==PROF== Connected to process
  void (anonymous namespace)::fused_adamw_gemm_kernel<true>((anonymous namespace)::Operand) (196, 1, 1)x(128, 1, 1)
    Section: Command line profiler metrics
    dram__bytes_read.sum                    byte   1,000,000
    dram__bytes_write.sum                  Mbyte        2.5
    gpu__time_duration.sum                nsecond     12,000
    smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct      %     50
  void (anonymous namespace)::fused_adamw_gemm_kernel<false>(Operand) (196, 1, 1)x(128, 1, 1)
    dram__bytes_read.sum                    byte        10
    dram__bytes_write.sum                   byte        20
  void (anonymous namespace)::adamw_update_kernel<true>(const float *) (1056, 1, 1)x(256, 1, 1)
    dram__bytes_read.sum                   Kbyte         3
    dram__bytes_write.sum                   byte         4
"""
    log += """  (anonymous namespace)::fused_adamw_ws_kernel((anonymous namespace)::Operand) (196, 1, 1)x(192, 1, 1)
    smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct      %     12.5
    smsp__warp_issue_stalled_barrier_per_warp_active.pct              %      30
"""
    rows = fb.parse_ncu(log)
    assert [r["kernel"] for r in rows] == ["fused", "wgrad", "step", "ws"]
    assert rows[3] == {"kernel": "ws", "stall_long_scoreboard_pct": 12.5, "stall_barrier_pct": 30.0}
    assert rows[0] == {"kernel": "fused", "dram_read": 1e6, "dram_write": 2.5e6, "time_s": 12e-6,
                       "stall_long_scoreboard_pct": 50.0}
    figs = timing.stall_figures("fused_adamw", ("fused_adamw_gemm", "fused_adamw_ws"), "s", rows[0], rows[3], {"device": "x", "driver": "d", "torch": "t", "clocks": {},
                                                      "throttle": []}, "src")
    ratio = [f for f in figs if f["name"] == "warp_specialized/fused_adamw/s/long_scoreboard_stall_ratio"]
    assert ratio[0]["value"] == 0.25 and ratio[0]["tag"] == "ARITHMETIC"
    assert rows[2]["dram_read"] == 3000 and rows[2]["dram_write"] == 4


def test_ncu_log_figures_without_template_names():
    from t4lib.benchmarks import fused_adamw as fb

    block = """  fused_adamw_gemm_kernel (196, 1, 1)x(128, 1, 1)
    dram__bytes_read.sum   byte  100
    dram__bytes_write.sum  byte  200
  fused_adamw_gemm_kernel (196, 1, 1)x(128, 1, 1)
    dram__bytes_read.sum   byte  100
    dram__bytes_write.sum  byte  300
  adamw_update_kernel (1056, 1, 1)x(256, 1, 1)
    dram__bytes_read.sum   byte  400
    dram__bytes_write.sum  byte  500
  fused_adamw_ws_kernel (196, 1, 1)x(192, 1, 1)
    dram__bytes_read.sum   byte  100
    dram__bytes_write.sum  byte  200
    smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct  %  10
"""
    figs = {f["name"]: f for f in fb.figures_from_ncu_log(block * len(fb.NCU_PROBES))}
    N, K, T = fb.NCU_PROBES[0]
    label = f"fused_adamw/{N}x{K}xT{T}"
    assert figs[f"{label}/fused/dram_bytes_per_param_measured"]["value"] == 300 / (N * K)
    assert figs[f"{label}/unfused/dram_bytes_per_param_measured"]["value"] == 1300 / (N * K)
    assert f"warp_specialized/fused_adamw/{N}x{K}xT{T}/long_scoreboard_stall_ratio" not in figs  # plain has none


def test_summary_rows_from_a_results_file(tmp_path):
    from t4lib.core import provenance, results
    from t4lib.benchmarks import fused_adamw as fb

    env = {"device": "GPU", "driver": "d", "torch": "t", "clocks": {}, "throttle": []}
    label = "fused_adamw/896x896xT2048"
    figs = [results.figure(f"{label}/{c}/time_median", us, "us", "MEASURED", "s", env=env)
            for c, us in (("fused", 10.0), ("unfused", 15.0), ("torch_fused", 5.0))]
    figs += [results.figure(f"{label}/speedup_vs_unfused", 1.5, "x", "ARITHMETIC", "s", note="n"),
             results.figure(f"{label}/speedup_vs_torch_fused", 0.5, "x", "ARITHMETIC", "s", note="n")]
    doc = {"schema": results.SCHEMA_VERSION, "figures": figs,
           "provenance": provenance.provenance_of("t4lib/benchmarks/fused_adamw.py")}
    (tmp_path / "f.json").write_text(__import__("json").dumps(doc))
    assert fb.summary_rows(tmp_path / "f.json") == [
        {"shape": "896x896", "T": 2048, "fused_us": 10.0, "unfused_us": 15.0, "torch_fused_us": 5.0,
         "speedup_vs_unfused": 1.5, "speedup_vs_torch_fused": 0.5}]


@pytest.mark.parametrize("ws", [True, False])
def test_ncu_probe_launch_order(monkeypatch, ws):
    """Per probed shape: fused, unfused (GEMM core + AdamW), then the warp-specialized kernel."""
    from t4lib.benchmarks import fused_adamw as fb

    calls = []
    monkeypatch.setattr(fb, "NCU_PROBES", [(8, 16, 4), (16, 8, 2)])
    monkeypatch.setattr(fb, "_inputs", lambda T, N, K, dev="cuda": (torch.zeros(T, N).half(), torch.zeros(T, K).half()))
    monkeypatch.setattr(fb, "_state", lambda N, K, dev="cuda": (*(torch.zeros(N, K) for _ in range(3)),
                                                               torch.zeros(N, K).half()))
    monkeypatch.setattr(fb.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(fb, "fused_adamw_", lambda *a, warp_specialized=False, **kw: calls.append(
        "ws" if warp_specialized else "fused"))
    monkeypatch.setattr(fb, "unfused_adamw_", lambda *a, **kw: calls.append("unfused"))
    fb.ncu_probe(ws=ws)
    assert calls == (["fused", "unfused", "ws"] if ws else ["fused", "unfused"]) * 2
