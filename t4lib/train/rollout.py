"""Rollouts from a (quantized) copy of the policy through :class:`t4lib.serving.StaticEngine`.

:class:`RolloutModel` keeps a copy of the policy whose Linear layers follow a
:class:`~t4lib.train.cp_hybrid.CPHybridPolicy`: fp16 ``nn.Linear``, W4A16
:class:`~t4lib.quant.QuantLinear`, or a :class:`PhaseLinear` holding both
(prefill in one precision, decode in the other). :meth:`RolloutModel.refresh`
copies the trainer's current weights into it *in place* (re-quantizing the
INT4 modules by RTN), so the engine's captured CUDA graph stays valid: this is
the "quantized copy refreshed each step" way of full fine-tuning; the seconds
it costs are kept in ``refresh_seconds``. ``simulate_int4`` (default: when the
copy is not on CUDA) holds INT4 modules as Linear layers carrying the
dequantized RTN weight, the very values the W4A16 kernel multiplies by, since
the CPU reference of ``QuantLinear`` unpacks the weight on every call.

:func:`sample_groups` samples ``num_generations`` completions per prompt, one
engine batch per prompt group, and returns each sampled token's log-probability
under the rollout policy, ``log softmax(logits / temperature)[token]``, from the
logits the engine recorded while sampling.
"""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from t4lib.models.shapes import QWEN25_15B
from t4lib.quant.linear import QuantLinear
from t4lib.quant.w4a16 import quantize_rtn
from t4lib.train.cp_hybrid import CPHybridPolicy
from t4lib.models import corpus, schema
from t4lib.models.tiny import eval_math
from t4lib.quant.w4a16 import rtn_codes
from t4lib.serving import StaticEngine
from t4lib.serving.engine import linear_weight_bytes
from t4lib.train.importance import token_kl


class PhaseLinear(nn.Module):
    """A Linear that runs the prompt's prefill (more than one position per row) with ``prefill`` and the
    one-token decode steps with ``decode``; the choice is made from the input's shape, so it is fixed when
    the engine compiles and captures the decode step. ``x [B, T, in]``."""

    def __init__(self, prefill: nn.Module, decode: nn.Module):
        super().__init__()
        self.prefill, self.decode = prefill, decode
        self.in_features, self.out_features = decode.in_features, decode.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() >= 3 and x.shape[-2] > 1:
            return self.prefill(x)
        return self.decode(x)


def _fp16_linear(lin: nn.Linear, dtype) -> nn.Linear:
    out = nn.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None, device=lin.weight.device,
                    dtype=dtype)
    out.requires_grad_(False)
    return out


def _quant_linear(lin: nn.Linear, spec: dict, simulate: bool, dtype) -> nn.Module:
    if simulate:  # same values as the kernel multiplies by, held dequantized (fast on CPU)
        out = _fp16_linear(lin, dtype)
        out.rtn_group_size = spec.get("group_size", 128)
        return out
    return QuantLinear(lin.in_features, lin.out_features, lin.bias is not None, spec.get("group_size", 128),
                       device=lin.weight.device)


