"""MTP drafts of the qwen35 engine: what they accept and what they buy.

Two measurements, because random weights accept nothing and a small model says little about a 27B step:

- **Copy model** (``data/models/qwen35-copy/model.gguf``, a 4-layer qwen35 with its NextN block trained on
  the project's copy/edit tasks, :mod:`.copy_model`): on held-out copy prompts, greedy decoding with and
  without ``mtp=gamma``: identical tokens, tokens per verify step, the accepted-count histogram, and
  tokens/s both ways in the same process.
- **27B shape** (random weights, :func:`.bench.random_model` with a NextN block): the wall time of one
  round with ``gamma`` drafts (nothing is accepted, so every round commits one token) against a plain
  decode step. With the copy model's tokens per step this projects the gain at 27B (ESTIMATED: the
  acceptance of a small model trained on copying, carried over to another model).

``python -m t4lib.benchmarks.qwen35_mtp --out results/<device-slug>`` writes ``qwen35_mtp.json``;
``--profile cpu`` runs the copy model on the CPU on a few prompts (exactness and tokens per step only).
"""
from __future__ import annotations

import argparse
import gc
import statistics
from pathlib import Path

import torch
from tqdm.auto import tqdm

from t4lib.core import hw, results
from t4lib.models.corpus import copy_doc, data_dir, load_jsonl
from t4lib.benchmarks.qwen35 import (
    config_27b, first_difference, graph_us, hf_greedy_times, mix_27b, random_model,
)
from t4lib.models.qwen35.engine import Qwen35Engine
from t4lib.models.qwen35.convert import gguf_to_hf_state_dict
from t4lib.models.qwen35.copy_model import copy_config
from t4lib.models.qwen35.oracle import check_mtp
from t4lib.models.tiny import load_tokenizer
from t4lib.ops.deltanet import state_bytes
from t4lib.ops.gguf import FORMATS, TYPE_OF

SOURCE = "t4lib.benchmarks.qwen35_mtp"
GAMMAS = (1, 2, 3)


def copy_model_path() -> Path:
    return data_dir() / "models" / "qwen35-copy" / "model.gguf"


def copy_prompts(n: int, n_long: int = 0) -> list[list[int]]:
    """Token ids of held-out copy/edit prompts (``copy_heldout``, then ``copy_long_heldout``)."""
    tok = load_tokenizer()
    recs = load_jsonl("copy_heldout.jsonl")[:n] + load_jsonl("copy_long_heldout.jsonl")[:n_long]
    return [tok(copy_doc(r)[0], add_special_tokens=False)["input_ids"] for r in recs]


def measure_hf(prompts: list[list[int]], new: int, device: str, dtype: torch.dtype) -> dict:
    """The peer: transformers' ``Qwen3_5ForCausalLM`` on the copy model's weights as the file stores them
    (dequantized), greedy ``generate``; decode rate: tokens after the first over the decode time, each measured
    within one run (:func:`.qwen35.hf_greedy_times`), summed over the prompts."""
    from transformers import Qwen3_5ForCausalLM  # optional: the transformers peer

    cfg = copy_config(load_tokenizer())
    cfg._attn_implementation = "sdpa"
    m = Qwen3_5ForCausalLM(cfg).eval()
    m.load_state_dict(gguf_to_hf_state_dict(copy_model_path(), cfg))
    m = m.to(device=device, dtype=dtype)
    tokens, seconds, outs = 0, 0.0, []
    for p in prompts:
        toks, decode_s = hf_greedy_times(m, torch.tensor([p], device=device), new,
                                         pad_token_id=cfg.pad_token_id, eos_token_id=None)
        outs.append(toks)
        seconds += decode_s
        tokens += new - 1
    del m
    return {"tokens_per_s": tokens / seconds, "tokens": outs}


