"""Supervised fine-tuning through TRL's ``SFTTrainer``, with a PEFT LoRA adapter
(on an fp16 base or on a frozen W4A16 base of :class:`t4lib.quant.QuantLinear`
layers) or full fine-tuning.

The loss is completion-only: TRL masks the prompt tokens of a prompt/completion
data set (labels ``-100``), so only the assistant turn is learned
(:func:`label_mask_example` shows it on one example).

LoRA on W4A16: ``QuantLinear`` has a backward pass in its input and no weight
parameter, and PEFT maps it to its own ``lora.Linear`` through
``LoraConfig._register_custom_module`` (PEFT's documented hook for layer types
it does not know), so ``y = base(x) + B A x * alpha / r`` trains A and B while
the 4-bit weight stays frozen.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from torch import nn

from t4lib.core import results
from t4lib.core.build import cache_dir
from t4lib.models import load
from t4lib.quant import quantize_model
from t4lib.quant.linear import QuantLinear
from t4lib.train import evaluate as ev
from t4lib.train.data import (REPLAY_SOURCES, check_prompt_completion, check_traces, load_traces, traces_dataset,
                              with_replay)
from t4lib.train.fused_adamw import FusedAdamWLinear, replace_linears, restore_linears

# PEFT warns on every layer type it does not know, even when a custom module is registered for it.
warnings.filterwarnings("ignore", message=r"Unsupported layer type .*QuantLinear")
# TRL and PEFT still call the pre-5.x name; the rename is theirs to follow, not a user's
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)

#: the seven projections of a Qwen2/Llama decoder layer
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BASES = ("fp16", "w4a16", "fp32")
METHODS = ("lora", "full")
# "adamw": the Trainer's own optimizer (fp16 autocast with its dynamic loss scaling on CUDA, clipping at
# max_grad_norm), unless a static loss_scale is set.
# "fused_linear" (method "full"): the decoder projections become t4lib.train.FusedAdamWLinear, which take their
# AdamW step inside backward (t4lib.ops.fused_adamw); the Trainer's optimizer keeps the other parameters; always
# under a static loss_scale, never clipped. On tiny-gpu (H200, notebook 01) it takes less time per step than
# "adamw" but trains worse, with or without a loss scale; "adamw" without clipping trains just as badly:
# the recipe needs the global-norm clipping that a fused update, applied before the global norm exists, cannot do.
OPTIMIZERS = ("adamw", "fused_linear")
# The static loss scale of fused_linear when none is given. The fused layers update inside backward, so an
# overflowed step cannot be skipped and the scale cannot back off as the Trainer's GradScaler does (it starts at
# 2^16): an overflow is an error (train). 2^10 moves the fp16 activation gradients ten binades away from
# fp16's underflow (6e-8; below 6e-5 they lose precision) and keeps gradients up to 64 (65504 / 1024) finite.
FUSED_LOSS_SCALE = 1024.0


def load_base(model_id: str, base: str = "fp16", device=None):
    """``(model, tokenizer)``: ``base="fp16"`` the checkpoint in fp16; ``"w4a16"`` its Linear
    layers (lm_head excepted) quantized to W4A16 (RTN, group 128); ``"fp32"`` for full fine-tuning
    or CPU."""
    if base not in BASES:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    model, tok = load(model_id, dtype=torch.float32 if base == "fp32" else torch.float16, device=device)
    if base == "w4a16":
        quantize_model(model)
    return model, tok


def lora_config(model, *, r: int = 16, alpha: int = 32, dropout: float = 0.0,
                targets: tuple[str, ...] = PROJECTIONS):
    """A ``peft.LoraConfig`` on ``targets``, with QuantLinear registered as a LoRA-able layer.

    ValueError naming any target that matches no Linear/QuantLinear module of ``model``."""
    from peft import LoraConfig  # optional: peft (the train extra)
    from peft.tuners.lora.layer import Linear as LoraLinear  # optional: peft (the train extra)

    if not isinstance(r, int) or r < 1:
        raise ValueError(f"r must be a positive int, got {r!r}")
    if isinstance(targets, str) or not targets:
        raise ValueError(f"targets must be a non-empty sequence of module names, got {targets!r}")
    leaves = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, (nn.Linear, QuantLinear))}
    missing = [t for t in targets if t not in leaves]
    if missing:
        raise ValueError(f"LoRA targets {missing} name no Linear/QuantLinear module of the model "
                         f"(linear modules: {sorted(leaves)})")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                     bias="none", task_type="CAUSAL_LM")
    cfg._register_custom_module({QuantLinear: LoraLinear})
    return cfg


@dataclass
class SFTSettings:
    """What one run trains (the TRL/Trainer arguments it maps to in :func:`sft_config`)."""

    method: str = "lora"          # "lora" or "full"
    epochs: float = 3.0
    max_steps: int = -1           # > 0 overrides epochs
    batch_size: int = 32
    lr: float = 1e-3
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_length: int = 512
    seed: int = 0
    logging_steps: int = 5
    r: int = 16
    alpha: int = 32
    targets: tuple = PROJECTIONS
    optimizer: str = "adamw"      # see OPTIMIZERS
    # Static loss scale (a power of two): fp16 autocast without the Trainer's GradScaler and without clipping,
    # the loss times loss_scale before backward, AdamW's eps times loss_scale (adam_eps). None: FUSED_LOSS_SCALE
    # with fused_linear; with adamw, the Trainer's own fp16 (GradScaler, clipping). adamw with 1 runs the fused
    # path's conditions without the fused layers (the SFT fused-optimizer lab).
    loss_scale: float | None = None
    extra: dict = field(default_factory=dict)   # more SFTConfig keyword arguments

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name, low in (("batch_size", 1), ("max_length", 8), ("logging_steps", 1), ("r", 1), ("alpha", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if not isinstance(self.max_steps, int) or isinstance(self.max_steps, bool):
            raise ValueError(f"max_steps must be an int (> 0 overrides epochs), got {self.max_steps!r}")
        if self.max_steps <= 0 and not (_is_real(self.epochs) and 0 < self.epochs < math.inf):
            raise ValueError(f"epochs must be a finite number > 0 (or max_steps > 0), got {self.epochs!r}")
        if not (_is_real(self.lr) and 0 < self.lr < math.inf):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        for name in ("weight_decay", "warmup_ratio"):
            v = getattr(self, name)
            if not (_is_real(v) and 0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.optimizer == "fused_linear":
            if self.method != "full":
                raise ValueError(f"optimizer='fused_linear' updates full weights: it needs method='full', "
                                 f"got method={self.method!r}")
            # The fused layers update inside backward: no micro-batches to accumulate, no global norm to clip.
            if self.extra.get("gradient_accumulation_steps", 1) != 1:
                raise ValueError("optimizer='fused_linear' cannot accumulate gradients: gradient_accumulation_steps "
                                 f"must be 1, got {self.extra['gradient_accumulation_steps']!r}")
            if self.extra.get("max_grad_norm"):
                raise ValueError("optimizer='fused_linear' cannot clip by global norm (the fused layers never hold "
                                 f"their gradient): leave max_grad_norm unset, got {self.extra['max_grad_norm']!r}")
            if self.loss_scale is None:
                self.loss_scale = FUSED_LOSS_SCALE
        if self.loss_scale is not None:
            if not is_power_of_two(self.loss_scale):
                raise ValueError(f"loss_scale must be a power of two > 0 (so that scaling the loss and AdamW's eps by "
                                 f"it is exact), got {self.loss_scale!r}")
            self.loss_scale = float(self.loss_scale)
            if self.method != "full":
                raise ValueError(f"a static loss_scale trains fp32 master weights under fp16 autocast: it needs "
                                 f"method='full', got method={self.method!r}")
            if self.extra.get("max_grad_norm"):
                raise ValueError("a static loss_scale runs without clipping (the Trainer would clip the scaled "
                                 f"gradient): leave max_grad_norm unset, got {self.extra['max_grad_norm']!r}")


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def is_power_of_two(x) -> bool:
    """``x`` is a real number 2^k (k any integer: 0.5, 1, 1024)."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
            and math.frexp(x)[0] == 0.5)


