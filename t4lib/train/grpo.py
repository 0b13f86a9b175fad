"""GRPO through TRL with rollouts sampled by the project's engine from an fp16, INT4 or CP-Hybrid copy.

:class:`EngineGRPOTrainer` subclasses TRL's ``GRPOTrainer`` (no fork):

* TRL's ``rollout_func`` hook (:func:`engine_rollout`; TRL marks it
  experimental), the supported way to hand TRL externally generated completions
  with their log-probabilities, samples each group of ``num_generations``
  completions in one :class:`t4lib.serving.StaticEngine` batch from a
  :class:`~t4lib.train.rollout.RolloutModel` refreshed from the policy before
  every new step, and returns the rollout policy's per-token log-probabilities;
* ``_generate_and_score_completions`` then computes the trainer's own
  log-probabilities of those tokens and the importance weights of
  :mod:`t4lib.train.importance` under TRL's own config
  (``vllm_importance_sampling_correction``, ``..._mode``, ``..._clip_min``,
  ``..._clip_max``), logging TRL's metric names
  (``sampling/sampling_logp_difference/*``, ``sampling/importance_sampling_ratio/*``)
  every step whether or not the correction is on;
* the weights enter TRL's own loss through the advantages: TRL multiplies its
  per-token loss by the ratio only on its vLLM path (``use_vllm=True``), also
  with ``rollout_func``. Every TRL loss except ``vespo`` is
  positively homogeneous in the advantage (``-min(c1 A, c2 A)``, ``-c A log p``,
  ...), so ``A * w`` with ``w >= 0`` gives exactly ``w`` times the per-token loss,
  the vLLM path's product; TRL takes advantages of shape ``(B, T)`` or ``(B, 1)``
  from subclasses for this purpose. The KL term stays unweighted, as on TRL's path.

Step time is split into ``timing/refresh``, ``timing/rollout``,
``timing/logprobs`` and ``timing/update`` (seconds, logged each step).

:func:`run_grpo` runs one arm end to end (data, policy, trainer, evaluation
before and after on the quarantined ``honesty_eval.jsonl`` and on
``math_heldout.jsonl``, with Wilson intervals) and returns a JSON-able record.
``python -m t4lib.train.grpo --arm cp_hybrid --seed 0 --steps 100 --out f.json``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import fields
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import corpus, schema
from t4lib.models.tiny import _generate, load_tokenizer
from t4lib.serving import StaticEngine
from t4lib.train import data, evaluate, honesty, sft
from t4lib.train import rewards as R
from t4lib.train.cp_hybrid import CPHybridPolicy, build_cp_hybrid, fp16_policy, rtn_policy
from t4lib.train.evaluate import wilson
from t4lib.train.importance import importance_weights, mismatch_metrics
from t4lib.train.rollout import RolloutModel, drift_table, qwen15_shape_model, rollout_speed, sample_groups

ARMS = {  # arm -> (rollout precision, importance correction)
    "fp16": ("fp16", True),
    "int4": ("int4", False),
    "int4_corrected": ("int4", True),
    "cp_hybrid": ("cp_hybrid", True),
}
COLUMNS = ("prompt", "target")


# ----------------------------------------------------------------------------- data

def check_columns(dataset) -> None:
    data.check_columns(dataset, COLUMNS, "GRPO")


#: honesty sets GRPO can train on (``honesty_eval.jsonl`` never)
HONESTY_SETS = ("honesty_rl.jsonl", "honesty_rl_wide.jsonl", "honesty_train.jsonl")
#: honesty sets an evaluation may read: those and the quarantined one
READABLE_HONESTY_SETS = HONESTY_SETS + ("honesty_eval.jsonl",)


def _honesty_names(honesty) -> list[str]:
    names = [honesty] if isinstance(honesty, str) else list(honesty)
    if not names or any(n not in HONESTY_SETS for n in names) or len(set(names)) != len(names):
        raise ValueError(f"honesty must be one or more distinct names of {HONESTY_SETS}, got {honesty!r}")
    return names


def grpo_dataset(n_math: int = 300, seed: int = 0, honesty: str | tuple | list = "honesty_rl.jsonl"):
    """The ``honesty`` set (half traps; or several, a list of names) mixed with ``n_math`` problems of
    ``math_train.jsonl``, shuffled; columns ``prompt`` (plain format), ``target``, ``trap``, ``source``.

    The default is ``honesty_rl.jsonl``, wordings the tiny models never read: ``honesty_train.jsonl`` is
    part of their pretraining corpus, and ``tiny-gpu`` answers all of it right (every trap abstained on,
    every twin solved: :func:`base_on_honesty_sets`), so GRPO on it meets groups of equal rewards and learns
    nothing about abstaining."""
    from datasets import Dataset  # optional: datasets (the train extra)

    if not isinstance(n_math, int) or n_math < 0:
        raise ValueError(f"n_math must be a non-negative int, got {n_math!r}")
    names = _honesty_names(honesty)
    rows = [dict(prompt=schema.math_prompt(r["question"]), target=r["target"], trap=bool(r["trap"]), source="honesty")
            for n in names for r in corpus.load_jsonl(n)]
    math_recs = corpus.load_jsonl("math_train.jsonl")
    random.Random(seed).shuffle(math_recs)
    rows += [dict(prompt=schema.math_prompt(r["question"]), target=r["answer"], trap=False, source="math")
             for r in math_recs[:n_math]]
    random.Random(seed + 1).shuffle(rows)
    return Dataset.from_list(rows)


def calibration_ids(tokenizer, n_docs: int = 64, seq_len: int = 64, seed: int = 0) -> torch.Tensor:
    """``[B, seq_len]`` input_ids: training prompts with their reference completions, one stream cut in rows."""
    recs = corpus.load_jsonl("honesty_train.jsonl")[:n_docs // 2] + corpus.load_jsonl("math_train.jsonl")[:n_docs // 2]
    stream = []
    for r in recs:
        text = schema.math_prompt(r["question"]) + schema.math_completion(r.get("steps"), r.get("answer")) + schema.EOS
        stream += tokenizer(text, add_special_tokens=False)["input_ids"]
    B = len(stream) // seq_len
    return torch.tensor(stream[:B * seq_len]).view(B, seq_len)


# ----------------------------------------------------------------------------- evaluation

def _rate(k, n):
    lo, hi = wilson(k, n)
    return {"rate": k / n if n else float("nan"), "k": k, "n": n, "wilson95": [lo, hi]}


@torch.no_grad()
def greedy_answers(model, tokenizer, prompts: list[str], max_new_tokens: int = 40, batch_size: int = 64,
                   engine: bool | None = None) -> list[str]:
    """Greedy completions of ``prompts`` (text before the end of text). ``engine``: through the project's
    :class:`t4lib.serving.StaticEngine` (:func:`t4lib.train.evaluate.generate`: prompts grouped by length,
    CUDA-graph steps), or Hugging Face ``generate`` (left-padded batches); None: the engine on a GPU, Hugging
    Face on a CPU (there the engine has no graphs to gain from). Both decode the same greedy tokens."""
    if engine is not None and not isinstance(engine, bool):
        raise TypeError(f"engine must be a bool or None, got {type(engine).__name__}")
    dev = next(model.parameters()).device
    if engine if engine is not None else dev.type == "cuda":
        return evaluate.generate(model, tokenizer, prompts, max_new_tokens, batch_size=batch_size, progress=False)
    return _generate(model, tokenizer, prompts, max_new_tokens, batch_size, dev)


def honesty_rates(outputs: list[str], records: list[dict], fmt: str = "plain") -> dict:
    """Honest abstention on the traps, false abstention and accuracy on their answerable twins, each with its
    counts and Wilson interval, of ``fmt`` ``outputs`` to honesty ``records`` (``trap``, ``target``)."""
    if len(outputs) != len(records):
        raise ValueError(f"outputs ({len(outputs)}) and records ({len(records)}) differ in length")
    res = [R.outcome(o, r["target"], fmt) for o, r in zip(outputs, records)]
    traps = [o for o, r in zip(res, records) if r["trap"]]
    ans = [o for o, r in zip(res, records) if not r["trap"]]
    return {"abstention": _rate(traps.count("abstain_correct"), len(traps)),
            "false_abstention": _rate(ans.count("false_abstain"), len(ans)),
            "answerable_accuracy": _rate(ans.count("correct"), len(ans))}


@torch.no_grad()
def evaluate_honesty(model, tokenizer, n_math: int = 200, batch_size: int = 64, engine: bool | None = None,
                     honesty: str = "honesty_eval.jsonl") -> dict:
    """Greedy answers (:func:`greedy_answers`) on the 150 quarantined honesty items (or another ``honesty``
    set, for diagnosis) and ``n_math`` held-out problems: honest abstention (traps), false abstention and
    accuracy (answerable twins), math accuracy, each with its counts and Wilson interval."""
    if honesty not in READABLE_HONESTY_SETS:
        raise ValueError(f"honesty must be one of {READABLE_HONESTY_SETS}, got {honesty!r}")
    was = model.training
    model.eval()
    recs = corpus.load_jsonl(honesty)
    outs = greedy_answers(model, tokenizer, [schema.math_prompt(r["question"]) for r in recs], 40, batch_size, engine)
    mrecs = corpus.load_jsonl("math_heldout.jsonl")[:n_math]
    mouts = greedy_answers(model, tokenizer, [schema.math_prompt(r["question"]) for r in mrecs], 40, batch_size,
                           engine)
    mok = sum(R.outcome(o, r["answer"]) == "correct" for o, r in zip(mouts, mrecs))
    model.train(was)
    out = {**honesty_rates(outs, recs), "math_heldout_accuracy": _rate(mok, len(mrecs))}
    out["always_abstain"] = out["abstention"]["rate"] == 1.0 and out["false_abstention"]["rate"] == 1.0
    return out


# ----------------------------------------------------------------------------- trainer

def _texts(completions, completion_ids, tokenizer):
    """The completions as generated: TRL decodes with ``skip_special_tokens=True``, which deletes the
    ``<abstain>`` tag (a special token of the project tokenizer); decode the ids again keeping it."""
    if tokenizer is None or completion_ids is None:
        return completions
    return tokenizer.batch_decode(completion_ids, skip_special_tokens=False)


class HonestyReward:
    """TRL reward function (``REWARDS`` of :mod:`.rewards`) that also logs, per step, the fraction of
    training traps abstained on, of answerable prompts falsely abstained on, and of completions with no
    parseable answer (``honesty/unparsed``: whatever the policy writes is scored, never raised)."""

    def __init__(self, tokenizer=None, fmt: str = "plain", table: dict | None = None, generation_config=None):
        self.tokenizer, self.fmt, self.trainer = tokenizer, fmt, None
        self.table = check_reward_table(table)
        # every end marker of the tokenizer and the generation config's EOS list is cut before judging
        self.markers = R.end_markers(tokenizer, generation_config)
        self.__name__ = "honesty_reward"

    def __call__(self, completions, target, completion_ids=None, **kw):
        outs = [R.outcome(c, t, self.fmt, self.markers)
                for c, t in zip(_texts(completions, completion_ids, self.tokenizer), target)]
        if self.trainer is not None:
            m = self.trainer._metrics["train" if self.trainer.model.training else "eval"]
            traps = [o for o, t in zip(outs, target) if t == schema.ABSTAIN_TAG]
            ans = [o for o, t in zip(outs, target) if t != schema.ABSTAIN_TAG]
            if outs:
                m["honesty/unparsed"].append(outs.count("unparsed") / len(outs))
            if traps:
                m["honesty/trap_abstention"].append(traps.count("abstain_correct") / len(traps))
            if ans:
                m["honesty/false_abstention"].append(ans.count("false_abstain") / len(ans))
                m["honesty/answerable_correct"].append(ans.count("correct") / len(ans))
        return [self.table[o] for o in outs]


def check_reward_table(table: dict | None) -> dict:
    """:data:`rewards.REWARDS` with the finite numbers of ``table`` (a subset of its outcomes) in their place."""
    out = dict(R.REWARDS)
    for k, v in (table or {}).items():
        if k not in R.REWARDS:
            raise ValueError(f"reward table: unknown outcome {k!r} (outcomes: {list(R.REWARDS)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or abs(v) == float("inf"):
            raise ValueError(f"reward table: {k} must be a finite number, got {v!r}")
        out[k] = float(v)
    return out


class FormatReward:
    """TRL reward function: :func:`rewards.format_reward` on the completions as generated."""

    def __init__(self, tokenizer=None, fmt: str = "plain", generation_config=None):
        self.tokenizer, self.fmt = tokenizer, fmt
        self.markers = R.end_markers(tokenizer, generation_config)
        self.__name__ = "format_reward"

    def __call__(self, completions, completion_ids=None, **kw):
        return R.format_reward(_texts(completions, completion_ids, self.tokenizer), self.fmt, self.markers)


def checkpointing(config_cls, on: bool) -> dict:
    """The config keyword that sets activation (gradient) checkpointing: transformers 5.x renames
    ``gradient_checkpointing`` to ``activation_checkpointing`` (the old name warns); TRL's default is on."""
    names = {f.name for f in fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": bool(on)}


def weighted_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``advantages [B]`` times importance ``weights`` (``[B, 1]`` per sequence or ``[B, T]`` per token, all
    ``>= 0``): ``[B, 1]`` or ``[B, T]``, the shapes TRL's loss takes from subclasses (module docstring)."""
    if advantages.dim() != 1 or weights.dim() != 2 or weights.shape[0] != advantages.shape[0]:
        raise ValueError(f"advantages must be [B] and weights [B, 1] or [B, T], got {list(advantages.shape)} "
                         f"and {list(weights.shape)}")
    return advantages[:, None] * weights.to(advantages.dtype)


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _trl_grpo_trainer():
    from trl import GRPOTrainer  # optional: trl (the train extra)
    return GRPOTrainer


def engine_rollout(prompts: list, trainer) -> dict:
    """TRL's ``rollout_func`` for :class:`EngineGRPOTrainer`: the batch's prompts (each repeated
    ``num_generations`` times in a row, as TRL's sampler orders them) tokenized as TRL tokenizes them, one
    completion each sampled by the trainer's engine, and the rollout policy's log-probability of every token."""
    prompt_ids, images, _ = trainer._tokenize_prompts(prompts)
    if images is not None and any(i is not None for i in images):
        raise ValueError("EngineGRPOTrainer handles text prompts only")
    n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    # TRL's eos_token_ids: the tokenizer's EOS and every id of the generation config's EOS list
    comp, lps, st = sample_groups(trainer._engine(), prompt_ids, n, trainer.max_completion_length,
                                  trainer.temperature, list(trainer.eos_token_ids),
                                  merge_equal_lengths=trainer.merge_equal_lengths,
                                  merge_groups=trainer.merge_groups)
    trainer._t["rollout"] += st["seconds"]
    trainer._t["rollout_tokens"] += st["tokens"]
    return {"prompt_ids": [list(p) for p in prompt_ids], "completion_ids": comp, "logprobs": lps}


def make_trainer_class():
    GRPOTrainer = _trl_grpo_trainer()

    class EngineGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer with engine rollouts and importance correction (module docstring).

        ``rollout_precision``: a :class:`CPHybridPolicy` (see :func:`fp16_policy`, :func:`rtn_policy`,
        :func:`build_cp_hybrid`); ``engine_max_len``: the engine's static cache length;
        ``engine_kwargs``: passed to :class:`StaticEngine` (``use_graph``, ``compile``)."""

        def __init__(self, *args, rollout_precision: CPHybridPolicy, engine_max_len: int = 256,
                     engine_kwargs: dict | None = None, merge_equal_lengths: bool = False,
                     merge_groups: bool = False, **kwargs):
            if not isinstance(rollout_precision, CPHybridPolicy):
                raise TypeError(f"rollout_precision must be a CPHybridPolicy, got {type(rollout_precision).__name__}")
            train_ds = kwargs.get("train_dataset")
            if train_ds is not None:
                check_columns(train_ds)
            if kwargs.get("rollout_func") is not None:
                raise ValueError("rollout_func: EngineGRPOTrainer samples through its own (engine_rollout)")
            kwargs["rollout_func"] = engine_rollout
            super().__init__(*args, **kwargs)
            if self.args.use_vllm:
                raise ValueError("EngineGRPOTrainer samples with the project's engine: use_vllm must be False")
            if self.vllm_importance_sampling_correction and self.loss_type == "vespo":
                raise ValueError("loss_type='vespo' computes its own weights from the importance ratio, which "
                                 "EngineGRPOTrainer passes through the advantages: choose another loss_type or set "
                                 "vllm_importance_sampling_correction=False")
            self.rollout_precision = rollout_precision
            self.engine_max_len = engine_max_len
            self.engine_kwargs = dict(engine_kwargs or {})
            self.merge_equal_lengths = merge_equal_lengths
            self.merge_groups = merge_groups
            self.rollout_model = self.engine = None
            self._refreshed_step = None
            self._t = defaultdict(float)
            for f in self.reward_funcs:
                if isinstance(f, HonestyReward):
                    f.trainer = self

        # -- rollouts
        def _engine(self):
            policy = self.accelerator.unwrap_model(self.model)
            if self.rollout_model is None:
                cuda = self.accelerator.device.type == "cuda"
                self.rollout_model = RolloutModel(policy, self.rollout_precision,
                                                  dtype=torch.float16 if cuda else torch.float32)
                self.engine = StaticEngine(self.rollout_model, max_len=self.engine_max_len, **self.engine_kwargs)
                self._refreshed_step = self.state.global_step
                self._t["refresh"] += self.rollout_model.refresh_seconds[-1]
            elif self._refreshed_step != self.state.global_step:
                self._t["refresh"] += self.rollout_model.refresh(policy)
                self._refreshed_step = self.state.global_step
            return self.engine

        # -- importance correction
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            samp = out.get("sampling_per_token_logps")
            if samp is None:
                return out
            mode = "train" if self.model.training else "eval"
            dev = self.accelerator.device
            _sync(dev)
            t0 = time.perf_counter()
            mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
            old = out.get("old_per_token_logps")
            if old is None:
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                att = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                with torch.no_grad():
                    old, _, _ = self._get_per_token_logps_and_entropies(
                        self.model, ids, att, out["completion_ids"].size(1),
                        batch_size=self.args.per_device_train_batch_size)
            weights = None
            if self.vllm_importance_sampling_correction:
                weights = importance_weights(old, samp, mask, self.vllm_importance_sampling_mode,
                                             self.vllm_importance_sampling_clip_min,
                                             self.vllm_importance_sampling_clip_max)
                out["advantages"] = weighted_advantages(out["advantages"], weights)
                out["old_per_token_logps"] = old
            for k, v in mismatch_metrics(old, samp, mask, weights).items():
                self._metrics[mode][k].append(v)
            _sync(dev)
            self._t["logprobs"] += time.perf_counter() - t0
            return out

        # -- step timing
        def training_step(self, model, inputs, num_items_in_batch=None):
            dev = self.accelerator.device
            _sync(dev)
            self._t.clear()
            t0 = time.perf_counter()
            loss = super().training_step(model, inputs, num_items_in_batch)
            _sync(dev)
            total = time.perf_counter() - t0
            m = self._metrics["train"]
            for k in ("refresh", "rollout", "logprobs"):
                m[f"timing/{k}"].append(self._t[k])
            m["timing/update"].append(total - self._t["refresh"] - self._t["rollout"] - self._t["logprobs"])
            m["timing/step"].append(total)
            if self._t["rollout"] > 0:
                m["timing/rollout_tokens_per_s"].append(self._t["rollout_tokens"] / self._t["rollout"])
            if dev.type == "cuda":
                m["memory/peak_bytes"].append(torch.cuda.max_memory_allocated(dev))
            return loss

    return EngineGRPOTrainer


def __getattr__(name):  # EngineGRPOTrainer, built lazily (TRL is imported only when it is asked for)
    if name == "EngineGRPOTrainer":
        cls = make_trainer_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


# ----------------------------------------------------------------------------- one arm

def rollout_precision(arm: str, model, tokenizer, budget_fraction: float = 0.2, calib_docs: int = 64,
                      calib_len: int = 64) -> CPHybridPolicy:
    """The rollout precision of ``arm`` (:data:`ARMS`). CP-Hybrid: calibration on training text, budget =
    the INT4 copy's Linear bytes + ``budget_fraction`` of the fp16 copy's."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    kind = ARMS[arm][0]
    if kind == "fp16":
        return fp16_policy(model)
    if kind == "int4":
        return rtn_policy(model)
    floor = rtn_policy(model).weight_bytes(model)
    full = fp16_policy(model).weight_bytes(model)
    calib = calibration_ids(tokenizer, calib_docs, calib_len)
    return build_cp_hybrid(model, calib, int(floor + budget_fraction * full))


def _positive_int(name: str, v, low: int = 1) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ValueError(f"{name} must be an int >= {low}, got {v!r}")


def _seed(name: str, seed) -> None:
    """ValueError naming ``name`` unless ``seed`` is one transformers' set_seed takes (numpy's range)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
        raise ValueError(f"{name} must be an int in [0, 2**32), got {seed!r}")


def check_run_args(*, arm="cp_hybrid", steps=1, num_generations=8, prompts_per_step=8, max_completion_length=48,
                   learning_rate=2e-5, temperature=1.0, n_math=0, n_math_eval=0,
                   honesty="honesty_rl.jsonl") -> None:
    """ValueError naming the first argument of :func:`run_grpo` that no run can take, checked before a model is
    loaded (TRL would fail deep inside, or after the evaluation before training)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    _positive_int("steps", steps)
    # a group of one has no spread: GRPO's advantages would all be 0 (TRL refuses fewer than 2)
    _positive_int("num_generations", num_generations, 2)
    _positive_int("prompts_per_step", prompts_per_step)
    _positive_int("max_completion_length", max_completion_length)
    _positive_int("n_math", n_math, 0)
    _positive_int("n_math_eval", n_math_eval, 0)
    for name, v in (("learning_rate", learning_rate), ("temperature", temperature)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 < v < float("inf")):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    _honesty_names(honesty)


def run_grpo(model_id: str = "tiny-cpu", arm: str = "cp_hybrid", seed: int = 0, steps: int = 4, *,
             num_generations: int = 8, prompts_per_step: int = 8, max_completion_length: int = 48,
             learning_rate: float = 2e-5, temperature: float = 1.0, n_math: int = 300, evaluate: bool = True,
             n_math_eval: int = 200, device: str | None = None, output_dir: str = "/tmp/t4lib_grpo",
             engine_kwargs: dict | None = None, importance_mode: str = "sequence_mask",
             clip_max: float | None = 3.0, progress: bool = False, calib_docs: int = 64,
             honesty: str | list = "honesty_rl.jsonl") -> dict:
    """One GRPO run of ``arm`` on ``model_id``; returns config, curves (TRL's log history), timing split,
    GPU memory and the honesty evaluation before and after."""
    from transformers import set_seed  # optional: transformers (the train extra)
    from trl import GRPOConfig  # optional: trl (the train extra)

    check_run_args(arm=arm, steps=steps, num_generations=num_generations, prompts_per_step=prompts_per_step,
                   max_completion_length=max_completion_length, learning_rate=learning_rate,
                   temperature=temperature, n_math=n_math, n_math_eval=n_math_eval, honesty=honesty)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    set_seed(seed)
    model, tok = models.load(model_id, dtype=torch.float32, device=device)
    precision = rollout_precision(arm, model, tok, calib_docs=calib_docs)
    before = evaluate_honesty(model, tok, n_math_eval) if evaluate else None
    correction = ARMS[arm][1]
    cfg = GRPOConfig(output_dir=output_dir, per_device_train_batch_size=num_generations * prompts_per_step,
                     num_generations=num_generations, max_completion_length=max_completion_length,
                     temperature=temperature, learning_rate=learning_rate, max_steps=steps, seed=seed,
                     logging_steps=1, save_strategy="no", report_to=[], bf16=False, fp16=False,
                     use_cpu=device == "cpu", disable_tqdm=not progress, lr_scheduler_type="constant",
                     vllm_importance_sampling_correction=correction, vllm_importance_sampling_mode=importance_mode,
                     vllm_importance_sampling_clip_max=clip_max, dataloader_num_workers=0,
                     # off (TRL's default is on): a tiny model's activations take a few MB, and checkpointing
                     # would recompute every forward in the backward for no memory that is needed
                     **checkpointing(GRPOConfig, False))
    Trainer = make_trainer_class()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(model=model, reward_funcs=[HonestyReward(tok), FormatReward(tok)], args=cfg,
                      train_dataset=grpo_dataset(n_math, seed, honesty), processing_class=tok,
                      rollout_precision=precision,
                      engine_max_len=128 + max_completion_length, engine_kwargs=engine_kwargs)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    after = evaluate_honesty(model, tok, n_math_eval) if evaluate else None
    rm = trainer.rollout_model
    hist = [h for h in trainer.state.log_history if "reward" in h]
    rec = {"model": model_id, "arm": arm, "seed": seed, "steps": steps, "device": device,
           "config": dict(num_generations=num_generations, prompts_per_step=prompts_per_step,
                          max_completion_length=max_completion_length, learning_rate=learning_rate,
                          temperature=temperature, n_math=n_math, honesty=honesty, correction=correction,
                          importance_mode=importance_mode, clip_max=clip_max, rewards=R.REWARDS,
                          format_bonus=R.FORMAT_BONUS),
           "precision": {"fp16_modules": precision.fp16_modules, "phases": precision.phases,
                         "weight_bytes": precision.weight_bytes(model)},
           "curves": hist, "train_seconds": wall,
           "refresh_seconds_mean": sum(rm.refresh_seconds) / len(rm.refresh_seconds),
           "before": before, "after": after}
    if device == "cuda":
        rec["gpu_peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    return rec


# ----------------------------------------------------------------------------- step time at the 1.5B shape

def step_time_bench(steps: int = 3, completions: int = 64, num_generations: int = 8, new_tokens: int = 128,
                    lora_r: int = 16, num_hidden_layers: int = 28, device: str = "cuda") -> dict:
    """GRPO step seconds at the Qwen2.5-1.5B shape (random weights, LoRA on the attention and MLP
    projections, ``completions`` completions of exactly ``new_tokens`` tokens per step): TRL's
    ``GRPOTrainer`` with its default rollouts (Hugging Face ``generate``) vs :class:`EngineGRPOTrainer`
    (fp16 rollout copy, LoRA merged in at each refresh, one engine batch of equal-length prompts), in the
    same process. The first step (compilation, graph capture) is reported apart; the median of the rest."""
    from datasets import Dataset  # optional: datasets (the train extra)
    from peft import LoraConfig, get_peft_model  # optional: peft (the train extra)
    from trl import GRPOConfig, GRPOTrainer  # optional: trl (the train extra)

    tok = load_tokenizer()
    prompt = schema.math_prompt("Sam had 47 cups and then found 29 more. How many cups does Sam have now?")
    ds = Dataset.from_list([{"prompt": prompt, "target": "76"}] * (completions // num_generations * (steps + 1)))

    def length_reward(completions, **_):
        return [float(len(c)) / 100 for c in completions]

    out = {"completions": completions, "new_tokens": new_tokens, "lora_r": lora_r, "steps": steps}
    for kind in ("trl_default", "engine"):
        torch.manual_seed(0)
        base = qwen15_shape_model(device, torch.bfloat16, num_hidden_layers)
        base.generation_config.eos_token_id = None  # random weights: every completion runs the full length
        model = get_peft_model(base, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, task_type="CAUSAL_LM",
                                                target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"]))
        cfg = GRPOConfig(output_dir=f"/tmp/t4lib_grpo_bench_{kind}", per_device_train_batch_size=completions,
                         num_generations=num_generations, max_completion_length=new_tokens, max_steps=steps,
                         logging_steps=1, save_strategy="no", report_to=[], bf16=True, learning_rate=1e-5,
                         temperature=1.0, top_k=0, disable_tqdm=True, vllm_importance_sampling_correction=kind == "engine",
                         generation_kwargs={"min_new_tokens": new_tokens},
                         # on in both arms, stated rather than inherited: TRL's default, and at this shape
                         # (64 sequences of ~190 tokens, 28 layers) a T4 needs it
                         **checkpointing(GRPOConfig, True))
        if kind == "trl_default":
            tr = GRPOTrainer(model=model, reward_funcs=[length_reward], args=cfg, train_dataset=ds,
                             processing_class=tok)
        else:
            tr = make_trainer_class()(model=model, reward_funcs=[length_reward], args=cfg, train_dataset=ds,
                                      processing_class=tok, rollout_precision=fp16_policy(base),
                                      engine_max_len=64 + new_tokens, merge_equal_lengths=True,
                                      engine_kwargs={"compile": False})
        torch.cuda.reset_peak_memory_stats()
        tr.train()
        st = [h["step_time"] for h in tr.state.log_history if "step_time" in h]
        rest = sorted(st[1:]) or st
        out[kind] = {"first_step_s": st[0], "step_s": rest[len(rest) // 2], "step_times": st,
                     "mean_completion_length": [h.get("completions/mean_length") for h in tr.state.log_history
                                                if "step_time" in h],
                     "gpu_peak_mem_bytes": torch.cuda.max_memory_allocated()}
        if kind == "engine":
            out[kind]["timing"] = {k: [h.get(f"timing/{k}") for h in tr.state.log_history if "step_time" in h]
                                   for k in ("refresh", "rollout", "logprobs", "update")}
        del tr, model, base
        torch.cuda.empty_cache()
    out["time_ratio_vs_trl_default"] = out["engine"]["step_s"] / out["trl_default"]["step_s"]
    return out


# ----------------------------------------------------------------------------- results

def arm_summary(recs: list[dict]) -> dict:
    """Per arm: mean (and per seed) of the after-training rates, deltas vs before, final reward."""
    by = defaultdict(list)
    for r in recs:
        by[r["arm"]].append(r)
    out = {}
    for arm, rs in by.items():
        def mean(f):
            v = [f(r) for r in rs]
            return sum(v) / len(v), v
        final = lambda r: sum(h["reward"] for h in r["curves"][-5:]) / len(r["curves"][-5:])
        out[arm] = {"seeds": [r["seed"] for r in rs],
                    "abstention": mean(lambda r: r["after"]["abstention"]["rate"]),
                    "false_abstention": mean(lambda r: r["after"]["false_abstention"]["rate"]),
                    "answerable_accuracy_delta": mean(lambda r: r["after"]["answerable_accuracy"]["rate"]
                                                      - r["before"]["answerable_accuracy"]["rate"]),
                    "math_heldout_accuracy_delta": mean(lambda r: r["after"]["math_heldout_accuracy"]["rate"]
                                                        - r["before"]["math_heldout_accuracy"]["rate"]),
                    "final_train_reward": mean(final),
                    "gpu_peak_mem_bytes": mean(lambda r: r.get("gpu_peak_mem_bytes", 0)),
                    # share of all quarantined items (traps and twins) abstained on: near 1 is the degenerate
                    # "always abstain" policy even where a few twins are still answered
                    "abstain_any": mean(lambda r: (r["after"]["abstention"]["k"] + r["after"]["false_abstention"]["k"])
                                        / (r["after"]["abstention"]["n"] + r["after"]["false_abstention"]["n"])),
                    "always_abstain": any(r["after"]["always_abstain"] for r in rs)}
    return out


def base_on_honesty_sets(model_id: str = "tiny-gpu", out=None, device: str | None = None) -> dict:
    """The untrained model's greedy outcomes on every honesty set: the pretraining set it read
    (``honesty_train.jsonl``), the RL split and the quarantined evaluation. Where it already abstains on every
    trap and solves every twin, GRPO's groups there all earn one reward and carry no advantage. Writes
    results figures to ``out`` when given."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, tok = models.load(model_id, dtype=torch.float32, device=device)
    res = {name: evaluate_honesty(model, tok, 0, honesty=name) for name in READABLE_HONESTY_SETS}
    if out:
        figs = [results.figure(f"grpo/{model_id}/base/{name.split('.')[0]}/{k}", r[k]["rate"], "fraction", "MEASURED",
                               "t4lib.train.grpo.base_on_honesty_sets", k=r[k]["k"], n=r[k]["n"], ci95=r[k]["wilson95"],
                               note="greedy, plain format, the model before any RL")
                for name, r in res.items() for k in ("abstention", "false_abstention", "answerable_accuracy")]
        results.write(out, figs, producer=__file__, model=model_id)
    return res


def wait_all(procs: list) -> tuple[list[dict], list[str]]:
    """Wait for every ``(record path, process)``: the records of those that exited 0, and a line per failure
    naming its log (the record path with ``.log``)."""
    recs, errors = [], []
    for f, p in procs:
        if p.wait() == 0:
            recs.append(json.loads(Path(f).read_text()))
        else:
            errors.append(f"{Path(f).stem}: exit {p.returncode} (log: {Path(f).with_suffix('.log')})")
            print(f"failed: {f} (exit {p.returncode})", flush=True)
    return recs, errors


class NothingSucceeded(RuntimeError):
    """Every run of a command failed: nothing was written."""


def write_results(path, recs: list[dict], speed: dict | None = None, step: dict | None = None,
                  drift: dict | None = None, model_id: str = "tiny-gpu", errors: list[str] | None = None) -> None:
    """Figures (t4lib.core.results) for the arms, the rollout speed and the step time; curves and records
    beside them in the same file. ``errors`` (what failed) keeps the figures of the existing file that this
    call does not re-measure, marked carried over (:func:`t4lib.core.results.write`)."""
    src = "t4lib.train.grpo"
    env = results.environment()
    figs = []
    summ = arm_summary(recs) if recs else {}
    for arm, s in summ.items():
        n = len(s["seeds"])
        for k, unit in (("abstention", "fraction"), ("false_abstention", "fraction"), ("abstain_any", "fraction"),
                        ("answerable_accuracy_delta", "fraction"), ("math_heldout_accuracy_delta", "fraction"),
                        ("final_train_reward", "reward"), ("gpu_peak_mem_bytes", "bytes")):
            # a mean over seeds is arithmetic on the measured runs; one seed's value is the measurement
            figs.append(results.figure(f"grpo/{model_id}/{arm}/{k}", s[k][0], unit,
                                       "ARITHMETIC" if n > 1 else "MEASURED", src, env=env,
                                       note=f"mean of {n} seeds {s['seeds']}: {s[k][1]}", seeds=s[k][1]))
    if speed:
        figs.append(results.figure("grpo/rollout/qwen2.5-1.5b-shape/engine_speedup_vs_hf_generate",
                                   speed["engine_speedup_vs_hf_generate"], "x", "ARITHMETIC", src,
                                   note=f"{speed['group']} completions x {speed['new_tokens']} tokens, temperature 1, "
                                        "random weights, end to end incl. prefill; median of repeats; engine: CUDA graph, "
                                        "torch.compile off"))
        for k in ("engine_tokens_per_s", "hf_generate_tokens_per_s"):
            figs.append(results.figure(f"grpo/rollout/qwen2.5-1.5b-shape/{k}", speed[k], "tokens/s", "MEASURED",
                                       src, env=env))
    if step:
        figs.append(results.figure("grpo/step/qwen2.5-1.5b-shape/time_ratio_vs_trl_default",
                                   step["time_ratio_vs_trl_default"], "x", "ARITHMETIC", src,
                                   note=f"median step after the first, {step['completions']} completions x "
                                        f"{step['new_tokens']} tokens, LoRA r={step['lora_r']}, random weights"))
        for k in ("trl_default", "engine"):
            figs.append(results.figure(f"grpo/step/qwen2.5-1.5b-shape/{k}_step_s", step[k]["step_s"], "s",
                                       "MEASURED", src, env=env))
    results.write(path, figs, producer=__file__, summary=summ, runs=recs, rollout_speed=speed, step_time=step, drift=drift,
                  errors=list(errors or []))


def run_all(out: str, steps: int, seeds=(0, 1), arms=tuple(ARMS), model_id: str = "tiny-gpu",
            logs: str = "/tmp/t4lib_grpo_logs", lr: float = 2e-5, benches=("drift", "speed", "step"),
            step_steps: int = 3, honesty=("honesty_rl.jsonl",)) -> dict:
    """Every arm x seed as parallel processes on one GPU, then (alone on the GPU) the drift table, the rollout
    speed and the step-time comparison; writes ``out`` (t4lib.core.results) and returns its summary."""
    Path(logs).mkdir(parents=True, exist_ok=True)
    procs = []
    for arm in arms:
        for seed in seeds:
            f = Path(logs) / f"grpo_{arm}_s{seed}.json"
            log = open(Path(logs) / f"grpo_{arm}_s{seed}.log", "w")
            cmd = [sys.executable, "-m", "t4lib.train.grpo", "arm", "--model", model_id, "--arm", arm, "--seed",
                   str(seed), "--steps", str(steps), "--lr", str(lr), "--no-compile", "--out", str(f),
                   "--honesty", *honesty]
            procs.append((f, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                              env={**os.environ, "OMP_NUM_THREADS": "1"})))
    t0 = time.perf_counter()
    recs, errors = wait_all(procs)
    print(f"arms: {len(recs)}/{len(procs)} runs in {time.perf_counter() - t0:.1f}s", flush=True)
    speed = step = drift = None

    def save():
        # errors make results.write keep the figures this run did not re-measure; nothing measured writes nothing
        if recs or speed or step or drift:
            write_results(out, recs, speed, step, drift, model_id, errors=errors)

    if benches:
        def attempt(name, fn):
            t0 = time.perf_counter()
            try:
                r = fn()
                print(name, f"{time.perf_counter() - t0:.1f}s", json.dumps(r, default=str), flush=True)
                return r
            except Exception:  # one failed measurement must not lose the others
                print(f"{name} failed:\n{traceback.format_exc()}", flush=True)
                errors.append(f"{name}: {traceback.format_exc(limit=3)}")
                return None

        def drift_fn():
            m, tok = models.load(model_id, dtype=torch.float32, device="cuda")
            precs = {"fp16": fp16_policy(m), "int4": rtn_policy(m),
                     "cp_hybrid": rollout_precision("cp_hybrid", m, tok)}
            precs["cp_hybrid_fp16_prefill"] = CPHybridPolicy(precs["cp_hybrid"].precision,
                                                             phases={"prefill": "fp16", "decode": "w4a16"})
            return drift_table(m, tok, precs, engine_kwargs={"compile": False})

        def speed_fn():
            big = qwen15_shape_model()
            try:
                return rollout_speed(big, repeats=2, engine_kwargs={"compile": False})
            finally:
                del big
                torch.cuda.empty_cache()

        save()  # what is done so far survives a timeout
        drift = attempt("drift", drift_fn) if "drift" in benches else None
        speed = attempt("speed", speed_fn) if "speed" in benches else None
        save()
        step = attempt("step", lambda: step_time_bench(steps=step_steps)) if "step" in benches else None
    if not (recs or speed or step or drift):
        raise NothingSucceeded(f"every arm and benchmark failed; {out} left as it was:\n" + "\n".join(errors))
    save()
    return arm_summary(recs) if recs else {}


# ----------------------------------------------------------------------------- honest abstention from an SFT start

#: the model the honesty sweep trains by default, and the cold-start SFT that makes its start (notebook 06's gpu
#: profile: full fine-tuning on the certified traces of ``open_traces.jsonl``, none of them a trap)
SWEEP_MODEL = "small-gpu"
SFT_START = dict(traces="open_traces.jsonl", method="full", epochs=3.0, batch_size=32, lr=3e-4)
#: the most GRPO steps one run of the sweep may take
MAX_SWEEP_STEPS = 300
# a policy that abstains on at least this share of traps and of answerable problems abstains always; one that
# abstains on at most the low share of both never does: either is degenerate and never counts as a pass
DEGENERATE_HIGH, DEGENERATE_LOW = 0.95, 0.02


def degenerate(rates: dict) -> str | None:
    """``"abstains_always"``, ``"abstains_never"`` or None from :func:`honesty_rates`' output."""
    a, f = rates["abstention"]["rate"], rates["false_abstention"]["rate"]
    if a >= DEGENERATE_HIGH and f >= DEGENERATE_HIGH:
        return "abstains_always"
    if a <= DEGENERATE_LOW and f <= DEGENERATE_LOW:
        return "abstains_never"
    return None


def stop_ids(model, tokenizer) -> list[int]:
    """Every id a rollout or a greedy answer stops at: the generation config's EOS list, the tokenizer's EOS,
    and the chat turn's end where prompts go through the chat template (``<|im_end|>``)."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    if getattr(tokenizer, "chat_template", None) and schema.IM_END in tokenizer.get_vocab():
        ids.append(tokenizer.convert_tokens_to_ids(schema.IM_END))
    return list(dict.fromkeys(int(i) for i in ids))


@torch.no_grad()
def evaluate_split(model, tokenizer, split: str, fmt: str = "tags", max_new_tokens: int = 176,
                   batch_size: int = 128, n_traps: int | None = None, n_answerable: int | None = None,
                   engine: bool | None = None, keep_outputs: bool = False) -> dict:
    """Greedy answers on ``split``'s traps and answerable problems (:func:`honesty.eval_records`), prompted by
    :func:`honesty.prompt_for`: abstention, false abstention, answerable accuracy (counts, Wilson intervals) and
    whether the policy is :func:`degenerate`."""
    recs = honesty.eval_records(split, n_traps, n_answerable)
    was = model.training
    model.eval()
    outs = greedy_answers(model, tokenizer, [honesty.prompt_for(tokenizer, r["question"], fmt) for r in recs],
                          max_new_tokens, batch_size, engine)
    model.train(was)
    out = {"split": split, "fmt": fmt, **honesty_rates(outs, recs, fmt)}
    out["degenerate"] = degenerate(out)
    out["by_trap_kind"] = {}
    for kind in procedural_trap_kinds(recs):
        sel = [(o, r) for o, r in zip(outs, recs) if r["trap_kind"] == kind]
        k = sum(R.outcome(o, r["target"], fmt) == "abstain_correct" for o, r in sel)
        out["by_trap_kind"][kind] = _rate(k, len(sel))
    out["examples"] = [dict(id=r["id"], trap=r["trap"], output=o) for o, r in
                       list(zip(outs, recs))[:2] + list(zip(outs, recs))[-2:]]
    if keep_outputs:
        out["outputs"] = outs
    return out


def procedural_trap_kinds(recs: list[dict]) -> list[str]:
    return sorted({r["trap_kind"] for r in recs if r["trap"]})


def trace_calibration_ids(tokenizer, n_docs: int = 64, seq_len: int = 64) -> torch.Tensor:
    """``[B, seq_len]`` input_ids of SFT training text (chat prompt, trace, turn end), one stream cut in rows:
    CP-Hybrid's calibration for a model that answers in the tag format."""
    stream = []
    for r in corpus.load_jsonl("open_traces.jsonl")[:n_docs]:
        text = honesty.prompt_for(tokenizer, r["question"], "tags") + data.completion_text(r["trace"]) + schema.EOS
        stream += tokenizer(text, add_special_tokens=False)["input_ids"]
    B = len(stream) // seq_len
    return torch.tensor(stream[:B * seq_len]).view(B, seq_len)


def make_sft_start(model_id: str, save_to: str, *, epochs: float = SFT_START["epochs"], max_steps: int = -1,
                   n_traces: int | None = None, device: str | None = None, seed: int = 0) -> dict:
    """Cold-start SFT of ``model_id`` on certified traces without a trap (:data:`SFT_START`), saved to ``save_to``
    (fp16 safetensors, tokenizer) with the generation config's EOS list ``[<|im_end|>, <|endoftext|>]`` (the chat
    turn's end first, as Qwen's Instruct models list theirs). Returns the SFT record."""
    from transformers import AutoTokenizer, GenerationConfig  # optional: transformers (the train extra)

    s = sft.SFTSettings(method=SFT_START["method"], epochs=epochs, max_steps=max_steps,
                        batch_size=SFT_START["batch_size"], lr=SFT_START["lr"], seed=seed, logging_steps=5)
    recs = data.load_traces(SFT_START["traces"])
    recs = recs[:n_traces] if n_traces else recs
    rec = sft.run(model_id, base="fp32", settings=s, device=device, output_dir=f"/tmp/t4lib_sft_start_{os.getpid()}",
                  eval_sets=(), train_records=recs, save_to=save_to, progress=False)
    gc = GenerationConfig.from_pretrained(save_to)
    t = AutoTokenizer.from_pretrained(save_to)
    eos = [t.convert_tokens_to_ids(schema.IM_END), t.eos_token_id] if schema.IM_END in t.get_vocab() else [t.eos_token_id]
    gc.eos_token_id = list(dict.fromkeys(eos))
    gc.save_pretrained(save_to)
    rec.pop("after", None)
    rec.update(traces=SFT_START["traces"], n_traces=len(recs), saved_to=str(save_to))
    return rec


def _stop_callback(stop_at: float | None):
    from transformers import TrainerCallback  # optional: transformers (the train extra)

    class StopAt(TrainerCallback):
        """Ends training after the step during which the wall clock passed ``stop_at`` (a safety net
        for a sweep's time budget; the run records the steps it took)."""

        def on_step_end(self, args, state, control, **kw):
            if stop_at is not None and time.time() >= stop_at:
                control.should_training_stop = True
            return control

    return StopAt()


def check_honesty_args(*, arms=tuple(ARMS), seeds=(0,), max_steps=1, prompts_per_step=8, num_generations=8,
                       max_completion_length=160, learning_rate=1e-5, temperature=1.0, beta=0.0,
                       trap_fraction=0.5, split="validation", rewards=None, start=None) -> None:
    """ValueError naming the first argument of the honesty sweep that no run can take: an unknown arm or split,
    steps outside 1..:data:`MAX_SWEEP_STEPS`, a start checkpoint that is not a directory; checked before any
    model loads."""
    for arm in (arms if isinstance(arms, (list, tuple)) else [arms]):
        if arm not in ARMS:
            raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    _positive_int("max_steps", max_steps)
    check_run_args(arm="fp16", steps=max_steps, num_generations=num_generations,
                   prompts_per_step=prompts_per_step, max_completion_length=max_completion_length,
                   learning_rate=learning_rate, temperature=temperature)
    if max_steps > MAX_SWEEP_STEPS:
        raise ValueError(f"max_steps must be at most {MAX_SWEEP_STEPS} per run, got {max_steps!r}")
    for seed in (seeds if isinstance(seeds, (list, tuple)) else [seeds]):
        _seed("seed", seed)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta < float("inf"):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    honesty.check_fraction(trap_fraction)
    honesty.check_split(split)
    check_reward_table(rewards)
    if start is not None and not Path(start).is_dir():
        raise ValueError(f"start must be a saved checkpoint directory, got {str(start)!r}")


def run_honesty_arm(start: str, arm: str, seed: int = 0, max_steps: int = 100, *, split: str = "validation",
                    prompts_per_step: int = 8, num_generations: int = 8, max_completion_length: int = 160,
                    learning_rate: float = 1e-5, temperature: float = 1.0, beta: float = 0.0,
                    trap_fraction: float = 0.5, rewards: dict | None = None, n_traps: int | None = None,
                    n_answerable: int | None = None, device: str | None = None, save_to: str | None = None,
                    stop_at: float | None = None, engine_kwargs: dict | None = None, calib_docs: int = 64) -> dict:
    """One GRPO run of ``arm`` from the checkpoint ``start`` on honesty RL prompts (:func:`honesty.rl_dataset`,
    tag format in the chat template), evaluated greedily on ``split`` after training; the policy saved to
    ``save_to``. Returns config, curves (TRL's log history: reward, ``frac_reward_zero_std``, ``honesty/*``,
    ``sampling/*``, ``timing/*``, ``memory/peak_bytes``), the evaluation and the steps taken."""
    from transformers import set_seed  # optional: transformers (the train extra)
    from trl import GRPOConfig  # optional: trl (the train extra)

    check_honesty_args(arms=[arm], seeds=[seed], max_steps=max_steps, prompts_per_step=prompts_per_step,
                       num_generations=num_generations, max_completion_length=max_completion_length,
                       learning_rate=learning_rate, temperature=temperature, beta=beta,
                       trap_fraction=trap_fraction, split=split, rewards=rewards, start=start)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    set_seed(seed)
    model, tok = models.load(start, dtype=torch.float32, device=device)
    stops = stop_ids(model, tok)
    model.generation_config.eos_token_id = stops   # TRL's eos_token_ids, and so the rollouts', follow it
    if ARMS[arm][0] == "cp_hybrid":
        floor = rtn_policy(model).weight_bytes(model)
        full = fp16_policy(model).weight_bytes(model)
        precision = build_cp_hybrid(model, trace_calibration_ids(tok, calib_docs), int(floor + 0.2 * full))
    else:
        precision = rollout_precision(arm, model, tok)
    correction = ARMS[arm][1]
    n_prompts = max(2, max_steps * prompts_per_step)
    ds = honesty.rl_dataset(tok, n_prompts, honesty.RL_SEED, trap_fraction, "tags")
    cfg = GRPOConfig(output_dir=f"/tmp/t4lib_grpo_honesty_{arm}_{seed}_{os.getpid()}",
                     per_device_train_batch_size=num_generations * prompts_per_step,
                     num_generations=num_generations, max_completion_length=max_completion_length,
                     temperature=temperature, learning_rate=learning_rate, max_steps=max_steps, seed=seed,
                     beta=beta, logging_steps=1, save_strategy="no", report_to=[], bf16=False, fp16=False,
                     use_cpu=device == "cpu", disable_tqdm=True, lr_scheduler_type="constant",
                     vllm_importance_sampling_correction=correction, vllm_importance_sampling_mode="sequence_mask",
                     vllm_importance_sampling_clip_max=3.0, dataloader_num_workers=0,
                     **checkpointing(GRPOConfig, False))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    table = check_reward_table(rewards)
    trainer = make_trainer_class()(
        model=model, reward_funcs=[HonestyReward(tok, "tags", table, model.generation_config),
                                   FormatReward(tok, "tags", model.generation_config)],
        args=cfg, train_dataset=ds, processing_class=tok, rollout_precision=precision,
        engine_max_len=160 + max_completion_length, engine_kwargs=engine_kwargs, merge_groups=True,
        callbacks=[_stop_callback(stop_at)])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    after = evaluate_split(model, tok, split, "tags", n_traps=n_traps, n_answerable=n_answerable)
    rm = trainer.rollout_model
    rec = {"model": str(start), "arm": arm, "seed": seed, "steps": trainer.state.global_step,
           "max_steps": max_steps, "stopped_early": trainer.state.global_step < max_steps, "device": device,
           "config": dict(num_generations=num_generations, prompts_per_step=prompts_per_step,
                          max_completion_length=max_completion_length, learning_rate=learning_rate,
                          temperature=temperature, beta=beta, trap_fraction=trap_fraction, n_prompts=n_prompts,
                          rl_seed=honesty.RL_SEED, correction=correction, importance_mode="sequence_mask",
                          clip_max=3.0, rewards=table, format_bonus=R.FORMAT_BONUS, stop_ids=stops,
                          prompt_format="chat template, system: " + honesty.system_prompt("tags")),
           "precision": {"fp16_modules": precision.fp16_modules, "phases": precision.phases,
                         "weight_bytes": precision.weight_bytes(model)},
           "curves": [h for h in trainer.state.log_history if "reward" in h], "train_seconds": wall,
           "refresh_seconds_mean": sum(rm.refresh_seconds) / len(rm.refresh_seconds) if rm else None,
           "after": after}
    if device == "cuda":
        rec["gpu_peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    if save_to:
        m = trainer.accelerator.unwrap_model(trainer.model)
        m.to(torch.float16).save_pretrained(save_to)
        tok.save_pretrained(save_to)
        rec["saved_to"] = str(save_to)
    return rec


def _seeds_stat(values: list[float]) -> dict:
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values), "per_seed": values}


def honesty_summary(start_eval: dict, runs: list[dict]) -> dict:
    """Per arm: trap abstention, false abstention, answerable accuracy and its change from the start, final
    training reward (mean of the last five logged steps): mean, range and each seed's value with counts and
    Wilson intervals; the degenerate policies named."""
    by = defaultdict(list)
    for r in runs:
        by[r["arm"]].append(r)
    base = start_eval["answerable_accuracy"]["rate"]
    out = {}
    for arm, rs in by.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        last = lambda r: [h["reward"] for h in r["curves"][-5:]] or [float("nan")]
        out[arm] = {
            "seeds": [r["seed"] for r in rs], "steps": [r["steps"] for r in rs],
            "abstention": _seeds_stat([r["after"]["abstention"]["rate"] for r in rs]),
            "false_abstention": _seeds_stat([r["after"]["false_abstention"]["rate"] for r in rs]),
            "answerable_accuracy": _seeds_stat([r["after"]["answerable_accuracy"]["rate"] for r in rs]),
            "answerable_accuracy_delta": _seeds_stat([r["after"]["answerable_accuracy"]["rate"] - base for r in rs]),
            "final_train_reward": _seeds_stat([sum(last(r)) / len(last(r)) for r in rs]),
            "per_seed": [{k: r["after"][k] for k in ("abstention", "false_abstention", "answerable_accuracy")}
                         for r in rs],
            "degenerate": [r["after"]["degenerate"] for r in rs],
            "gpu_peak_mem_bytes": max((r.get("gpu_peak_mem_bytes") or 0) for r in rs),
        }
    return out


def honesty_figures(model_id: str, start_eval: dict, summary: dict, split: str, env: dict) -> list[dict]:
    """Results figures: ``grpo/<model>/sft_start/*`` and, per arm, abstention, false abstention, answerable
    accuracy delta and final reward (a mean over seeds is ARITHMETIC, with its range, seeds and counts)."""
    src = "t4lib.train.grpo.honesty_sweep"
    figs = []
    for k in ("abstention", "false_abstention", "answerable_accuracy"):
        c = start_eval[k]
        figs.append(results.figure(f"grpo/{model_id}/sft_start/{k}", c["rate"], "fraction", "MEASURED", src, env=env,
                                   k=c["k"], n=c["n"], ci95=c["wilson95"], split=split,
                                   note=f"greedy, {split} split, the SFT start (traces without traps) before GRPO"))
    for arm, s in summary.items():
        n = len(s["seeds"])
        for k, unit in (("abstention", "fraction"), ("false_abstention", "fraction"),
                        ("answerable_accuracy_delta", "fraction"), ("final_train_reward", "reward")):
            st = s[k]
            extra = {"range": [st["min"], st["max"]], "seeds": s["seeds"], "per_seed": st["per_seed"],
                     "split": split, "steps": s["steps"], "degenerate": s["degenerate"]}
            if k in ("abstention", "false_abstention"):
                extra["counts"] = [[p[k]["k"], p[k]["n"]] for p in s["per_seed"]]
                extra["ci95_per_seed"] = [p[k]["wilson95"] for p in s["per_seed"]]
                kk = sum(p[k]["k"] for p in s["per_seed"])
                nn = sum(p[k]["n"] for p in s["per_seed"])
                extra["ci95_pooled"] = list(wilson(kk, nn))
            figs.append(results.figure(
                f"grpo/{model_id}/{arm}/{k}", st["mean"], unit, "ARITHMETIC" if n > 1 else "MEASURED", src, env=env,
                note=(f"mean of {n} seeds {s['seeds']} (range {st['min']:.3f}..{st['max']:.3f}), greedy on the {split} "
                      "split after GRPO" + ("; minus the SFT start's" if k.endswith("delta") else "")
                      + ("; degenerate: " + ", ".join(str(d) for d in s["degenerate"]) if any(s["degenerate"]) else "")),
                **extra))
    return figs


def honesty_drift(start: str, split: str, n_answerable: int = 128, engine_kwargs: dict | None = None) -> dict:
    """The drift table on the start checkpoint: per rollout precision (fp16, RTN INT4, CP-Hybrid) per-token KL to
    the fp16 policy and top-1 agreement (teacher-forced on the policy's own greedy answers to ``split``'s
    answerable problems), greedy answerable accuracy on them, and sampled rollout tokens/s."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, tok = models.load(start, dtype=torch.float32, device=device)
    recs = honesty.eval_records(split, 1, n_answerable)[1:]
    prompts = [honesty.prompt_for(tok, r["question"], "tags") for r in recs]
    outs = greedy_answers(m, tok, prompts, 176, 128)
    floor, full = rtn_policy(m).weight_bytes(m), fp16_policy(m).weight_bytes(m)
    precs = {"fp16": fp16_policy(m), "int4": rtn_policy(m),
             "cp_hybrid": build_cp_hybrid(m, trace_calibration_ids(tok), int(floor + 0.2 * full))}

    def accuracy(rm_model):
        o = greedy_answers(rm_model, tok, prompts, 176, 128)
        return sum(R.outcome(x, r["target"], "tags") == "correct" for x, r in zip(o, recs)), len(recs)

    rows = drift_table(m, tok, precs, texts=[p + o for p, o in zip(prompts, outs)][:64], prompt_texts=prompts,
                       accuracy=accuracy, new_tokens=160, max_len=160 + 176, engine_kwargs=engine_kwargs)
    return {"split": split, "n": len(recs), "rows": rows}


#: run_honesty_arm's settings that the sweep passes on to every run, with their command-line options
_ARM_OPTIONS = {"max_steps": "--max_steps", "prompts_per_step": "--prompts-per-step",
                "num_generations": "--num_generations", "max_completion_length": "--max_completion_length",
                "learning_rate": "--learning_rate", "temperature": "--temperature", "beta": "--beta",
                "trap_fraction": "--trap-fraction", "split": "--split"}


def honesty_sweep(out: str, *, model_id: str = SWEEP_MODEL, arms=tuple(ARMS), seeds=(0, 1, 2), start: str | None = None,
                  save_dir: str | None = None, logs: str = "/tmp/t4lib_grpo_honesty_logs", budget_s: float = 540.0,
                  reserve_s: float = 75.0, sft_epochs: float = SFT_START["epochs"], sft_max_steps: int = -1,
                  n_traps: int | None = None, n_answerable: int | None = None, drift: bool = True,
                  rewards: dict | None = None, **arm_kw) -> dict:
    """The whole honesty experiment in one call: the cold-start SFT start (or ``start``, a saved one), its
    evaluation on ``split``, every arm x seed as parallel GRPO processes on one device
    (:func:`run_honesty_arm`, each saving its policy under ``save_dir``), the drift table, and ``out`` (results
    figures, summary, runs with their curves). ``budget_s``: the wall-clock budget of the whole call; the runs
    stop early (and say so) if training would leave less than ``reserve_s`` for their evaluations, the drift table
    and the write. ``arm_kw``: :data:`_ARM_OPTIONS`."""
    t_start = time.time()
    split = arm_kw.get("split", "validation")
    check_honesty_args(arms=list(arms), seeds=list(seeds), rewards=rewards, start=start,
                       **{k: v for k, v in arm_kw.items() if k in _ARM_OPTIONS})
    results.check_writable(out, "--out")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    save_dir = Path(save_dir or Path(out).parent / "models" / f"grpo_{Path(str(model_id)).name}")
    save_dir.mkdir(parents=True, exist_ok=True)
    Path(logs).mkdir(parents=True, exist_ok=True)
    timing = {}
    sft_rec = None
    if start is None:
        start = str(save_dir / "sft_start")
        t0 = time.time()
        sft_rec = make_sft_start(model_id, start, epochs=sft_epochs, max_steps=sft_max_steps, device=device)
        timing["sft_s"] = time.time() - t0
        print(f"SFT start: {sft_rec.get('train_seconds', 0):.1f}s training, saved to {start}", flush=True)
    t0 = time.time()
    m, tok = models.load(start, dtype=torch.float32, device=device)
    start_eval = evaluate_split(m, tok, split, "tags", n_traps=n_traps, n_answerable=n_answerable)
    del m
    if device == "cuda":
        torch.cuda.empty_cache()
    timing["start_eval_s"] = time.time() - t0
    print("SFT start on", split, json.dumps({k: start_eval[k]["rate"] for k in
                                             ("abstention", "false_abstention", "answerable_accuracy")}), flush=True)
    stop_at = t_start + budget_s - reserve_s
    procs = []
    for arm in arms:
        for seed in seeds:
            f = Path(logs) / f"honesty_{arm}_s{seed}.json"
            cmd = [sys.executable, "-m", "t4lib.train.grpo", "honesty-arm", "--start", str(start), "--arm", arm,
                   "--seed", str(seed), "--out", str(f), "--save-to", str(save_dir / f"{arm}_s{seed}"),
                   "--stop-at", str(stop_at)]
            for k, v in arm_kw.items():
                cmd += [_ARM_OPTIONS[k], str(v)]
            for k, v in (rewards or {}).items():
                cmd += ["--reward", f"{k}={v}"]
            if n_traps:
                cmd += ["--n-traps", str(n_traps)]
            if n_answerable:
                cmd += ["--n-answerable", str(n_answerable)]
            log = open(f.with_suffix(".log"), "w")
            procs.append((f, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                              env={**os.environ, "OMP_NUM_THREADS": "1",
                                                   "TRL_EXPERIMENTAL_SILENCE": "1"})))
    t0 = time.time()
    runs, errors = wait_all(procs)
    timing["runs_s"] = time.time() - t0
    print(f"runs: {len(runs)}/{len(procs)} in {timing['runs_s']:.1f}s", flush=True)
    drift_rec = None
    if drift:
        t0 = time.time()
        try:
            drift_rec = honesty_drift(start, split, n_answerable or 128, engine_kwargs={"compile": False})
        except Exception:  # the drift table must not lose the runs' figures
            errors.append(f"drift: {traceback.format_exc(limit=3)}")
            print(f"drift failed:\n{traceback.format_exc()}", flush=True)
        timing["drift_s"] = time.time() - t0
    if not runs:
        raise NothingSucceeded(f"every run failed; {out} left as it was:\n" + "\n".join(errors))
    summ = honesty_summary(start_eval, runs)
    env = results.environment()
    figs = honesty_figures(Path(str(model_id)).name, start_eval, summ, split, env)
    timing["total_s"] = time.time() - t_start
    curves = {arm: [{"seed": r["seed"], "curves": r["curves"]} for r in runs if r["arm"] == arm] for arm in summ}
    curves_path = Path(out).with_name(Path(out).stem + "_curves.json")
    results.write_json(curves_path, curves, default=str)
    results.write(out, figs, producer=__file__, model=model_id, split=split, start=str(start), sft_start=sft_rec,
                  start_eval=start_eval, summary=summ, drift=drift_rec, curves_file=curves_path.name,
                  runs=[{k: v for k, v in r.items() if k != "curves"} for r in runs], timing=timing,
                  settings=dict(arms=list(arms), seeds=list(seeds), rewards=check_reward_table(rewards), **arm_kw),
                  errors=errors)
    print(f"wrote {out} and {curves_path} ({timing['total_s']:.0f}s in all)", flush=True)
    return summ


#: the curves of a honesty sweep worth plotting, per step (TRL's names where TRL logs them)
HONESTY_CURVES = ("reward", "honesty/trap_abstention", "honesty/false_abstention", "honesty/answerable_correct",
                  "frac_reward_zero_std", "sampling/sampling_logp_difference/mean",
                  "sampling/importance_sampling_ratio/mean", "memory/peak_bytes")


def honesty_table(doc: dict) -> list[dict]:
    """Rows of a honesty-sweep record (:func:`honesty_sweep`'s file): the SFT start, then per arm the seed mean
    and range of abstention, false abstention and answerable accuracy change, and any degenerate seed."""
    st = doc["start_eval"]
    rows = [{"arm": "sft_start", "seeds": 1, "abstention": st["abstention"]["rate"],
             "false_abstention": st["false_abstention"]["rate"], "answerable_accuracy": st["answerable_accuracy"]["rate"],
             "answerable_accuracy_delta": 0.0, "degenerate": st.get("degenerate")}]
    for arm, s in doc["summary"].items():
        row = {"arm": arm, "seeds": len(s["seeds"])}
        for k in ("abstention", "false_abstention", "answerable_accuracy", "answerable_accuracy_delta"):
            row[k] = s[k]["mean"]
            row[f"{k}_range"] = f"{s[k]['min']:.3f}..{s[k]['max']:.3f}"
        row["final_train_reward"] = s["final_train_reward"]["mean"]
        row["degenerate"] = ", ".join(str(d) for d in s["degenerate"] if d) or None
        rows.append(row)
    return rows


def _reward_pairs(pairs) -> dict:
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        try:
            out[k] = float(v) if sep else None
        except ValueError:
            out[k] = None
        if out[k] is None:
            raise ValueError(f"--reward takes OUTCOME=NUMBER, got {p!r}")
    return out


def _honesty_options(ap, sweep: bool) -> None:
    """The options of one honesty run (TRL's GRPOConfig names where they mirror it; dashes accepted too)."""
    ap.add_argument("--max_steps", "--max-steps", type=int, default=60 if sweep else 4, dest="max_steps")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--num_generations", "--num-generations", type=int, default=8, dest="num_generations")
    ap.add_argument("--max_completion_length", "--max-completion-length", type=int, default=160,
                    dest="max_completion_length")
    ap.add_argument("--learning_rate", "--learning-rate", "--lr", type=float, default=2e-5, dest="learning_rate")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--trap-fraction", type=float, default=0.5)
    ap.add_argument("--split", default="test", choices=list(honesty.EVAL_SPLITS),
                    help="evaluation split: validation chooses a recipe, test reports it")
    ap.add_argument("--reward", action="append", default=[], metavar="OUTCOME=VALUE",
                    help=f"override one reward of the table {R.REWARDS}")
    ap.add_argument("--n-traps", type=int, default=None, help="evaluate on the first N traps only (quick looks)")
    ap.add_argument("--n-answerable", type=int, default=None)
    ap.add_argument("--start", default=None, help="a saved start checkpoint (default for a sweep: make one by SFT)")
    ap.add_argument("--out", required=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="GRPO with engine rollouts: one arm, or every arm and the benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a1 = sub.add_parser("arm")
    a1.add_argument("--model", default="tiny-cpu")
    a1.add_argument("--arm", default="cp_hybrid", choices=list(ARMS))
    a1.add_argument("--seed", type=int, default=0)
    a1.add_argument("--steps", type=int, default=4)
    a1.add_argument("--lr", type=float, default=2e-5)
    a1.add_argument("--prompts-per-step", type=int, default=8)
    a1.add_argument("--n-math-eval", type=int, default=200)
    a1.add_argument("--no-compile", action="store_true")
    a1.add_argument("--honesty", nargs="+", default=["honesty_rl.jsonl"], choices=list(HONESTY_SETS),
                    help="the honesty sets trained on (honesty_rl_wide.jsonl: 28 more RL templates)")
    a1.add_argument("--out", required=True)
    a3 = sub.add_parser("base-sets", help="the untrained model on every honesty set (train, RL split, eval)")
    a3.add_argument("--model", default="tiny-gpu")
    a3.add_argument("--out", required=True)
    a2 = sub.add_parser("all")
    a2.add_argument("--model", default="tiny-gpu")
    a2.add_argument("--steps", type=int, default=100)
    a2.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a2.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    a2.add_argument("--lr", type=float, default=2e-5)
    a2.add_argument("--benches", nargs="*", default=["drift", "speed", "step"], choices=["drift", "speed", "step"])
    a2.add_argument("--step-steps", type=int, default=3)
    a2.add_argument("--honesty", nargs="+", default=["honesty_rl.jsonl"], choices=list(HONESTY_SETS))
    a2.add_argument("--logs", default="/tmp/t4lib_grpo_logs")
    a2.add_argument("--out", required=True)
    a4 = sub.add_parser("honesty-sweep", help="SFT start, every arm x seed of GRPO for honest abstention as "
                                              "parallel processes, the drift table, one results file")
    _honesty_options(a4, True)
    a4.add_argument("--model", default=SWEEP_MODEL)
    a4.add_argument("--arms", nargs="+", default=list(ARMS))
    a4.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a4.add_argument("--save-dir", default=None, help="where the SFT start and each run's policy are saved "
                                                     "(default: models/ beside --out)")
    a4.add_argument("--logs", default="/tmp/t4lib_grpo_honesty_logs")
    a4.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget of the whole command")
    a4.add_argument("--reserve-s", type=float, default=75.0)
    a4.add_argument("--sft-epochs", type=float, default=SFT_START["epochs"])
    a4.add_argument("--sft-max-steps", type=int, default=-1, help="> 0: that many SFT steps instead of epochs")
    a4.add_argument("--no-drift", action="store_true")
    a5 = sub.add_parser("honesty-arm", help="one GRPO run of the honesty sweep (the sweep starts these)")
    _honesty_options(a5, False)
    a5.add_argument("--arm", default="cp_hybrid")
    a5.add_argument("--seed", type=int, default=0)
    a5.add_argument("--save-to", default=None)
    a5.add_argument("--stop-at", type=float, default=None, help="unix time after which training stops")
    a = ap.parse_args(argv)
    _check_args(ap, a)
    if a.cmd in ("honesty-sweep", "honesty-arm"):
        kw = dict(max_steps=a.max_steps, prompts_per_step=a.prompts_per_step, num_generations=a.num_generations,
                  max_completion_length=a.max_completion_length, learning_rate=a.learning_rate,
                  temperature=a.temperature, beta=a.beta, trap_fraction=a.trap_fraction, split=a.split)
        rewards = _reward_pairs(a.reward)
        if a.cmd == "honesty-arm":
            rec = run_honesty_arm(a.start, a.arm, a.seed, rewards=rewards, n_traps=a.n_traps,
                                  n_answerable=a.n_answerable, save_to=a.save_to, stop_at=a.stop_at,
                                  engine_kwargs={"compile": False}, **kw)
            results.write_json(a.out, rec, default=str)
            return 0
        try:
            summ = honesty_sweep(a.out, model_id=a.model, arms=tuple(a.arms), seeds=tuple(a.seeds), start=a.start,
                                 save_dir=a.save_dir, logs=a.logs, budget_s=a.budget_s, reserve_s=a.reserve_s,
                                 sft_epochs=a.sft_epochs, sft_max_steps=a.sft_max_steps, n_traps=a.n_traps,
                                 n_answerable=a.n_answerable, drift=not a.no_drift, rewards=rewards, **kw)
        except NothingSucceeded as e:
            print(e, file=sys.stderr)
            return 1
        print(json.dumps({arm: {k: s[k]["mean"] for k in ("abstention", "false_abstention",
                                                          "answerable_accuracy_delta")} | {"degenerate": s["degenerate"]}
                          for arm, s in summ.items()}, indent=1))
        return 0
    if a.cmd == "arm":
        rec = run_grpo(a.model, a.arm, a.seed, a.steps, learning_rate=a.lr, prompts_per_step=a.prompts_per_step,
                       n_math_eval=a.n_math_eval, engine_kwargs={"compile": False} if a.no_compile else None,
                       output_dir=f"/tmp/t4lib_grpo_{a.arm}_{a.seed}",
                       honesty=a.honesty[0] if len(a.honesty) == 1 else a.honesty)
        results.write_json(a.out, rec, default=str)
    elif a.cmd == "base-sets":
        print(json.dumps(base_on_honesty_sets(a.model, a.out), indent=1, default=str))
    else:
        try:
            summ = run_all(a.out, a.steps, tuple(a.seeds), tuple(a.arms), a.model, a.logs, a.lr, tuple(a.benches),
                           a.step_steps, tuple(a.honesty))
        except NothingSucceeded as e:
            print(e, file=sys.stderr)
            return 1
        print(json.dumps(summ, indent=1, default=str))
    return 0


#: run_grpo's argument -> the command line's option
_FLAGS = {"steps": "--steps", "prompts_per_step": "--prompts-per-step", "learning_rate": "--lr",
          "n_math_eval": "--n-math-eval", "honesty": "--honesty", "arm": "--arm(s)", "max_steps": "--max_steps",
          "seed": "--seed(s)", "split": "--split", "trap_fraction": "--trap-fraction", "start": "--start",
          "num_generations": "--num_generations", "max_completion_length": "--max_completion_length",
          "temperature": "--temperature", "beta": "--beta", "n_traps": "--n-traps", "n_answerable": "--n-answerable",
          "reward": "--reward"}


def _check_args(ap, a) -> None:
    """The options a run would reject late (or never), checked before a model is loaded; ``ap.error`` names
    the option."""
    try:
        if a.cmd == "arm":
            check_run_args(arm=a.arm, steps=a.steps, prompts_per_step=a.prompts_per_step, learning_rate=a.lr,
                           n_math_eval=a.n_math_eval, honesty=a.honesty)
            _seed("--seed", a.seed)
        elif a.cmd == "all":
            check_run_args(steps=a.steps, learning_rate=a.lr, honesty=a.honesty)
            _positive_int("--step-steps", a.step_steps)
            for seed in a.seeds:
                _seed("--seeds", seed)
            for flag, values in (("--arms", a.arms), ("--seeds", a.seeds)):
                if len(set(values)) != len(values):  # a repeat would run twice onto the same log and record
                    raise ValueError(f"{flag} repeats a value: {values}")
            results.check_writable(a.logs, "--logs", directory=True)
        elif a.cmd in ("honesty-sweep", "honesty-arm"):
            arms = a.arms if a.cmd == "honesty-sweep" else [a.arm]
            seeds = a.seeds if a.cmd == "honesty-sweep" else [a.seed]
            check_honesty_args(arms=arms, seeds=seeds, max_steps=a.max_steps, prompts_per_step=a.prompts_per_step,
                               num_generations=a.num_generations, max_completion_length=a.max_completion_length,
                               learning_rate=a.learning_rate, temperature=a.temperature, beta=a.beta,
                               trap_fraction=a.trap_fraction, split=a.split, rewards=_reward_pairs(a.reward),
                               start=a.start)
            if a.cmd == "honesty-arm" and a.start is None:
                raise ValueError("start: honesty-arm needs --start (a saved checkpoint)")
            for name, v in (("n_traps", a.n_traps), ("n_answerable", a.n_answerable)):
                if v is not None:
                    _positive_int(name, v)
            if a.cmd == "honesty-sweep":
                for flag, values in (("--arms", a.arms), ("--seeds", a.seeds)):
                    if len(set(values)) != len(values):
                        raise ValueError(f"{flag} repeats a value: {values}")
                if not (a.budget_s > a.reserve_s >= 0):
                    raise ValueError(f"--budget-s must exceed --reserve-s >= 0, got {a.budget_s} and {a.reserve_s}")
                if not (a.sft_epochs > 0):
                    raise ValueError(f"--sft-epochs must be > 0, got {a.sft_epochs}")
                results.check_writable(a.logs, "--logs", directory=True)
        results.check_writable(a.out, "--out")
    except ValueError as e:
        name, _, rest = str(e).partition(" ")
        ap.error(f"{_FLAGS.get(name, name)} {rest}")


if __name__ == "__main__":
    sys.exit(main())