def measure_copy_model(prompts: list[list[int]], new: int, device: str, gammas=GAMMAS, progress=None,
                       hf: bool = True, hf_prompts: int | None = None) -> dict:
    """Plain greedy against ``mtp=gamma`` on each prompt, same engine (fp16 on CUDA, fp32 on CPU), and with
    ``hf`` transformers' greedy ``generate`` on the same weights in the same process (:func:`measure_hf`), on
    the first ``hf_prompts`` prompts (all when None; its rate is per token, so a subset measures it)."""
    if hf_prompts is not None and (isinstance(hf_prompts, bool) or not isinstance(hf_prompts, int)
                                   or hf_prompts < 1):
        raise ValueError(f"hf_prompts must be None (all) or a positive int, got {hf_prompts!r}")
    if isinstance(new, bool) or not isinstance(new, int) or new < 2:
        raise ValueError(f"new must be an int >= 2 (a decode rate needs two tokens), got {new!r}")
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    eng = Qwen35Engine.from_gguf(copy_model_path(), devices=[device], max_len=max(map(len, prompts)) + new + 8,
                                 dtype=dtype)
    eng.generate(prompts[0], 4)   # warm-up: compiles, packs, captures the graphs
    for g in gammas:
        eng.generate(prompts[0], 4, mtp=g)
    n_sub = len(prompts[:hf_prompts]) if hf else 0
    rows = {"plain": {"tokens": 0, "decode_s": 0.0, "sub_tokens": 0, "sub_s": 0.0}}
    for g in gammas:
        rows[f"mtp{g}"] = {"tokens": 0, "decode_s": 0.0, "sub_tokens": 0, "sub_s": 0.0, "identical": 0, "rounds": 0,
                           "hist": [0] * (g + 1), "first_mismatch": []}

    def count(row, r, i):
        row["tokens"] += len(r.tokens) - 1
        row["decode_s"] += r.decode_s
        if i < n_sub:   # the prompts the transformers peer also runs
            row["sub_tokens"] += len(r.tokens) - 1
            row["sub_s"] += r.decode_s

    plains = []
    for i, p in enumerate(prompts):
        plain = eng.generate(p, new)
        plains.append(plain.tokens)
        count(rows["plain"], plain, i)
        for g in gammas:
            r = eng.generate(p, new, mtp=g)
            row = rows[f"mtp{g}"]
            count(row, r, i)
            row["rounds"] += r.mtp["rounds"]
            row["hist"] = [a + b for a, b in zip(row["hist"], r.mtp["accepted_histogram"])]
            if r.tokens == plain.tokens:
                row["identical"] += 1
            else:   # where they part, and plain greedy's top-2 logit gap there
                ref = eng.generate(p, new, return_logits=True)
                row["first_mismatch"].append({"prompt": i, **first_difference(r.tokens, ref.tokens, ref.logits)})
        if progress is not None:
            progress.update(1)
    out = {"prompts": len(prompts), "new_tokens": new, "device": device, "dtype": str(dtype),
           "cuda_graphs": eng.graphs is not None, "plain_tokens_per_s": rows["plain"]["tokens"] /
           rows["plain"]["decode_s"]}
    if hf:
        peer = measure_hf(prompts[:n_sub], new, device, dtype)
        out["hf_prompts"] = n_sub
        out["hf_tokens_per_s"] = peer["tokens_per_s"]
        out["hf_identical_fraction"] = sum(a == b for a, b in zip(peer["tokens"], plains)) / n_sub
        out["plain_speedup_vs_hf"] = rows["plain"]["sub_tokens"] / rows["plain"]["sub_s"] / peer["tokens_per_s"]
    for g in gammas:
        row = rows[f"mtp{g}"]
        rate = row["tokens"] / row["decode_s"]
        out[f"mtp{g}"] = {"tokens_per_s": rate, "speedup_vs_plain": rate / out["plain_tokens_per_s"],
                          "speedup_vs_hf": row["sub_tokens"] / row["sub_s"] / out["hf_tokens_per_s"] if hf else None,
                          "tokens_per_step": row["tokens"] / row["rounds"], "accepted_histogram": row["hist"],
                          "identical_fraction": row["identical"] / len(prompts),
                          "first_mismatch": row["first_mismatch"][:10]}
    return out


