"""The contract benchmark: calibrate, measure shapes 1-13 in separate
processes, run shape 14 with bounded memory, and write the results.

    python -m t4lib.benchmarks.contract --out results/<device-slug>/ [--quick] [--shapes 1,4,9]

writes ``contract_benchmark.json`` (figures via ``t4lib.core.results``, the
per-shape table and the calibration report in its metadata) and
``contract_plan.json`` (the calibration plan, with its device signature).

Steps, each in a fresh Python process (``timing.spawn``):

1. calibration of every shape key (``calibrate.calibrate_shape``) -> plan;
2. ``PROCESSES`` (3) measurement processes; each loads the plan, builds the
   seeded reference and the optimized model from its state dict, checks the
   optimized output (strict and judge rules) on the benchmark input, and only
   if it passes times reference, optimized and ``torch.compile``'d reference
   (regional compilation of each block, the peer) in alternating rounds. Shape
   order rotates between processes;
3. shape 14: the blockwise evaluator at full size (peak memory, wall time),
   then its reduced version against the dense reference.

``--quick`` (a smoke run, not the protocol): one measurement process instead
of three, 10 warm-ups and 30 repetitions instead of 20 and 100, and shape 14
on its first 4 rows instead of 32 (peak memory does not depend on the row
count: rows are evaluated one at a time).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from t4lib.contract import timing
from t4lib.contract import rule, shapes as S
from t4lib.contract.calibrate import CalibrationConfig, Plan, calibrate_shape
from t4lib.contract.model import BaselineTransformer, build_pair
from t4lib.core import hw, results

BENCH_SEED = 1234              # benchmark inputs
CALIB_SEEDS = (11, 12)         # calibration inputs (never the benchmark's)
LONG_SEED = 77
SOURCE = "t4lib.benchmarks.contract"


def weight_seed(shape_id: int) -> int:
    return 1000 + shape_id


def _torch_setup(profile: str):
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    if profile == "gpu":
        if not torch.cuda.is_available():
            raise RuntimeError("the gpu profile needs a CUDA device")
        return torch.device("cuda"), torch.float16
    return torch.device("cpu"), torch.float32


def _table(profile: str):
    return (S.SHAPES, S.LONG, S.REDUCED) if profile == "gpu" else (S.CPU_SHAPES, S.CPU_LONG, S.CPU_REDUCED)


def _env() -> dict:
    try:
        return results.environment()
    except Exception as e:  # never lose a measurement over telemetry
        return {"device": "unknown", "driver": "n/a", "torch": "n/a", "clocks": {}, "throttle": [], "why": str(e)}


def _free():
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- workers

def calibrate_worker(p: dict) -> dict:
    """Calibrate the shapes ``p["ids"]``; save the plan to ``p["plan"]``."""
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    dev, dt = _torch_setup(p["profile"])
    table = S.by_id(p["ids"], _table(p["profile"])[0])
    cfg = CalibrationConfig(**p.get("config", {}))
    plan = Plan()
    reports, total = [], time.perf_counter()
    for sh in table:
        t0 = time.perf_counter()
        try:
            ref, opt = build_pair(sh.D, sh.H, sh.L, causal=sh.causal, seed=weight_seed(sh.id), device=dev, dtype=dt)
            inputs = [S.make_inputs(sh, s, dev, dt) for s in CALIB_SEEDS]
            key, entry, rep = calibrate_shape(ref, opt, inputs, cfg)
            plan.add(key, entry)
            rep.update(shape=sh.id, seconds=time.perf_counter() - t0)
        except Exception as e:
            rep = {"shape": sh.id, "error": f"{type(e).__name__}: {e}"[:800], "seconds": time.perf_counter() - t0}
        reports.append(rep)
        ref = opt = inputs = None
        _free()
    plan.save(p["plan"])
    return {"reports": reports, "calibration_s": time.perf_counter() - total, "env": _env(),
            "plan_device": plan.device}


def _compiled_peer(ref):
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(64, getattr(cfg, name)))
    peer = copy.deepcopy(ref)
    for blk in peer.layers:                # regional compilation: each block, same code
        blk.compile(dynamic=False)
    return peer


def _rule_pair(out, ref_out) -> dict:
    s, j = rule.strict(out, ref_out), rule.judge(out, ref_out)
    return {"strict_failures": s.failures, "strict_max_usage": s.max_usage, "max_abs": s.max_abs,
            "judge_failures": j.failures, "elements": s.total}


def measure_worker(p: dict) -> dict:
    """Measure shapes ``p["ids"]`` (in the given order) against the plan."""
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    dev, dt = _torch_setup(p["profile"])
    table = S.by_id(p["ids"], _table(p["profile"])[0])
    plan = Plan.load(p["plan"], device=dev, on_stale="warn")
    out = []
    for sh in table:
        r: dict[str, Any] = {"shape": sh.id}
        try:
            with timing.Stopwatch(dev) as sw:
                ref, opt = build_pair(sh.D, sh.H, sh.L, causal=sh.causal, seed=weight_seed(sh.id),
                                      device=dev, dtype=dt, plan=plan)
            r["build_s"] = sw.seconds
            x, m = S.make_inputs(sh, BENCH_SEED, dev, dt)
            with torch.no_grad():
                ref_out = ref(x, m)
                with timing.Stopwatch(dev) as sw:
                    kind = opt.mask_kind(m)
                r.update(mask_kind=kind, mask_inspection_s=sw.seconds, key=opt.key_for(x, kind))
                entry = plan.lookup(r["key"])
                r["plan"] = entry.name if entry is not None else "reference (key not in plan)"
                with timing.Stopwatch(dev) as sw:
                    opt(x, m)                      # set-up: weight packing, graph capture
                r["setup_s"] = sw.seconds
                r["dispatch"] = opt.last_dispatch
                r["optimized"] = _rule_pair(opt(x, m), ref_out)
                cases = {"reference": lambda: ref(x, m)}
                if r["optimized"]["strict_failures"] == 0:
                    cases["optimized"] = lambda: opt(x, m)
                else:
                    r["optimized"]["not_timed"] = "fails the strict rule on the benchmark input"
                peer = None
                if p.get("compile"):
                    try:
                        with timing.Stopwatch(dev) as sw:
                            peer = _compiled_peer(ref)
                            peer_out = peer(x, m)
                        r["compile_s"] = sw.seconds
                        r["compiled"] = _rule_pair(peer_out, ref_out)
                        cases["compiled"] = lambda: peer(x, m)
                    except Exception as e:
                        r["compiled"] = {"error": f"{type(e).__name__}: {e}"[:800]}
                insp0 = opt.proof.inspections
                t = timing.time_alternating(cases, warmup=p["warmup"], reps=p["reps"], rounds=p["rounds"],
                                            device=dev)
                r["mask_inspections_during_timing"] = opt.proof.inspections - insp0
                r["times"] = {n: {k: v for k, v in s.items() if k not in ("samples", "_order")}
                              for n, s in t.items()}
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"[:800]
        out.append(r)
        ref = opt = peer = x = m = ref_out = cases = None
        try:
            import torch._dynamo  # in the measuring process, as torch

            torch._dynamo.reset()
        except Exception:
            pass
        _free()
    return {"process": p["index"], "results": out, "env": _env()}


def long_worker(p: dict) -> dict:
    """Shape 14: full-size blockwise run (peak memory), then the reduced check."""
    import torch  # torch loads in the measuring processes: the parent only orchestrates them

    dev, dt = _torch_setup(p["profile"])
    _, long, reduced = _table(p["profile"])
    if p.get("rows"):
        long = dataclasses.replace(long, B=min(long.B, int(p["rows"])))
    q_block = int(p.get("q_block", 8192))
    res: dict[str, Any] = {"shape": long.as_dict(), "reduced_shape": reduced.as_dict(), "q_block": q_block}
    torch.manual_seed(weight_seed(14))
    model = BaselineTransformer(long.D, long.H, long.L, causal=long.causal, device=dev, dtype=dt).eval()
    try:
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        with timing.Stopwatch(dev) as sw:
            summ = S.long_context_forward(model, long, LONG_SEED, q_block=q_block)
        res.update(wall_s=sw.seconds, finite=summ["finite"], valid_tokens=summ["valid_tokens"],
                   row_sum=summ["row_sum"][:4])
        if dev.type == "cuda":
            res.update(peak_bytes=torch.cuda.max_memory_allocated(), weights_bytes=base,
                       peak_reserved_bytes=torch.cuda.max_memory_reserved())
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:800]
    _free()
    try:
        with timing.Stopwatch(dev) as sw:
            ref_out, blk_out = S.long_context_dense(model, reduced, LONG_SEED, q_block=min(q_block, 1024))
        res["reduced"] = {"judge": rule.judge(blk_out, ref_out).as_dict(),
                          "strict": rule.strict(blk_out, ref_out).as_dict(), "seconds": sw.seconds}
        x, m = S.stacked_input(reduced, LONG_SEED, dev, dt)
        with torch.no_grad():
            t = timing.time_alternating(
                {"dense_reference": lambda: model(x, m),
                 "blockwise": lambda: S.long_context_forward(model, reduced, LONG_SEED, q_block=1024)},
                warmup=2, reps=5, rounds=1, device=dev)
        res["reduced"]["times"] = {n: {"median_s": v["median_s"], "p90_s": v["p90_s"]} for n, v in t.items()}
    except Exception as e:
        res["reduced_error"] = f"{type(e).__name__}: {e}"[:800]
    res["env"] = _env()
    return res


# ----------------------------------------------------------------------------- orchestration

def _call(target: str, payload: dict, processes: int, timeout: float) -> dict:
    """In a fresh process (``processes > 0``) or in this one (the CPU profile)."""
    if processes > 0:
        # the module path, not __name__ (which is "__main__" under python -m)
        return timing.spawn(f"t4lib.benchmarks.contract:{target}", payload, timeout=timeout)
    try:
        return globals()[target](payload)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def benchmark(out_dir=None, *, profile: str = "gpu", quick: bool = False, ids=None, processes: int | None = None,
              compile_peer: bool = True, long_context: bool = True, warmup: int | None = None,
              reps: int | None = None, rounds: int | None = None, calib_config: dict | None = None,
              progress=print) -> dict:
    """Run everything and return ``{"figures": [...], "meta": {...}}``.

    ``processes=0`` runs the workers in this process (the CPU profile of the
    notebook); the protocol is ``processes=3``.
    """
    t_start = time.perf_counter()
    if profile not in ("gpu", "cpu"):
        raise ValueError(f"profile must be 'gpu' or 'cpu', got {profile!r}")
    table, long, _ = _table(profile)
    ids = list(ids) if ids else [s.id for s in table]
    if len(set(ids)) != len(ids):
        raise ValueError(f"ids: each shape once, got {ids}")
    S.by_id(ids, table)  # unknown ids: a ValueError naming them, before any work
    procs = (1 if quick else timing.PROCESSES) if processes is None else processes
    n_meas = max(1, procs)
    warmup = warmup if warmup is not None else (10 if quick else timing.WARMUP)
    reps = reps if reps is not None else (30 if quick else timing.REPS)
    rounds = rounds if rounds is not None else timing.ROUNDS
    out_dir = Path(out_dir) if out_dir else None
    plan_path = (out_dir / "contract_plan.json") if out_dir else Path(tempfile.mkdtemp()) / "contract_plan.json"
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)

    progress(f"calibrating {len(ids)} shapes ...")
    cal = _call("calibrate_worker", {"profile": profile, "ids": ids, "plan": str(plan_path),
                                     "config": calib_config or {}}, procs, 300)
    if "error" in cal and "reports" not in cal:
        progress(f"calibration failed: {cal['error']}\n{cal.get('stderr_tail', '')}")
    meas = []
    for i in range(n_meas):
        order = ids[i % len(ids):] + ids[:i % len(ids)] if i else ids
        progress(f"measurement process {i + 1}/{n_meas} ...")
        res = _call("measure_worker", {"profile": profile, "ids": order, "plan": str(plan_path), "index": i,
                                       "warmup": warmup, "reps": reps, "rounds": rounds,
                                       "compile": compile_peer}, procs, 420)
        if "error" in res and "results" not in res:
            progress(f"measurement process {i + 1} failed: {res['error']}\n{res.get('stderr_tail', '')}")
        meas.append(res)
    lres = None
    if long_context:
        progress(f"shape 14 ({'first 4 rows' if quick else 'full'}) ...")
        lres = _call("long_worker", {"profile": profile, "rows": 4 if quick else None}, procs, 420)
        if "error" in lres and "shape" not in lres:
            progress(f"shape 14 failed: {lres['error']}\n{lres.get('stderr_tail', '')}")
    doc = summarize(table, ids, cal, meas, lres, plan_path=plan_path, quick=quick,
                    protocol={"warmup": warmup, "reps": reps, "rounds": rounds, "processes": n_meas,
                              "separate_processes": procs > 0, "compile_peer": compile_peer},
                    profile=profile)
    doc["meta"]["benchmark_wall_s"] = time.perf_counter() - t_start
    return doc


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def failures(cal: dict, meas: list[dict], lres: dict | None) -> list[str]:
    """Every failure of a run, in one list: a worker process that failed, a shape that failed to
    calibrate or measure, a peer that failed to compile, shape 14 or its reduced check."""
    errs = []
    if cal.get("error"):
        errs.append(f"calibration: {cal['error']}")
    errs += [f"calibration of shape {r.get('shape')}: {r['error']}" for r in cal.get("reports", []) if r.get("error")]
    for i, m in enumerate(meas):
        if m.get("error"):
            errs.append(f"measurement process {i + 1}: {m['error']}")
        for r in m.get("results", []):
            if r.get("error"):
                errs.append(f"shape {r.get('shape')} (measurement process {i + 1}): {r['error']}")
            if (r.get("compiled") or {}).get("error"):
                errs.append(f"shape {r.get('shape')} compiled peer (measurement process {i + 1}): "
                            f"{r['compiled']['error']}")
    if lres is not None:
        for k, what in (("error", "shape 14"), ("reduced_error", "shape 14 reduced check")):
            if lres.get(k):
                errs.append(f"{what}: {lres[k]}")
    return errs


def summarize(table, ids, cal, meas, lres, *, plan_path, quick, protocol, profile) -> dict:
    """Aggregate the workers' dicts into figures and a per-shape table.

    ``meta["errors"]`` lists every failure (:func:`failures`); a run that measured nothing (no shape
    timed, no shape-14 result) has no figures, so that it never replaces a good record."""
    env = cal.get("env") or next((m["env"] for m in meas if "env" in m), None) or _env()
    figs, rows = [], []
    m_by_id = {s.id: s for s in table}
    cal_by_id = {r.get("shape"): r for r in cal.get("reports", [])}
    device_name = env.get("device", "?")
    for sid in ids:
        sh = m_by_id[sid]
        per = [r for m in meas for r in m.get("results", []) if r.get("shape") == sid]
        row: dict[str, Any] = {"shape": sh.as_dict(), "calibration": cal_by_id.get(sid, {}).get("chosen"),
                               "errors": [r["error"] for r in per if "error" in r]}
        ok = [r for r in per if "times" in r]
        row["strict_failures"] = [r.get("optimized", {}).get("strict_failures") for r in per]
        row["judge_failures"] = [r.get("optimized", {}).get("judge_failures") for r in per]
        row["dispatch"] = sorted({r.get("dispatch") for r in per if r.get("dispatch")})
        for case in ("reference", "optimized", "compiled"):
            meds = [r["times"][case]["median_s"] for r in ok if case in r["times"]]
            p90s = [r["times"][case]["p90_s"] for r in ok if case in r["times"]]
            if meds:
                row[case] = {"median_s": statistics.median(meds), "p90_s": statistics.median(p90s),
                             "process_medians_s": meds, "process_p90s_s": p90s}
        for case in ("optimized", "compiled"):
            sp = [r["times"]["reference"]["median_s"] / r["times"][case]["median_s"] for r in ok
                  if case in r["times"]]
            if sp:
                row[case]["speedup"] = statistics.median(sp)
                row[case]["process_speedups"] = sp
                row[case]["p90_not_worse"] = row[case]["p90_s"] <= row["reference"]["p90_s"]
        comp = [r.get("compiled", {}) for r in per]
        row["compiled_strict_failures"] = [c.get("strict_failures") for c in comp]
        for k in ("setup_s", "mask_inspection_s", "compile_s", "build_s", "mask_inspections_during_timing"):
            vals = [r[k] for r in per if k in r]
            if vals:
                row[k] = statistics.median(vals)
        rows.append(row)
        pre = f"contract/shape{sid:02d}"
        note_sp = f"median over processes of (reference median / {{}} median), same process, {sh.label}"
        for case in ("reference", "optimized", "compiled"):
            if case in row:
                figs.append(results.figure(f"{pre}/{case}/latency_median", row[case]["median_s"] * 1e3, "ms",
                                           "MEASURED", SOURCE, env=env, p90_ms=row[case]["p90_s"] * 1e3,
                                           process_medians_ms=[v * 1e3 for v in row[case]["process_medians_s"]],
                                           shape=sh.label))
        for case in ("optimized", "compiled"):
            if case in row and "speedup" in row[case]:
                figs.append(results.figure(f"{pre}/{case}/speedup", row[case]["speedup"], "x", "ARITHMETIC",
                                           SOURCE, env=env, note=note_sp.format(case),
                                           p90_not_worse=row[case]["p90_not_worse"]))
        sf = [v for v in row["strict_failures"] if v is not None]
        if sf:
            figs.append(results.figure(f"{pre}/optimized/strict_failures", int(sum(sf)), "elements", "MEASURED",
                                       SOURCE, env=env, processes=len(sf),
                                       elements_per_process=(per[0].get("optimized", {}).get("elements"))))
        if profile == "gpu":
            t4 = max(sh.flops() / hw.T4.fp16_tensor_flops, sh.min_bytes() / hw.T4.sustained_bw)
            figs.append(results.figure(f"{pre}/t4_projection_floor", t4 * 1e3, "ms", "ESTIMATED", SOURCE,
                                       note="T4 roofline floor for one forward: max(FLOPs / 65 TFLOP/s fp16 "
                                            "tensor, (weights + x + y bytes) / 260 GB/s); a lower bound, "
                                            f"not a prediction; measured figures above are on {device_name}"))
    # aggregates
    sp_opt = [r["optimized"]["speedup"] for r in rows if "speedup" in r.get("optimized", {})]
    sp_cmp = [r["compiled"]["speedup"] for r in rows if "speedup" in r.get("compiled", {})]
    complete = len(sp_opt) == len(ids)
    sf_all = [v for r in rows for v in r["strict_failures"] if v is not None]
    summary = {
        "shapes": len(ids), "shapes_timed": len(sp_opt),
        "geomean_speedup_optimized": _geomean(sp_opt), "geomean_speedup_compiled": _geomean(sp_cmp),
        "strict_failures_total": int(sum(sf_all)) if sf_all else None,
        "p90_regressions": [r["shape"]["id"] for r in rows if r.get("optimized", {}).get("p90_not_worse") is False],
        "calibration_s": cal.get("calibration_s"),
    }
    if sp_opt:
        figs.append(results.figure("contract/geomean_speedup/optimized", summary["geomean_speedup_optimized"], "x",
                                   "ARITHMETIC", SOURCE, env=env, shapes=len(sp_opt), complete=complete,
                                   note="unweighted geometric mean over shapes of the per-shape speedups"))
    if sp_cmp:
        figs.append(results.figure("contract/geomean_speedup/compiled", summary["geomean_speedup_compiled"], "x",
                                   "ARITHMETIC", SOURCE, env=env, shapes=len(sp_cmp),
                                   note="torch.compile (regional, default mode) of the reference; unweighted "
                                        "geometric mean of per-shape speedups over the eager reference"))
    if summary["strict_failures_total"] is not None:  # only what was checked: a failed run checked nothing
        figs.append(results.figure("contract/strict_failures_total", summary["strict_failures_total"], "elements",
                                   "MEASURED", SOURCE, env=env))
    if sp_opt:
        figs.append(results.figure("contract/p90_regressions", len(summary["p90_regressions"]), "shapes",
                                   "ARITHMETIC", SOURCE, env=env, shapes_list=summary["p90_regressions"],
                                   note="shapes whose optimized p90 (median over processes) exceeds the "
                                        "reference's"))
    if summary["calibration_s"] is not None:
        figs.append(results.figure("contract/calibration_time", summary["calibration_s"], "s", "MEASURED", SOURCE,
                                   env=env, note="all shapes, excluded from latency"))
    long_meta = None
    if lres is not None:
        long_meta = {k: v for k, v in lres.items() if k != "env"}
        lenv = lres.get("env", env)
        if "peak_bytes" in lres:
            figs.append(results.figure("contract/shape14/peak_memory", lres["peak_bytes"] / 2 ** 30, "GiB",
                                       "MEASURED", SOURCE, env=lenv, rows=lres["shape"]["B"],
                                       note_budget="<= 2 GiB",
                                       weights_GiB=lres.get("weights_bytes", 0) / 2 ** 30))
            est = S.estimate_long_peak_bytes(S.LONG if profile == "gpu" else S.CPU_LONG, lres.get("q_block", 8192))
            figs.append(results.figure("contract/shape14/peak_memory_model", est / 2 ** 30, "GiB", "ESTIMATED",
                                       SOURCE, note="6 S D + 7 q_block D fp16 values plus weights "
                                                    "(shapes.estimate_long_peak_bytes)"))
        if "wall_s" in lres:
            figs.append(results.figure("contract/shape14/wall_time", lres["wall_s"], "s", "MEASURED", SOURCE,
                                       env=lenv, rows=lres["shape"]["B"], finite=lres.get("finite")))
        red = lres.get("reduced")
        if red:
            figs.append(results.figure("contract/shape14/reduced_judge_failures", red["judge"]["failures"],
                                       "elements", "MEASURED", SOURCE, env=lenv, elements=red["judge"]["total"],
                                       shape=lres["reduced_shape"]["label"]))
            figs.append(results.figure("contract/shape14/reduced_strict_failures", red["strict"]["failures"],
                                       "elements", "MEASURED", SOURCE, env=lenv, elements=red["strict"]["total"]))
    meta = {"profile": profile, "quick": quick, "protocol": protocol, "summary": summary, "shapes": rows,
            "calibration": cal.get("reports", []), "calibration_error": cal.get("error"),
            "plan_file": str(plan_path), "long_context": long_meta,
            "errors": failures(cal, meas, lres),
            "contract": {"dtype": "float16" if profile == "gpu" else "float32",
                         "strict": "|a-r| <= 1e-3 or |a-r| <= 1e-2 |r|", "judge": "atol 2e-3, rtol 2e-2",
                         "bench_seed": BENCH_SEED, "calibration_seeds": list(CALIB_SEEDS)}}
    measured_long = lres is not None and ("wall_s" in lres or "reduced" in lres)
    if not sp_opt and not any(r.get("reference") for r in rows) and not measured_long:
        figs = []  # estimates and a calibration time alone are no record of this benchmark
    return {"figures": figs, "meta": meta}


def run(out_dir=None, **kw) -> list[dict]:
    """Run the GPU benchmark and write ``<out_dir>/contract_benchmark.json``
    (default ``results/<device-slug>/``); returns the figures.

    Raises RuntimeError listing the failures when any step failed: a run that measured nothing writes
    nothing (a good record stays as it was); one that failed part-way writes what it measured, the
    previous figures of the rest carried over and its ``errors`` beside them, then raises."""
    out_dir = Path(out_dir) if out_dir else results.results_dir() / hw.device_slug()
    kw.setdefault("profile", "gpu")
    doc = benchmark(out_dir, **kw)
    errs = doc["meta"]["errors"]
    path = out_dir / "contract_benchmark.json"
    if not doc["figures"]:
        raise RuntimeError(f"the contract benchmark measured nothing; {path} left as it was. Failures:\n  "
                           + "\n  ".join(errs or ["(none recorded)"]))
    results.write(path, doc["figures"], **doc["meta"])
    if errs:
        raise RuntimeError(f"the contract benchmark failed in part ({len(errs)} failures, recorded in {path} "
                           "beside the figures it measured):\n  " + "\n  ".join(errs))
    return doc["figures"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m t4lib.benchmarks.contract", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output folder (default results/<device-slug>/)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 process, 30 reps, shape 14 on 4 rows")
    ap.add_argument("--shapes", default=None, help="comma-separated shape ids (default all 13)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    ap.add_argument("--no-long", action="store_true", help="skip shape 14")
    ap.add_argument("--profile", default="gpu", choices=("gpu", "cpu"))
    a = ap.parse_args(argv)
    ids = None
    if a.shapes:
        try:
            ids = [int(v) for v in a.shapes.split(",")]
        except ValueError:
            ap.error(f"--shapes: comma-separated shape ids, got {a.shapes!r}")
        table = _table(a.profile)[0]
        if len(set(ids)) != len(ids) or not all(i in {s.id for s in table} for i in ids):
            ap.error(f"--shapes: each shape once, from {[s.id for s in table]}; got {a.shapes!r}")
    if a.out is not None:
        try:
            results.check_writable(a.out, "--out", directory=True)
        except ValueError as e:
            ap.error(str(e))
    try:
        figs = run(a.out, quick=a.quick, ids=ids, compile_peer=not a.no_compile, long_context=not a.no_long,
                   profile=a.profile)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    for f in figs:
        if "geomean" in f["name"] or "total" in f["name"] or "shape14" in f["name"] or "regress" in f["name"]:
            print(f"{f['name']}: {f['value']} {f['unit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
