"""A small Qwen3.5 with its multi-token-prediction (MTP) block, trained on the project's input-grounded
copy/edit tasks, so that the qwen35 engine's MTP drafts can be measured on a model whose drafts get accepted.

A random model's MTP block drafts tokens nobody accepts; a real Qwen3.5 is too big for most tests. Copy and
edit tasks (``copy_train.jsonl``) are where a small model predicts two tokens ahead well: most of the answer
is already in the prompt. The model is transformers' ``Qwen3_5ForCausalLM`` (2 Gated DeltaNet + 2 gated
full-attention layers, GQA 4/2, DeltaNet 4 value over 2 key heads, tied embeddings) and the MTP block is
:class:`~.mtp_reference.Qwen35MTP`, trained jointly:

    loss = main next-token CE + 0.5 * MTP CE (row t predicts token t + 2)

both weighted per target token as in :mod:`t4lib.models.tiny` (prompt tokens 0.1, answer tokens 1). The MTP
reads the main model's final hidden states detached: the main model is moved by the MTP loss only through the
shared embedding and head.

Command line::

    python -m t4lib.models.qwen35.copy_model train [--out DIR] [--steps N]   # -> data/models/qwen35-copy

It writes ``model.gguf`` (qwen35 with its NextN block; Q8_0 matrices, F32 vectors and the small
``ssm_alpha``/``ssm_beta``), ``training_record.json`` and ``loss_curve.png``; the tokenizer is the
project's (``data/tokenizer``).

Evaluation, teacher forced on the held-out tasks (``copy_heldout.jsonl``) with the Q8_0-rounded weights the
file stores:

* ``copy_token_accuracy``: answer tokens the main model predicts exactly (as ``tiny.eval_copy``);
* ``mtp_token_accuracy``: answer tokens the MTP block predicts exactly from two back (row t -> token t + 2);
* ``both_right_fraction``: rows whose two targets (t + 1, t + 2) are both answer tokens and where both the
  main and the MTP prediction are right: about the acceptance of one-token MTP drafts;
* ``mtp_accuracy_given_main_right``: the same count over the rows whose main prediction is right.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from tqdm.auto import tqdm

from t4lib.core import results
from t4lib.models import corpus, schema
from t4lib.models.tiny import (
    _batches, _lr_at, _token_stream, _versions, copy_sequences, load_tokenizer, plot_loss,
)
from t4lib.models.qwen35.convert import hf_to_gguf
from t4lib.models.qwen35.mtp_reference import Qwen35MTP
from t4lib.quant.gguf import GGUFFile

__all__ = ["copy_config", "build", "train", "evaluate", "q8_round", "checkpoint_dir", "DIMS", "GGUF_TYPES",
           "MTP_WEIGHT", "PROMPT_WEIGHT", "STEPS", "LR"]

COMMAND = "python -m t4lib.models.qwen35.copy_model train"
# Sizes: every matrix's K (256, 512) is a multiple of 256, so every GGUF format the engine runs fits.
DIMS = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, full_attention_interval=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64)
# Q8_0 for every matrix kind gguf-py quantizes; the small ssm_alpha/ssm_beta (4 rows) stay F32.
GGUF_TYPES = {k: "Q8_0" for k in ("attn_qkv", "attn_gate", "ssm_out", "ffn_gate", "ffn_up", "ffn_down", "attn_q",
                                  "attn_k", "attn_v", "attn_output", "token_embd", "nextn.eh_proj")}
_F32_MATRICES = ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight")  # ssm_alpha, ssm_beta
MTP_WEIGHT = 0.5
PROMPT_WEIGHT = 0.1
STEPS = 640     # about 0.75 s a step on 2 CPU cores (measured): training takes about 8 minutes
# The same recipe at 640 steps on an H200 (fp32 weights; a sweep whose figures are not kept in results/),
# learning rates 3e-4 .. 8e-3: 3e-4 .. 7e-4 learned to copy (held-out
# main token accuracy 0.90-0.92, 7e-4 over two seeds); from 1e-3 up the main model stayed at 0.67-0.75. The MTP
# block reached 0.65-0.69 at every rate (a 3x rate for its parameters alone did not help) and 0.79 at 1600
# steps: it is short of steps, not of rate.
LR = 7e-4
WARMUP = 40
WEIGHT_DECAY = 0.1


def checkpoint_dir() -> Path:
    """Committed location: ``data/models/qwen35-copy``."""
    return corpus.data_dir() / "models" / "qwen35-copy"


def copy_config(tokenizer, dims: dict | None = None):
    """``Qwen3_5TextConfig`` of the copy model: :data:`DIMS` (``dims`` replaces some, for tests), the
    project tokenizer's vocabulary rounded up to 64 and its special ids, eager attention (the MTP block
    passes its own additive causal mask)."""
    from transformers import Qwen3_5TextConfig  # optional (train extra)

    d = {**DIMS, **(dims or {})}
    cfg = Qwen3_5TextConfig(
        vocab_size=-(-len(tokenizer) // 64) * 64, max_position_embeddings=1024, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}, **d)
    cfg._attn_implementation = "eager"
    return cfg


def build(cfg, seed: int = 0):
    """(``Qwen3_5ForCausalLM``, ``Qwen35MTP``), the MTP block initialised as transformers initialises the
    main model (normal 0.02 matrices, zero-centred norms at 0)."""
    import torch  # this module imports without torch, as the library does
    from transformers import Qwen3_5ForCausalLM  # optional (train extra)

    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg)
    mtp = Qwen35MTP(cfg)
    mtp.apply(model._init_weights)
    return model, mtp


def _forward(model, mtp, ids):
    """Main logits [B, T, V] (row t -> token t + 1) and MTP logits [B, T - 1, V] (row t -> token t + 2)."""
    import torch  # this module imports without torch, as the library does

    h = model.model(input_ids=ids).last_hidden_state
    T = ids.shape[1]
    # positions as [3, B, T - 1] (one row per rotary section): the form every transformers 5.x text rotary
    # takes (5.17's indexes three dimensions; 5.24's also takes [B, T])
    pos = torch.arange(T - 1, device=ids.device).expand(3, ids.shape[0], -1)
    out = mtp(ids[:, 1:], h[:, :-1].detach(), model.model.embed_tokens, model.model.rotary_emb, pos)
    return model.lm_head(h), model.lm_head(out)


def _weighted_ce(logits, targets, weights):
    import torch  # this module imports without torch, as the library does

    nll = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                            reduction="none")
    return (nll * weights.reshape(-1)).sum() / weights.sum().clamp_min(1.0)


def q8_round(model, mtp) -> None:
    """Round in place every matrix the GGUF stores as Q8_0 through gguf-py's Q8_0 (blocks of 32 along K), so
    evaluation sees the values the file holds. The converter only permutes whole rows, or column blocks of a
    head's width (a multiple of 32), so rounding in transformers' layout gives the same values."""
    import gguf  # optional (gguf extra)
    import torch  # this module imports without torch, as the library does

    qt = gguf.GGMLQuantizationType.Q8_0
    with torch.no_grad():
        for module in (model, mtp):
            for name, p in module.named_parameters():
                if p.ndim == 2 and not name.endswith(_F32_MATRICES):
                    a = p.detach().float().cpu().numpy()
                    p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(a, qt), qt)))


def evaluate(model, mtp, tokenizer, n: int = 300, batch_size: int = 32, progress=None) -> dict:
    """Teacher-forced figures on the first ``n`` held-out copy tasks (see the module docstring)."""
    import torch  # this module imports without torch, as the library does

    recs = corpus.load_jsonl("copy_heldout.jsonl")[:n]
    main_ok = main_n = mtp_ok = mtp_n = both = both_n = given_main = 0
    model.eval()
    mtp.eval()
    for i in range(0, len(recs), batch_size):
        chunk = recs[i:i + batch_size]
        seqs, spans = copy_sequences(tokenizer, chunk)
        ids = torch.full((len(seqs), max(map(len, seqs))), tokenizer.pad_token_id, dtype=torch.long)
        for j, s in enumerate(seqs):   # right padding: every model here is causal, real rows never see it
            ids[j, :len(s)] = torch.tensor(s)
        with torch.no_grad():
            main_logits, mtp_logits = _forward(model, mtp, ids)
        mp, tp = main_logits.argmax(-1), mtp_logits.argmax(-1)
        for j, (a, b) in enumerate(spans):
            main_ok += (mp[j, a - 1:b - 1] == ids[j, a:b]).sum().item()
            main_n += b - a
            mtp_ok += (tp[j, a - 2:b - 2] == ids[j, a:b]).sum().item()
            mtp_n += b - a
            # rows a - 1 .. b - 3: main predicts answer token t + 1, MTP answer token t + 2
            m_hit = mp[j, a - 1:b - 2] == ids[j, a:b - 1]
            d_hit = tp[j, a - 1:b - 2] == ids[j, a + 1:b]
            both += (m_hit & d_hit).sum().item()
            both_n += b - a - 1
            given_main += m_hit.sum().item()
        if progress is not None:
            progress.update(len(chunk))
    return dict(copy_token_accuracy=main_ok / max(1, main_n), mtp_token_accuracy=mtp_ok / max(1, mtp_n),
                both_right_fraction=both / max(1, both_n), mtp_accuracy_given_main_right=both / max(1, given_main),
                copy_answer_tokens=main_n, both_rows=both_n, copy_n=len(recs))


def _write_gguf(model, mtp, cfg, path: Path) -> None:
    """``model.gguf`` from the main and ``mtp.*`` tensors; a file without the NextN block is refused, since
    measuring its drafts is what the model is for."""
    hf_to_gguf({**model.state_dict(), **mtp.state_dict_with_prefix()}, cfg, path, types=GGUF_TYPES)
    f = GGUFFile(path)
    if not (int(f.key("nextn_predict_layers", 0) or 0) > 0 and any(".nextn." in n for n in f.tensors)):
        raise RuntimeError(f"{path}: the qwen35 GGUF writer left out the MTP (NextN) block")


def train(out=None, steps: int = STEPS, seq_len: int = 256, batch_size: int = 8, lr: float = LR, seed: int = 0,
          progress: bool = True, dims: dict | None = None, eval_n: int = 300) -> dict:
    """Train the model and its MTP block from scratch on ``copy_train.jsonl``, evaluate them with their
    Q8_0-rounded weights, and write ``model.gguf``, ``training_record.json`` and ``loss_curve.png`` into
    ``out`` (default :func:`checkpoint_dir`). ``dims`` and ``eval_n`` shrink the run for tests. Returns the
    record."""
    import torch  # this module imports without torch, as the library does

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    out = Path(out) if out is not None else checkpoint_dir()
    torch.set_num_threads(2)
    t0 = time.time()
    tok = load_tokenizer()
    cfg = copy_config(tok, dims)
    pairs = [(p, c + schema.EOS) for p, c in map(corpus.copy_doc, corpus.load_jsonl("copy_train.jsonl"))]
    docs = _token_stream(tok, pairs, PROMPT_WEIGHT)
    model, mtp = build(cfg, seed)
    model.train()
    mtp.train()
    params = dict(model.named_parameters())
    params.update({f"mtp.{n}": q for n, q in mtp.named_parameters()})   # the tied head appears once
    opt = torch.optim.AdamW([{"params": [q for q in params.values() if q.ndim >= 2], "weight_decay": WEIGHT_DECAY},
                             {"params": [q for q in params.values() if q.ndim < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    sched = SimpleNamespace(lr=lr, warmup=min(WARMUP, max(1, steps // 10)), steps=steps)
    batches = _batches(docs, seq_len, batch_size, seed)
    main_losses, mtp_losses, epoch = [], [], 0
    t_train = time.time()
    bar = tqdm(range(steps), desc="train qwen35-copy", unit="step", disable=not progress, file=sys.stderr)
    for step in bar:
        epoch, batch, wts = next(batches)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, sched)
        main_logits, mtp_logits = _forward(model, mtp, batch[:, :-1])
        main_loss = _weighted_ce(main_logits, batch[:, 1:], wts[:, 1:])
        mtp_loss = _weighted_ce(mtp_logits, batch[:, 2:], wts[:, 2:])
        opt.zero_grad(set_to_none=True)
        (main_loss + MTP_WEIGHT * mtp_loss).backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        main_losses.append(main_loss.item())
        mtp_losses.append(mtp_loss.item())
        if step % 10 == 0:
            bar.set_postfix(main=f"{main_losses[-1]:.3f}", mtp=f"{mtp_losses[-1]:.3f}", epoch=epoch)
    bar.close()
    train_s = time.time() - t_train
    w = max(1, min(50, steps // 5))
    q8_round(model, mtp)
    t_eval = time.time()
    ev = evaluate(model, mtp, tok, n=eval_n)
    out.mkdir(parents=True, exist_ok=True)
    _write_gguf(model, mtp, cfg, out / "model.gguf")
    d = {**DIMS, **(dims or {})}
    record = dict(
        model="qwen35-copy", dims=d, vocab_size=cfg.vocab_size, model_config=cfg.to_dict(),
        n_params=sum(q.numel() for q in model.parameters()), n_params_mtp=sum(q.numel() for q in mtp.parameters()),
        data={name: corpus.sha256(name) for name in ("copy_train.jsonl", "copy_heldout.jsonl")},
        tokenizer_sha256=corpus.sha256("tokenizer/tokenizer.json"), train_documents=len(docs),
        train_tokens_per_epoch=sum(len(x[0]) for x in docs),
        steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr, warmup=sched.warmup, weight_decay=WEIGHT_DECAY,
        schedule="linear warmup, cosine to 0.1 lr (tiny._lr_at)", prompt_weight=PROMPT_WEIGHT, mtp_weight=MTP_WEIGHT,
        mtp_hidden="main final hidden states, detached", seed=seed, device="cpu", cpu_threads=torch.get_num_threads(),
        tokens_seen=steps * batch_size * seq_len, epochs_seen=epoch + 1,
        final_main_loss=sum(main_losses[-w:]) / w, final_mtp_loss=sum(mtp_losses[-w:]) / w, final_loss_window=w,
        main_loss_every_10=[round(x, 4) for x in main_losses[::10]],
        mtp_loss_every_10=[round(x, 4) for x in mtp_losses[::10]],
        train_seconds=round(train_s, 1), eval=ev, eval_seconds=round(time.time() - t_eval, 1),
        eval_weights="Q8_0-rounded matrices as stored in model.gguf, computed in fp32 (transformers, eager)",
        gguf="model.gguf", gguf_types=GGUF_TYPES, gguf_bytes=(out / "model.gguf").stat().st_size,
        wall_seconds=round(time.time() - t0, 1), versions=_versions(),
        command=COMMAND + (f" --steps {steps}" if steps != STEPS else ""),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    )
    results.write_json(out / "training_record.json", record, indent=2)
    try:
        plot_loss({"main (t + 1)": main_losses, "MTP (t + 2)": mtp_losses}, out / "loss_curve.png",
              f"qwen35-copy: {(record['n_params'] + record['n_params_mtp']) / 1e6:.2f}M params, {steps} steps")
    except ImportError as err:  # matplotlib missing: the GGUF and record are already written
        print(f"loss plot skipped: {err}", file=sys.stderr)
    return record


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m t4lib.models.qwen35.copy_model", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="train the model and its MTP block; write model.gguf, record and plot")
    tr.add_argument("--out", default=None, help="output directory (default data/models/qwen35-copy)")
    tr.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    a = ap.parse_args(argv)
    rec = train(a.out, steps=a.steps)
    show = {k: rec[k] for k in ("steps", "train_seconds", "final_main_loss", "final_mtp_loss", "gguf_bytes")}
    show.update({k: v for k, v in rec["eval"].items() if isinstance(v, float)})
    print(json.dumps(show, indent=2))
    print(f"wrote {Path(a.out) if a.out else checkpoint_dir()}")


if __name__ == "__main__":
    main()