def measure_27b_rounds(new: int = 64, prompt_len: int = 16, gammas=GAMMAS, activations: str = "fp16") -> dict:
    """Plain decode against ``mtp=gamma`` on the 27B shape with random weights (nothing accepted), and the
    parts of a round as graph replays: the verify forward of gamma + 1 rows, one NextN chain step;
    ``activations``: the GEMVs' (:class:`.model.Linear`)."""

    cfg = config_27b()
    model = random_model(cfg, mtp=True, activations=activations)
    prompt = list(range(1, prompt_len + 1))
    eng = Qwen35Engine(model, max_len=prompt_len + new + 8, dtype=torch.float16)
    eng.generate(prompt, 4)
    plain = statistics.median(eng.generate(prompt, new).decode_tokens_per_s for _ in range(3))
    ref = eng.generate(prompt, new, return_logits=True)   # plain greedy tokens and the logits they came from
    out = {"plain_tokens_per_s": plain, "plain_step_us": 1e6 / plain, "mtp_block_bytes": model.mtp.nbytes,
           "weight_bytes": model.bytes_per_token()}
    for g in gammas:
        eng.generate(prompt, 4, mtp=g)
        runs = [eng.generate(prompt, new, mtp=g) for _ in range(3)]
        r = sorted(runs, key=lambda x: x.decode_s)[1]
        rb = eng.rows[g + 1]
        diff = first_difference(r.tokens, ref.tokens, ref.logits)
        out[f"mtp{g}"] = {"round_us": r.decode_s / r.mtp["rounds"] * 1e6, "rounds": r.mtp["rounds"],
                          "identical": diff is None, "first_mismatch": diff and diff["position"],
                          "top2_gap_at_mismatch": diff and diff["top2_gap"],
                          "accepted_histogram": r.mtp["accepted_histogram"],
                          "verify_us": graph_us(lambda: eng._run_rows(rb, 0)),
                          "tokens_per_s_nothing_accepted": (len(r.tokens) - 1) / r.decode_s}
    bufs, p0 = eng.mtp_bufs, prompt_len + new // 2

    def chain_step():   # the step advances its position: each replay starts again from p0 (one tiny fill kernel)
        bufs["pos"].fill_(p0)
        eng._run_mtp_step()

    out["mtp_step_us"] = graph_us(chain_step)
    del eng, model
    gc.collect()   # the next model of this shape needs the memory back
    torch.cuda.empty_cache()
    return out


def oracle_figures(checks: dict) -> list[dict]:
    """:func:`.oracle.check_mtp` as figures (CPU); its rows go into ``checks["oracle"]``."""
    orc = check_mtp()
    checks["oracle"] = orc
    onote = ("tiny random qwen35 with a random NextN block, F32 weights, fp32 engine on the CPU, against "
             "transformers' Qwen3_5ForCausalLM and Qwen35MTP (its layers); the prompt as one multi-row forward")
    return [results.figure("qwen35_engine/mtp/oracle/rows_rel_err", orc["rows_rel_err"], "max|d|/max|logit|",
                           "MEASURED", SOURCE, note=onote + "; main model logits"),
            results.figure("qwen35_engine/mtp/oracle/nextn_rel_err", orc["nextn_rel_err"], "max|d|/max|logit|",
                           "MEASURED", SOURCE, note=onote + "; NextN block logits"),
            results.figure("qwen35_engine/mtp/oracle/greedy_identical_fraction",
                           sum(orc["identical"].values()) / len(orc["identical"]), "fraction", "MEASURED", SOURCE,
                           note=onote + f"; {orc['tokens']} greedy tokens with mtp = 1, 2, 3 against plain greedy")]


def round_bytes_27b(gamma: int) -> dict:
    """Bytes a plain token and a round of ``gamma`` drafts move at the 27B shape (ARITHMETIC, from the formats'
    block sizes in :func:`.bench.mix_27b`): a round reads every weight once for its ``gamma + 1`` rows, steps each
    Gated DeltaNet state once per row (read and write) and writes a snapshot after each row but the last, reads the NextN block and
    the head once more for the block's rows, and both again for each of the ``gamma - 1`` chained drafts."""
    c = config_27b()

    def nbytes(kind, layer, N, K):
        _, nv, nb = FORMATS[TYPE_OF[mix_27b(kind, layer, c.n_layers)]]
        return N * K // nv * nb

    def layer_weights(i, kind):
        qd, kd = c.attn_heads * c.head_dim, c.attn_kv_heads * c.head_dim
        ffn = nbytes("ffn_gate", i, c.ffn, c.hidden) + nbytes("ffn_up", i, c.ffn, c.hidden) + \
            nbytes("ffn_down", i, c.hidden, c.ffn)
        if kind == "attention":
            return ffn + nbytes("attn_q", i, 2 * qd, c.hidden) + 2 * nbytes("attn_k", i, kd, c.hidden) + \
                nbytes("attn_output", i, c.hidden, qd)
        vd = c.ssm_v_heads * c.ssm_v_dim
        return ffn + nbytes("attn_qkv", i, c.conv_dim, c.hidden) + nbytes("attn_gate", i, vd, c.hidden) + \
            nbytes("ssm_out", i, c.hidden, vd) + 2 * 4 * c.ssm_v_heads * c.hidden

    head = nbytes("output", 0, c.vocab, c.hidden)
    weights = sum(layer_weights(i, k) for i, k in enumerate(c.layer_types)) + head
    n_dn = c.layer_types.count("deltanet")
    state = n_dn * state_bytes(1, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim)   # one row: read + write
    snapshot = state // 2
    nextn = layer_weights(c.n_layers - 1, "attention") + c.hidden * 2 * c.hidden * 34 // 32   # eh_proj, Q8_0
    rows = gamma + 1
    plain = weights + state
    rnd = weights + rows * state + (rows - 1) * snapshot + (nextn + head) * gamma
    return {"plain": plain, "round": rnd, "weights": weights, "head": head, "nextn": nextn, "state": state}


