"""GPU tests of t4lib.pacing: results do not depend on the cap; a short sweep runs end to end."""
import pytest
import torch

from t4lib.core import results
from t4lib.pacing import controller, grid, kernels, report, sweep

pytestmark = pytest.mark.gpu


def _caps_ctas(wpc):
    lim = grid.device_limits()
    return [grid.ctas_for_cap(c, wpc, lim) for c in grid.DEFAULT_CAPS] + [1, 7, lim.num_sms + 3, 10 ** 6]


def test_device_limits_match_torch():
    p = torch.cuda.get_device_properties(0)
    lim = grid.device_limits()
    assert lim.num_sms == p.multi_processor_count and lim.max_warps_per_sm * 32 == p.max_threads_per_multi_processor


def test_int4_dequant_bitwise_equal_across_caps():
    k = kernels.get("int4_dequant")
    wl = k.build(torch.device("cuda"), "test")
    free = wl.call(None)  # the uncapped launch
    for ctas in _caps_ctas(k.warps_per_cta()):
        out = wl.call(ctas)
        torch.cuda.synchronize()
        assert torch.equal(out, free), f"int4_dequant differs at max_blocks={ctas}"
    assert not torch.isnan(free).any()


def test_int4_dequant_capped_matches_reference():
    from t4lib.ops.int4 import int4_dequant, reference
    g = torch.Generator(device="cuda").manual_seed(3)
    n = (1 << 16) + 16 * 5  # whole 128-value groups, not a multiple of the CTA's work
    packed = torch.randint(-2 ** 31, 2 ** 31 - 1, (n,), dtype=torch.int32, device="cuda", generator=g)
    scales = (torch.rand(n * 8 // 128, device="cuda", generator=g) + 0.5).half()
    want = reference.int4_dequant(packed.cpu(), scales.cpu(), 128)
    for ctas in _caps_ctas(8):
        got = int4_dequant(packed, scales, 128, backend="cuda", max_blocks=ctas).cpu()
        assert torch.equal(got, want), f"max_blocks={ctas}"


def test_w4a16_gemm_bitwise_equal_across_caps():
    k = kernels.get("w4a16_gemm")
    why = k.why_unavailable()
    if why:
        pytest.skip(why)
    for size in ("test", "tiny"):
        wl = k.build(torch.device("cuda"), size)
        free = wl.call(None)
        torch.cuda.synchronize()
        assert torch.isfinite(free).all()
        for ctas in _caps_ctas(k.warps_per_cta()):
            out = wl.call(ctas)
            torch.cuda.synchronize()
            assert torch.equal(out, free), f"w4a16 gemm {size} differs at max_ctas={ctas}"


def test_short_sweep_end_to_end(tmp_path):
    names = ["int4_dequant"] + ([] if kernels.get("w4a16_gemm").why_unavailable() else ["w4a16_gemm"])
    s = sweep.run_sweep(names, caps=(0.25, 1.0), window_s=1.5, settle_s=0.3, size="test", progress=False)
    assert not s["synthetic"] and s["device"] == torch.cuda.get_device_name(0)
    for n in names:
        e = s["kernels"][n]
        assert "skipped" not in e and "error" not in e, e.get("skipped") or e.get("error")
        assert [r["cap"] for r in e["rows"]] == [0.25, 1.0]
        for r in e["rows"]:
            assert r["throughput"] > 0 and r["bitwise_equal_to_first_cap"] and r["calls"] > 0
            assert r["measured_s"] > 0.5
    path, figs = report.save(s, tmp_path)
    results.validate_file(path)
    if s["idle"].get("power_avg_w") is not None:  # NVML present
        r = s["kernels"]["int4_dequant"]["rows"][-1]
        assert r["power_avg_w"] > 0 and r["sm_mhz_avg"] > 0
        d = controller.choose(s, "int4_dequant", 10 * r["power_avg_w"])
        assert d.cap is not None
        kw = controller.launch_kwargs(d)
        assert kw["kwargs"]["max_blocks"] == grid.ctas_for_cap(d.cap, 8)


def test_sweep_rejects_bad_caps():
    with pytest.raises(ValueError, match="cap"):
        sweep.run_sweep(["int4_dequant"], caps=(0.0,), window_s=1)
    with pytest.raises(ValueError, match="window_s"):
        sweep.run_sweep(["int4_dequant"], window_s=0)
