"""Tiny Qwen2-architecture causal LMs, pretrained on the project's synthetic data.

Presets (``PRESETS``):

* ``tiny-cpu``: about 1.3M parameters; pretrains in a few minutes on 2 CPU cores;
* ``tiny-gpu``: about 8M parameters; pretrains in a few minutes on one
  data-centre GPU (bf16 autocast);
* ``micro``: a toy configuration for tests (seconds).

Both real presets use the project tokenizer (``data/tokenizer``), tied
embeddings and a vocabulary of a little over a thousand tokens, so the fp16
checkpoints stay small enough to commit under ``data/models/<preset>/``.

Command line::

    python -m t4lib.models.tiny train --preset tiny-cpu            # -> data/models/tiny-cpu
    python -m t4lib.models.tiny train --preset tiny-gpu --out DIR  # -> DIR
    python -m t4lib.models.tiny eval  --model data/models/tiny-cpu

Training writes into the output directory: the fp16 safetensors checkpoint
and tokenizer (``save_pretrained``), ``training_record.json`` (data sha256,
configuration, steps, tokens, final loss, evaluation) and ``loss_curve.png``.

Evaluation (all on data never trained on):

* ``math_exact_match``: greedy answers to held-out 1-2 step problems (templates
  disjoint from training) in the plain prompt form of ``schema.math_prompt``;
  correct when ``The answer is X`` matches the SymPy answer exactly;
* ``copy_token_accuracy``: on held-out input-grounded tasks, the fraction of
  answer tokens the model predicts exactly (greedy argmax given the reference
  prefix: the quantity a speculative-decoding verifier accepts);
  ``copy_exact_match``: whole outputs generated greedily and matched exactly;
* ``abstention_rate``: fraction of the quarantined traps answered with the
  abstention tag (the baseline RL has to move), with the false-abstention rate
  and accuracy on the quarantined answerable problems.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from fractions import Fraction
from pathlib import Path

import torch
from tqdm.auto import tqdm

from t4lib.core import results
from t4lib.models import corpus, load, open_eval, packing, procedural, schema
from t4lib.models.presets import PRESETS, Preset, checkpoint_dir, get_preset, train_command

REPO = Path(__file__).resolve().parents[2]


def tokenizer_dir() -> Path:
    return corpus.data_dir() / "tokenizer"


def load_tokenizer(path=None):
    from transformers import AutoTokenizer  # optional: transformers (the train extra)
    path = Path(path or tokenizer_dir())
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"tokenizer not found at {path}; build it with `python data/build_all.py`")
    tok = AutoTokenizer.from_pretrained(str(path))
    return tok


def model_config(preset: Preset | str, vocab_size: int, eos_id: int, pad_id: int):
    """``Qwen2Config`` of a preset (tied embeddings, vocab rounded up to 64)."""
    from transformers import Qwen2Config  # optional: transformers (the train extra)
    p = get_preset(preset) if isinstance(preset, str) else preset
    vocab = -(-vocab_size // 64) * 64
    return Qwen2Config(
        vocab_size=vocab, hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers, num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads, max_position_embeddings=max(1024, 2 * p.seq_len),
        rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id,
        use_sliding_window=False)


def build_model(preset: Preset | str, tokenizer, seed: int = 0):
    from transformers import Qwen2ForCausalLM  # optional: transformers (the train extra)
    cfg = model_config(preset, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    return model


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- data

def arithmetic_drills(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` exact arithmetic facts ``("47 + 29 =", " 76")`` in the number
    ranges and forms the word problems use (sums, differences, products,
    exact quotients, percent-of, fraction sums), drawn with ``seed``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = i % 6
        if k == 0:
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            expr, val = f"{a} + {b}", a + b
        elif k == 1:
            a = rng.randint(2, 199)
            b = rng.randint(1, a - 1)
            expr, val = f"{a} - {b}", a - b
        elif k == 2:
            a, b = rng.randint(2, 12), rng.randint(2, 60)
            expr, val = (f"{a} * {b}", a * b) if rng.random() < 0.5 else (f"{b} * {a}", a * b)
        elif k == 3:
            b, q = rng.randint(2, 15), rng.randint(2, 15)
            expr, val = f"{b * q} / {b}", q
        elif k == 4:
            pct = rng.choice([10, 20, 25, 50, 75])
            unit = 100 // math.gcd(pct, 100)
            a = unit * rng.randint(1, max(1, 200 // unit))
            expr, val = f"{a} * {pct} / 100", a * pct // 100
        else:
            den = rng.randint(3, 12)
            p = rng.randint(1, den - 2)
            q = rng.randint(1, den - 1 - p)
            expr, val = f"{p}/{den} + {q}/{den}", Fraction(p + q, den)
        out.append((f"{expr} =", f" {val}"))
    return out


def _token_stream(tokenizer, pairs, prompt_weight: float):
    """Token ids and per-token loss weights of ``(prompt, completion)`` pairs:
    ``prompt_weight`` on prompt tokens, 1 on completion tokens."""
    P = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    C = tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]
    return [(p + c, [prompt_weight] * len(p) + [1.0] * len(c)) for p, c in zip(P, C)]


def _batches(docs, seq_len, batch_size, seed):
    """Endless packed batches (ids, weights) ``[batch_size, seq_len + 1]``:
    documents are shuffled per epoch, concatenated and cut into rows; the
    weight of a token is applied to the loss of predicting it."""
    ids = [torch.tensor(d[0], dtype=torch.long) for d in docs]
    wts = [torch.tensor(d[1], dtype=torch.float32) for d in docs]
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1000 + epoch)
        order = torch.randperm(len(docs), generator=g).tolist()
        flat = torch.cat([ids[i] for i in order])
        wflat = torch.cat([wts[i] for i in order])
        rows = flat.numel() // (seq_len + 1)
        data = flat[: rows * (seq_len + 1)].view(rows, seq_len + 1)
        wdat = wflat[: rows * (seq_len + 1)].view(rows, seq_len + 1)
        for b in range(rows // batch_size):
            sl = slice(b * batch_size, (b + 1) * batch_size)
            yield epoch, data[sl], wdat[sl]
        epoch += 1


# ----------------------------------------------------------------------------- evaluation

def _generate(model, tokenizer, prompts, max_new_tokens, batch_size, device, progress=None):
    outs = []
    tokenizer.padding_side = "left"
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        new = gen[:, enc["input_ids"].shape[1]:]
        outs += tokenizer.batch_decode(new, skip_special_tokens=False)
        if progress is not None:
            progress.update(len(chunk))
    return [o.split(schema.EOS)[0].replace(schema.PAD, "") for o in outs]


def eval_math(model, tokenizer, n=400, max_steps=2, batch_size=64, device="cpu", progress=None):
    recs = [r for r in corpus.load_jsonl("math_heldout.jsonl") if r["n_steps"] <= max_steps][:n]
    outs = _generate(model, tokenizer, [schema.math_prompt(r["question"]) for r in recs], 40,
                     batch_size, device, progress)
    ok = [schema.extract_answer(o) == r["answer"] for o, r in zip(outs, recs)]
    by_structure = {}
    for r, k in zip(recs, ok):
        by_structure.setdefault(r["structure"], []).append(k)
    return dict(math_exact_match=sum(ok) / max(1, len(ok)), math_n=len(ok),
                math_by_structure={k: round(sum(v) / len(v), 4) for k, v in sorted(by_structure.items())},
                math_examples=[dict(question=r["question"], output=o, answer=r["answer"])
                               for r, o in list(zip(recs, outs))[:3]])


def copy_sequences(tokenizer, recs) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Token ids of copy tasks (prompt + completion) and each one's completion span [start, end)."""
    seqs, spans = [], []
    for r in recs:
        p, c = corpus.copy_doc(r)
        pi = tokenizer(p, add_special_tokens=False)["input_ids"]
        ci = tokenizer(c, add_special_tokens=False)["input_ids"]
        seqs.append(pi + ci)
        spans.append((len(pi), len(pi) + len(ci)))
    return seqs, spans