def rounds_figures(copy: dict, checks: dict, dev: str) -> list[dict]:
    """:func:`measure_27b_rounds` with fp16 and with int8 activations as figures (int8 under ``27b-shape/int8/``);
    a failing measurement is recorded in ``checks["errors"]`` and leaves the others; on a GPU without the memory
    for the 27B shape, ``checks["skipped"]`` says so and no 27B figure is written."""
    figs = []
    b = round_bytes_27b(1)
    need = b["weights"] + b["nextn"] + (1 << 30)   # the weights, the NextN block and 1 GiB for caches and work
    for act, prefix in (("fp16", "qwen35_engine/mtp/27b-shape"), ("int8", "qwen35_engine/mtp/27b-shape/int8")):
        free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0
        if free < need:   # a 16 GB T4 holds no 27B-shape model: say so instead of running out of memory
            checks.setdefault("skipped", {})[f"27b_{act}"] = (f"needs {need / 2**30:.1f} GiB of GPU memory, "
                                                              f"{free / 2**30:.1f} GiB free")
            continue
        try:
            big = measure_27b_rounds(activations=act)
        except Exception as e:   # keep the copy-model figures; the error is recorded beside them
            checks.setdefault("errors", {})[f"27b_{act}"] = f"{type(e).__name__}: {e}"
            continue
        checks["27b" if act == "fp16" else "27b_int8"] = big
        bnote = (f"27B shape, random weights in the file's quant mix with a NextN block, {act} activations into "
                 f"the GEMVs, {dev}, CUDA graphs; nothing is accepted with random weights, so a round commits one "
                 "token and restores the DeltaNet state")
        figs.append(results.figure(f"{prefix}/plain_step_us", big["plain_step_us"], "us", "MEASURED", SOURCE,
                                   note=bnote))
        figs.append(results.figure(f"{prefix}/mtp_step_us", big["mtp_step_us"], "us", "MEASURED", SOURCE,
                                   note=bnote + "; one NextN chain step (block + head), graph replay, with the fill "
                                   "that resets its position"))
        for g in GAMMAS:
            b, c = big[f"mtp{g}"], copy[f"mtp{g}"]
            figs += [results.figure(f"{prefix}/gamma{g}/round_us", b["round_us"], "us", "MEASURED", SOURCE,
                                    note=bnote + "; decode time / rounds"),
                     results.figure(f"{prefix}/gamma{g}/verify_us", b["verify_us"], "us", "MEASURED", SOURCE,
                                    note=bnote + f"; the verify forward of {g + 1} rows and the NextN block over "
                                    "them, graph replay")]
            proj = c["tokens_per_step"] * big["plain_step_us"] / b["round_us"]
            figs.append(results.figure(
                f"{prefix}/gamma{g}/projected_speedup", proj, "x", "ESTIMATED", SOURCE,
                note=f"the copy model's tokens per step ({c['tokens_per_step']:.2f}) x plain step / round time at the "
                     f"27B shape ({act} activations, {dev}); assumes a 27B model's NextN block accepts as often as "
                     "the copy model's"))
    return figs


