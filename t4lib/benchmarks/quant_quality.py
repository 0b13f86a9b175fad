"""Quantization quality: perplexity of fp16, RTN and GPTQ versions of one model.

:func:`run` is the measurement: by default the project's trained tiny model
(``data/models/tiny-cpu``), GPTQ calibrated on packed rows of the *training*
documents (:func:`calibration_ids`), perplexity on packed rows of the
*held-out* math and copy sets (:func:`heldout_ids`), both rendered the way
pretraining renders a document (plain prompt + completion + EOS, concatenated
and cut into rows). The two splits share no record. It writes the figures
(tag MEASURED, computed on the CPU) to ``results/cpu/w4a16_quality.json``;
``python -m t4lib.benchmarks.quant_quality`` runs it.

A model id that cannot be loaded is an error (:class:`t4lib.models.ModelNotAvailableError`
or FileNotFoundError, naming the id). The synthetic model is an explicit choice:
``model_id="markov"`` (:data:`MARKOV`), or ``fallback=True`` to use it when the
id cannot be loaded. It is :func:`markov_model`: a small random Qwen2 trained
for a few hundred steps on a synthetic order-1 Markov corpus (a fixed random
sparse transition table), so that held-out perplexity is still meaningful; the
result then says ``"fallback": true`` and names the synthetic source.

Perplexity and KL are computed in chunks of rows and of the vocabulary
(:func:`perplexity`, :func:`mean_kl`): full ``[rows, seq, vocab]`` logits are
never formed, so a 152k-vocabulary model fits a T4 or a 12 GB Colab runtime.
"""
from __future__ import annotations

import argparse
import copy
import inspect
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from t4lib import models
from t4lib.core import results as R
from t4lib.models import corpus, schema
from t4lib.quant.linear import set_activations
from t4lib.quant.model import default_policy, quantize_model

#: held-out files rendered for the perplexity evaluation (never trained on)
HELDOUT_FILES = ("math_heldout.jsonl", "copy_heldout.jsonl")
#: the model id that chooses the synthetic Markov model (:func:`markov_model`) explicitly
MARKOV = "markov"


def markov_tokens(n_seq: int, seq_len: int, vocab: int = 320, branching: int = 4, seed: int = 0,
                  table_seed: int = 1234) -> torch.Tensor:
    """[n_seq, seq_len] int64 from a sparse random transition table (``branching`` successors per token)."""
    gt = torch.Generator().manual_seed(table_seed)
    succ = torch.randint(0, vocab, (vocab, branching), generator=gt)
    probs = torch.softmax(torch.randn(vocab, branching, generator=gt) * 1.5, -1)
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n_seq, seq_len, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (n_seq,), generator=g)
    for t in range(1, seq_len):
        j = torch.multinomial(probs[out[:, t - 1]], 1, generator=g)[:, 0]
        out[:, t] = succ[out[:, t - 1], j]
    return out


