"""Speculative decoding benchmark: prompt lookup and a draft model against plain greedy decoding
(``StaticEngine``) and Hugging Face ``generate`` (greedy and ``prompt_lookup_num_tokens=10``), in one
process, on held-out input-grounded (copy/edit) and open-ended (word problem) prompts; the fp16
exactness fraction; the verify-cost curve at the Qwen2.5-0.5B and 7B shapes with its T4 projection.

    python -m t4lib.benchmarks.speculative --out results/nvidia-h200          # on a GPU
    python -m t4lib.benchmarks.speculative --out /tmp/x --prompts 4 --quick   # smoke test
    python -m t4lib.benchmarks.speculative --out /tmp/x --hf-prompts 12       # Hugging Face on the first 12 only

Protocol: every method decodes each prompt greedily until EOS or ``max_new`` tokens and is timed end
to end (prefill included, synchronised), one prompt after another at batch 1, after one warm-up
prompt (the engines: after an untimed pass over every prompt, as the references' pass gives
``StaticEngine``). ``StaticEngine`` is timed on a fixed number of tokens (``generate_with_stats``, no stop at
EOS): it is given each prompt's greedy length (the reference's), which makes it decode exactly the same
tokens without the host checks an EOS stop costs. Batch 8: eight prompts per call, every batch run once untimed before the timed pass; our
engine takes them ragged; the ``StaticEngine`` batch needs one prompt length, so its prompts are
left-truncated to the batch's shortest (its cost does not depend on token values), and it decodes until
the batch's longest reference. Rates are generated tokens (up to EOS) per second. Where the time goes
is recorded for both engines at batch 1 (``details.engine_greedy_b1_split``: ``StaticEngine``'s time to the
first token and its decode; ``details.pld_b1.<kind>.stats``: the speculative engine's prefill, drafting and
verifying), and the ratio after the first token (``decode_speedup_vs_engine_greedy``) beside the end-to-end one.
Both engines replay a captured prefill graph per prompt-length bucket on a GPU, so the end-to-end ratio is the
one a user sees and the second isolates what speculation gains in the decode. On a GPU the speculative engine
drafts and accepts in device rounds (its default there); ``details.pld_b1_loops`` times the same engine on
the copy prompts with the host loop and with other round settings, in the same process.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from t4lib import models
from t4lib.benchmarks.serving import build_random_model
from t4lib.core import graphs, results
from t4lib.models.shapes import QWEN25_05B, QWEN25_7B
from t4lib.serving import StaticEngine
from t4lib.speculative.cache import RowStaticCache
from t4lib.speculative.drafters import DraftModelDrafter, PromptLookupDrafter
from t4lib.speculative.engine import SpeculativeEngine
# the prompt helpers live in t4lib.benchmarks.prompts (notebook 07 reads them too); re-exported for the labs
from t4lib.benchmarks.prompts import eos_of, load_prompts, reads_chat

SOURCE = "t4lib/benchmarks/speculative.py"
EOS = 0   # the project's models' end of text (their generation config's); any model's: eos_of(model)
QWEN_SHAPES = {  # Qwen2.5 configurations (random weights here)
    "qwen2.5-0.5b": QWEN25_05B,
    "qwen2.5-7b": QWEN25_7B,
}
T4_BW = 260e9          # sustained bytes/s (the project's T4 roofline)
T4_FP16_FLOPS = 32e12  # half the 65 TFLOPs fp16 tensor-core peak: what a GEMM sustains on a 70 W part


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---------------------------------------------------------------------- references

def greedy_references(model, prompts, max_new: int, eos: int | list[int] | None = EOS, max_len: int = 512, engine=None):
    """Plain greedy tokens of each prompt (``StaticEngine``, batch 1, up to EOS) and, per generated
    position, the gap between the target's two largest logits (for explaining fp16 mismatches).
    ``engine``: a ``StaticEngine`` of ``model`` to use (saves compiling another)."""
    eng = engine if engine is not None else StaticEngine(model, max_len=max_len)
    refs, gaps = [], []
    for p in prompts:
        r = eng.generate_with_stats(torch.tensor([p]), max_new, eos_token_id=eos, output_logits=True)
        n = r.lengths[0]
        refs.append(r.new_tokens[0, :n].tolist())
        top2 = r.logits[0, :n].topk(2, dim=-1).values
        gaps.append((top2[:, 0] - top2[:, 1]).tolist())
    return refs, gaps


def exactness(got: list[list[int]], refs: list[list[int]], gaps: list[list[float]]) -> dict:
    """Identical sequences, and for each mismatch the first differing position and the target's top-2
    logit gap there (a near-tie of fp16 arithmetic, not a wrong acceptance, when small)."""
    mism = []
    for i, (g, r) in enumerate(zip(got, refs)):
        if g != r:
            j = next((j for j, (a, b) in enumerate(zip(g, r)) if a != b), min(len(g), len(r)))
            mism.append(dict(prompt=i, position=j, top2_gap=gaps[i][j] if j < len(gaps[i]) else None,
                             got=g[j:j + 4], want=r[j:j + 4]))
    return dict(identical=len(refs) - len(mism), n=len(refs), mismatches=mism)


# ---------------------------------------------------------------------- timing
def time_b1(fn, prompts, warm_all: bool = False, per_prompt: list | None = None) -> tuple[float, list]:
    """Total seconds of ``fn(prompt_index)`` over every prompt, one after another; one warm-up call first
    (``warm_all``: an untimed pass over every prompt, so no shape is seen for the first time while timed).
    ``per_prompt``: a list that receives each prompt's seconds (to compare with a peer timed on fewer prompts)."""
    for i in range(len(prompts) if warm_all else 1):
        fn(i)
    outs, total = [], 0.0
    for i in range(len(prompts)):
        _sync()
        t0 = time.perf_counter()
        outs.append(fn(i))
        _sync()
        dt = time.perf_counter() - t0
        total += dt
        if per_prompt is not None:
            per_prompt.append(dt)
    return total, outs