def trainer_setting(extra: dict, name: str):
    """An SFTConfig setting of a run whose ``SFTSettings.extra`` is ``extra``: ``extra[name]``, else SFTConfig's
    default."""
    from trl import SFTConfig  # optional: trl (the train extra)

    return extra.get(name, next(f.default for f in fields(SFTConfig) if f.name == name))


def adam_eps(s: SFTSettings) -> float:
    """AdamW's eps for the run: the Trainer's ``adam_epsilon``, times ``s.loss_scale`` when set, for the Trainer's
    optimizer and the fused layers alike. With gradients S g the moments are S m and S^2 v, so the step
    lr m / (sqrt(v) + eps) is unchanged when eps is S eps too (exact for S a power of two; weight decay is
    decoupled from the gradient)."""
    eps = trainer_setting(s.extra, "adam_epsilon")
    return eps * s.loss_scale if s.loss_scale is not None else eps


def adam_betas(s: SFTSettings) -> tuple[float, float]:
    """AdamW's betas for the run: the Trainer's ``adam_beta1``/``adam_beta2``, given to the fused layers too, so
    both optimizers take the same steps."""
    return float(trainer_setting(s.extra, "adam_beta1")), float(trainer_setting(s.extra, "adam_beta2"))


def sft_config(s: SFTSettings, output_dir: str, device_type: str):
    from trl import SFTConfig  # optional: trl (the train extra)

    cuda = device_type == "cuda"
    static = s.loss_scale is not None
    no_clip = {"max_grad_norm": 0.0} if static and "max_grad_norm" not in s.extra else {}
    extra = {**s.extra, "adam_epsilon": adam_eps(s)} if static else s.extra
    # transformers 5.x renames gradient_checkpointing (TRL turns it on by default); the old name warns there
    names = {f.name for f in fields(SFTConfig)}
    no_ckpt = {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}
    return SFTConfig(
        output_dir=output_dir, num_train_epochs=s.epochs, max_steps=s.max_steps,
        per_device_train_batch_size=s.batch_size, learning_rate=s.lr, lr_scheduler_type="cosine",
        warmup_steps=float(s.warmup_ratio),  # a float in [0, 1): a ratio of the steps
        weight_decay=s.weight_decay, max_length=s.max_length,
        completion_only_loss=True, packing=False, **no_ckpt,
        # fp16 autocast (what a T4 has) with the Trainer's dynamic loss scaling; the fused layers would see its
        # scaled gradient before any unscaling or skipped step, so with a static loss_scale train() supplies the
        # autocast, the trainer (make_trainer) scales the loss, AdamW's eps is scaled alike and nothing clips
        fp16=cuda and not static, bf16=False, use_cpu=not cuda, **no_clip,
        logging_steps=s.logging_steps, save_strategy="no", report_to="none", seed=s.seed,
        data_seed=s.seed, dataloader_num_workers=0, **extra)


