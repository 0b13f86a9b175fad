"""CPU tests of t4lib.pacing: cap -> grid mapping, controller, recorded sweeps, projection, report.

The sweeps used here are built in this file from made-up numbers (labelled
synthetic where they stand for one); nothing here is a measurement.
"""
import json
import math
import random

import pytest
import torch

from t4lib.core import results
from t4lib.pacing import controller, grid, projection, recorded, report, sweep
from t4lib.pacing.__main__ import main as cli_main

H200_LIKE = grid.SMLimits("H200-like", 132, 64)


# ------------------------------------------------------------------ mapping
@pytest.mark.parametrize("limits,wpc,expect", [
    (grid.T4_LIMITS, 8, [1, 1, 2, 4]),     # 256-thread CTAs on 32 warps/SM: 12.5% rounds up to one CTA
    (grid.T4_LIMITS, 4, [1, 2, 4, 8]),     # 128-thread CTAs
    (H200_LIKE, 8, [1, 2, 4, 8]),
    (H200_LIKE, 4, [2, 4, 8, 16]),
    (grid.SMLimits("odd", 7, 48), 3, [2, 4, 8, 16]),
], ids=["t4-8w", "t4-4w", "h200-8w", "h200-4w", "odd"])
def test_ctas_for_default_caps(limits, wpc, expect):
    per_sm = [grid.ctas_per_sm(c, wpc, limits) for c in grid.DEFAULT_CAPS]
    assert per_sm == expect
    assert [grid.ctas_for_cap(c, wpc, limits) for c in grid.DEFAULT_CAPS] == [k * limits.num_sms for k in expect]


def test_plan_reports_the_warp_fraction_really_allowed():
    p = grid.plan(0.125, 8, grid.T4_LIMITS)
    assert (p.ctas_per_sm, p.ctas, p.warp_fraction) == (1, 40, 0.25)
    assert grid.plan(1.0, 8, grid.T4_LIMITS).warp_fraction == 1.0


