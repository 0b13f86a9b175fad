"""Batch-1 decode of StaticEngine before and after "StaticEngine takes ragged batches" (5d4529c), and Hugging Face
generate with a static cache, in one process on one GPU (not part of the library; see README.md):

    python labs/serving_regression/serving_regression_lab.py --out OUT.json [--shapes 7b 0.5b] [--quick]

Per shape (the serving benchmark's random-weight Qwen2.5 7B and 0.5B shapes): HF ``generate`` (fp16, static cache)
timed as the benchmark times it, then the model quantized W4A16 (RTN g128) with fused q/k/v and gate/up, and on it
the engine of 5d4529c^ (``engine_before.py``) and today's ``t4lib.serving.StaticEngine`` (``generate_with_stats``),
both warmed up, then timed alternately (``--repeats`` calls each, median). Both engines' greedy tokens are compared.
A last probe builds today's engine again with dynamo's recompile limit already used up, as in a process that has
compiled more than ``recompile_limit`` engines (the serving benchmark after its batched section): the hypothesis
of README.md. ``--quick``: a 2-layer model of small widths on the CPU (no graph, no compile): checks the script.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))   # engine_before.py beside this script

import engine_before  # noqa: E402
from t4lib.benchmarks.serving import QWEN05, QWEN7B, build_random_model  # noqa: E402
from t4lib.core import results, timing  # noqa: E402
from t4lib.quant import quantize_model  # noqa: E402
from t4lib.serving import StaticEngine, fuse_projections  # noqa: E402
from t4lib.serving.engine import hf_generate  # noqa: E402

SOURCE = "labs/serving_regression/serving_regression_lab.py"
SHAPES = {"7b": ("qwen2.5-7b-shape", QWEN7B), "0.5b": ("qwen2.5-0.5b-shape", QWEN05)}
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def hf_decode_rate(m, ids, n: int, reps: int = 3) -> tuple[float, float]:
    """(decode tokens/s, end-to-end tokens/s) of HF static-cache generate, as the serving benchmark measures them:
    decode from the first new token to the last within one run (timing.TokenTimes), median of ``reps``."""
    hf_generate(m, ids, n)   # warm-up (compiles HF's forward on CUDA)
    t_e2e = timing.wall_time(lambda: hf_generate(m, ids, n), reps=reps)
    spans = []
    for _ in range(reps):
        stamps = timing.TokenTimes()
        hf_generate(m, ids, n, streamer=stamps)
        spans.append(stamps.times[-1] - stamps.times[0])
    return (n - 1) / statistics.median(spans), n / t_e2e


def timed(call):
    """(result, end-to-end seconds) of one engine call, the device synchronized before and after."""
    sync()
    t0 = time.perf_counter()
    r = call()
    sync()
    return r, time.perf_counter() - t0


def recompile_limit_name() -> str:
    return "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"


def measure_shape(label: str, cfg: dict, a, dev: str, deadline: float) -> tuple[dict, list[str]]:
    rows: dict = {"shape": label, "prompt_len": a.prompt_len, "new_tokens": a.new_tokens}
    notes: list[str] = []
    m = build_random_model(cfg, dev=dev)
    g = torch.Generator(device=dev).manual_seed(0)
    ids = torch.randint(0, cfg["vocab_size"], (1, a.prompt_len), device=dev, generator=g)
    max_len = a.prompt_len + a.new_tokens + 8     # as the serving benchmark
    if not a.no_hf:
        rows["hf_static_fp16_decode_tokens_per_s"], rows["hf_static_fp16_tokens_per_s"] = \
            hf_decode_rate(m, ids, a.new_tokens)
    quantize_model(m)        # RTN g128; lm_head and embeddings fp16 (the benchmark's engine_w4a16)
    fuse_projections(m)
    engines = {"before": engine_before.StaticEngine(m, max_len=max_len),
               "today": StaticEngine(m, max_len=max_len)}
    calls = {"before": lambda n: engines["before"].generate(ids, n),
             "today": lambda n: engines["today"].generate_with_stats(ids, n)}
    for k in calls:          # compile, capture, warm up (as the benchmark: 8 tokens), then one full-length call
        calls[k](8)
        calls[k](a.new_tokens)
    runs: dict = {k: [] for k in calls}
    for _ in range(a.repeats):   # alternate, so drift in clocks or temperature hits both alike
        for k in calls:
            runs[k].append(timed(lambda k=k: calls[k](a.new_tokens)))
    for k, rs in runs.items():
        r = rs[-1][0]
        rows[f"engine_{k}"] = dict(
            decode_tokens_per_s=statistics.median(x.decode_tokens_per_s for x, _ in rs),
            decode_tokens_per_s_all=[x.decode_tokens_per_s for x, _ in rs],
            end_to_end_tokens_per_s=a.new_tokens / statistics.median(t for _, t in rs),
            ttft_ms=statistics.median(x.ttft_s for x, _ in rs) * 1e3,
            graph=r.graph, graph_error=r.graph_error, compiled=r.compiled, compile_error=r.compile_error,
            prefill_graph=r.prefill_graph)
    tb, tt = runs["before"][-1][0].new_tokens, runs["today"][-1][0].new_tokens
    same = torch.equal(tb, tt)
    diff = (tb != tt).nonzero()
    rows["greedy_tokens_identical"] = same
    rows["greedy_first_difference"] = None if same else int(diff[0, -1])
    rows["greedy_agreement"] = (tb == tt).float().mean().item()
    b, t = rows["engine_before"]["decode_tokens_per_s"], rows["engine_today"]["decode_tokens_per_s"]
    rows["today_over_before"] = t / b
    if "hf_static_fp16_decode_tokens_per_s" in rows:
        hf = rows["hf_static_fp16_decode_tokens_per_s"]
        rows["before_speedup_vs_hf_static"], rows["today_speedup_vs_hf_static"] = b / hf, t / hf
    del engines, calls, runs
    # the probe: today's engine once dynamo's recompile limit for StaticEngine._forward is used up
    if dev == "cuda" and not a.no_probe and time.monotonic() < deadline:
        name = recompile_limit_name()
        with torch._dynamo.config.patch(**{name: 1}):   # this process has compiled >= 1 entry already
            eng = StaticEngine(m, max_len=max_len)
            eng.generate_with_stats(ids, 8)
            rs = [eng.generate_with_stats(ids, a.new_tokens) for _ in range(3)]
        rows["engine_today_recompile_limit_used_up"] = dict(
            decode_tokens_per_s=statistics.median(x.decode_tokens_per_s for x in rs), compiled=rs[-1].compiled,
            compile_error=rs[-1].compile_error, graph=rs[-1].graph,
            how=f"torch._dynamo.config.{name}=1 while building and warming a new engine on the same model")
        del eng
    elif dev == "cuda" and not a.no_probe:
        notes.append(f"{label}: recompile-limit probe skipped (time budget)")
    del m
    if dev == "cuda":
        torch.cuda.empty_cache()
    return rows, notes


def figures(rows: dict, env: dict) -> list[dict]:
    label, figs = f"serving_regression/{rows['shape']}", []

    def fig(name, value, unit, tag="MEASURED", **kw):
        if tag == "MEASURED":
            kw["env"] = env
        figs.append(results.figure(f"{label}/{name}", value, unit, tag, SOURCE, **kw))

    for k, what in (("before", "StaticEngine of 5d4529c^ (engine_before.py), generate()"),
                    ("today", "today's StaticEngine, generate_with_stats()")):
        e = rows[f"engine_{k}"]
        fig(f"engine_{k}/decode_tokens_per_s", e["decode_tokens_per_s"], "tokens/s", compiled=e["compiled"],
            graph=e["graph"], compile_error=e["compile_error"],
            note=f"{what}: W4A16 fused, batch 1, greedy, {rows['new_tokens']} new tokens after {rows['prompt_len']}; "
                 f"the engine's own decode timer (synchronize, perf_counter), median of {len(e['decode_tokens_per_s_all'])}")
    fig("today_over_before", rows["today_over_before"], "x", "ARITHMETIC",
        note="decode tokens/s of today's engine / the engine of 5d4529c^, same model, prompt and process")
    fig("greedy_tokens_identical", int(rows["greedy_tokens_identical"]), "bool",
        note="1 when both engines' greedy tokens are equal position by position")
    if "hf_static_fp16_decode_tokens_per_s" in rows:
        fig("hf_static/decode_tokens_per_s", rows["hf_static_fp16_decode_tokens_per_s"], "tokens/s",
            note="HF generate, fp16, cache_implementation='static', first to last new token in one run, median of 3")
        for k in ("before", "today"):
            fig(f"engine_{k}/decode_speedup_vs_hf_static", rows[f"{k}_speedup_vs_hf_static"], "x", "ARITHMETIC",
                note=f"engine_{k} decode tokens/s (W4A16) / HF static-cache decode tokens/s (fp16), same process")
    p = rows.get("engine_today_recompile_limit_used_up")
    if p:
        fig("engine_today_recompile_limit_used_up/decode_tokens_per_s", p["decode_tokens_per_s"], "tokens/s",
            compiled=p["compiled"], compile_error=p["compile_error"], note=p["how"])
    return figs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python labs/serving_regression/serving_regression_lab.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON record to write (t4lib.core.results format)")
    ap.add_argument("--shapes", nargs="+", default=["7b", "0.5b"], choices=list(SHAPES))
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens per call (the benchmark's 128)")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per engine (median)")
    ap.add_argument("--budget-s", type=float, default=170.0, help="skip what is left (probe, next shape) after this")
    ap.add_argument("--no-hf", action="store_true", help="skip the Hugging Face baseline")
    ap.add_argument("--no-probe", action="store_true", help="skip the recompile-limit probe")
    ap.add_argument("--quick", action="store_true", help="a tiny 2-layer model on the CPU: checks the script runs")
    a = ap.parse_args(argv)
    dev = "cpu" if a.quick else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("serving_regression_lab: no CUDA device; the engines' graphs and compile need one "
                         "(use --quick for a CPU check of the script)")
    if a.quick:
        a.new_tokens, a.repeats = min(a.new_tokens, 8), min(a.repeats, 2)
    t0 = time.monotonic()
    deadline = t0 + a.budget_s
    env = results.environment()
    all_rows, figs, errors, notes = {}, [], [], []
    for key in a.shapes:
        label, cfg = SHAPES[key]
        if a.quick:
            label, cfg = f"{label}/tiny", TINY
        if time.monotonic() > deadline:
            notes.append(f"{label}: skipped (time budget {a.budget_s:.0f} s)")
            continue
        try:
            rows, n = measure_shape(label, cfg, a, dev, deadline)
            all_rows[label], notes = rows, notes + n
            figs += figures(rows, env)
            print(label, {k: v for k, v in rows.items() if not isinstance(v, dict)}, flush=True)
            for k in ("engine_before", "engine_today", "engine_today_recompile_limit_used_up"):
                if k in rows:
                    print("  ", k, {x: y for x, y in rows[k].items() if x != "decode_tokens_per_s_all"}, flush=True)
        except Exception as e:   # recorded; the other shape still runs
            import traceback  # only on failure
            errors.append(f"{label}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            print(errors[-1], file=sys.stderr, flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
        # written after each shape: a run stopped by a timeout keeps what finished
        lab = results.lab_record(" ".join(["python", *sys.argv]))
        results.write(a.out, figs, producer=SOURCE, errors=errors, merge=False, rows=all_rows, notes=notes,
                      elapsed_s=time.monotonic() - t0, torch_version=torch.__version__,
                      **{k: lab[k] for k in ("device", "commit", "command", "date")})
    return 1 if errors and not figs else 0


if __name__ == "__main__":
    raise SystemExit(main())