@dataclass
class SFTResult:
    model: object                  # the trained model (PeftModel for LoRA)
    trainer: object
    losses: list                   # [(step, loss)] as logged by the Trainer
    train_seconds: float
    trainable_params: int
    settings: dict


def prepare(model, s: SFTSettings, tokenizer=None):
    """Wrap ``model`` for ``s.method``: a PEFT LoRA model, or the model itself (all parameters trainable)."""
    if s.method == "full":
        if any(isinstance(m, QuantLinear) for m in model.modules()):
            raise ValueError("method='full' needs an fp16/fp32 model: a W4A16 base has no trainable weights "
                             "(use method='lora')")
        for p in model.parameters():
            p.requires_grad_(True)
        if s.optimizer == "fused_linear":
            replace_linears(model, names=tuple(s.targets), lr=s.lr, weight_decay=s.weight_decay, eps=adam_eps(s),
                            betas=adam_betas(s))
        return model
    from peft import get_peft_model  # optional: peft (the train extra)
    return get_peft_model(model, lora_config(model, r=s.r, alpha=s.alpha, targets=tuple(s.targets)))


def make_trainer(model, tokenizer, dataset, s: SFTSettings, output_dir: str):
    """An ``SFTTrainer`` for ``model`` (already :func:`prepare`-d) on a prompt/completion data set."""
    from trl import SFTTrainer  # optional: trl (the train extra)

    check_prompt_completion(dataset)
    dev = next(model.parameters()).device.type
    torch.manual_seed(s.seed)
    keep = [c for c in dataset.column_names if c in ("prompt", "completion")]
    cls = SFTTrainer if s.loss_scale is None else _static_loss_scale_trainer(s.loss_scale)
    return cls(model=model, args=sft_config(s, output_dir, dev),
               train_dataset=dataset.select_columns(keep), processing_class=tokenizer,
               callbacks=[_fused_layers_follow_schedule()] if s.optimizer == "fused_linear" else None)