def hf_runner(model, prompts, max_new: int, eos=EOS, **kw):
    """Hugging Face ``generate``, greedy, stopping at EOS (default dynamic cache: assisted and prompt-lookup
    generation refuse a static cache)."""
    dev = next(model.parameters()).device
    # plain greedy against plain greedy: not the repetition penalty an Instruct model's generation config holds
    kw.setdefault("repetition_penalty", 1.0)

    def run(i):
        ids = torch.tensor([prompts[i]], device=dev)
        out = model.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                             pad_token_id=getattr(model.config, "pad_token_id", None) or 1, **kw)
        return out[0, ids.shape[1]:].tolist()
    return run


def spec_runner(eng: SpeculativeEngine, prompts, max_new: int, stats: list, eos=EOS):
    def run(i):
        r = eng.generate_with_stats([prompts[i]], max_new, eos_token_id=eos)
        stats.append(r.stats)
        return r.new_tokens[0]
    return run


def static_runner(eng, prompts, lengths, split: list | None = None):
    """``StaticEngine`` decoding prompt ``i`` for ``lengths[i]`` tokens; ``split`` collects each call's
    (time to first token, decode seconds, whether the prefill replayed a graph)."""
    def run(i):
        r = eng.generate_with_stats(torch.tensor([prompts[i]]), lengths[i])
        if split is not None:
            split.append((r.ttft_s, r.decode_s, r.prefill_graph))
        return r.new_tokens[0].tolist()
    return run


def merge_stats(stats) -> dict:
    """Sums over calls: tokens per forward, acceptance histogram, draft/verify time split."""
    s = dict(decode_tokens=sum(x.decode_tokens for x in stats), row_forwards=sum(x.row_forwards for x in stats),
             target_forwards=sum(x.target_forwards for x in stats), drafted=sum(x.drafted for x in stats),
             accepted=sum(x.accepted for x in stats), plain_steps=sum(x.plain_steps for x in stats),
             no_draft=sum(x.no_draft for x in stats),
             prefill_s=sum(x.prefill_s for x in stats), draft_s=sum(x.draft_s for x in stats),
             verify_s=sum(x.verify_s for x in stats), total_s=sum(x.total_s for x in stats),
             prefill_graph=all(getattr(x, "prefill_graph", False) for x in stats))
    width = max(len(x.accept_hist) for x in stats)
    s["accept_hist"] = [sum(x.accept_hist[i] for x in stats if i < len(x.accept_hist)) for i in range(width)]
    s["tokens_per_forward"] = s["decode_tokens"] / s["row_forwards"] if s["row_forwards"] else float("nan")
    s["acceptance_rate"] = s["accepted"] / s["drafted"] if s["drafted"] else float("nan")
    s["other_s"] = s["total_s"] - s["prefill_s"] - s["draft_s"] - s["verify_s"]
    return s