def policy_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """name -> current tensor of a policy (PEFT adapters merged into the base weights by the caller;
    names without the PEFT wrappers' ``base_model.model.`` / ``.base_layer`` parts)."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    out = {}
    for n, p in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers()):
        if "lora_" in n:
            continue
        out[n.replace(".base_layer", "")] = p
    return out


class RolloutModel(nn.Module):
    """The rollout copy of a policy under ``precision`` (see module docstring)."""

    def __init__(self, policy_model: nn.Module, precision: CPHybridPolicy, dtype: torch.dtype = torch.float16,
                 simulate_int4: bool | None = None):
        super().__init__()
        if not isinstance(precision, CPHybridPolicy):
            raise TypeError(f"precision must be a CPHybridPolicy, got {type(precision).__name__}")
        base = policy_model.get_base_model() if hasattr(policy_model, "get_base_model") else policy_model
        if hasattr(base, "merge_and_unload"):
            raise TypeError("pass the PEFT model itself, not its LoRA layers")
        self.precision = precision
        self.dtype = dtype
        # the skeleton: a deep copy with LoRA wrappers dropped (their merged weights are copied by refresh)
        m = copy.deepcopy(base)
        for mod in m.modules():
            # a trainer may patch an instance's forward (accelerate's fp32-output wrapper): the deep copy's
            # patched forward would still call the original model, so fall back to the class's forward
            for attr in ("forward", "_old_forward", "_hf_hook"):
                mod.__dict__.pop(attr, None)
        _unwrap_lora(m)
        m = m.to(dtype).eval().requires_grad_(False)
        if simulate_int4 is None:
            simulate_int4 = not next(m.parameters()).is_cuda
        self.simulate_int4 = bool(simulate_int4)
        pol = precision.check(m)
        for name, spec in pol.items():
            parent_name, _, leaf = name.rpartition(".")
            parent = m.get_submodule(parent_name) if parent_name else m
            lin = getattr(parent, leaf)
            if spec["format"] == "fp16":
                continue
            ph = precision.phases
            mk = {"fp16": lambda: _fp16_linear(lin, dtype), "w4a16": lambda: _quant_linear(lin, spec, self.simulate_int4, dtype)}
            if ph["prefill"] == ph["decode"] == "w4a16":
                new = mk["w4a16"]()
            else:
                new = PhaseLinear(mk[ph["prefill"]](), mk[ph["decode"]]())
            setattr(parent, leaf, new)
        self.model = m
        self.config = m.config
        self.refresh_seconds: list[float] = []
        self.refresh(policy_model)

    def forward(self, *a, **kw):
        return self.model(*a, **kw)

    @torch.no_grad()
    def refresh(self, policy_model: nn.Module) -> float:
        """Copy the policy's current weights in place (re-quantizing INT4 modules); returns seconds."""
        cuda = next(self.model.parameters()).is_cuda
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        merged = hasattr(policy_model, "merge_adapter")
        if merged:
            policy_model.merge_adapter()
        try:
            src = policy_weights(policy_model)
            dst_mods = dict(self.model.named_modules())
            for name, mod in dst_mods.items():
                if isinstance(mod, (QuantLinear, PhaseLinear)) or (isinstance(mod, nn.Linear) and name):
                    if any(name.startswith(p + ".") for p, m in dst_mods.items()
                           if isinstance(m, PhaseLinear) and p):
                        continue  # the halves of a PhaseLinear are filled with it
                    _fill(mod, src[name + ".weight"], src.get(name + ".bias"))
            for n, p in list(self.model.named_parameters()) + list(self.model.named_buffers()):
                owner = n.rsplit(".", 1)[0]
                if isinstance(dst_mods.get(owner), (nn.Linear, QuantLinear)):
                    continue
                if n in src and p.is_floating_point():
                    p.copy_(src[n])
        finally:
            if merged:
                policy_model.unmerge_adapter()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        self.refresh_seconds.append(dt)
        return dt


def _unwrap_lora(model: nn.Module) -> None:
    """Replace PEFT LoRA layers of a deep copy by their base Linear."""
    for name, mod in list(model.named_modules()):
        if hasattr(mod, "base_layer") and hasattr(mod, "lora_A"):
            parent_name, _, leaf = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, leaf, mod.base_layer)


def _fill(mod: nn.Module, w: torch.Tensor, b: torch.Tensor | None) -> None:
    if isinstance(mod, PhaseLinear):
        _fill(mod.prefill, w, b)
        _fill(mod.decode, w, b)
    elif isinstance(mod, QuantLinear):
        qw = quantize_rtn(w.detach(), mod.group_size)
        mod.qweight.copy_(qw.qweight)
        mod.scales.copy_(qw.scales)
        if b is not None:
            mod.bias.copy_(b)
    elif getattr(mod, "rtn_group_size", None):
        mod.weight.copy_(rtn_dequantized(w, mod.rtn_group_size))
        if b is not None:
            mod.bias.copy_(b)
    else:
        mod.weight.copy_(w)
        if b is not None:
            mod.bias.copy_(b)