def test_mapping_matches_definition_on_random_inputs():
    rng = random.Random(0)
    for _ in range(2000):
        lim = grid.SMLimits("r", rng.randint(1, 200), rng.choice([16, 32, 48, 64]))
        wpc = rng.randint(1, lim.max_warps_per_sm)
        c = rng.choice([rng.random() or 1.0, rng.choice(grid.DEFAULT_CAPS)])
        k = grid.ctas_per_sm(c, wpc, lim)
        # the largest whole number of CTAs whose warps fit in the cap, but at least one
        fit = [n for n in range(0, lim.max_warps_per_sm // wpc + 1) if n * wpc <= c * lim.max_warps_per_sm + 1e-9]
        assert k == max(1, max(fit))
        assert grid.ctas_for_cap(c, wpc, lim) == k * lim.num_sms


@pytest.mark.parametrize("bad", [0, 0.0, -0.25, 1.0001, 2, float("nan"), float("inf")])
def test_cap_outside_unit_interval_is_rejected(bad):
    with pytest.raises(ValueError, match="cap"):
        grid.ctas_for_cap(bad, 8, grid.T4_LIMITS)


@pytest.mark.parametrize("bad", ["0.5", None, True])
def test_cap_of_wrong_type_is_rejected(bad):
    with pytest.raises(TypeError, match="cap"):
        grid.check_cap(bad)


@pytest.mark.parametrize("bad", [0, -1, 2.0, 33])
def test_bad_warps_per_cta(bad):
    with pytest.raises(ValueError, match="warps_per_cta"):
        grid.ctas_per_sm(0.5, bad, grid.T4_LIMITS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_gpu_gives_clear_errors_and_explained_noop():
    with pytest.raises(RuntimeError, match="CUDA device"):
        grid.device_limits()
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        sweep.run_sweep(["int4_dequant"], window_s=1)
    assert cli_main(["sweep", "--out", "/nonexistent/never-written"]) == 2
    d = controller.choose(_sweep(), "mem", 100)
    out = controller.launch_kwargs(d)
    assert out["kwargs"] == {} and "no CUDA device" in out["note"]


def test_kernel_slots():
    from t4lib.pacing import kernels
    k = kernels.get("int4_dequant")
    assert (k.kind, k.unit, k.warps_per_cta(), k.cap_kwarg) == ("memory-bound", "B", 8, "max_blocks")
    g = kernels.get("w4a16_gemm")
    assert (g.kind, g.unit, g.cap_kwarg) == ("compute-bound", "FLOP", "max_ctas")
    assert g.warps_per_cta() == 4  # kernels/w4a16.cu: kGemmThreads = 128
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernels.get("nope")


def test_w4a16_workload_on_cpu_reference():
    from t4lib.pacing import kernels
    k = kernels.get("w4a16_gemm")
    if k.why_unavailable():
        pytest.skip(k.why_unavailable())
    wl = k.build(torch.device("cpu"), "tiny")
    M, N, K = wl.shape["M"], wl.shape["N"], wl.shape["K"]
    out = wl.call(None)
    assert out.shape == (M, N) and out.dtype == torch.float16 and torch.isfinite(out).all()
    assert wl.work_per_call == 2 * M * N * K


def test_int4_workload_runs_on_cpu_reference():
    from t4lib.pacing import kernels
    from t4lib.ops.int4 import reference
    wl = kernels.get("int4_dequant").build(torch.device("cpu"), "tiny")
    out = wl.call(40)
    assert out.dtype == torch.float16 and out.numel() == wl.shape["values"]
    n = wl.shape["n_words"]
    assert wl.work_per_call == n * 4 + n * 16 + (n * 8 // 128) * 2


# ---------------------------------------------------------------- controller
def _row(cap, thr, watts, reasons=(), mhz=1500.0):
    return {"cap": cap, "ctas": int(cap * 160), "warp_fraction": cap, "throughput": thr, "power_avg_w": watts,
            "power_p95_w": watts + 1, "sm_mhz_avg": mhz, "mem_mhz_avg": 5000.0, "temp_max_c": 60.0,
            "reasons_seen": list(reasons), "energy_per_unit_j": watts / thr, "bitwise_equal_to_first_cap": True,
            "trace": {"t": [0.0, 1.0], "power_w": [watts, watts], "sm_mhz": [mhz, mhz], "mem_mhz": [5000, 5000],
                      "temp_c": [50, 60]}}


def _sweep(synthetic=True):
    """A made-up sweep for the tests (synthetic unless a test needs the measured shape)."""
    return {
        "kind": "pacing_sweep", "synthetic": synthetic, "device": "TEST DEVICE (made up)", "driver": "0",
        "torch": "0", "power_limit_w": 100.0, "max_sm_mhz": 1600, "window_s": 2.0, "settle_s": 0.4,
        "idle": {"power_avg_w": 20.0, "sm_mhz_avg": 300.0, "reasons_seen": ["gpu_idle"]},
        "kernels": {
            "mem": {"kind": "memory-bound", "unit": "B", "rows": [
                _row(0.125, 80.0, 40.0), _row(0.25, 95.0, 50.0), _row(0.5, 100.0, 60.0), _row(1.0, 100.0, 70.0)]},
            "gemm": {"kind": "compute-bound", "unit": "FLOP", "rows": [
                _row(0.125, 30.0, 45.0), _row(0.25, 55.0, 60.0), _row(0.5, 90.0, 64.0, ["sw_power_cap"]),
                _row(1.0, 100.0, 66.0, ["hw_power_brake_slowdown", "gpu_idle"])]},
            "gone": {"kind": "compute-bound", "unit": "FLOP", "skipped": "not importable"},
        },
    }


def test_choose_most_throughput_under_budget():
    s = _sweep()
    d = controller.choose(s, "mem", 65.0)
    assert d.cap == 0.5 and d.throughput == 100.0 and d.frac_of_unpaced == 1.0
    assert d.unpaced_cap == 1.0 and d.synthetic
    ev = {e["cap"]: e for e in d.evidence}
    assert not ev[1.0]["eligible"] and "budget" in ev[1.0]["why_not"]
    assert controller.choose(s, "mem", 55.0).cap == 0.25
    assert controller.choose(s, "mem", 1000.0).cap == 0.5  # equal throughput: the lower cap (less power)


def test_power_cap_events_exclude_a_cap_even_under_budget():
    d = controller.choose(_sweep(), "gemm", 70.0)
    assert d.cap == 0.25
    ev = {e["cap"]: e for e in d.evidence}
    assert "sw_power_cap" in ev[0.5]["why_not"] and "hw_power_brake_slowdown" in ev[1.0]["why_not"]
    assert ev[0.25]["eligible"] and ev[0.125]["eligible"]


def test_no_eligible_cap_is_an_explained_noop():
    d = controller.choose(_sweep(), "mem", 30.0)
    assert d.cap is None and "no-op" in d.reason
    assert controller.launch_kwargs(d, grid.T4_LIMITS) == {"kwargs": {}, "note": d.reason}


def test_choice_matches_brute_force_on_random_sweeps():
    rng = random.Random(1)
    for _ in range(300):
        s = _sweep()
        rows = [_row(c, rng.uniform(1, 100), rng.uniform(21, 90),
                     rng.choice([[], [], ["sw_power_cap"], ["hw_power_brake_slowdown"], ["gpu_idle"]]))
                for c in grid.DEFAULT_CAPS]
        s["kernels"]["mem"]["rows"] = rows
        b = rng.uniform(21, 95)
        ok = [r for r in rows if r["power_avg_w"] < b and not set(r["reasons_seen"]) & set(sweep.POWER_CAP_REASONS)]
        d = controller.choose(s, "mem", b)
        if not ok:
            assert d.cap is None
            continue
        best = max(r["throughput"] for r in ok)
        assert d.throughput >= 0.995 * best and d.power_avg_w < b
        assert d.cap == min(r["cap"] for r in ok if r["throughput"] >= 0.995 * best)


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf"), "70", True])
def test_bad_budget(bad):
    with pytest.raises(ValueError, match="budget_w"):
        controller.choose(_sweep(), "mem", bad)


@pytest.mark.parametrize("b", [5.0, 20.0])
def test_budget_at_or_below_idle_power(b):
    with pytest.raises(ValueError, match="budget_w.*idle power"):
        controller.choose(_sweep(), "mem", b)


def test_unknown_or_skipped_kernel():
    with pytest.raises(ValueError, match="not in this sweep"):
        controller.choose(_sweep(), "nope")
    with pytest.raises(ValueError, match="not importable"):
        controller.choose(_sweep(), "gone")


def test_binding_budget_and_launch_kwargs():
    s = _sweep()
    assert controller.binding_budget(s, "mem") == pytest.approx(35.0)
    # half of 30 W would sit below the 20 W idle power: halfway between idle and unpaced instead
    s["kernels"]["mem"]["rows"][-1]["power_avg_w"] = 30.0
    assert controller.binding_budget(s, "mem") == pytest.approx(25.0)
    s2 = _sweep()
    s2["kernels"]["int4_dequant"] = s2["kernels"].pop("mem")
    d = controller.choose(s2, "int4_dequant", 55.0)
    out = controller.launch_kwargs(d, grid.T4_LIMITS)
    assert out["kwargs"] == {"max_blocks": 40} and out["plan"]["ctas_per_sm"] == 1


def test_library_synthetic_sweep_is_labelled_and_consistent():
    s = recorded.synthetic_sweep()
    assert s["synthetic"] is True and "SYNTHETIC" in s["device"]
    recorded.validate_sweep(s)
    with pytest.raises(ValueError, match="synthetic"):
        report.to_figures(s)
    d = controller.choose(s, "w4a16_gemm", 70.0)
    assert d.cap is not None and d.power_avg_w < 70.0


# ------------------------------------------------------ recorded sweeps, report
def test_figures_save_load_roundtrip(tmp_path):
    s = _sweep(synthetic=False)
    del s["kernels"]["gemm"]
    s["kernels"]["int4_dequant"] = s["kernels"].pop("mem")
    s["kernels"]["int4_dequant"]["rows"][0]["power_avg_w"] = 30.0
    path, figs = report.save(s, tmp_path)
    results.validate_file(path)
    names = {f["name"]: f for f in figs}
    thr = names["pacing/int4_dequant/cap0.5/throughput"]
    assert thr["tag"] == "MEASURED" and thr["unit"] == "GB/s" and thr["clocks"]["power_limit_w"] == 100.0
    assert thr["value"] == pytest.approx(100.0 / 1e9)
    assert names["pacing/int4_dequant/cap0.5/energy"]["tag"] == "ARITHMETIC"
    est = [f for f in figs if f["tag"] == "ESTIMATED"]
    assert est and all("T4 model" in f["note"] for f in est)
    assert {"pacing/int4_dequant/t4_projection/paced", "pacing/int4_dequant/t4_projection/unpaced"} <= set(names)
    ch = names["pacing/int4_dequant/binding_budget/chosen_cap"]
    assert ch["value"] == 0.125 and ch["budget_w"] == pytest.approx(35.0)
    assert names["pacing/int4_dequant/t4_budget/chosen_cap"]["value"] == 0.5
    assert all(f["tag"] == "MEASURED" or f.get("note") for f in figs)
    assert (tmp_path / "pacing_throughput_vs_cap.png").is_file()
    assert (tmp_path / "pacing_int4_dequant_traces.png").is_file()
    back = recorded.load_sweep(path)
    assert back["kernels"]["int4_dequant"]["rows"][2]["throughput"] == 100.0
    assert recorded.find_recorded(tmp_path) == [path]
    assert cli_main(["decide", "--sweep", str(path), "--budget", "55", "--kernel", "int4_dequant"]) == 0
    assert cli_main(["decide", "--sweep", str(path), "--budget", "5", "--kernel", "int4_dequant"]) == 2  # < idle


def test_find_recorded_ignores_synthetic(tmp_path):
    (tmp_path / "x").mkdir()
    doc = {"schema": 1, "figures": [], "pacing": recorded.synthetic_sweep()}
    (tmp_path / "x" / recorded.SWEEP_FILE).write_text(json.dumps(doc))
    assert recorded.find_recorded(tmp_path) == []


def test_load_sweep_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        recorded.load_sweep(tmp_path / "missing.json")
    p = tmp_path / "a.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        recorded.load_sweep(p)
    p.write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match="not a pacing sweep"):
        recorded.load_sweep(p)
    s = _sweep()
    s["kernels"]["mem"]["rows"][0]["cap"] = 1.5
    p.write_text(json.dumps(s))
    with pytest.raises(ValueError, match="cap"):
        recorded.load_sweep(p)
    s = _sweep()
    s["kernels"]["mem"]["rows"][1]["throughput"] = -1
    p.write_text(json.dumps(s))
    with pytest.raises(ValueError, match="throughput"):
        recorded.load_sweep(p)


def test_table_and_clock_finding():
    s = _sweep()
    rows = report.table(s)
    assert len(rows) == 9 and rows[-1]["note"] == "not importable"
    assert "no cap changed the SM clock" in report.clock_finding(s, "mem")
    s["kernels"]["gemm"]["rows"][-1]["sm_mhz_avg"] = 1200.0
    f = report.clock_finding(s, "gemm")
    assert "changed the average SM clock by 300 MHz" in f and "sw_power_cap" in f and "gpu_idle" not in f


# ------------------------------------------------------------ sweep helpers
def test_downsample_and_summary():
    samples = [{"t": i * 0.01, "power_w": float(i % 10), "sm_mhz": 1000, "mem_mhz": 5000, "temp_c": 50,
                "reasons": ["sw_power_cap"] if i % 4 == 0 else []} for i in range(1000)]
    d = sweep.downsample(samples)
    assert len(d["t"]) <= sweep.TRACE_POINTS and len(d["power_w"]) == len(d["t"])
    assert sum(d["power_w"]) / len(d["power_w"]) == pytest.approx(4.5, abs=0.2)
    st = sweep.summarize_samples(samples, 0.0, 100.0)
    assert st["n_samples"] == 1000 and st["power_avg_w"] == pytest.approx(4.5)
    assert st["reason_fraction"] == {"sw_power_cap": 0.25} and st["power_p95_w"] == pytest.approx(9.0)
    assert sweep.summarize_samples(samples, 5.0, 100.0)["n_samples"] == 500
    assert sweep.downsample([])["t"] == []


def test_default_window():
    assert sweep.default_window_s("Tesla T4") == 60.0
    assert sweep.default_window_s("NVIDIA H200") == 15.0


# --------------------------------------------------------------- projection
def test_memory_bound_projection():
    rows = projection.memory_bound()
    assert all(r["throughput"] <= 260e9 for r in rows)
    # at an assumed 600 ns latency even one 8-warp CTA per SM keeps 260 GB/s busy: bandwidth-bound everywhere
    assert all(r["bound"] == "bandwidth" for r in rows)
    slow = projection.memory_bound(latency_ns=20000.0)
    thr = [r["throughput"] for r in slow]
    assert slow[0]["bound"] == "occupancy" and thr == sorted(thr) and thr[0] == thr[1]  # 0.125 and 0.25: one CTA


def test_compute_bound_projection():
    rel = {0.125: 0.3, 0.25: 0.55, 0.5: 0.85, 1.0: 1.0}
    rows = projection.compute_bound(rel_throughput=rel)
    for r in rows:
        assert 585 <= r["sm_mhz"] <= 1590 and r["power_w"] <= 70.0 + 1e-9
    thr = [r["throughput"] for r in rows]
    assert thr == sorted(thr)  # in the cubic model pacing never raises throughput ...
    e = [r["energy_per_tflop_j"] for r in rows]
    mhz = [r["sm_mhz"] for r in rows]
    assert mhz == sorted(mhz, reverse=True)  # ... but holds the clock higher
    assert rows[0]["sm_mhz"] == 1590 and rows[-1]["sm_mhz"] < 1590
    full = projection.compute_bound()
    assert full[-1]["throughput"] == pytest.approx(65e12 * 0.5 * full[-1]["sm_mhz"] / 1590)
    assert all(math.isfinite(x) for x in e)
    p = projection.project(_sweep())
    assert "1 at every cap" in p["w4a16_gemm"]["note"]
    # with u = 1 everywhere every cap is power-capped alike: paced falls back to the lowest cap
    assert p["int4_dequant"]["paced"]["cap"] == 0.125 and p["int4_dequant"]["unpaced"]["cap"] == 1.0
    low = projection._paced({"w4a16_gemm": {"rows": rows}})["w4a16_gemm"]["paced"]
    assert rows[1]["sm_mhz"] == 1590 and rows[2]["sm_mhz"] < 1590
    assert low["cap"] == 0.25 and low["throughput"] == rows[1]["throughput"]  # the fastest cap still at 1590 MHz


# ------------------------------------------- the sweep runner, with the GPU faked
class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class _FakeSampler:
    """Stands in for telemetry.Sampler: 100 readings/s of a made-up power and clock."""
    def __init__(self, interval=0.05, index=0):
        self.samples, self.why = [], None

    def __enter__(self):
        import time
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import time
        n = int((time.perf_counter() - self._t0) * 100)
        self.samples = [{"t": i / 100, "power_w": 50.0 + (i % 2), "sm_mhz": 1500, "mem_mhz": 5000, "temp_c": 60,
                         "reasons": ["sw_power_cap"] if i % 10 == 0 else []} for i in range(n)]


def test_sweep_runner_logic_with_faked_gpu(monkeypatch, tmp_path):
    import time
    from t4lib.pacing import kernels
    calls = []

    def build(device, size):
        def call(ctas):
            calls.append(ctas)
            time.sleep(0.002)  # 2 ms of "GPU work" per call
            return torch.full((4,), 1.0)
        return kernels.Workload(call, 1e6, {"n": 4})

    monkeypatch.setitem(kernels.KERNELS, "fake", kernels.PacedKernel(
        "fake", "memory-bound", "B", lambda: 8, build, cap_kwarg="max_blocks"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(sweep.telemetry, "Sampler", _FakeSampler)
    monkeypatch.setattr(sweep.grid, "device_limits", lambda device=None: grid.T4_LIMITS)
    monkeypatch.setattr(sweep.hw, "device_info", lambda: {"torch": "x", "driver": "y", "capability": (7, 5)})
    monkeypatch.setattr(sweep, "device_power_info", lambda: {"power_limit_w": 70.0, "max_sm_mhz": 1590})
    monkeypatch.setattr(sweep, "idle_power", lambda interval=0.05: {"power_avg_w": 10.0})
    def broken(device, size):
        raise RuntimeError("kernel exploded")

    monkeypatch.setitem(kernels.KERNELS, "broken", kernels.PacedKernel("broken", "compute-bound", "FLOP", lambda: 4,
                                                                       broken))
    monkeypatch.setitem(kernels.KERNELS, "absent", kernels.PacedKernel(
        "absent", "compute-bound", "FLOP", lambda: 4, broken, why_unavailable=lambda: "not written yet"))
    s = sweep.run_sweep(["broken", "absent", "fake"], caps=(0.25, 1.0), window_s=0.5, settle_s=0.1, progress=False)
    assert "kernel exploded" in s["kernels"]["broken"]["skipped"]
    assert s["kernels"]["absent"]["skipped"] == "not written yet"
    e = s["kernels"]["fake"]
    assert [r["cap"] for r in e["rows"]] == [0.25, 1.0]
    assert set(calls) == {40, 160}  # T4: 1 and 4 CTAs of 8 warps per SM
    for r in e["rows"]:
        assert r["bitwise_equal_to_first_cap"] and r["batch_calls"] >= 5
        assert 0.3 < r["measured_s"] < 0.6
        # ~ one call per 2 ms; the fake's events complete at once, so the two batches still in flight at the end
        # count as done with no time of their own (up to ~10% over on a slow, busy host)
        assert 1e6 / 0.004 < r["throughput"] < 1e6 / 0.0017
        assert r["power_avg_w"] == pytest.approx(50.5, abs=0.1) and r["power_cap_event"]
        assert r["reason_fraction"]["sw_power_cap"] == pytest.approx(0.1, abs=0.05)
        assert r["energy_per_unit_j"] == pytest.approx(r["power_avg_w"] / r["throughput"])
        assert len(r["trace"]["t"]) <= sweep.TRACE_POINTS and r["throughput_trace"]["value"]
    json.dumps(s)  # serializable as is
    d = controller.choose(s, "fake", 60.0)
    assert d.cap is None and "sw_power_cap" in d.evidence[0]["why_not"]


# ------------------------------------------------ recorded sweeps shipped in results/
_RECORDED = recorded.find_recorded()


@pytest.mark.skipif(not _RECORDED, reason="no measured pacing sweep under results/ yet")
@pytest.mark.parametrize("path", _RECORDED, ids=[str(p.parent.name) for p in _RECORDED])
def test_controller_on_recorded_sweep(path):
    s = recorded.load_sweep(path)
    assert not s.get("synthetic")
    idle = (s.get("idle") or {}).get("power_avg_w")
    for name, e in s["kernels"].items():
        if not e.get("rows"):
            continue
        for r in e["rows"]:
            assert r["bitwise_equal_to_first_cap"], f"{name} cap {r['cap']}: result changed with the cap"
        budgets = [controller.T4_BUDGET_W, controller.binding_budget(s, name)]
        for b in budgets:
            if idle is not None and b <= idle:
                with pytest.raises(ValueError, match="idle power"):
                    controller.choose(s, name, b)
                continue
            d = controller.choose(s, name, b)
            ok = [r for r in e["rows"] if r["power_avg_w"] is not None and r["power_avg_w"] < b
                  and not set(r["reasons_seen"]) & set(sweep.POWER_CAP_REASONS)]
            if not ok:
                assert d.cap is None
            else:
                assert d.power_avg_w < b and d.throughput >= 0.995 * max(r["throughput"] for r in ok)
