"""CPU tests of the exact-contract Transformer benchmark (t4lib.contract)."""
import json
import math
import warnings

import pytest
import torch

from t4lib.contract import calibrate as C
from t4lib.contract import model as M
from t4lib.contract import rule as R
from t4lib.contract import shapes as S
from t4lib.contract import timing as T

DT = torch.float32


def pair(D=32, H=4, L=3, causal=False, seed=3, plan=None, dtype=DT):
    return M.build_pair(D, H, L, causal=causal, seed=seed, device="cpu", dtype=dtype, plan=plan)


def inputs(B=2, S_=12, D=32, seed=0, lengths=None, dtype=DT):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, S_, D, generator=g).to(dtype)
    if lengths is None:
        return x, torch.ones(B, S_, dtype=torch.bool)
    return x, torch.arange(S_)[None, :] < torch.tensor(lengths)[:, None]


def plan_for(opt, x, kind, layers, graph=False):
    p = C.Plan()
    p.add(opt.key_for(x, kind), C.PlanEntry(layers, graph))
    return p


ALL_MODES = ["ref", "fused", "packed", "packed_fused", "sdpa"]


# ----------------------------------------------------------------------------- state dict

def test_state_dict_round_trip_is_exact():
    ref, _ = pair(L=2)
    opt = M.OptimizedTransformer(**ref.config())
    missing = opt.load_state_dict(ref.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    assert list(opt.state_dict()) == list(ref.state_dict())
    back = M.BaselineTransformer(**ref.config())
    back.load_state_dict(opt.state_dict(), strict=True)
    x, m = inputs(lengths=[12, 7])
    with torch.no_grad():
        r = ref(x, m)
        assert torch.equal(opt(x, m), r)           # no plan: the reference path
        assert opt.last_dispatch == "reference"
        assert torch.equal(back(x, m), r)


def test_load_state_dict_refreshes_packed_weights():
    ref, opt = pair(L=2)
    x, m = inputs()
    opt.plan = plan_for(opt, x, "all_valid", ["packed_fused", "sdpa"])
    with torch.no_grad():
        before = opt(x, m)
        other, _ = pair(L=2, seed=99)
        opt.load_state_dict(other.state_dict())
        after = opt(x, m)
        assert not torch.allclose(before, after)
        assert R.strict(after, other(x, m)).passed


# ----------------------------------------------------------------------------- mask semantics

@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_invalid_queries_are_exactly_zero(mode, causal):
    ref, opt = pair(causal=causal)
    x, m = inputs(lengths=[12, 5])
    opt.plan = plan_for(opt, x, "padded", [mode] * 3)
    with torch.no_grad():
        for y in (ref(x, m), opt(x, m)):
            assert torch.isfinite(y).all()
            assert (y[~m] == 0).all() and y[~m].numel() == 7 * 32
            assert (y[m] != 0).any()
    assert opt.last_dispatch.startswith("eager:")


@pytest.mark.parametrize("mode", ALL_MODES)
def test_no_causal_leakage(mode):
    ref, opt = pair(causal=True)
    x, m = inputs(S_=16)
    opt.plan = plan_for(opt, x, "all_valid", [mode] * 3)
    x2 = x.clone()
    x2[:, 9:] = torch.randn_like(x2[:, 9:]) * 5   # change the future only
    with torch.no_grad():
        for model in (ref, opt):
            a, b = model(x, m), model(x2, m)
            assert torch.equal(a[:, :9], b[:, :9]), model.__class__.__name__
            assert not torch.equal(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("mode", ALL_MODES)
def test_invalid_keys_never_attended(mode):
    ref, opt = pair(causal=False)
    x, m = inputs(lengths=[12, 6])
    opt.plan = plan_for(opt, x, "padded", [mode] * 3)
    x2 = x.clone()
    x2[1, 6:] = 1000.0                          # garbage in invalid positions
    with torch.no_grad():
        for model in (ref, opt):
            a, b = model(x, m), model(x2, m)
            assert torch.allclose(a, b, atol=1e-6, rtol=0) and torch.equal(a[~m], b[~m])


def test_all_invalid_row_is_a_safe_zero_row():
    for causal in (False, True):
        ref, opt = pair(causal=causal)
        x, m = inputs(lengths=[12, 0])
        opt.plan = plan_for(opt, x, "padded", ["sdpa"] * 3)
        with torch.no_grad():
            for y in (ref(x, m), opt(x, m)):
                assert torch.isfinite(y).all()
                assert (y[1] == 0).all()
            assert torch.equal(ref(x[:1], m[:1]), ref(x, m)[:1])


def test_mask_none_equals_all_true_mask():
    ref, opt = pair(causal=True)
    x, m = inputs()
    with torch.no_grad():
        assert torch.equal(ref(x, None), ref(x, m))
    assert opt.mask_kind(None) == "all_valid" and opt.mask_kind(m) == "all_valid"


# ----------------------------------------------------------------------------- exactness of candidates

@pytest.mark.parametrize("lengths", [None, [12, 7]], ids=["all-valid", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ref_mode_with_mask_removed_is_bit_identical(lengths, causal):
    ref, opt = pair(causal=causal)
    x, m = inputs(lengths=lengths)
    kind = opt.mask_kind(m)
    opt.plan = plan_for(opt, x, kind, ["ref"] * 3)
    with torch.no_grad():
        assert torch.equal(opt(x, m), ref(x, m))


def test_fused_attention_is_bit_identical_for_power_of_two_scale():
    ref, opt = pair(D=64, H=1)       # d_head 64: scale 1/8
    x, m = inputs(D=64)
    assert M._is_pow2(opt.layers[0].attn.scale) and not M._is_pow2(1 / math.sqrt(32))
    opt.plan = plan_for(opt, x, "all_valid", ["fused"] * 3)
    with torch.no_grad():
        assert torch.equal(opt(x, m), ref(x, m))


@pytest.mark.parametrize("mode", ALL_MODES)
def test_every_mode_passes_strict_in_fp32(mode):
    ref, opt = pair(causal=True)
    x, m = inputs(lengths=[12, 9])
    opt.plan = plan_for(opt, x, "padded", [mode] * 3)
    with torch.no_grad():
        assert R.strict(opt(x, m), ref(x, m)).passed


def test_fp16_model_runs_and_passes_judge_on_cpu():
    ref, opt = pair(dtype=torch.float16)
    x, m = inputs(lengths=[12, 8], dtype=torch.float16)
    opt.plan = plan_for(opt, x, "padded", ["packed_fused", "ref", "sdpa"])
    with torch.no_grad():
        y = opt(x, m)
        assert y.dtype == torch.float16
        assert R.judge(y, ref(x, m)).passed


# ----------------------------------------------------------------------------- correctness rule

def test_strict_rule_boundaries():
    f64 = dict(dtype=torch.float64)
    r = torch.tensor([0.0, 0.05, 1.0, 1.0, 10.0, -2.0], **f64)
    a = torch.tensor([1e-3, 0.05 + 1.1e-3, 1.0 + 9e-3, 1.0 + 1.1e-2, 10.09, -2.03], **f64)
    res = R.strict(a, r)
    # 0: |d|=1e-3 (atol) passes; 1: 1.1e-3 > max(1e-3, 5e-4) fails; 2: 9e-3 <= 1e-2 passes;
    # 3: 1.1e-2 > 1e-2 fails; 4: 0.09 <= 0.1 passes; 5: 0.03 > 0.02 fails
    assert res.failures == 3 and res.total == 6 and not res.passed
    assert R.judge(a, r).failures == 0      # judge: 2e-3 / 2e-2
    assert res.max_usage == pytest.approx(0.03 / 0.02, rel=1e-9) and res.worst_index == (5,)


def test_rule_nan_inf_and_errors():
    r = torch.tensor([1.0, float("inf"), 0.0])
    assert R.strict(torch.tensor([1.0, float("inf"), 0.0]), r).passed
    res = R.strict(torch.tensor([float("nan"), float("inf"), 0.0]), r)
    assert res.failures == 1 and math.isinf(res.max_usage)
    assert R.strict(torch.tensor([1.0, -float("inf"), 0.0]), r).failures == 1
    with pytest.raises(ValueError, match="shape"):
        R.strict(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="rule"):
        R.compare(torch.zeros(3), torch.zeros(3), "lenient")
    exact = R.compare(torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0 + 1e-9], dtype=torch.float64), (0.0, 0.0))
    assert exact.failures == 1


def test_rule_chunking_matches_unchunked():
    g = torch.Generator().manual_seed(1)
    r = torch.randn(1000, generator=g)
    a = r + torch.randn(1000, generator=g) * 3e-3
    one, many = R.compare(a, r, chunk=1 << 20), R.compare(a, r, chunk=97)
    assert (one.failures, one.worst_index) == (many.failures, many.worst_index)
    assert one.max_usage == pytest.approx(many.max_usage)


# ----------------------------------------------------------------------------- mask proof cache

def test_mask_proof_cached_per_object_and_version():
    ref, opt = pair(L=2)
    x, m = inputs(lengths=None)
    opt.plan = plan_for(opt, x, "all_valid", ["packed_fused", "sdpa"])
    pp = plan_for(opt, x, "padded", ["ref", "ref"])
    opt.plan.entries.update(pp.entries)
    with torch.no_grad():
        opt(x, m)
        opt(x, m)
        assert opt.proof.inspections == 1                       # proven once, reused
        assert opt.last_dispatch == "eager:packed_fused,sdpa"
        m[1, 5:] = False                                        # in-place mutation bumps _version
        y = opt(x, m)
        assert opt.proof.inspections == 2
        assert opt.last_dispatch == "eager:ref,ref"             # the padded entry, not the proof
        assert torch.equal(y, ref(x, m)) and (y[1, 5:] == 0).all()
        c = m.clone()                                           # a clone is a new object: checked again
        opt(x, c)
        assert opt.proof.inspections == 3
        opt(x, torch.ones_like(m))                              # a different mask
        assert opt.proof.inspections == 4
        with torch.inference_mode():                            # no version counter: never cached
            im = torch.ones(2, 12, dtype=torch.bool)
            opt(x, im)
            opt(x, im)
        assert opt.proof.inspections == 6


def test_mask_proof_data_write_needs_forget():
    opt = M.OptimizedTransformer(32, 4, 1)
    m = torch.ones(2, 12, dtype=torch.bool)
    assert opt.mask_kind(m) == "all_valid"
    m.data[0, 0] = False                    # .data writes bypass the version counter (documented)
    opt.forget_masks()
    assert opt.mask_kind(m) == "padded"


# ----------------------------------------------------------------------------- plans

def test_plan_save_load_round_trip_and_unknown_key_fallback(tmp_path):
    ref, opt = pair(L=2, causal=True)
    x, m = inputs(lengths=[12, 10])
    key = opt.key_for(x, "padded")
    assert key == "cpu|float32|B2|S12|D32|H4|L2|causal|padded"
    p = C.Plan()
    p.add(key, C.PlanEntry(["packed", "sdpa"], False, info={"median_s": 1.0}))
    p.add("cpu|float32|B1|S1|D32|H4|L2|causal|all_valid", C.PlanEntry.reference(why="test"))
    path = p.save(tmp_path / "plan.json")
    q = C.Plan.load(path)
    assert q.device == p.device and q.lookup(key).layers == ["packed", "sdpa"]
    assert q.lookup(key).name == "packed+sdpa1/eager"
    assert q.lookup("cpu|float32|B1|S1|D32|H4|L2|causal|all_valid").layers is None
    opt.plan = q
    with torch.no_grad():
        opt(x, m)
        assert opt.last_dispatch == "eager:packed,sdpa"
        x3, m3 = inputs(B=3, lengths=[12, 10, 4])                  # unknown key -> reference path
        assert torch.equal(opt(x3, m3), ref(x3, m3)) and opt.last_dispatch == "reference"


def test_stale_plan_for_another_device(tmp_path):
    p = C.Plan({"name": "NVIDIA H200", "capability": "sm90", "torch": "2.9", "cuda": "12.8"})
    p.add("sm90|float16|B1|S16|D32|H4|L2|causal|all_valid", C.PlanEntry(["sdpa", "sdpa"], True))
    path = p.save(tmp_path / "plan.json")
    with pytest.raises(C.StalePlanError, match="calibrated for"):
        C.Plan.load(path, on_stale="error")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        stale = C.Plan.load(path)
    assert any("re-run the calibration" in str(i.message) for i in w)
    assert stale.entries == {} and stale.stale_from["name"] == "NVIDIA H200"
    assert C.Plan.load(path, on_stale="ignore").entries


def test_corrupt_plan_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        C.Plan.load(bad)
    bad.write_text(json.dumps({"schema": 1, "device": {}, "entries": {"k": {"graph": True}}}))
    with pytest.raises(ValueError, match="malformed"):
        C.Plan.load(bad, on_stale="ignore")
    with pytest.raises(ValueError, match="on_stale"):
        C.Plan.load(bad, on_stale="maybe")


def test_bad_plan_entry_is_rejected():
    ref, opt = pair(L=2)
    x, m = inputs()
    opt.plan = plan_for(opt, x, "all_valid", ["ref", "warp-speed"])
    with pytest.raises(ValueError, match="plan entry layers"):
        opt(x, m)


# ----------------------------------------------------------------------------- calibration

def test_suffix_search_stops_at_first_failure():
    assert C.suffix_search(6, lambda k: k <= 2) == (2, [1, 2, 3])
    assert C.suffix_search(4, lambda k: True) == (4, [1, 2, 3, 4])
    assert C.suffix_search(4, lambda k: False) == (0, [1])
    assert C.suffix_search(5, lambda k: k != 2) == (1, [1, 2])   # a later pass does not count


def test_calibration_discovers_depth_limit():
    """With a margin only bit-exact plans meet, every inexact candidate must be
    rejected by measurement (and reported with why)."""
    ref, opt = pair(D=32, H=4, L=3, causal=True)    # d_head 8: scale 1/sqrt(8), not a power of two
    ins = [inputs(seed=s, lengths=[12, 8]) for s in (1, 2)]
    cfg = C.CalibrationConfig(margin=0.0, warmup=0, reps=2)
    key, entry, rep = C.calibrate_shape(ref, opt, ins, cfg)
    assert rep["sdpa_depth"] == 0                      # SDPA differs in the last bits in fp32
    rejected = [p for p in rep["probes"] if not p["accepted"]]
    assert any(p["plan"].startswith(rep["base"] + "+sdpa1") or p["plan"] == "sdpa-all/eager" or "sdpa1" in p["plan"]
               for p in rejected)
    assert all("why" in p for p in rejected if "error" not in p)
    assert entry.layers is None or all(mm != "sdpa" for mm in entry.layers)
    # with the plain rule (margin 1) SDPA passes in every layer in fp32
    key2, entry2, rep2 = C.calibrate_shape(ref, opt, ins, C.CalibrationConfig(margin=1.0, warmup=0, reps=2))
    assert key2 == key and rep2["sdpa_depth"] == 3


def test_calibrated_plan_drives_forward():
    sh = S.CPU_SHAPES[1]
    ref, opt = M.build_pair(sh.D, sh.H, sh.L, causal=sh.causal, seed=5, device="cpu", dtype=DT)
    ins = [S.make_inputs(sh, s, "cpu", DT) for s in (11, 12)]
    key, entry, rep = C.calibrate_shape(ref, opt, ins, C.CalibrationConfig(warmup=0, reps=2))
    plan = C.Plan()
    plan.add(key, entry)
    opt.plan = plan
    x, m = S.make_inputs(sh, 1234, "cpu", DT)
    with torch.no_grad():
        assert R.strict(opt(x, m), ref(x, m)).passed
    assert opt.last_dispatch == ("reference" if entry.layers is None else f"eager:{','.join(entry.layers)}")
    assert {"ref/eager"} <= {p["plan"] for p in rep["probes"] if p["stage"] == "candidate"}


# ----------------------------------------------------------------------------- bad input

def test_bad_inputs_raise_clear_errors():
    ref, opt = pair()
    x, m = inputs()
    for model in (ref, opt):
        with pytest.raises(ValueError, match="valid_token_mask must have shape"):
            model(x, m[:, :5])
        with pytest.raises(TypeError, match="valid_token_mask must have dtype torch.bool"):
            model(x, m.long())
        with pytest.raises(ValueError, match="valid_token_mask must be on"):
            model(x, torch.ones(2, 12, dtype=torch.bool, device="meta"))
        with pytest.raises(ValueError, match=r"x must have width D=32"):
            model(torch.randn(2, 12, 16), m)
        with pytest.raises(ValueError, match="x must be 3-D"):
            model(torch.randn(12, 32))
        with pytest.raises(TypeError, match="x must have the model's dtype"):
            model(x.double(), m)
        with pytest.raises(TypeError, match="x must be a torch.Tensor"):
            model(x.tolist(), m)
    with pytest.raises(ValueError, match="divisible"):
        M.BaselineTransformer(30, 4, 1)


# ----------------------------------------------------------------------------- timing

def test_time_alternating_order_and_counts():
    calls = []
    cases = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    t = T.time_alternating(cases, warmup=2, reps=3, rounds=3, device="cpu")
    assert t["a"]["_order"] == ["a", "b", "b", "a", "a", "b"]
    assert t["a"]["n"] == 9 and len(t["b"]["rounds"]) == 3
    assert calls.count("a") == 3 * (2 + 3)
    assert T.quantile([1, 2, 3, 4], 0.5) == 2.5
    with pytest.raises(ValueError):
        T.time_alternating({}, device="cpu")


def test_spawn_reports_worker_failure():
    res = T.spawn("t4lib.contract.no_such_module:f", {}, timeout=60)
    assert "error" in res and "No module named" in res["stderr_tail"]


# ----------------------------------------------------------------------------- shapes and shape 14

def test_shape_table_spans_the_contract():
    t = S.SHAPES
    assert [s.id for s in t] == list(range(1, 14))
    assert {s.D for s in t} == {128, 512, 1024}
    assert min(s.S for s in t) == 128 and max(s.S for s in t) == 4096
    assert min(s.B for s in t) == 1 and max(s.B for s in t) == 32
    assert min(s.L for s in t) == 2 and max(s.L for s in t) == 12
    assert {s.causal for s in t} == {True, False} and {s.padded for s in t} == {True, False}
    assert (S.LONG.B, S.LONG.S, S.LONG.D, S.LONG.H, S.LONG.L) == (32, 100_000, 1024, 16, 2)
    assert S.estimate_long_peak_bytes(S.LONG) < 2 * 2 ** 30
    x, m = S.make_inputs(S.CPU_SHAPES[1], 3, "cpu", DT)
    lens = m.sum(1)
    assert ((lens >= S.CPU_SHAPES[1].S // 2) & (lens < S.CPU_SHAPES[1].S)).all()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_blockwise_long_context_matches_dense(causal):
    import dataclasses

    sh = dataclasses.replace(S.CPU_REDUCED, causal=causal)
    torch.manual_seed(4)
    model = M.BaselineTransformer(sh.D, sh.H, sh.L, causal=causal).eval()
    ref, blk = S.long_context_dense(model, sh, seed=9, q_block=20)   # several query blocks
    assert R.strict(blk, ref).passed
    _, m = S.stacked_input(sh, 9, "cpu", DT)
    assert (blk[~m] == 0).all() and (~m).any()
    summ = S.long_context_forward(model, sh, 9, q_block=20)
    assert summ["finite"] and summ["valid_tokens"] == int(m.sum())
    assert summ["row_sum"][0] == pytest.approx(float(ref[0].double().sum()), abs=1e-3)
    with pytest.raises(ValueError, match="does not match"):
        S.long_context_forward(model, dataclasses.replace(sh, D=64), 1)


# ----------------------------------------------------------------------------- benchmark pipeline

def test_benchmark_pipeline_in_process_writes_valid_results(tmp_path):
    from t4lib.core import results
    from t4lib.benchmarks import contract as bench

    doc = bench.benchmark(tmp_path, profile="cpu", processes=0, ids=[1], compile_peer=False, warmup=0, reps=2,
                          rounds=2, calib_config={"warmup": 0, "reps": 2}, progress=lambda *_: None)
    meta = doc["meta"]
    assert meta["summary"]["shapes_timed"] == 1 and meta["summary"]["strict_failures_total"] == 0
    row = meta["shapes"][0]
    assert row["strict_failures"] == [0] and row["errors"] == [] and row["mask_inspections_during_timing"] == 0
    assert meta["long_context"]["reduced"]["judge"]["passed"]
    path = results.write(tmp_path / "contract_benchmark.json", doc["figures"], **meta)
    results.validate_file(path)
    names = {f["name"] for f in doc["figures"]}
    assert {"contract/shape01/optimized/speedup", "contract/geomean_speedup/optimized",
            "contract/shape14/reduced_judge_failures"} <= names
    assert C.Plan.load(tmp_path / "contract_plan.json").entries


def _good_record(path):
    from t4lib.core import results

    fig = results.figure("contract/geomean_speedup/optimized", 1.5, "x", "ARITHMETIC", "test", note="kept")
    return results.write(path, [fig], profile="gpu", producer=__file__)


def test_every_worker_failing_never_replaces_a_good_record_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    from t4lib import cli
    from t4lib.benchmarks import contract as bench

    good = _good_record(tmp_path / "contract_benchmark.json").read_bytes()
    calls = []

    def failing_spawn(target, payload, *, timeout=600.0, env=None):
        calls.append(target)
        return {"error": f"{target} exited with status 1", "stderr_tail": "boom"}

    monkeypatch.setattr(bench.timing, "spawn", failing_spawn)
    assert cli.main(["bench", "contract", "--out", str(tmp_path)]) == 1
    assert (tmp_path / "contract_benchmark.json").read_bytes() == good
    assert len(calls) == 5  # calibration, three measurement processes, shape 14
    err = capsys.readouterr().err
    assert "measured nothing" in err and "measurement process 3" in err and "shape 14" in err
    assert bench.main(["--out", str(tmp_path)]) == 1
    assert (tmp_path / "contract_benchmark.json").read_bytes() == good


def test_failures_of_every_kind_are_counted_in_one_place(tmp_path, monkeypatch):
    from t4lib.benchmarks import contract as bench
    from t4lib.core import results

    def broken(p):
        raise RuntimeError("worker broke")

    monkeypatch.setattr(bench, "long_worker", broken)  # shape 14 fails, shape 1 is measured
    _good_record(tmp_path / "contract_benchmark.json")
    with pytest.raises(RuntimeError, match="(?s)failed in part.*shape 14: RuntimeError: worker broke"):
        bench.run(tmp_path, profile="cpu", processes=0, ids=[1], compile_peer=False, warmup=0, reps=2, rounds=2,
                  calib_config={"warmup": 0, "reps": 2}, progress=lambda *_: None)
    doc = results.read_results(tmp_path / "contract_benchmark.json")
    assert doc["errors"] == ["shape 14: RuntimeError: worker broke"]
    names = {f["name"]: f for f in doc["figures"]}
    assert "contract/shape01/optimized/speedup" in names
    assert names["contract/geomean_speedup/optimized"]["value"] != 1.5  # re-measured, not carried
    doc2 = bench.summarize(S.CPU_SHAPES, [1], {"error": "calibration broke"},
                           [{"error": "process broke"}, {"results": [{"shape": 1, "error": "shape broke"}]}],
                           {"error": "long broke", "reduced_error": "reduced broke"},
                           plan_path=tmp_path / "p.json", quick=True, protocol={}, profile="cpu")
    assert doc2["figures"] == [] and doc2["meta"]["summary"]["strict_failures_total"] is None
    assert doc2["meta"]["errors"] == ["calibration: calibration broke", "measurement process 1: process broke",
                                      "shape 1 (measurement process 2): shape broke", "shape 14: long broke",
                                      "shape 14 reduced check: reduced broke"]


@pytest.mark.parametrize("argv, match", [
    (["--shapes", "a"], "--shapes: comma-separated"), (["--shapes", "99"], "--shapes: each shape once"),
    (["--shapes", "1,1"], "--shapes: each shape once"), (["--profile", "tpu"], "--profile")])
def test_contract_cli_checks_its_options_before_any_work(argv, match, capsys, monkeypatch):
    from t4lib.benchmarks import contract as bench

    monkeypatch.setattr(bench, "benchmark", lambda *a, **k: pytest.fail("ran with a bad option"))
    with pytest.raises(SystemExit) as e:
        bench.main(argv + (["--profile", "cpu"] if "--profile" not in argv else []))
    assert e.value.code == 2 and match in capsys.readouterr().err


def test_contract_benchmark_refuses_unknown_or_repeated_ids_and_profiles(tmp_path):
    from t4lib.benchmarks import contract as bench

    for kw, match in ((dict(ids=[99]), "unknown shape ids"), (dict(ids=[1, 1]), "ids: each shape once"),
                      (dict(profile="tpu"), "profile must be")):
        with pytest.raises(ValueError, match=match):
            bench.benchmark(tmp_path, **{"profile": "cpu", "processes": 0, **kw})
    assert not (tmp_path / "contract_plan.json").exists()