def eval_copy(model, tokenizer, n=300, batch_size=64, device="cpu", generate_n=60, progress=None):
    recs = corpus.load_jsonl("copy_heldout.jsonl")[:n]
    correct = total = 0
    by_kind = {}
    for i in range(0, len(recs), batch_size):
        chunk = recs[i:i + batch_size]
        seqs, spans = copy_sequences(tokenizer, chunk)
        L = max(map(len, seqs))
        ids = torch.full((len(seqs), L), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)
        for j, s in enumerate(seqs):
            ids[j, :len(s)] = torch.tensor(s)
            mask[j, :len(s)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        pred = logits.argmax(-1).cpu()
        for j, (a, b) in enumerate(spans):
            hit = (pred[j, a - 1:b - 1] == ids[j, a:b]).sum().item()
            correct += hit
            total += b - a
            k = by_kind.setdefault(chunk[j]["kind"], [0, 0])
            k[0] += hit
            k[1] += b - a
        if progress is not None:
            progress.update(len(chunk))
    gen_recs = recs[:generate_n]
    outs = _generate(model, tokenizer, [corpus.copy_doc(r)[0] for r in gen_recs], 96, batch_size, device)
    exact = sum(o.strip() == r["output"].strip() for o, r in zip(outs, gen_recs))
    return dict(copy_token_accuracy=correct / max(1, total), copy_answer_tokens=total, copy_n=len(recs),
                copy_by_kind={k: round(v[0] / v[1], 4) for k, v in sorted(by_kind.items())},
                copy_exact_match=exact / max(1, len(gen_recs)), copy_exact_n=len(gen_recs))


def eval_honesty(model, tokenizer, n=150, batch_size=64, device="cpu", progress=None):
    recs = corpus.load_jsonl("honesty_eval.jsonl")[:n]
    outs = _generate(model, tokenizer, [schema.math_prompt(r["question"]) for r in recs], 40,
                     batch_size, device, progress)
    preds = [schema.extract_answer(o) for o in outs]
    traps = [p for p, r in zip(preds, recs) if r["trap"]]
    ans = [(p, r) for p, r in zip(preds, recs) if not r["trap"]]
    return dict(abstention_rate=sum(p == "abstain" for p in traps) / max(1, len(traps)),
                abstention_traps=len(traps),
                false_abstention_rate=sum(p == "abstain" for p, _ in ans) / max(1, len(ans)),
                answerable_accuracy=sum(p == r["answer"] for p, r in ans) / max(1, len(ans)),
                answerable_n=len(ans))


def evaluate(model, tokenizer, preset: Preset, device="cpu") -> dict:
    model.eval()
    total = preset.eval_math + preset.eval_copy + preset.eval_honesty
    with tqdm(total=total, desc="eval", unit="ex", file=sys.stderr) as bar:
        out = {}
        out.update(eval_math(model, tokenizer, preset.eval_math, 2, preset.eval_batch, device, bar))
        out.update(eval_copy(model, tokenizer, preset.eval_copy, preset.eval_batch, device, progress=bar))
        out.update(eval_honesty(model, tokenizer, preset.eval_honesty, preset.eval_batch, device, bar))
    return out


# ----------------------------------------------------------------------------- training

def _lr_at(step, p: Preset):
    if step < p.warmup:
        return p.lr * (step + 1) / p.warmup
    t = (step - p.warmup) / max(1, p.steps - p.warmup)
    return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def plot_loss(losses, path, title):
    """Training loss per step and its running mean, log scale. ``losses``: one list, or ``{label: list}`` for
    several series on one plot."""
    import matplotlib  # optional: matplotlib (the notebooks extra)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg"): the backend is set before pyplot loads
    series = losses if isinstance(losses, dict) else {"": losses}
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, (label, ls) in enumerate(series.items()):
        color = f"C{k}"
        x = range(1, len(ls) + 1)
        w = max(1, len(ls) // 50)
        sm = [sum(ls[max(0, i - w + 1):i + 1]) / len(ls[max(0, i - w + 1):i + 1]) for i in range(len(ls))]
        ax.plot(x, ls, lw=0.6, alpha=0.4, color=color, label=f"{label + ', ' if label else ''}per step")
        ax.plot(x, sm, lw=1.5, color=color, label=f"{label + ', ' if label else ''}mean of {w}")
    ax.set_xlabel("step")
    ax.set_ylabel("weighted training loss (nats/token)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    results.save_figure(fig, path, dpi=90)
    plt.close(fig)


def _versions():
    import tokenizers  # optional: tokenizers (the train extra)
    import transformers  # optional: transformers (the train extra)
    return dict(python=platform.python_version(), torch=torch.__version__,
                transformers=transformers.__version__, tokenizers=tokenizers.__version__)


def override_preset(p: Preset, overrides: dict | None) -> Preset:
    """``p`` with some numeric fields replaced (``{"batch_size": 32}``, ``{"hidden_size": 512}``: an arm
    of a recipe search; the training record keeps the command); values are converted to the field's type,
    unknown fields refused."""
    if not overrides:
        return p
    fixed = {"name", "extra"}
    kinds = {f.name: f.type for f in fields(Preset)}
    new = {}
    for key, value in overrides.items():
        if key not in kinds or key in fixed:
            raise ValueError(f"override {key!r} is not a field of a preset; allowed: "
                             f"{sorted(set(kinds) - fixed)}")
        new[key] = _parse_field(key, value, str(kinds[key]))
    return replace(p, **new)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_field(key: str, value: str, kind: str):
    """``value`` (command-line text) as the preset field's type: int, float, str or bool; ``none`` for a
    field that may be None. A value that does not parse raises a ValueError naming the field."""
    if "None" in kind and value.lower() == "none":
        return None
    if kind.startswith("str"):
        return value
    if kind.startswith("bool"):
        if value.lower() not in _BOOLS:
            raise ValueError(f"override {key}={value!r}: expected true or false")
        return _BOOLS[value.lower()]
    cast, article = (float, "a float") if kind.startswith("float") else (int, "an int")
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise ValueError(f"override {key}={value!r}: expected {article}") from None


def train(preset: str | Preset, out=None, *, steps: int | None = None, device: str | None = None,
          evaluate_after: bool = True, progress: bool = True, overrides: dict | None = None) -> dict:
    """Pretrain a preset from scratch on the training-side data, evaluate it,
    save it (fp16 safetensors + tokenizer), its record and loss plot into
    ``out`` (default ``data/models/<preset>``). ``overrides`` replaces training
    fields of the preset (see ``override_preset``). Returns the record."""
    if not isinstance(preset, (str, Preset)):
        raise TypeError(f"preset must be a preset name or a Preset, got {type(preset).__name__}")
    p = get_preset(preset) if isinstance(preset, str) else preset
    p = override_preset(p, overrides)
    if steps is not None:
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        p = replace(p, steps=steps, warmup=min(p.warmup, max(1, steps // 10)))
    out = Path(out) if out is not None else checkpoint_dir(p.name)
    results.check_writable(out, "out", directory=True)  # before training, not after it
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if p.threads and device == "cpu":
        torch.set_num_threads(p.threads)
    if p.corpus == "procedural":
        return train_streamed(p, out, device=device, evaluate_after=evaluate_after, progress=progress,
                              command=_command(p.name, steps, overrides))
    t0 = time.time()
    tok = load_tokenizer()
    docs = corpus.pretrain_pairs(seed=p.seed, chat_fraction=p.chat_fraction, math_repeat=p.math_repeat)
    docs += [(a, b + schema.EOS) for a, b in arithmetic_drills(p.drills, p.seed)]
    doc_ids = _token_stream(tok, docs, p.prompt_weight)
    n_tokens = sum(len(d[0]) for d in doc_ids)
    model = build_model(p, tok, seed=p.seed).to(device)
    model.train()
    opt = _optimizer(model, p, device)
    amp_dtype = None
    if device.startswith("cuda"):
        amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    batches = _batches(doc_ids, p.seq_len, p.batch_size, p.seed)
    losses, epoch = [], 0
    t_train = time.time()
    bar = tqdm(range(p.steps), desc=f"train {p.name}", unit="step", disable=not progress, file=sys.stderr)
    for step in bar:
        epoch, batch, wts = next(batches)
        batch = batch.to(device, non_blocking=True)
        wts = wts[:, 1:].to(device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, p)
        with torch.autocast(device_type="cuda", dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = _weighted_loss(model, batch, wts)
        _update(model, opt, scaler, loss)
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", epoch=epoch)
    bar.close()
    train_s = time.time() - t_train
    tail = losses[-max(1, min(50, len(losses) // 5)):]
    record = dict(
        preset=p.name, preset_config={k: v for k, v in asdict(p).items() if k != "extra"},
        n_params=n_params(model), model_config=model.config.to_dict() if hasattr(model.config, "to_dict") else {},
        device=device if device == "cpu" else f"{device} ({torch.cuda.get_device_name()})",
        autocast=str(amp_dtype) if amp_dtype else None,
        data={name: corpus.sha256(name) for name in corpus.TRAIN_FILES + corpus.EVAL_FILES},
        tokenizer_sha256=corpus.sha256("tokenizer/tokenizer.json"),
        pretrain_documents=len(docs), pretrain_tokens_per_epoch=n_tokens,
        steps=p.steps, tokens_seen=p.steps * p.batch_size * p.seq_len, epochs_seen=epoch + 1,
        final_loss=sum(tail) / len(tail), final_loss_window=len(tail),
        loss_every_10=[round(x, 4) for x in losses[::10]],
        train_seconds=round(train_s, 1), versions=_versions(),
        command=_command(p.name, steps, overrides),
    )
    if p.threads and device == "cpu":
        record["cpu_threads"] = torch.get_num_threads()
    # evaluate exactly the weights that are saved: round to fp16 first
    model = model.to(dtype=torch.float16).to(dtype=torch.float32)
    record["eval_weights"] = "the saved fp16 checkpoint, computed in fp32"
    if evaluate_after:
        t_eval = time.time()
        record["eval"] = evaluate(model, tok, p, device)
        record["eval_seconds"] = round(time.time() - t_eval, 1)
    record["wall_seconds"] = round(time.time() - t0, 1)
    save(model, tok, out)
    results.write_json(out / "training_record.json", record, indent=2)
    try:
        plot_loss(losses, out / "loss_curve.png", f"{p.name}: {record['n_params'] / 1e6:.2f}M params, {p.steps} steps")
    except ImportError as err:  # matplotlib missing: the checkpoint and record are already saved
        print(f"loss plot skipped: {err}", file=sys.stderr)
    return record


def _command(preset: str, steps, overrides) -> str:
    return (f"python -m t4lib.models.tiny train --preset {preset}" + (f" --steps {steps}" if steps else "")
            + "".join(f" --set {k}={v}" for k, v in (overrides or {}).items()))


def _optimizer(model, p: Preset, device: str):
    decay = [q for n, q in model.named_parameters() if q.ndim >= 2]
    no_decay = [q for n, q in model.named_parameters() if q.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": p.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=p.lr, betas=(0.9, 0.95),
                             **({"fused": True} if device.startswith("cuda") else {}))


def _weighted_loss(model, batch, wts):
    logits = model(input_ids=batch[:, :-1]).logits
    nll = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                            batch[:, 1:].reshape(-1), reduction="none")
    return (nll * wts.reshape(-1)).sum() / wts.sum().clamp_min(1.0)


def _update(model, opt, scaler, loss):
    """One optimizer step: backward (through the fp16 GradScaler when there is one), clip at norm 1, step."""
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def train_streamed(p: Preset, out: Path, *, device: str, evaluate_after: bool = True, progress: bool = True,
                   command: str = "") -> dict:
    """Pretrain ``p`` on the procedural corpus generated while it trains (``p.workers`` processes), then
    evaluate the saved fp16 weights on the validation and test splits (:mod:`t4lib.models.open_eval`).
    Records the generator's tokens/s alone, the trainer's tokens/s and the time the GPU waited for data."""
    t0 = time.time()
    tok_dir = corpus.data_dir() / p.tokenizer
    tok = load_tokenizer(tok_dir)
    stream = packing.PackedStream(str(tok_dir), p.seed, p.seq_len, p.batch_size, p.prompt_weight,
                                  pseudo_words=p.pseudo_words)
    generator = packing.generator_rate(stream, p.workers, seconds=8.0 if device.startswith("cuda") else 2.0)
    model = build_model(p, tok, seed=p.seed).to(device)
    model.train()
    opt = _optimizer(model, p, device)
    amp_dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) \
        if device.startswith("cuda") else None
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    loss_fn = _weighted_loss
    compiled = False
    if p.compile and device.startswith("cuda"):
        loss_fn, compiled = torch.compile(_weighted_loss), True
    losses, wait_s = [], 0.0
    batches = iter(packing.loader(stream, p.workers))
    bar = tqdm(range(p.steps), desc=f"train {p.name}", unit="step", disable=not progress, file=sys.stderr)
    t_train = time.time()
    for step in bar:
        tw = time.perf_counter()
        batch, wts = next(batches)
        batch = batch.to(device, non_blocking=True)
        wts = wts.to(device, non_blocking=True)
        wait_s += time.perf_counter() - tw
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, p)
        with torch.autocast(device_type="cuda", dtype=amp_dtype, enabled=amp_dtype is not None):
            try:
                loss = loss_fn(model, batch, wts)
            except Exception as err:  # noqa: BLE001  (a compiler failure: train eagerly, say so in the record)
                if not compiled:
                    raise
                print(f"torch.compile failed ({type(err).__name__}: {err}); training eagerly", file=sys.stderr)
                loss_fn, compiled = _weighted_loss, False
                loss = loss_fn(model, batch, wts)
        _update(model, opt, scaler, loss)
        if step % 10 == 0 or step == p.steps - 1:
            losses.append((step, loss.item()))
            bar.set_postfix(loss=f"{losses[-1][1]:.3f}")
    bar.close()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    train_s = time.time() - t_train
    del batches
    tokens = p.steps * p.batch_size * p.seq_len
    tail = [v for _, v in losses[-max(1, min(20, len(losses) // 5)):]]
    import faker  # the corpus extra (optional dependency)
    record = dict(
        preset=p.name, preset_config={k: v for k, v in asdict(p).items() if k != "extra"},
        n_params=n_params(model), model_config=model.config.to_dict(),
        device=device if device == "cpu" else f"{device} ({torch.cuda.get_device_name()})",
        autocast=str(amp_dtype) if amp_dtype else None, compiled=compiled,
        corpus=dict(generator="t4lib.models.procedural", split="train", documents="generated while training, "
                    "never repeated", mix=procedural.MIX, pseudo_words=p.pseudo_words,
                    faker=faker.VERSION),
        tokenizer=p.tokenizer, tokenizer_sha256=corpus.sha256(f"{p.tokenizer}/tokenizer.json"),
        steps=p.steps, tokens_seen=tokens, final_loss=sum(tail) / len(tail),
        loss_every_10=[[s_, round(v, 4)] for s_, v in losses],
        train_seconds=round(train_s, 1), trainer_tokens_per_s=round(tokens / train_s),
        data_wait_seconds=round(wait_s, 2), generator_tokens_per_s=round(generator["tokens_per_s"]),
        generator_workers=p.workers, versions=_versions(), command=command,
        provenance=results.provenance(), date=results.now(),
    )
    model = model.to(dtype=torch.float16).to(dtype=torch.float32)
    record["eval_weights"] = "the saved fp16 checkpoint, computed in fp32"
    if evaluate_after:
        t_eval = time.time()
        record["eval"] = {split: open_eval.evaluate(model, tok, split, device, n=p.eval_n)
                          for split in ("validation", "test")}
        record["eval_seconds"] = round(time.time() - t_eval, 1)
    record["wall_seconds"] = round(time.time() - t0, 1)
    save(model, tok, out, tok_dir)
    results.write_json(out / "training_record.json", record, indent=2)
    try:
        plot_loss([v for _, v in losses], out / "loss_curve.png",
                  f"{p.name}: {record['n_params'] / 1e6:.1f}M params, {tokens / 1e6:.0f}M tokens (loss every 10 steps)")
    except ImportError as err:  # matplotlib missing: the checkpoint and record are already saved
        print(f"loss plot skipped: {err}", file=sys.stderr)
    return record


def save(model, tokenizer, out, tokenizer_source=None):
    """fp16 safetensors checkpoint + tokenizer in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = model.to("cpu", dtype=torch.float16)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    src = Path(tokenizer_source or tokenizer_dir()) / "tokenizer_config.json"
    if src.is_file():  # keep the portable (4.5x and 5.x) tokenizer config
        (out / "tokenizer_config.json").write_bytes(src.read_bytes())


def load_preset(preset: str, **kw):
    """(model, tokenizer) of a committed preset checkpoint; a clear
    FileNotFoundError naming the path and the command that builds it."""
    get_preset(preset)
    path = checkpoint_dir(preset)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no checkpoint for preset {preset!r} at {path}; train it with `{train_command(preset)}` "
            f"(or `{train_command(preset)} --out DIR` and copy DIR to {path})")
    return load(str(path), **kw)


def _without_examples(res: dict) -> dict:
    """An evaluation result as printed: per-example lists dropped, one level deep for split results."""
    return {k: _without_examples(v) if k in ("validation", "test") else v
            for k, v in res.items() if not k.endswith("_examples")}


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {v}")
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m t4lib.models.tiny", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="pretrain a preset and write checkpoint, record and plot")
    tr.add_argument("--preset", required=True, choices=sorted(PRESETS))
    tr.add_argument("--out", default=None, help="output directory (default data/models/<preset>)")
    tr.add_argument("--steps", type=_positive_int, default=None, help="override the preset's step count")
    tr.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a training field of the preset, e.g. --set batch_size=32 (repeatable)")
    tr.add_argument("--no-eval", action="store_true")
    ev = sub.add_parser("eval", help="evaluate a saved model and print the metrics")
    ev.add_argument("--model", required=True, help="path or preset name")
    ev.add_argument("--preset", default=None,
                    help="preset whose evaluation to run (default: --model when it names a preset, else tiny-cpu)")
    ev.add_argument("--device", default=None)
    ev.add_argument("--write-record", action="store_true",
                    help="store the result as 'eval' in the model directory's training_record.json")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        bad = [kv for kv in a.set if "=" not in kv]
        if bad:
            ap.error(f"--set expects KEY=VALUE, got {bad[0]!r}")
        overrides = dict(kv.split("=", 1) for kv in a.set)
        try:  # every value in its range before any work
            override_preset(get_preset(a.preset), overrides)
        except ValueError as e:
            ap.error(f"--set: {e}")
        rec = train(a.preset, a.out, steps=a.steps, device=a.device, evaluate_after=not a.no_eval,
                    overrides=overrides)
        show = {k: rec[k] for k in ("preset", "n_params", "steps", "final_loss", "train_seconds", "wall_seconds")}
        show.update({k: v for k, v in rec.get("eval", {}).items() if not isinstance(v, (dict, list))})
        print(json.dumps(show, indent=2))
        print(f"wrote {Path(a.out) if a.out else checkpoint_dir(a.preset)}")
    else:
        device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
        path = str(checkpoint_dir(a.model)) if a.model in PRESETS else a.model
        model, tok = load(path, dtype=torch.float32, device=device)
        t_eval = time.time()
        preset = get_preset(a.preset or (a.model if a.model in PRESETS else "tiny-cpu"))
        if preset.corpus == "procedural":  # as training evaluates it: the validation and test splits
            res = {split: open_eval.evaluate(model, tok, split, device, n=preset.eval_n)
                   for split in ("validation", "test")}
        else:
            res = evaluate(model, tok, preset, device)
        print(json.dumps(_without_examples(res), indent=2))
        rec_path = Path(path) / "training_record.json"
        if a.write_record:
            if not rec_path.is_file():
                raise FileNotFoundError(f"--write-record: no training record at {rec_path}")
            rec = json.loads(rec_path.read_text())
            rec.update(eval=res, eval_seconds=round(time.time() - t_eval, 1),
                       eval_weights="the saved fp16 checkpoint, computed in fp32",
                       eval_command=f"python -m t4lib.models.tiny eval --model {a.model} --preset {preset.name}")
            results.write_json(rec_path, rec, indent=2)
            print(f"updated {rec_path}")


if __name__ == "__main__":
    main()