def run(out_dir, profile: str = "gpu") -> list[dict]:
    gpu = profile == "gpu"
    if gpu and not torch.cuda.is_available():
        raise RuntimeError("the gpu profile needs a CUDA device")
    n, n_long, new = (40, 10, 96) if gpu else (10, 2, 48)
    prompts = copy_prompts(n, n_long)
    with tqdm(total=len(prompts), desc="copy prompts") as bar:
        copy = measure_copy_model(prompts, new, "cuda" if gpu else "cpu", progress=bar, hf_prompts=8 if gpu else None)
    dev = hw.device_info()["name"] if gpu else "CPU"
    note = (f"qwen35-copy (data/models/qwen35-copy: 4 layers, NextN block trained on copy tasks), {copy['prompts']} "
            f"held-out copy/edit prompts, {new} greedy tokens, {copy['dtype']}, {dev}, CUDA graphs "
            f"{copy['cuda_graphs']}; tokens/s = generated tokens after the first / decode time, summed over prompts")
    figs = [results.figure("qwen35_engine/mtp/copy/plain/decode_tokens_per_s", copy["plain_tokens_per_s"],
                           "tokens/s", "MEASURED", SOURCE, note=note),
            results.figure("qwen35_engine/mtp/copy/hf/decode_tokens_per_s", copy["hf_tokens_per_s"], "tokens/s",
                           "MEASURED", SOURCE, note=note + "; transformers' Qwen3_5ForCausalLM greedy generate on the "
                           f"file's weights dequantized, same process, on the first {copy['hf_prompts']} prompts, "
                           "(new - 1) / (t(new) - t(1)) per prompt"),
            results.figure("qwen35_engine/mtp/copy/hf/identical_fraction", copy["hf_identical_fraction"],
                           "fraction", "MEASURED", SOURCE, note=note + f"; of the first {copy['hf_prompts']} prompts, those whose "
                           "plain greedy tokens equal transformers' generate"),
            results.figure("qwen35_engine/mtp/copy/plain/speedup_vs_hf", copy["plain_speedup_vs_hf"], "x",
                           "ARITHMETIC", SOURCE, note=note + "; plain greedy against transformers' generate in the "
                           f"same process, both on the first {copy['hf_prompts']} prompts")]
    for g in GAMMAS:
        c = copy[f"mtp{g}"]
        figs += [results.figure(f"qwen35_engine/mtp/copy/gamma{g}/tokens_per_step", c["tokens_per_step"], "tokens",
                                "MEASURED", SOURCE, note=note + "; tokens committed per verify forward"),
                 results.figure(f"qwen35_engine/mtp/copy/gamma{g}/decode_tokens_per_s", c["tokens_per_s"],
                                "tokens/s", "MEASURED", SOURCE, note=note),
                 results.figure(f"qwen35_engine/mtp/copy/gamma{g}/speedup_vs_plain", c["speedup_vs_plain"], "x",
                                "ARITHMETIC", SOURCE, note=note + "; against plain greedy in the same process"),
                 results.figure(f"qwen35_engine/mtp/copy/gamma{g}/speedup_vs_hf", c["speedup_vs_hf"], "x",
                                "ARITHMETIC", SOURCE, note=note + "; against transformers' generate in the same process, "
                                f"both on the first {copy['hf_prompts']} prompts"),
                 results.figure(f"qwen35_engine/mtp/copy/gamma{g}/identical_fraction", c["identical_fraction"],
                                "fraction", "MEASURED", SOURCE, note=note + "; prompts whose tokens equal plain greedy")]
    best = max(GAMMAS, key=lambda g: copy[f"mtp{g}"]["tokens_per_step"])
    figs.append(results.figure("qwen35_engine/mtp/tokens_per_step", copy[f"mtp{best}"]["tokens_per_step"], "tokens",
                               "MEASURED", SOURCE, note=note + f"; gamma = {best}, the most tokens per step"))
    checks = {"copy": copy, "bytes_27b": {}}
    for g in GAMMAS:
        b = round_bytes_27b(g)
        checks["bytes_27b"][g] = b
        tau = copy[f"mtp{g}"]["tokens_per_step"]
        figs.append(results.figure(
            f"qwen35_engine/mtp/27b-shape/gamma{g}/t4_projected_speedup", tau * b["plain"] / b["round"], "x",
            "ESTIMATED", SOURCE,
            note=f"memory-bound model of a T4: tokens per step ({tau:.2f}, the copy model on {dev}) x bytes of a plain "
                 f"token ({b['plain'] / 1e9:.2f} GB) / bytes of a round ({b['round'] / 1e9:.2f} GB: weights once for "
                 f"{g + 1} rows, DeltaNet state per row and a snapshot per row but the last, NextN block and head per "
                 f"draft; ARITHMETIC); "
                 "assumes a 27B NextN block accepts as often as the copy model's and the GEMVs of up to "
                 f"{g + 1} rows run at the bandwidth of one"))
    if not gpu:   # the oracle runs transformers on the CPU (with fla installed it would take the CUDA kernels)
        figs += oracle_figures(checks)
    if gpu:
        figs += rounds_figures(copy, checks, dev)
    # a part that failed keeps the figures it measured before, carried over beside its error
    errors = [f"{part}: {e}" for part, e in checks.get("errors", {}).items()]
    results.write(Path(out_dir) / "qwen35_mtp.json", figs, checks=checks, errors=errors)
    return figs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="output folder (default results/<device-slug>, or results/cpu)")
    ap.add_argument("--profile", choices=("gpu", "cpu"), default="gpu")
    a = ap.parse_args(argv)
    out = a.out or results.results_dir() / (hw.device_slug() if a.profile == "gpu" else "cpu")
    for f in run(out, a.profile):
        print(f"{f['name']}: {f['value']:.4g} {f['unit']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