def rtn_dequantized(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """``quantize_rtn(w, group_size).dequantize()`` without packing the nibbles: ``fp16(q * s)``."""
    N, K = w.shape
    q, s = rtn_codes(w, group_size)
    return (q.float().reshape(N, K // group_size, group_size) * s.float()[..., None]).to(torch.float16).reshape(N, K)


def check_groups(prompt_ids: list, num_generations: int) -> None:
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}")
    if len(prompt_ids) % num_generations:
        raise ValueError(f"num_generations={num_generations} does not divide the batch of {len(prompt_ids)} prompts")
    for i in range(0, len(prompt_ids), num_generations):
        g = prompt_ids[i:i + num_generations]
        if any(list(p) != list(g[0]) for p in g):
            raise ValueError(f"prompts {i}..{i + num_generations - 1} are not one group of num_generations "
                             "copies of one prompt")


@torch.no_grad()
def sample_groups(engine, prompt_ids: list[list[int]], num_generations: int, max_new_tokens: int,
                  temperature: float = 1.0, eos_token_id: int | list[int] | None = None,
                  merge_equal_lengths: bool = False, merge_groups: bool = False):
    """Sample a completion for every prompt of ``prompt_ids`` (groups of ``num_generations`` identical
    prompts, one engine batch each; with ``merge_equal_lengths`` every group whose prompt has the same
    length joins one batch; with ``merge_groups`` every group joins one ragged batch, each row sampled from
    the distribution it would have alone). Returns ``(completion_ids, logprobs, stats)``: lists per row cut
    after eos, the rollout policy's log-probability of each sampled token, and ``{"tokens", "seconds"}``."""
    check_groups(prompt_ids, num_generations)
    starts = list(range(0, len(prompt_ids), num_generations))
    batches = {}
    for i in starts:
        key = 0 if merge_groups else len(prompt_ids[i]) if merge_equal_lengths else i
        batches.setdefault(key, []).extend(range(i, i + num_generations))
    comp, lps = [None] * len(prompt_ids), [None] * len(prompt_ids)
    ntok, t0 = 0, time.perf_counter()
    for rows in batches.values():
        # each token's log-probability is taken inside the engine's step: [B, new] floats leave the GPU, not
        # the [B, new, V] logits (at a 152k vocabulary, 64 x 128 of them are 5 GB)
        prompts = [torch.as_tensor(prompt_ids[r]).tolist() for r in rows]   # ragged when groups merge
        res = engine.generate_with_stats(prompts, max_new_tokens, do_sample=True, temperature=temperature,
                              eos_token_id=eos_token_id, output_logprobs=True)
        tok_lp = res.logprobs
        for b, (r, n) in enumerate(zip(rows, res.lengths)):
            comp[r] = res.new_tokens[b, :n].tolist()
            lps[r] = tok_lp[b, :n].tolist()
            ntok += n
    return comp, lps, {"tokens": ntok, "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- measurements

def qwen15_shape_model(device="cuda", dtype=torch.float16, num_hidden_layers: int = 28):
    """A Qwen2.5-1.5B-shaped Qwen2 model (:data:`t4lib.models.shapes.QWEN25_15B`) with random
    weights (no hub needed)."""
    from transformers import AutoModelForCausalLM, Qwen2Config  # optional: transformers (the train extra)

    cfg = Qwen2Config(**dict(QWEN25_15B, num_hidden_layers=num_hidden_layers, eos_token_id=151643,
                             pad_token_id=151643, bos_token_id=151643))
    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: a CPU init of 1.5B parameters takes long
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()


@torch.no_grad()
def rollout_speed(model, prompt_len: int = 64, group: int = 8, new_tokens: int = 128, repeats: int = 3,
                  engine_kwargs: dict | None = None) -> dict:
    """Sampled tokens/s (temperature 1, whole vocabulary) of one group of ``group`` completions of
    ``new_tokens`` tokens, end to end (prefill included): :class:`StaticEngine` recording each token's
    log-probability (as rollouts do) vs Hugging Face ``generate``, same model, same process.
    Median over ``repeats`` after one warm-up call each."""
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(1000, model.config.vocab_size), (1, prompt_len), generator=g).repeat(group, 1)

    def timed(fn):
        ts = []
        for i in range(repeats + 1):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            if i:
                ts.append(time.perf_counter() - t0)
        ts.sort()
        return ts[len(ts) // 2]

    eng = StaticEngine(model, max_len=prompt_len + new_tokens, **(engine_kwargs or {}))
    out = {"group": group, "new_tokens": new_tokens, "prompt_len": prompt_len}
    t = timed(lambda: eng.generate_with_stats(ids, new_tokens, do_sample=True, temperature=1.0, output_logprobs=True))
    out["engine_s"], out["engine_compiled"] = t, eng._decode_forward is not None and eng.compile_error is None
    out["engine_graph"] = eng.graph is not None
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
              min_new_tokens=new_tokens, pad_token_id=model.config.eos_token_id)
    out["hf_generate_s"] = timed(lambda: model.generate(ids.to(dev), **kw))
    n = group * new_tokens
    for k in ("engine", "hf_generate"):
        out[f"{k}_tokens_per_s"] = n / out[f"{k}_s"]
    out["engine_speedup_vs_hf_generate"] = out["engine_tokens_per_s"] / out["hf_generate_tokens_per_s"]
    return out


@torch.no_grad()
def drift_table(model, tokenizer, precisions: dict, n_docs: int = 64, n_math: int = 200, group: int = 8,
                new_tokens: int = 48, n_prompts: int = 8, engine_kwargs: dict | None = None,
                texts: list[str] | None = None, prompt_texts: list[str] | None = None, accuracy=None,
                max_len: int = 192) -> dict:
    """Per rollout precision (name -> :class:`CPHybridPolicy`): per-token ``KL(p_policy || p_rollout)``
    and top-1 agreement on held-out text (the policy's own reference completions of ``math_heldout``,
    teacher-forced; when the two phases differ, one token at a time, i.e. in the decode precision), greedy
    held-out accuracy, Linear weight bytes, and sampled rollout tokens/s (groups of ``group``).

    Another model's data: ``texts`` (teacher-forced, cut to the shortest), ``prompt_texts`` (rollout prompts),
    ``accuracy`` (``fn(model) -> (correct, n)``, greedy on the model's own held-out set) replace the
    ``math_heldout`` defaults; ``max_len`` is the engine's cache length (prompt + ``new_tokens``)."""
    dev = next(model.parameters()).device
    recs = corpus.load_jsonl("math_heldout.jsonl")
    docs = texts if texts is not None else [schema.math_prompt(r["question"]) + schema.math_completion(
        r["steps"], r["answer"]) for r in recs[:n_docs]]
    enc = [tokenizer(d, add_special_tokens=False)["input_ids"] for d in docs]
    L = min(map(len, enc))
    ids = torch.tensor([e[:L] for e in enc], device=dev)
    ref = model(input_ids=ids).logits.float()
    prompt_texts = prompt_texts if prompt_texts is not None else [schema.math_prompt(r["question"])
                                                                  for r in recs[n_docs:n_docs + n_prompts]]
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompt_texts[:n_prompts]]
    rows = {}
    for name, prec in precisions.items():
        rm = RolloutModel(model, prec, dtype=torch.float16 if dev.type == "cuda" else torch.float32)
        # teacher-forced with one-token steps would run the decode precision; a full forward runs prefill's
        dec = _decode_logits(rm, ids) if prec.phases["prefill"] != prec.phases["decode"] else None
        lg = rm(input_ids=ids).logits.float() if dec is None else dec
        row = {"kl_per_token": token_kl(ref, lg), "top1_agreement": (ref.argmax(-1) == lg.argmax(-1)).float().mean().item(),
               "linear_weight_bytes": linear_weight_bytes(rm.model), "policy_weight_bytes": prec.weight_bytes(model),
               "fp16_modules": len(prec.fp16_modules), "phases": prec.phases}
        eng = StaticEngine(rm, max_len=max_len, **(engine_kwargs or {}))
        sample_groups(eng, [prompts[0]] * group, group, new_tokens, 1.0, None)  # warm-up (graph capture)
        _, _, st = sample_groups(eng, [p for p in prompts for _ in range(group)], group, new_tokens, 1.0, None)
        row["rollout_tokens_per_s"] = st["tokens"] / st["seconds"]
        if accuracy is not None:
            k, n = accuracy(rm.model)
            row["accuracy"], row["accuracy_k"], row["accuracy_n"] = (k / n if n else float("nan")), k, n
        else:
            row["math_heldout_accuracy"] = eval_math(rm.model, tokenizer, n_math, 4, 64, dev)["math_exact_match"]
            row["math_n"] = n_math
        rows[name] = row
        del eng, rm
    return rows


def _decode_logits(rm: "RolloutModel", ids: torch.Tensor) -> torch.Tensor:
    """Logits of every position computed one token at a time (the decode phase's precision) with a
    dynamic cache."""
    from transformers import DynamicCache  # optional: transformers (the train extra)

    cache, outs = DynamicCache(), []
    for t in range(ids.shape[1]):
        o = rm.model(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        outs.append(o.logits.float())
    return torch.cat(outs, 1)