def _static_loss_scale_trainer(loss_scale: float):
    """An ``SFTTrainer`` class whose training loss is scaled by ``loss_scale`` in backward only: the loss keeps its
    value (what the Trainer logs) and every gradient is ``loss_scale`` times the true one (the optimizers take
    eps times it: :func:`adam_eps`); the logged ``grad_norm`` is unscaled. Each step checks that its loss is finite
    (one host sync): an fp16 overflow in the previous backward has written inf/NaN into the weights by then, since
    neither the fused layers nor a static scale can skip a step. :func:`train` checks the weights after the last
    step."""
    from trl import SFTTrainer  # optional: trl (the train extra)

    class ScaleInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, loss):
            return loss.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * loss_scale

    class StaticLossScaleSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            out = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                       num_items_in_batch=num_items_in_batch)
            loss = out[0] if return_outputs else out
            if not (model.training and loss.requires_grad):
                return out
            if not torch.isfinite(loss.detach()):
                raise _overflow_error(model, loss_scale, self.state.global_step, loss_step=True)
            loss = ScaleInBackward.apply(loss)
            return (loss, *out[1:]) if return_outputs else loss

        def log(self, logs, *args, **kw):
            if logs.get("grad_norm") is not None:   # the norm of the scaled gradients of the Trainer's parameters
                logs = {**logs, "grad_norm": logs["grad_norm"] / loss_scale}
            return super().log(logs, *args, **kw)

    return StaticLossScaleSFTTrainer


def _nonfinite_weights(model) -> list[str]:
    return [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]


def _overflow_error(model, loss_scale: float, step: int, loss_step: bool = False) -> FloatingPointError | None:
    """The error for a run under a static loss scale whose weights (or, ``loss_step``, whose loss of step
    ``step + 1``) are not finite after ``step`` steps; None when everything is finite."""
    bad = _nonfinite_weights(model)
    if bad:
        return FloatingPointError(
            f"fp16 overflow under the static loss_scale={loss_scale:g}: the update of step {step} wrote inf/NaN "
            f"into {len(bad)} weight tensors (first: {bad[0]}). A static scale does not skip an overflowed step as "
            f"the Trainer's GradScaler does (the fused layers update inside backward): train again with a lower "
            f"loss_scale (--loss-scale), e.g. {loss_scale / 16:g}")
    if loss_step:
        return FloatingPointError(
            f"the loss of step {step + 1} is not finite while every weight is: the fp16 forward overflowed "
            f"(loss_scale={loss_scale:g} scales backward only, so a lower loss_scale does not help here)")
    return None


def _fused_layers_follow_schedule():
    """A callback that, before each step, gives every FusedAdamWLinear the learning rate the Trainer's optimizer
    takes in that step (the fused update runs inside backward, before the scheduler moves on). A rate of exactly
    0 (the first warm-up step) is given as the smallest positive fp32: the moments advance as torch.optim.AdamW's
    would and a weight moves by at most that much."""
    from transformers import TrainerCallback  # optional: transformers (the train extra)

    class FusedLayersFollowSchedule(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, lr_scheduler=None, **kw):
            lr = max(float(lr_scheduler.get_last_lr()[0]), float(torch.finfo(torch.float32).tiny))
            for m in model.modules():
                if isinstance(m, FusedAdamWLinear):
                    m.lr = lr

    return FusedLayersFollowSchedule()


def train(model, tokenizer, dataset, s: SFTSettings, output_dir: str) -> SFTResult:
    """Run SFT (progress bar from the Trainer) and return the model and its loss curve."""
    torch.manual_seed(s.seed)
    model = prepare(model, s, tokenizer)
    trainer = make_trainer(model, tokenizer, dataset, s, output_dir)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    fused = s.optimizer == "fused_linear"
    static = s.loss_scale is not None
    if static:  # fp16 autocast without the Trainer's GradScaler (see sft_config); removed after training
        model.forward = torch.autocast(next(model.parameters()).device.type, dtype=torch.float16)(model.forward)
    t0 = time.perf_counter()
    try:
        trainer.train()
    finally:
        if static:
            del model.forward
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if static:  # each step checked its loss (the previous update); this checks the last update
        err = _overflow_error(model, s.loss_scale, trainer.state.global_step)
        if err:
            raise err
    losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
    # The Trainer wrapped forward in fp16 autocast (CUDA): without the wrapper, generation after
    # training runs in the model's own dtype, as the static cache it allocates expects.
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    if fused:  # back to nn.Linear (the fp32 master weights) for evaluation, generation and saving
        restore_linears(model)
    model.eval()
    return SFTResult(model=model, trainer=trainer, losses=losses, train_seconds=dt, trainable_params=n_train,
                     settings={k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(s).items()})