def markov_model(steps: int = 300, seed: int = 0, hidden: int = 256, layers: int = 2, vocab: int = 320,
                 progress: bool = False):
    """A small Qwen2 trained on :func:`markov_tokens` (CPU-friendly, deterministic)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM  # optional (train extra)

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True)
    m = Qwen2ForCausalLM(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    it = range(steps)
    if progress:
        it = tqdm(it, desc="train tiny", leave=False)
    for s in it:
        ids = markov_tokens(16, 64, vocab, seed=10_000 + s)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return m.eval()


def _cpu_env() -> dict:
    """The environment of figures computed on the CPU (also on a GPU host)."""
    return {"device": "cpu", "driver": "n/a", "torch": torch.__version__, "clocks": {}, "throttle": []}


def _head_and_trunk(model):
    """``(output projection, trunk)``: ``trunk(input_ids=...)`` gives the final hidden states (after the final
    norm) that the output projection turns into logits (Hugging Face causal LMs: ``get_output_embeddings()``
    and ``get_decoder()``)."""
    head = model.get_output_embeddings()
    trunk = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    if head is None or trunk is None:
        raise TypeError(f"model must be a causal LM with get_output_embeddings() and get_decoder(), "
                        f"got {type(model).__name__}")
    return head, trunk


def _logit_chunks(model, ids: torch.Tensor, vocab_chunk: int):
    """Yield ``(v0, z)`` for the next-token logits of ``ids [r, T]`` over vocabulary ids ``v0 .. v0 + C``:
    ``z [r * (T - 1), C]`` fp32, computed as the model computes its logits (the output projection in the
    model's dtype, then cast), one vocabulary chunk at a time."""
    head, trunk = _head_and_trunk(model)
    h = trunk(input_ids=ids).last_hidden_state[:, :-1]
    h = h.reshape(-1, h.shape[-1])
    w, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if not isinstance(head, torch.nn.Linear) or w is None:  # a quantized head: rows chunked, vocabulary whole
        yield 0, head(h).float()
        return
    for v0 in range(0, w.shape[0], vocab_chunk):
        v1 = min(v0 + vocab_chunk, w.shape[0])
        yield v0, torch.nn.functional.linear(h, w[v0:v1], None if bias is None else bias[v0:v1]).float()


def _check_chunks(batch_size, vocab_chunk) -> None:
    for name, v in (("batch_size", batch_size), ("vocab_chunk", vocab_chunk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch_size: int = 8, *, vocab_chunk: int = 8192) -> float:
    """exp(mean next-token NLL) over ``ids [n, T]``, on the model's device.

    NLL = logsumexp_v(z_v) - z_target, the logsumexp a running one over vocabulary chunks
    (``lse = logaddexp(lse, logsumexp(z[:, v0:v1]))``): ``batch_size`` rows and ``vocab_chunk`` vocabulary
    entries at a time. Beyond the model's own forward over ``batch_size`` rows (activations, without its
    logits) the peak is the hidden states ``[batch_size, T, hidden]`` and about two fp32 ``[batch_size * (T-1),
    vocab_chunk]`` tensors: 2 x 8 x 255 x 8192 x 4 B = 134 MB at the defaults, whatever the vocabulary (the
    whole logits of 32 rows of 256 tokens over Qwen2.5's 151,936 entries would be 4.96 GB in fp32)."""
    _check_chunks(batch_size, vocab_chunk)
    dev = next(model.parameters()).device
    tot, n = 0.0, 0
    for i in range(0, ids.shape[0], batch_size):
        b = ids[i:i + batch_size].to(dev)
        target = b[:, 1:].reshape(-1)
        lse = torch.full(target.shape, float("-inf"), device=dev)
        zt = torch.zeros(target.shape, device=dev)
        for v0, z in _logit_chunks(model, b, vocab_chunk):
            lse = torch.logaddexp(lse, torch.logsumexp(z, -1))
            hit = (target >= v0) & (target < v0 + z.shape[1])
            zt[hit] = z[hit, target[hit] - v0]
        tot, n = tot + float((lse - zt).sum()), n + target.numel()
    return float(torch.exp(torch.tensor(tot / n)))


@torch.no_grad()
def mean_kl(ref, model, ids: torch.Tensor, batch_size: int = 8, *, vocab_chunk: int = 8192) -> float:
    """Mean over next-token positions of KL(ref || model), in nats: how far ``model``'s predictions
    moved from ``ref``'s. Unlike perplexity it cannot improve by accident: an overconfident model's
    perplexity drops under any noise that softens its logits, its KL to itself only grows.

    With logits p = ref's, q = model's: KL = sum_v softmax(p)_v (p_v - q_v) - lse(p) + lse(q), each sum
    accumulated over vocabulary chunks in one pass (``a`` rescaled by exp(lse_old - lse_new) as ``lse(p)``
    grows), on ``ref``'s device (``model`` on the same one). Peak beyond the two forwards: about four fp32
    ``[batch_size * (T-1), vocab_chunk]`` tensors, 4 x 8 x 255 x 8192 x 4 B = 267 MB at the defaults for any
    vocabulary (whole fp32 log-probabilities of 32 rows x 255 positions x 151,936 entries, for both models
    and their exponent, would be about 15 GB)."""
    _check_chunks(batch_size, vocab_chunk)
    dev = next(ref.parameters()).device
    tot, n = 0.0, 0
    for i in range(0, ids.shape[0], batch_size):
        b = ids[i:i + batch_size].to(dev)
        rows = b[:, 1:].numel()
        lse_p = torch.full((rows,), float("-inf"), device=dev)
        lse_q = torch.full((rows,), float("-inf"), device=dev)
        a = torch.zeros(rows, device=dev)
        for (v0, zp), (w0, zq) in zip(_logit_chunks(ref, b, vocab_chunk), _logit_chunks(model, b, vocab_chunk)):
            if v0 != w0 or zp.shape != zq.shape:
                raise ValueError(f"ref and model give logits of different shapes ({tuple(zp.shape)} at {v0}, "
                                 f"{tuple(zq.shape)} at {w0}): not the same vocabulary")
            new = torch.logaddexp(lse_p, torch.logsumexp(zp, -1))
            a = a * torch.exp(lse_p - new) + (torch.exp(zp - new[:, None]) * (zp - zq)).sum(-1)
            lse_p = new
            lse_q = torch.logaddexp(lse_q, torch.logsumexp(zq, -1))
        tot += float((a - lse_p + lse_q).sum())
        n += rows
    return tot / n


def compare_quantizers(model, calib: list[torch.Tensor], test: torch.Tensor, group_size: int = 128, *,
                       fp: float | None = None) -> dict:
    """Perplexity of ``model`` as given, RTN-quantized and GPTQ-quantized (default policy otherwise),
    and each quantized model's mean KL divergence from ``model`` (:func:`mean_kl`).

    ``fp``: the unquantized model's perplexity on ``test`` when already known (saves one pass)."""
    out = {"fp": perplexity(model, test) if fp is None else float(fp)}
    rtn = quantize_model(copy.deepcopy(model), default_policy(model, group_size, "rtn"))
    out["rtn"] = perplexity(rtn, test)
    out["kl_rtn"] = mean_kl(model, rtn, test)
    del rtn  # one quantized copy at a time
    gptq = quantize_model(copy.deepcopy(model), default_policy(model, group_size, "gptq"), calib=calib)
    out["gptq"] = perplexity(gptq, test)
    out["kl_gptq"] = mean_kl(model, gptq, test)
    out["kl_ratio"] = out["kl_gptq"] / out["kl_rtn"] if out["kl_rtn"] > 0 else float("nan")
    out["gap_rtn"] = out["rtn"] - out["fp"]
    out["gap_gptq"] = out["gptq"] - out["fp"]
    out["gap_ratio"] = out["gap_gptq"] / out["gap_rtn"] if out["gap_rtn"] > 0 else float("nan")
    return out


# ----------------------------------------------------------------------------- project text

def _pack(tokenizer, docs: list[str], seq_len: int, n_seq: int | None) -> torch.Tensor:
    """Tokenize ``docs``, concatenate them in order and cut ``[rows, seq_len]`` (the tail is dropped)."""
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    flat = torch.tensor([t for d in ids for t in d], dtype=torch.long)
    rows = flat.numel() // seq_len
    if rows == 0:
        raise ValueError(f"{len(docs)} documents give fewer than seq_len={seq_len} tokens")
    out = flat[: rows * seq_len].view(rows, seq_len)
    if n_seq is not None and n_seq < rows:  # evenly spaced rows, so a subset still spans every file
        out = out[torch.linspace(0, rows - 1, n_seq).round().long()]
    return out


def heldout_documents(files=HELDOUT_FILES, root=None) -> list[str]:
    """The held-out records rendered as pretraining renders a document: plain prompt + completion + EOS,
    in file order."""
    docs = []
    for name in files:
        if name not in corpus.EVAL_FILES:
            raise ValueError(f"files must be held-out sets {corpus.EVAL_FILES}, got {name!r}")
        for rec in corpus.load_jsonl(name, root):
            p, c = corpus.copy_doc(rec) if "instruction" in rec else corpus.math_doc(rec)
            docs.append(p + c + schema.EOS)
    return docs


def heldout_ids(tokenizer, seq_len: int = 256, n_seq: int | None = None, files=HELDOUT_FILES,
                root=None) -> torch.Tensor:
    """``[rows, seq_len]`` token ids of the held-out sets: all rows, or ``n_seq`` evenly spaced ones."""
    return _pack(tokenizer, heldout_documents(files, root), seq_len, n_seq)


def calibration_ids(tokenizer, n_seq: int = 64, seq_len: int = 256, seed: int = 0, root=None,
                    batch: int = 16) -> list[torch.Tensor]:
    """GPTQ calibration batches ``[batch, seq_len]``: the first ``n_seq`` rows of the training documents
    (:func:`t4lib.models.corpus.pretrain_documents`, shuffled with ``seed``), packed."""
    ids = _pack(tokenizer, corpus.pretrain_documents(root, seed=seed), seq_len, None)[:n_seq]
    if ids.shape[0] < n_seq:
        raise ValueError(f"the training documents give only {ids.shape[0]} rows of {seq_len} tokens, "
                         f"n_seq={n_seq} asked")
    return list(ids.split(batch))


def _markov_data(steps: int, calib_seqs: int, eval_seqs: int | None, progress: bool, why: str) -> dict:
    model = markov_model(steps, progress=progress)
    return {"model": model, "calib": [markov_tokens(8, 64, seed=2 + i) for i in range(max(1, calib_seqs // 8))],
            "test": markov_tokens(eval_seqs or 32, 64, seed=1), "fallback": True,
            "source": f"FALLBACK: {why}; random Qwen2 trained {steps} steps on the synthetic Markov corpus",
            "eval_text": "synthetic Markov tokens", "calib_text": "synthetic Markov tokens"}


def load_or_fallback(model_id: str = "tiny-cpu", *, seq_len: int = 256, calib_seqs: int = 64,
                     eval_seqs: int | None = None, fallback_steps: int = 300, progress: bool = False,
                     fallback: bool = False, device=None, dtype=None) -> dict:
    """Model, calibration batches and test ids for :func:`run`.

    ``model_id`` loads with :func:`t4lib.models.load` and is evaluated on the project's held-out text. An id
    that cannot be loaded raises (FileNotFoundError / :class:`t4lib.models.ModelNotAvailableError`, naming it)
    unless ``fallback=True``. The synthetic :func:`markov_model` is used, with ``"fallback"`` True and a source
    starting ``FALLBACK``, when chosen (``model_id="markov"``) or when ``fallback`` is on and the id cannot be
    loaded.

    ``device``: where the model runs (None: CUDA when there is one, else the CPU); ``dtype``: None gives
    float32 on the CPU and float16 on a GPU (the fp16 reference that W4A16 is compared with).
    """
    if model_id == MARKOV:
        return _markov_data(fallback_steps, calib_seqs, eval_seqs, progress, f"model_id={MARKOV!r} chosen")
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype is None:
        dtype = torch.float32 if dev.type == "cpu" else torch.float16
    try:
        model, tok = models.load(model_id, dtype=dtype, device=dev)
    except (FileNotFoundError, models.ModelNotAvailableError) as e:
        if not fallback:
            raise
        return _markov_data(fallback_steps, calib_seqs, eval_seqs, progress,
                            f"{model_id} not available ({type(e).__name__})")
    return {"model": model.eval(), "calib": calibration_ids(tok, calib_seqs, seq_len),
            "test": heldout_ids(tok, seq_len, eval_seqs), "fallback": False, "source": str(model_id),
            "eval_text": "+".join(HELDOUT_FILES), "calib_text": "training documents (corpus.pretrain_documents)"}


def run(out_dir=None, model_id: str = "tiny-cpu", group_sizes=(32, 64, 128), primary: int = 32, *,
        seq_len: int = 256, calib_seqs: int = 64, eval_seqs: int | None = None, fallback_steps: int = 300,
        write: bool = True, progress: bool = False, fallback: bool = False, device=None, dtype=None) -> dict:
    """Measure fp / RTN / GPTQ perplexity for each group size and write ``w4a16_quality.json``.

    ``primary`` is the group size the quality target is judged on (see the notebook for why 32 on a
    hidden-size-128 model). Returns ``{"rows": {g: compare_quantizers(...)}, "primary", "fallback",
    "source", "eval_tokens", "calib_tokens", "path", "figures"}``. ``fallback``, ``device``, ``dtype``: as
    :func:`load_or_fallback` (a model that cannot be loaded is an error unless ``fallback``). Figures computed
    on the CPU say device ``cpu`` and ``out_dir`` then defaults to ``results/cpu/``.
    """
    if primary not in group_sizes:
        raise ValueError(f"primary={primary!r} must be one of group_sizes={tuple(group_sizes)}")
    t0 = time.perf_counter()
    d = load_or_fallback(model_id, seq_len=seq_len, calib_seqs=calib_seqs, eval_seqs=eval_seqs,
                         fallback_steps=fallback_steps, progress=progress, fallback=fallback, device=device,
                         dtype=dtype)
    model, calib, test = d["model"], d["calib"], d["test"]
    eval_tokens = int(test[:, 1:].numel())
    calib_tokens = int(sum(c.numel() for c in calib))
    fp = perplexity(model, test)
    rows = {}
    it = group_sizes
    if progress:
        it = tqdm(group_sizes, desc="group sizes", leave=False)
    for g in it:
        rows[g] = compare_quantizers(model, calib, test, g, fp=fp)
    out = {"rows": rows, "primary": primary, "fallback": d["fallback"], "source": d["source"],
           "eval_tokens": eval_tokens, "calib_tokens": calib_tokens, "eval_text": d["eval_text"],
           "calib_text": d["calib_text"], "seconds": time.perf_counter() - t0}
    src = "t4lib.benchmarks.quant_quality.run"
    what = (f"model {d['source']}; eval {eval_tokens} next-token predictions on {d['eval_text']}; GPTQ calibration "
            f"{calib_tokens} tokens of {d['calib_text']}; lm_head and embeddings fp16")
    env = R.environment()
    if next(model.parameters()).device.type == "cpu" and env["device"] != "cpu":  # a GPU host, computed on the CPU
        env = _cpu_env()
    figs = [R.figure("w4a16_quality/ppl_fp", fp, "perplexity", "MEASURED", src, env=env, note=what,
                     eval_tokens=eval_tokens, fallback=d["fallback"])]
    for g, r in rows.items():
        for k in ("rtn", "gptq"):
            figs.append(R.figure(f"w4a16_quality/g{g}/ppl_{k}", r[k], "perplexity", "MEASURED", src, env=env,
                                 note=what, group_size=g, eval_tokens=eval_tokens, fallback=d["fallback"]))
        for k in ("gap_rtn", "gap_gptq"):
            figs.append(R.figure(f"w4a16_quality/g{g}/{k}", r[k], "perplexity", "ARITHMETIC", src,
                                 note=f"ppl_{k[4:]} - ppl_fp at group {g}", group_size=g))
        for k in ("kl_rtn", "kl_gptq"):
            figs.append(R.figure(f"w4a16_quality/g{g}/{k}", r[k], "nats/token", "MEASURED", src, env=env,
                                 note=f"mean KL(fp || {k[3:]}) per next-token prediction; {what}", group_size=g,
                                 eval_tokens=eval_tokens, fallback=d["fallback"]))
        if r["kl_ratio"] == r["kl_ratio"]:
            figs.append(R.figure(f"w4a16_quality/g{g}/kl_ratio_gptq_over_rtn", r["kl_ratio"], "ratio", "ARITHMETIC",
                                 src, note=f"kl_gptq / kl_rtn at group {g} (reported beside the perplexity target)",
                                 group_size=g))
        if r["gap_ratio"] == r["gap_ratio"]:  # finite only when RTN's gap is positive
            figs.append(R.figure(f"w4a16_quality/g{g}/gap_ratio_gptq_over_rtn", r["gap_ratio"], "ratio",
                                 "ARITHMETIC", src, note=f"gap_gptq / gap_rtn at group {g}; target <= 0.5",
                                 group_size=g, target_met=bool(r["gap_ratio"] <= 0.5)))
    out["figures"] = figs
    out["target_met"] = bool(rows[primary]["gap_rtn"] > 0 and rows[primary]["gap_ratio"] <= 0.5)
    out["target_reason"] = target_reason(out)
    if write:
        path = (Path(out_dir) if out_dir is not None else R.results_dir() / env["device"]) / "w4a16_quality.json"
        out["path"] = R.write(path, figs, model=d["source"], fallback=d["fallback"], primary_group_size=primary,
                              target="GPTQ perplexity gap to fp16 at most half of RTN's",
                              target_met=out["target_met"], target_reason=out["target_reason"], eval_text=d["eval_text"], calib_text=d["calib_text"],
                              seq_len=int(test.shape[1]), eval_tokens=eval_tokens, calib_tokens=calib_tokens)
    return out


@torch.no_grad()
def decode_log_probs(model, ids: torch.Tensor, batch_size: int = 4) -> torch.Tensor:
    """Next-token log-probabilities [n, T - 1, V] over ``ids [n, T]``, computed as decoding computes them: one
    token per step against a KV cache, so every Linear layer sees ``batch_size`` rows per step (the GEMV
    path, where ``activations="int8"`` applies; a teacher-forced forward over whole sequences takes the GEMM
    and keeps fp16 activations)."""
    from transformers import DynamicCache  # optional (train extra)

    dev = next(model.parameters()).device
    # newer transformers name the argument ``cache``; older ones only know ``past_key_values``
    arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = []
    for b in ids.to(dev).split(batch_size):
        cache, steps = DynamicCache(), []
        for t in range(b.shape[1] - 1):
            o = model(input_ids=b[:, t:t + 1], use_cache=True, **{arg: cache})
            cache = o.past_key_values
            steps.append(torch.log_softmax(o.logits[:, -1].float(), -1).cpu())
        out.append(torch.stack(steps, 1))
    return torch.cat(out)


def activation_quality(out_dir=None, model_id: str = "tiny-cpu", group_size: int = 32, *, n_seq: int = 8,
                       seq_len: int = 256, fallback_steps: int = 300, write: bool = True,
                       fallback: bool = False) -> dict:
    """Int8 activations against fp16 ones on the same RTN W4A16 model, in decode numerics
    (:func:`decode_log_probs`): perplexity of each on held-out text, the mean KL(W4A16 || W4A8) per token and
    the share of positions where both predict the same top token. Writes ``w4a8_quality.json`` (device cpu:
    on the CPU the W4A16 reference computes in the input dtype, fp32, and W4A8 quantizes from fp16)."""
    d = load_or_fallback(model_id, seq_len=seq_len, calib_seqs=8, eval_seqs=n_seq, fallback_steps=fallback_steps,
                         fallback=fallback, device="cpu")
    test = d["test"]
    qm = quantize_model(copy.deepcopy(d["model"]), default_policy(d["model"], group_size, "rtn"))
    lp16 = decode_log_probs(qm, test)
    set_activations(qm, "int8")
    lp8 = decode_log_probs(qm, test)
    target = test[:, 1:, None]
    ppl = {k: float(torch.exp(-lp.gather(-1, target).mean())) for k, lp in (("w4a16", lp16), ("w4a8", lp8))}
    kl = float((lp16.exp() * (lp16 - lp8)).sum(-1).mean())
    agree = float((lp16.argmax(-1) == lp8.argmax(-1)).float().mean())
    n_tok = int(target.numel())
    src = "t4lib.benchmarks.quant_quality.activation_quality"
    what = (f"model {d['source']}, RTN group {group_size} (lm_head and embeddings fp16); {n_tok} next-token "
            f"predictions on {d['eval_text']}, decoded one token per step against a KV cache")
    env = _cpu_env()
    figs = [R.figure(f"w4a8_quality/ppl_{k}_decode", v, "perplexity", "MEASURED", src, env=env, note=what,
                     eval_tokens=n_tok, fallback=d["fallback"]) for k, v in ppl.items()]
    figs.append(R.figure("w4a8_quality/kl_w4a8_from_w4a16", kl, "nats/token", "MEASURED", src, env=env,
                         note=f"mean KL(W4A16 || W4A8) per next-token prediction; {what}", eval_tokens=n_tok))
    figs.append(R.figure("w4a8_quality/top1_agreement", agree, "fraction", "MEASURED", src, env=env,
                         note=f"share of positions where W4A8 and W4A16 predict the same next token; {what}",
                         eval_tokens=n_tok))
    out = {"ppl": ppl, "kl": kl, "top1_agreement": agree, "eval_tokens": n_tok, "source": d["source"],
           "fallback": d["fallback"], "figures": figs}
    if write:
        path = (Path(out_dir) if out_dir is not None else R.results_dir() / "cpu") / "w4a8_quality.json"
        out["path"] = R.write(path, figs, model=d["source"], fallback=d["fallback"], group_size=group_size,
                              eval_text=d["eval_text"], eval_tokens=n_tok)
    return out


def main(argv=None) -> None:
    """``python -m t4lib.benchmarks.quant_quality [--model tiny-cpu] [--eval-seqs N]``: the full measurement."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--model", default="tiny-cpu")
    ap.add_argument("--eval-seqs", type=int, default=None, help="evenly spaced held-out rows (default: all)")
    ap.add_argument("--calib-seqs", type=int, default=64)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--device", default="cpu", help="where the model runs (cpu: fp32, the recorded figures; "
                                                     "cuda: fp16)")
    a = ap.parse_args(argv)
    r = run(a.out_dir, a.model, calib_seqs=a.calib_seqs, eval_seqs=a.eval_seqs, progress=True, device=a.device)
    print(format_table(r))
    print("written:", r["path"])


def target_reason(r: dict) -> str:
    """Why the quality target is or is not met at the primary group size, in words."""
    g = r["primary"]
    q = r["rows"][g]
    if q["gap_rtn"] <= 0:
        return (f"RTN's perplexity gap at group {g} is {q['gap_rtn']:+.4f}, not positive, so 'GPTQ's gap at most half "
                f"of RTN's' has no meaning here (GPTQ's gap is {q['gap_gptq']:+.4f})")
    return f"GPTQ gap / RTN gap at group {g} = {q['gap_ratio']:.3f} (target <= 0.5)"


def format_table(r: dict, verdict: bool = True) -> str:
    """A text table of :func:`run`'s result; ``verdict``: end with the target's verdict and its reason."""
    lines = [f"model: {r['source']}",
             f"eval: {r['eval_tokens']} next-token predictions ({r['eval_text']}); "
             f"GPTQ calibration: {r['calib_tokens']} tokens ({r['calib_text']})",
             f"{'group':>5} {'ppl fp':>9} {'ppl RTN':>9} {'ppl GPTQ':>9} {'gap RTN':>9} {'gap GPTQ':>9} {'ratio':>6}"
             f" {'KL RTN':>8} {'KL GPTQ':>8} {'KL ratio':>8}"]
    for g, q in r["rows"].items():
        ratio = f"{q['gap_ratio']:6.3f}" if q["gap_rtn"] > 0 else "   n/a"
        lines.append(f"{g:>5} {q['fp']:9.4f} {q['rtn']:9.4f} {q['gptq']:9.4f} {q['gap_rtn']:+9.4f} "
                     f"{q['gap_gptq']:+9.4f} {ratio} {q['kl_rtn']:8.4f} {q['kl_gptq']:8.4f} {q['kl_ratio']:8.3f}"
                     + ("  <- target judged here" if g == r["primary"] else ""))
    if verdict:
        lines.append(f"target (GPTQ gap <= 0.5 x RTN gap at group {r['primary']}): "
                     f"{'MET' if r['target_met'] else 'NOT MET'} ({target_reason(r)})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