# ---------------------------------------------------------------------- verify-cost curve
@torch.no_grad()
def verify_cost_curve(model, qs=range(1, 17), context: int = 512, reps: int = 20) -> list[float]:
    """Seconds of one target forward of ``q`` tokens after ``context`` cached tokens, per ``q``: the
    forward the speculative engine verifies with (per-row cache, 4D mask), one CUDA graph per q,
    median of ``reps`` replays."""
    eng = SpeculativeEngine(model, PromptLookupDrafter(), max_len=context + 32, max_batch_size=1, ks=(1,),
                            compile=False)
    cache = RowStaticCache(model.config, 1, context + 32, eng.device, eng.dtype)
    out = []
    for q in qs:
        ids = torch.randint(0, model.config.vocab_size, (1, q), device=eng.device)
        g, _ = graphs.capture(lambda: eng._forward(ids, cache), reset=lambda: cache.pos.fill_(context))
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        out.append(sorted(ts)[len(ts) // 2])
        del g
    return out


def _forward_params_and_kv(cfg_kw: dict, context: int) -> tuple[int, int]:
    """(weights one forward reads, fp16 KV-cache bytes of ``context`` tokens) of a Qwen2 shape."""
    h, L, i, v = cfg_kw["hidden_size"], cfg_kw["num_hidden_layers"], cfg_kw["intermediate_size"], cfg_kw["vocab_size"]
    kvh, nh = cfg_kw["num_key_value_heads"], cfg_kw["num_attention_heads"]
    hd = h // nh
    layer = h * h * 2 + 2 * h * kvh * hd + 3 * h * i
    return L * layer + h * v, 2 * L * kvh * hd * 2 * context


def t4_forward_model(cfg_kw: dict, q: int, context: int = 512) -> float:
    """ESTIMATED seconds of one fp16 forward of q tokens on a T4: weight + KV bytes / 260 GB/s or
    2 x params x q / 32 TFLOPs, whichever is larger (a roofline; no launch overhead)."""
    params, kv_bytes = _forward_params_and_kv(cfg_kw, context)
    return max((params * 2 + kv_bytes) / T4_BW, 2 * params * q / T4_FP16_FLOPS)


def shape_fits(cfg_kw: dict, context: int = 512, headroom: float = 1.1) -> tuple[bool, str]:
    """Whether a random-weight fp16 model of this shape and its cache fit in what this process may still
    allocate on the GPU (its per-process memory fraction, and what the device has free), and why not."""
    params, kv_bytes = _forward_params_and_kv(cfg_kw, context)
    if not cfg_kw.get("tie_word_embeddings", True):
        params += cfg_kw["hidden_size"] * cfg_kw["vocab_size"]      # the input embedding, held apart
    need = (params * 2 + kv_bytes) * headroom
    limit = torch.cuda.get_device_properties(0).total_memory * torch.cuda.get_per_process_memory_fraction()
    slack = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    avail = min(limit - torch.cuda.memory_allocated(), torch.cuda.mem_get_info()[0] + slack)
    if need <= avail:
        return True, ""
    return False, (f"needs about {need / 2**30:.1f} GiB (fp16 weights and cache, {headroom:.0%} of it), "
                   f"{avail / 2**30:.1f} GiB may still be allocated by this process")


def projected_speedup(tokens_per_forward: float, k_mean: float, t_of_q) -> float:
    """Plain decoding makes 1 token per t(1); speculative decoding tokens_per_forward per t(k+1)
    (drafting cost of prompt lookup neglected)."""
    q = max(1, round(k_mean) + 1)
    return tokens_per_forward * t_of_q(1) / t_of_q(q)


# ---------------------------------------------------------------------- the benchmark
def run(out_dir: str | Path, n_prompts: int = 40, max_new: int = 64, batch: int = 8, quick: bool = False,
        target: str = "tiny-gpu", draft: str = "tiny-cpu", device: str = "cuda", log=print,
        hf_prompts: int | None = None, prompt_set: str = "project", name: str | None = None,
        shape_curves: bool = True) -> dict:
    """The whole benchmark (see module docstring); writes ``out_dir/speculative.json``. ``device="cpu"``
    runs the same code paths without the verify-cost curves (a smoke test; CPU times mean nothing).
    ``hf_prompts``: Hugging Face ``generate`` runs on the first this many copy prompts (default: all; 4 with
    ``quick``); its rates are per token, so fewer prompts only widen their spread. ``prompt_set``: ``project``
    (data/copy_heldout.jsonl, data/math_heldout.jsonl) or ``open`` (the procedural corpus's test split, copy
    outputs of 100+ tokens); ``name``: figures ``speculative/<name>/...`` in ``speculative_<name>.json``."""
    if prompt_set not in ("project", "open"):
        raise ValueError(f"prompt_set must be 'project' or 'open', got {prompt_set!r}")
    if hf_prompts is not None and (not isinstance(hf_prompts, int) or isinstance(hf_prompts, bool) or hf_prompts < 1):
        raise ValueError(f"hf_prompts must be a positive int or None, got {hf_prompts!r}")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = results.environment()
    figs, errors, details = [], {}, {}

    prefix, file_name = ("speculative", "speculative.json") if name is None else \
        (f"speculative/{name}", f"speculative_{name}.json")

    def fig(fig_name, value, unit, tag="MEASURED", **kw):
        if tag == "MEASURED":
            kw["env"] = env
        figs.append(results.figure(f"{prefix}/{fig_name}", value, unit, tag, SOURCE, **kw))

    dtype = torch.float16 if device == "cuda" else torch.float32
    model, tok = models.load(target, dtype=dtype, device=device)
    eos = eos_of(model, tok)   # the target's EOS list (its generation config's)
    details["eos_token_id"] = eos
    details["prompt_format"] = "chat template" if reads_chat(tok) else "plain"
    copy_p = load_prompts(tok, "copy" if prompt_set == "project" else "open_copy", n_prompts)
    open_p = load_prompts(tok, "open" if prompt_set == "project" else "open_math", n_prompts)
    max_len = max(len(p) for p in copy_p + open_p) + max_new + 8
    log(f"{target}: {len(copy_p)} copy + {len(open_p)} open prompts, {max_new} new tokens, max_len {max_len}")

    se = StaticEngine(model, max_len=max_len)   # the references and the plain-greedy baseline
    refs, gaps = {}, {}
    for kind, ps in (("copy", copy_p), ("open", open_p)):
        refs[kind], gaps[kind] = greedy_references(model, ps, max_new, eos=eos, max_len=max_len, engine=se)
    ntok = {k: sum(len(r) for r in v) for k, v in refs.items()}
    details["reference_tokens"] = ntok

    # plain greedy, batch 1 (the engine's own baseline)
    t_se, se_split = {}, {}
    for kind, ps in (("copy", copy_p), ("open", open_p)):
        lens = [len(r) for r in refs[kind]]
        split = []
        t_se[kind], outs = time_b1(static_runner(se, ps, lens, split), ps, warm_all=True)
        split = split[len(ps):]   # the warm-up pass
        se_split[kind] = dict(ttft_s=sum(a for a, _, _ in split), decode_s=sum(b for _, b, _ in split),
                              prefill_graph=all(g for _, _, g in split),
                              total_s=t_se[kind])
        same = sum(o == r for o, r in zip(outs, refs[kind]))
        if same < len(ps):   # fp16 near-ties can part two runs of the same prompt: the check below says where
            errors[f"engine_greedy/{kind}"] = (f"StaticEngine repeated itself on {same}/{len(ps)} {kind} prompts "
                                               "(the references are its first run)")
            details.setdefault("engine_repeat_mismatches", {})[kind] = exactness(outs, refs[kind], gaps[kind])
        fig(f"engine_greedy/{kind}/b1/tokens_per_s", ntok[kind] / t_se[kind], "tokens/s",
            note="StaticEngine (static cache, prefill graph per prompt bucket, compiled step in a CUDA graph), "
                 "end to end")
    details["engine_greedy_b1_split"] = se_split
    log(f"StaticEngine b1: copy {ntok['copy'] / t_se['copy']:.0f} tok/s, open {ntok['open'] / t_se['open']:.0f}; "
        + ", ".join(f"{k}: first token {v['ttft_s']:.3f} s + decode {v['decode_s']:.3f} s of {v['total_s']:.3f} s"
                    for k, v in se_split.items()))

    # Hugging Face generate, batch 1 (copy prompts)
    t_hf = {}
    hf_n = min(hf_prompts or (4 if quick else len(copy_p)), len(copy_p))
    for name, kw in (("hf_greedy", {}), ("hf_pld", dict(prompt_lookup_num_tokens=10))):
        try:
            t_hf[name], outs = time_b1(hf_runner(model, copy_p[:hf_n], max_new, eos=eos, **kw), copy_p[:hf_n])
            n = sum(len(o) for o in outs)
            same = sum(o == r for o, r in zip(outs, refs["copy"]))
            fig(f"{name}/copy/b1/tokens_per_s", n / t_hf[name], "tokens/s", prompts=hf_n, identical=same,
                note="model.generate greedy, dynamic cache" + (", prompt_lookup_num_tokens=10" if kw else ""))
            t_hf[name] = (n, t_hf[name])
            log(f"{name}: {n / t_hf[name][1]:.0f} tok/s, {same}/{hf_n} identical to StaticEngine greedy")
        except Exception as e:  # a transformers version without this mode: say so, keep going
            errors[name] = f"{type(e).__name__}: {e}"
            log(f"{name} failed: {errors[name]}")

    # our prompt lookup, batch 1
    pld = PromptLookupDrafter(max_ngram=3, min_ngram=1, eos_token_id=eos)
    eng = SpeculativeEngine(model, pld, max_len=max_len, max_batch_size=batch, ks=(1, 2, 4, 8))
    spec_b1 = {}
    for kind, ps in (("copy", copy_p), ("open", open_p)):
        st, per = [], []
        t, outs = time_b1(spec_runner(eng, ps, max_new, st, eos=eos), ps, warm_all=True, per_prompt=per)
        st = st[len(ps):]  # the warm-up pass
        ex = exactness(outs, refs[kind], gaps[kind])
        ms = merge_stats(st)
        spec_b1[kind] = dict(time_s=t, exact=ex, stats=ms)
        rate = ntok[kind] / t
        label = "pld" if kind == "copy" else "open_ended"
        fig(f"{label}/b1/tokens_per_s", rate, "tokens/s", compiled=eng._compiled is not None,
            compile_error=eng.compile_error)
        fig(f"{label}/b1/speedup_vs_engine_greedy", t_se[kind] / t, "x", "ARITHMETIC",
            note="StaticEngine greedy time / speculative time, same model, prompts and tokens (both MEASURED), "
                 "end to end, both prefilling by a graph replay (decode_speedup_vs_engine_greedy compares the "
                 "time after the first token)")
        fig(f"{label}/b1/tokens_per_forward", ms["tokens_per_forward"], "tokens", "ARITHMETIC",
            note="tokens after the prefill / target forwards (verify + plain steps), counted")
        fig(f"{label}/b1/acceptance_rate", ms["acceptance_rate"], "fraction", "ARITHMETIC",
            note="accepted / drafted tokens, counted")
        # after the first token: StaticEngine's decode vs everything after the speculative engine's prefill
        after = ms["total_s"] - ms["prefill_s"]
        fig(f"{label}/b1/decode_speedup_vs_engine_greedy", se_split[kind]["decode_s"] / after, "x", "ARITHMETIC",
            note="time after the first token: StaticEngine decode / speculative (draft + verify + host), both "
                 "MEASURED")
        fig(f"engine_greedy/{kind}/b1/first_token_s", se_split[kind]["ttft_s"] / len(ps), "s",
            prefill_graph=se_split[kind]["prefill_graph"],
            note="StaticEngine time to the first token per prompt (prefill + first choice), mean")
        fig(f"{label}/b1/prefill_s", ms["prefill_s"] / len(ps), "s", prefill_graph=ms["prefill_graph"],
            note="speculative engine prefill + first choice per prompt, mean")
        fig(f"{label}/b1/draft_time_fraction", ms["draft_s"] / ms["total_s"], "fraction", "ARITHMETIC",
            note=("device rounds: drafting runs inside the round graphs and is counted in the verify time"
                  if eng.device_rounds else "host drafting time / total time"))
        fig(f"{label}/b1/verify_time_fraction", ms["verify_s"] / ms["total_s"], "fraction", "ARITHMETIC",
            note="verify time / total time, both MEASURED")
        log(f"PLD b1 {kind}: {rate:.0f} tok/s ({t_se[kind] / t:.2f}x engine greedy; after the first token "
            f"{se_split[kind]['decode_s'] / after:.2f}x), {ms['tokens_per_forward']:.2f} tok/forward, identical "
            f"{ex['identical']}/{ex['n']}; prefill {ms['prefill_s']:.3f} s (graph: {ms['prefill_graph']}) "
            f"draft {ms['draft_s']:.3f} verify {ms['verify_s']:.3f} other {ms['other_s']:.3f}")
        # against Hugging Face on the same prompts: ours over the first hf_n prompts only
        ours_n = sum(len(r) for r in refs[kind][:hf_n])
        ours_rate = ours_n / sum(per[:hf_n]) if per[:hf_n] else float("nan")
        for peer, label_peer in (("hf_pld", "prompt-lookup"), ("hf_greedy", "greedy")):
            if kind == "copy" and peer in t_hf:
                n, th = t_hf[peer]
                fig(f"pld/b1/speedup_vs_{peer}", ours_rate / (n / th), "x", "ARITHMETIC", prompts=hf_n,
                    note=f"our tokens/s / HF {label_peer} tokens/s, both over the same first {hf_n} copy prompts, "
                         "both MEASURED")
    details["pld_b1"] = spec_b1

    # the same engine and copy prompts, batch 1, with other loop settings: the host loop (a round trip per
    # verify) against device rounds, a second chunk queued behind each read, two rounds per read, and a fixed
    # k = 8 instead of adaptive k
    loops = {}
    for name, kw in (("host_loop", dict(device_rounds=False)), ("rounds_in_flight2", dict(in_flight=2)),
                     ("rounds_per_sync2", dict(rounds_per_sync=2)), ("rounds_fixed_k8", dict(adaptive=False))):
        if name != "host_loop" and not eng.device_rounds:
            continue
        saved = {a: getattr(eng, a) for a in kw}
        for a, v in kw.items():
            setattr(eng, a, v)
        st = []
        try:
            t, outs = time_b1(spec_runner(eng, copy_p, max_new, st, eos=eos), copy_p, warm_all=True)
        finally:
            for a, v in saved.items():
                setattr(eng, a, v)
        ms = merge_stats(st[len(copy_p):])
        loops[name] = dict(settings=kw, time_s=t, speedup_vs_engine_greedy=t_se["copy"] / t,
                           exact=exactness(outs, refs["copy"], gaps["copy"]), stats=ms)
        log(f"PLD b1 copy, {name}: {t_se['copy'] / t:.2f}x engine greedy, {ms['tokens_per_forward']:.2f} tok/forward")
    details["pld_b1_loops"] = loops
    if "host_loop" in loops and eng.device_rounds:
        fig("pld_host_loop/b1/speedup_vs_engine_greedy", loops["host_loop"]["speedup_vs_engine_greedy"], "x",
            "ARITHMETIC", tokens_per_forward=loops["host_loop"]["stats"]["tokens_per_forward"],
            note="the same engine with device_rounds=False (drafting on the host, a round trip per verify); "
                 "StaticEngine greedy time / its time, both MEASURED")

    # batch 8
    b8 = {}
    for kind, ps in (("copy", copy_p), ("open", open_p)):
        groups = [list(range(i, min(i + batch, len(ps)))) for i in range(0, len(ps), batch)]
        groups = [g for g in groups if len(g) == batch] or [groups[0]]
        se_b = StaticEngine(model, max_len=max_len)
        t_sb = t_sp = 0.0
        toks = 0
        outs_all, st = {}, []
        for gi, g in enumerate(groups + groups):  # every group once untimed first: no shape new while timed
            m = min(len(ps[i]) for i in g)
            ids = torch.tensor([ps[i][-m:] for i in g])
            longest = max(len(refs[kind][i]) for i in g)
            _sync(); t0 = time.perf_counter()
            se_b.generate_with_stats(ids, longest)
            _sync(); t1 = time.perf_counter()
            r = eng.generate_with_stats([ps[i] for i in g], max_new, eos_token_id=eos)
            _sync(); t2 = time.perf_counter()
            if gi >= len(groups):
                t_sb += t1 - t0
                t_sp += t2 - t1
                toks += sum(len(refs[kind][i]) for i in g)
                st.append(r.stats)
                outs_all.update({i: o for i, o in zip(g, r.new_tokens)})
        details["batched_warm_up"] = "every batch"
        idx = sorted(outs_all)
        ex = exactness([outs_all[i] for i in idx], [refs[kind][i] for i in idx], [gaps[kind][i] for i in idx])
        ms = merge_stats(st)
        b8[kind] = dict(exact=ex, stats=ms, static_s=t_sb, spec_s=t_sp, tokens=toks)
        label = "pld" if kind == "copy" else "open_ended"
        fig(f"engine_greedy/{kind}/b{batch}/tokens_per_s", toks / t_sb, "tokens/s",
            note="StaticEngine batch (prompts left-truncated to the batch's shortest), until the longest reference")
        fig(f"{label}/b{batch}/tokens_per_s", toks / t_sp, "tokens/s")
        fig(f"{label}/b{batch}/speedup_vs_engine_greedy", t_sb / t_sp, "x", "ARITHMETIC",
            note="batched StaticEngine time / batched speculative time for the same generated tokens, both MEASURED")
        fig(f"{label}/b{batch}/tokens_per_forward", ms["tokens_per_forward"], "tokens", "ARITHMETIC",
            note="per active sequence: tokens after the prefill / (target forwards x active rows), counted")
        log(f"PLD b{batch} {kind}: {t_sb / t_sp:.2f}x batched greedy, {ms['tokens_per_forward']:.2f} tok/forward, "
            f"identical {ex['identical']}/{ex['n']}")
    details[f"pld_b{batch}"] = b8
    # GPU time of one replay of each captured graph (1: a plain step, q: a verify of q tokens), per batch size:
    # with the wall times above it separates device time from host round trips
    details["verify_graph_ms"] = {B: st.graph_ms for B, st in eng._states.items()}
    details["round_graph_ms"] = {B: st.round_ms for B, st in eng._states.items()}   # k -> one device round

    # exactness over every sequence decoded above (fp16)
    ident = sum(d["exact"]["identical"] for d in list(spec_b1.values()) + list(b8.values()))
    total = sum(d["exact"]["n"] for d in list(spec_b1.values()) + list(b8.values()))
    fig("exact/identical_fraction", ident / total, "fraction", "ARITHMETIC", identical=ident, sequences=total,
        note="speculative outputs identical to StaticEngine plain greedy (fp16), batch 1 and batch 8, copy and open")

    # draft model: tiny-cpu drafting for tiny-gpu, batch 1, copy prompts
    try:
        if draft is None:
            raise LookupError("skipped: no draft model sharing the target's vocabulary was given")
        dmodel, _ = models.load(draft, dtype=dtype, device=device)
        dm = DraftModelDrafter(dmodel, max_len=max_len, eos_token_id=eos)
        if dm.vocab_size != model.config.vocab_size:
            raise ValueError(f"draft model {draft} has another vocabulary than {target}")
        # the prompt-lookup engine with the drafter swapped: its graphs do not depend on the drafter, and a
        # second engine would compile the target's forward again
        eng_d, pld_drafter = eng, eng.drafter
        eng_d.drafter = dm
        st = []
        t, outs = time_b1(spec_runner(eng_d, copy_p, max_new, st, eos=eos), copy_p, warm_all=True)
        eng_d.drafter = pld_drafter
        ms = merge_stats(st[len(copy_p):])
        ex = exactness(outs, refs["copy"], gaps["copy"])
        details["draft_model_b1"] = dict(time_s=t, exact=ex, stats=ms)
        fig("draft_model/b1/tokens_per_s", ntok["copy"] / t, "tokens/s", draft=draft)
        fig("draft_model/b1/speedup_vs_engine_greedy", t_se["copy"] / t, "x", "ARITHMETIC",
            note=f"{draft} (fp16; greedy drafts for the whole batch: a prefill graph, then graph-replayed plain steps) "
                 f"drafting for {target}; StaticEngine greedy time / ours")
        fig("draft_model/b1/tokens_per_forward", ms["tokens_per_forward"], "tokens", "ARITHMETIC",
            note="tokens after the prefill / target forwards, counted")
        log(f"draft model b1: {t_se['copy'] / t:.2f}x, {ms['tokens_per_forward']:.2f} tok/forward, "
            f"identical {ex['identical']}/{ex['n']}, draft {ms['draft_s']:.2f}s verify {ms['verify_s']:.2f}s")
        del eng_d, dm, dmodel
    except Exception as e:
        errors["draft_model"] = f"{type(e).__name__}: {e}"
        log(f"draft model failed: {errors['draft_model']}")
    del eng, se
    if device == "cuda":
        torch.cuda.empty_cache()

    # verify-cost curve at the Qwen2.5 shapes, and the T4 projection
    qs = list(range(1, 17))
    curves = {}
    tpf = spec_b1["copy"]["stats"]["tokens_per_forward"]
    k_hist = spec_b1["copy"]["stats"]
    k_mean = (k_hist["drafted"] / max(1, sum(k_hist["accept_hist"]))) if k_hist["drafted"] else 1
    for shape, kw in tqdm(list(QWEN_SHAPES.items()) if device == "cuda" and shape_curves else [],
                          desc="verify-cost curves"):
        try:
            t4 = [t4_forward_model(kw, q) for q in qs]
            curves[shape + "/t4_estimate"] = t4
            fits, why = shape_fits(kw)
            if fits:
                m = build_random_model(kw)   # fp16, built on the GPU
                ts = verify_cost_curve(m, qs, reps=5 if quick else 20)
                del m
                torch.cuda.empty_cache()
                curves[shape] = ts
                for q in (1, 2, 4, 8, 16):
                    fig(f"verify_cost/{shape}/q{q}/ms", ts[q - 1] * 1e3, "ms", context=512,
                        note="one fp16 forward of q tokens (random weights), CUDA graph, median")
            else:   # a T4 cannot hold it either: its roofline estimate below still stands
                details.setdefault("skipped", {})[f"verify_cost/{shape}"] = why
                log(f"verify cost {shape} not measured: {why}")
            fig(f"verify_cost/{shape}/t4_projected_speedup", projected_speedup(tpf, k_mean, lambda q: t4[q - 1]), "x",
                "ESTIMATED", tokens_per_forward=tpf, mean_draft_len=k_mean,
                note=f"T4 roofline (max(bytes/260 GB/s, 2*params*q/32 TFLOPs)) of a {shape} forward, times the "
                     f"tokens per forward MEASURED with {target} prompt lookup on the copy prompts; assumes the "
                     f"{shape} model accepts as often as {target}, and neglects drafting and host overhead")
            if fits:
                fig(f"verify_cost/{shape}/h200_projected_speedup",
                    projected_speedup(tpf, k_mean, lambda q: ts[q - 1]), "x", "ESTIMATED", tokens_per_forward=tpf,
                    mean_draft_len=k_mean,
                    note=f"the measured H200 verify-cost curve of {shape} times the tokens per forward of {target}")
        except Exception as e:
            errors[f"verify_cost/{shape}"] = f"{type(e).__name__}: {e}"
            log(f"verify cost {shape} failed: {errors[f'verify_cost/{shape}']}")
    details["verify_cost_s"] = curves
    details["mean_draft_len"] = k_mean

    path = results.write(out_dir / file_name, figs, producer=__file__, errors=errors, details=_jsonable(details),
                         protocol=__doc__.split("Protocol: ")[1].strip(), target=target, draft=draft,
                         prompts=n_prompts, max_new=max_new, prompt_set=prompt_set)
    log(f"wrote {path}")
    return dict(figures=figs, errors=errors, details=details, path=str(path))


TARGETS = (  # issue targets: (figure, at least, what)
    ("speculative/exact/identical_fraction", 0.99, "fp16 sequences identical to plain greedy"),
    ("speculative/pld/b1/speedup_vs_engine_greedy", 2.0, "input-grounded, batch 1, over StaticEngine greedy"),
    ("speculative/pld/b1/speedup_vs_hf_pld", 20.0, "input-grounded, batch 1, over HF prompt_lookup_num_tokens=10"),
    ("speculative/pld/b1/tokens_per_forward", None, "input-grounded, batch 1 (reported)"),
    ("speculative/open_ended/b1/speedup_vs_engine_greedy", 0.95, "open-ended, batch 1, over StaticEngine greedy"),
    ("speculative/pld/b8/speedup_vs_engine_greedy", 1.5, "input-grounded, batch 8, over batched greedy"),
    ("speculative/draft_model/b1/speedup_vs_engine_greedy", None, "draft model, batch 1 (reported)"),
    ("speculative/draft_model/b1/tokens_per_forward", None, "draft model, batch 1 (reported)"),
)


def unprefixed(doc: dict, name: str | None) -> dict:
    """A results document written with ``name`` (figures ``speculative/<name>/...``) with the figures named as
    an unnamed run's (``speculative/...``), so one reader serves both."""
    if not name:
        return doc
    pre = f"speculative/{name}/"
    figs = [dict(f, name="speculative/" + f["name"][len(pre):]) if f["name"].startswith(pre) else f
            for f in doc.get("figures", [])]
    return dict(doc, figures=figs)


def targets_table(doc: dict) -> list[dict]:
    """Each target of the issue with the recorded figure (None when absent) and whether it is met."""
    figs = {f["name"]: f for f in doc.get("figures", [])}
    rows = []
    for name, goal, what in TARGETS:
        f = figs.get(name)
        v = None if f is None else f["value"]
        met = None if goal is None or v is None else v >= goal
        rows.append(dict(figure=name, value=v, target=goal, met=met, what=what, tag=f and f["tag"]))
    return rows


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(results.results_dir() / "nvidia-h200"))
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="fewer HF prompts and replays (smoke test)")
    ap.add_argument("--hf-prompts", type=int, default=None, help="Hugging Face generate on the first N copy prompts")
    ap.add_argument("--target", default="tiny-gpu", help="a preset, local path or HF id")
    ap.add_argument("--draft", default="tiny-cpu", help="draft model sharing the target's vocabulary ('none': skip)")
    ap.add_argument("--prompt-set", default="project", choices=("project", "open"))
    ap.add_argument("--name", default=None, help="figures speculative/NAME/... in speculative_NAME.json")
    ap.add_argument("--no-shape-curves", action="store_true",
                    help="skip the verify-cost curves of the Qwen2.5 shapes (random weights) and their T4 projection")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("the speculative benchmark needs a CUDA GPU")
    t0 = time.perf_counter()
    run(a.out, n_prompts=a.prompts, max_new=a.max_new, quick=a.quick, hf_prompts=a.hf_prompts, target=a.target,
        draft=None if a.draft == "none" else a.draft, prompt_set=a.prompt_set, name=a.name,
        shape_curves=not a.no_shape_curves,
        log=lambda msg: print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True))


if __name__ == "__main__":
    main()
