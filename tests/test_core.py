"""Import, dispatch, hardware facts and telemetry without a GPU."""
import subprocess
import sys

import pytest
import torch

from t4lib.core import hw, telemetry
from t4lib.ops import _dispatch


def test_import_never_compiles(tmp_path):
    code = ("import t4lib, t4lib.ops.int4, t4lib.core.timing, t4lib.cli, t4lib.evidence.verify; "
            "import os; print(os.listdir(os.environ['T4LIB_CACHE']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "T4LIB_CACHE": str(tmp_path)}, check=True)
    assert out.stdout.strip() == "[]"


def test_check_names_the_argument():
    with pytest.raises(TypeError, match="weights must have dtype"):
        _dispatch.check("weights", torch.zeros(4), dtype=torch.int32)
    with pytest.raises(ValueError, match="weights must be contiguous"):
        _dispatch.check("weights", torch.zeros(4, 4).t())
    with pytest.raises(ValueError, match="weights must be 1-D"):
        _dispatch.check("weights", torch.zeros(4, 4), ndim=1)
    with pytest.raises(TypeError, match="weights must be a torch.Tensor"):
        _dispatch.check("weights", [1, 2])


def test_backend_choice_on_cpu(monkeypatch):
    cpu = torch.device("cpu")
    assert _dispatch.use_cuda("auto", "int4", cpu) is False
    assert _dispatch.use_cuda("reference", "int4", cpu) is False
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        _dispatch.use_cuda("cuda", "int4", cpu)
    with pytest.raises(ValueError, match="backend must be one of"):
        _dispatch.use_cuda("fast", "int4", cpu)
    monkeypatch.setenv("T4LIB_REQUIRE_CUDA", "1")
    with pytest.raises(RuntimeError, match="T4LIB_REQUIRE_CUDA=1 but inputs are on the CPU"):
        _dispatch.use_cuda("auto", "int4", cpu)


def test_t4_budget_and_slug():
    assert hw.T4.sms == 40 and hw.T4.smem_per_block == 64 * 1024 and hw.T4.tdp_watts == 70
    assert hw.T4.peak_bw == 320e9 and hw.T4.sustained_bw == 260e9 and hw.T4.fp16_tensor_flops == 65e12
    assert hw.slug("NVIDIA H200") == "nvidia-h200" and hw.slug("Tesla T4") == "tesla-t4"
    assert hw.t4_time_estimate(260e9) == pytest.approx(1.0)


def test_feature_matrix_marks_post_turing_features():
    rows = {r["feature"]: r for r in hw.feature_matrix((9, 0))}
    assert rows["cp.async (async global->shared copy)"]["T4 (sm_75)"] == "no"
    assert rows["cp.async (async global->shared copy)"]["this device"] == "yes"
    assert all(r["this device"] == "n/a (no GPU)" for r in hw.feature_matrix(None))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_telemetry_without_gpu_says_why():
    with telemetry.Sampler(0.01) as s:
        pass
    assert s.samples == [] and s.why
    assert s.summary()["n"] == 0 and s.summary()["why"]
    snap = telemetry.snapshot()
    assert snap["clocks"] == {} and snap["throttle"] == [] and snap["why"]


def test_sampler_rejects_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        telemetry.Sampler(0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_bench_needs_cuda():
    from t4lib.core import timing

    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        timing.compare({"a": (lambda: None, lambda: ())}, baseline="a")


def test_bench_rejects_unknown_baseline():
    from t4lib.core import timing

    with pytest.raises(ValueError, match="baseline"):
        timing.compare({"a": (lambda: None, lambda: ())}, baseline="b")


@pytest.mark.gpu
@pytest.mark.slow
def test_bench_on_gpu_times_and_ratios():
    from t4lib.core import timing

    n = 1 << 24
    mk = lambda: (torch.randn(n, device="cuda", dtype=torch.float16),)
    res = timing.compare({"copy": (lambda x: x.clone(), mk), "add": (lambda x: x + 1, mk)}, baseline="copy",
                        bytes_moved=4 * n, rounds=2, iters=5)
    c = res["cases"]["add"]
    assert c["graph"] and c["n_sets"] >= 2 and 0 < c["median_s"] and c["p10_s"] <= c["median_s"] <= c["p90_s"]
    assert 0.05 < c["frac_copy_bw"] < 1.5
    assert res["cases"]["copy"]["speedup_vs_baseline"] == 1.0


@pytest.mark.gpu
def test_telemetry_samples_on_gpu():
    import time
    with telemetry.Sampler(0.01) as s:
        time.sleep(0.2)
    assert len(s.samples) >= 3 and s.samples[0]["sm_mhz"] is not None
    assert isinstance(s.summary()["reasons_seen"], list)


@pytest.mark.gpu
def test_int4_kernel_runs_inside_cuda_graph():
    from t4lib.ops.int4 import int4_dequant, pack_int4

    v = torch.randint(-8, 8, (4096,), dtype=torch.int8)
    p = pack_int4(v).cuda()
    int4_dequant(p, backend="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = int4_dequant(p, backend="cuda")
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), v.to(torch.float16))