def label_mask_example(trainer, index: int = 0) -> dict:
    """The collated labels of one training example: ``{tokens, masked}`` where ``masked[i]``
    says token ``i`` carries no loss (label ``-100``), and where the completion starts."""
    ex = trainer.train_dataset[index]
    batch = trainer.data_collator([ex])
    ids = batch["input_ids"][0].tolist()
    labels = batch["labels"][0].tolist()
    tok = trainer.processing_class
    masked = [lab == -100 for lab in labels]
    return dict(tokens=[tok.decode([i]) for i in ids], masked=masked,
                completion_start=masked.index(False) if False in masked else None)


def checkpoint_dir(model_id: str) -> Path:
    """Where a fine-tuned copy of ``model_id`` is saved for the notebooks after it (the GRPO notebook
    starts from it): the user cache beside the kernel libraries, not ``data/models``, whose committed
    checkpoints have a size budget."""
    return cache_dir() / "models" / f"{Path(str(model_id)).name}-sft"


def merged_model(model):
    """A plain HF model with the adapter folded in (fp16 LoRA), or the model itself (full FT)."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model


# ----------------------------------------------------------------------------- one experiment

#: evaluation sets: name -> (source, load_eval_records keyword arguments)
EVAL_SETS = {
    "heldout_1_2": ("math_heldout", dict(max_steps=2)),
    "heldout_3_4": ("math_heldout", dict(min_steps=3)),
    "honesty_answerable": ("honesty_answerable", {}),
    # the procedural corpus's held-out productions and pools (small-gpu): choose on validation, report test
    "open_validation_1_2": ("open_validation", dict(max_steps=2)),
    "open_test_1_2": ("open_test", dict(max_steps=2)),
    "open_test_3_4": ("open_test", dict(min_steps=3)),
}


def evaluate_sets(model, tok, sets=tuple(EVAL_SETS), fmt="tags", n=None, batch_size=128,
                  max_new_tokens=176, progress=True, keep_rows=False) -> dict:
    """``{set: summary}`` of :func:`t4lib.train.evaluate.evaluate_model` on named evaluation sets.
    ``keep_rows``: each summary also keeps every scored row (``rows``: id, structure, steps, output, verdicts),
    for reading the failures of one structure."""
    out = {}
    for name in sets:
        if name not in EVAL_SETS:
            raise ValueError(f"eval set must be one of {sorted(EVAL_SETS)}, got {name!r}")
        src, kw = EVAL_SETS[name]
        recs = ev.load_eval_records(src, n=n, **kw)
        summ, rows = ev.evaluate_model(model, tok, recs, fmt, batch_size=batch_size, progress=progress,
                                       max_new_tokens=max_new_tokens if fmt == "tags" else 48)
        summ["examples"] = [dict(id=r["id"], output=r["output"], correct=r["correct"],
                                 schema_valid=r["schema_valid"]) for r in rows[:3]]
        if keep_rows:
            summ["rows"] = [{k: r[k] for k in ("id", "structure", "n_steps", "schema_valid", "correct", "output")}
                            for r in rows]
        out[name] = summ
    return out


def run(model_id: str = "tiny-gpu", *, base: str = "fp16", settings: SFTSettings | None = None,
        device: str | None = None, output_dir: str = "/tmp/t4lib_sft", eval_sets=tuple(EVAL_SETS),
        eval_n: int | None = None, before: bool = False, save_to: str | None = None,
        train_records: list[dict] | None = None, progress: bool = True, replay: int = 0,
        replay_source: str = "math_train", keep_rows: bool = False) -> dict:
    """Load ``model_id`` on ``base``, SFT it on the traces, evaluate, optionally save; a JSON-able record.

    ``before``: also evaluate the untouched base (tag and plain formats). ``save_to``: the merged
    fp16 checkpoint (fp16 LoRA, full FT) or the adapter (LoRA on W4A16) with the tokenizer. ``replay``:
    that many plain-format problems (:func:`t4lib.train.data.replay_dataset`, from ``replay_source``) mixed into
    the traces. ``keep_rows``: the after-SFT evaluation keeps every output (:func:`evaluate_sets`)."""
    s = settings or SFTSettings()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if s.method == "full" and base != "fp32":
        raise ValueError(f"method='full' trains fp32 master weights: pass base='fp32', got {base!r}")
    model, tok = load_base(model_id, base, device=device)
    rec = dict(model=model_id, base=base, device=device, settings=None)
    if device == "cuda":
        rec["device_name"] = torch.cuda.get_device_name()
    if before:
        rec["before"] = {fmt: evaluate_sets(model, tok, eval_sets, fmt, n=eval_n, progress=progress)
                         for fmt in ("plain", "tags")}
    ds, report = traces_dataset(tok, train_records, max_length=s.max_length)
    rec["data"] = report.as_dict()
    if replay:
        ds = with_replay(ds, replay, s.seed, replay_source)
        rec["data"].update(replay=replay, replay_source=replay_source)
    res = train(model, tok, ds, s, output_dir)
    rec.update(settings=res.settings, losses=res.losses, train_seconds=res.train_seconds,
               trainable_params=res.trainable_params)
    rec["after"] = evaluate_sets(res.model, tok, eval_sets, "tags", n=eval_n, progress=progress, keep_rows=keep_rows)
    if save_to:
        m = res.model
        if base == "w4a16" or any(isinstance(x, QuantLinear) for x in m.modules()):
            m.save_pretrained(save_to)          # the adapter; the base is tiny-gpu quantized by load_base
        else:
            m = merged_model(m).to(torch.float16)
            m.save_pretrained(save_to)
        tok.save_pretrained(save_to)
        rec["saved_to"] = str(save_to)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description="SFT of a local model on the certified traces (TRL + PEFT)")
    ap.add_argument("--model", default="tiny-gpu")
    ap.add_argument("--base", default="fp16", choices=BASES)
    ap.add_argument("--method", default="lora", choices=METHODS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--before", action="store_true")
    ap.add_argument("--eval-n", type=int, default=None)
    ap.add_argument("--save", default=None)
    ap.add_argument("--eval-sets", default=",".join(EVAL_SETS))
    ap.add_argument("--eval-only", action="store_true", help="evaluate the base (plain and tag formats) only")
    ap.add_argument("--replay", type=int, default=0, help="plain-format math problems mixed into the traces")
    ap.add_argument("--replay-from", default="math_train", choices=REPLAY_SOURCES,
                    help="where --replay's problems come from: math_train.jsonl (the committed corpus's models) or "
                         "the procedural generator (small-gpu's corpus)")
    ap.add_argument("--traces", default="traces.jsonl",
                    help="the trace file in data/: traces.jsonl (800, the train templates), traces_wide.jsonl "
                         "(1600, eight phrasings per structure), open_traces.jsonl (4000, small-gpu's corpus); or "
                         "procedural:N, N certified traces generated from small-gpu's training grammar (the first "
                         "4000 are open_traces.jsonl)")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--neftune", type=float, default=None,
                    help="NEFTune noise alpha (uniform noise on the input embeddings while training; TRL's "
                         "neftune_noise_alpha)")
    ap.add_argument("--keep-outputs", action="store_true", help="record every after-SFT output and verdict")
    ap.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                    help="fused_linear (with --method full): the decoder projections take their AdamW step inside "
                         "backward (t4lib.train.FusedAdamWLinear), under a static loss scale (--loss-scale), no "
                         "clipping. Less time per step, but on tiny-gpu it trains worse than adamw, as adamw does "
                         "without clipping (--max-grad-norm 0; notebook 01)")
    ap.add_argument("--loss-scale", type=float, default=None,
                    help="static loss scale, a power of two: fp16 autocast without the Trainer's GradScaler and "
                         "without clipping, the loss times it before backward and AdamW's eps times it (the same "
                         "steps); an fp16 overflow stops training with an error. Default: "
                         f"{FUSED_LOSS_SCALE:g} with --optimizer fused_linear; unset with adamw keeps the Trainer's "
                         "GradScaler and clipping at 1.0; --optimizer adamw --loss-scale 1 trains under the fused "
                         "path's conditions without the fused layers")
    ap.add_argument("--max-grad-norm", type=float, default=None,
                    help="the Trainer's global-norm clipping (its default 1.0; 0 turns it off). The fused layers "
                         "cannot clip: with --optimizer fused_linear only 0 is accepted")
    ap.add_argument("--adam-beta2", type=float, default=None,
                    help="AdamW's beta2 for the Trainer's optimizer and the fused layers alike (default the "
                         "Trainer's 0.999). Without clipping a lower one (0.95) forgets the large gradients of the "
                         "first steps sooner")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    _check_args(ap, a)
    if a.adam_beta2 is not None and not 0 <= a.adam_beta2 < 1:
        ap.error(f"--adam-beta2 must be in [0, 1), got {a.adam_beta2:g}")
    if a.neftune is not None and not (math.isfinite(a.neftune) and a.neftune > 0):
        ap.error(f"--neftune must be > 0 and finite, got {a.neftune}")
    if a.max_grad_norm is not None and not a.max_grad_norm >= 0:
        ap.error(f"--max-grad-norm must be >= 0 (0: no clipping), got {a.max_grad_norm:g}")
    if a.loss_scale is not None and not is_power_of_two(a.loss_scale):
        ap.error(f"--loss-scale must be a power of two > 0, got {a.loss_scale:g}")
    try:
        s = SFTSettings(method=a.method, seed=a.seed, lr=a.lr, epochs=a.epochs, batch_size=a.batch_size, r=a.r,
                        alpha=2 * a.r, weight_decay=a.weight_decay, optimizer=a.optimizer, loss_scale=a.loss_scale,
                        extra={**({} if a.neftune is None else {"neftune_noise_alpha": a.neftune}),
                               **({} if a.max_grad_norm is None else {"max_grad_norm": a.max_grad_norm}),
                               **({} if a.adam_beta2 is None else {"adam_beta2": a.adam_beta2})})
    except ValueError as e:  # a combination of options no run can take: said before any model is loaded
        ap.error(str(e))
    sets = a.eval_sets
    if a.eval_only:
        model, tok = load_base(a.model, a.base, device="cuda" if torch.cuda.is_available() else "cpu")
        rec = dict(model=a.model, base=a.base, before={fmt: evaluate_sets(model, tok, sets, fmt, n=a.eval_n)
                                                       for fmt in ("plain", "tags")})
        results.write_json(a.out, rec, default=str)
        return 0
    rec = run(a.model, base=a.base, settings=s, before=a.before, eval_n=a.eval_n, save_to=a.save,
              eval_sets=sets, output_dir=f"/tmp/t4lib_sft_{a.base}_{a.method}_{a.seed}", replay=a.replay,
              replay_source=a.replay_from, train_records=load_traces(a.traces), keep_rows=a.keep_outputs)
    rec["data"]["traces"] = a.traces
    results.write_json(a.out, rec, default=str)
    a_ = rec["after"].get("heldout_1_2", {}).get("overall", {})
    loss = f"{rec['losses'][-1][1]:.4f}" if rec["losses"] else "not logged (fewer steps than logging_steps)"
    print(f"{a.base}/{a.method}/seed{a.seed}: final loss {loss}, heldout_1_2 "
          f"schema {a_.get('schema_valid', {}).get('rate')}, grounded {a_.get('grounded', {}).get('rate')}")
    return 0


def _check_args(ap, a) -> None:
    """Every argument that a run would reject late, checked before a model is loaded (``ap.error`` names it)."""
    if not (math.isfinite(a.epochs) and a.epochs > 0):
        ap.error(f"--epochs must be a finite number > 0, got {a.epochs:g}")
    if not (math.isfinite(a.lr) and a.lr > 0):
        ap.error(f"--lr must be a finite number > 0, got {a.lr:g}")
    for flag, v, low in (("--batch-size", a.batch_size, 1), ("--r", a.r, 1), ("--replay", a.replay, 0)):
        if v < low:
            ap.error(f"{flag} must be >= {low}, got {v}")
    if not 0 <= a.seed < 2 ** 32:  # the Trainer's set_seed takes no other, and would fail after the model loads
        ap.error(f"--seed must be in [0, 2**32), got {a.seed}")
    if a.eval_n is not None and a.eval_n < 1:
        ap.error(f"--eval-n must be >= 1 (leave it out to evaluate every record), got {a.eval_n}")
    if not (math.isfinite(a.weight_decay) and a.weight_decay >= 0):
        ap.error(f"--weight-decay must be a finite number >= 0, got {a.weight_decay:g}")
    sets = tuple(x.strip() for x in a.eval_sets.split(",") if x.strip())
    unknown = [x for x in sets if x not in EVAL_SETS]
    if not sets or unknown:
        ap.error(f"--eval-sets must name one or more of {sorted(EVAL_SETS)} (comma-separated), got {a.eval_sets!r}")
    a.eval_sets = sets
    if not a.eval_only:
        try:
            check_traces(a.traces)
        except ValueError as e:
            ap.error(f"--{e}")
    try:
        results.check_writable(a.out, "--out")
        if a.save:
            results.check_writable(a.save, "--save", directory=True)
    except ValueError as e:
        ap.error(str(e))


def compare_curves(reference: list[list], candidate: list[list], skip: int = 0) -> dict:
    """Loss curves of several seeds each (``[[(step, loss), ...], ...]``): is the candidate within the
    run-to-run spread of the reference? Per logged step (after ``skip`` points): the reference band
    [min, max] over seeds; ``frac_candidate_mean_in_band`` (fraction of steps where the candidate's
    seed-mean lies in it), ``max_abs_mean_gap`` and ``median_band_width``."""
    if len(reference) < 2 or not candidate:
        raise ValueError("compare_curves needs at least two reference seeds and one candidate seed")
    steps = sorted(set.intersection(*[{s for s, _ in c} for c in reference + candidate]))[skip:]
    if not steps:
        raise ValueError("the curves share no logged step")
    ref = [dict(c) for c in reference]
    cand = [dict(c) for c in candidate]
    inside, gaps, widths = 0, [], []
    for s in steps:
        lo, hi = min(r[s] for r in ref), max(r[s] for r in ref)
        cm = statistics.fmean(c[s] for c in cand)
        rm = statistics.fmean(r[s] for r in ref)
        inside += lo <= cm <= hi
        gaps.append(abs(cm - rm))
        widths.append(hi - lo)
    last = steps[-1]
    return dict(steps=len(steps), frac_candidate_mean_in_band=inside / len(steps), max_abs_mean_gap=max(gaps),
                median_band_width=statistics.median(widths), final_step=last,
                final_reference=[r[last] for r in ref], final_candidate=[c[last] for c in cand])


def sft_figures(rec: dict, name: str = "tiny-gpu", env: dict | None = None, heldout: str = "heldout_1_2",
                heldout_3_4: str = "heldout_3_4") -> list[dict]:
    """Results figures of a :func:`run` record made with ``before=True``: after-SFT schema validity,
    grounded pass (overall, two-step, 3-4 step, honesty answerable) and the base model's rates. ``heldout``
    and ``heldout_3_4`` name the evaluation sets the figures read (``open_test_1_2``, ``open_test_3_4`` for
    a model of the procedural corpus)."""
    src = "t4lib.train.sft"
    figs = []

    def add(fig_name, cell, note):
        figs.append(results.figure(fig_name, cell["rate"], "fraction", "MEASURED", src, env=env, k=cell["k"],
                                   ci95=cell["ci95"], note=note))

    after, before = rec["after"], rec.get("before", {})
    h = after[heldout]
    add(f"sft/{name}/schema_valid", h["overall"]["schema_valid"], f"after SFT, 1-2 step held-out, n={h['overall']['n']}")
    add(f"sft/{name}/grounded_pass", h["overall"]["grounded"], f"after SFT, 1-2 step held-out, n={h['overall']['n']}")
    add(f"sft/{name}/grounded_pass_two_step", h["two_step"]["grounded"], f"after SFT, n={h['two_step']['n']}")
    if heldout_3_4 in after:
        add(f"sft/{name}/grounded_pass_3_4_steps", after[heldout_3_4]["overall"]["grounded"], "after SFT")
    if "honesty_answerable" in after:
        add(f"sft/{name}/honesty_answerable/grounded_pass", after["honesty_answerable"]["overall"]["grounded"],
            "after SFT, answerable half of honesty_eval")
    if before:
        add(f"sft/{name}/base/grounded_pass", before["tags"][heldout]["overall"]["grounded"],
            "base model, tag format (chat template), 1-2 step held-out")
        add(f"sft/{name}/base/plain_exact_match", before["plain"][heldout]["overall"]["correct"],
            "base model, its own plain format, 1-2 step held-out")
    return figs


if __name__ == "__main__":
    raise SystemExit(main())
