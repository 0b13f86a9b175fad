"""Quantize the Linear layers of any Hugging Face causal LM by a per-module policy.

A *policy* is a plain ``dict``: fully qualified module name -> spec, where a
spec is ``{"format": "fp16"}`` (keep the module as it is) or
``{"format": "w4a16", "group_size": 128, "method": "rtn" | "gptq"}``.
:func:`default_policy` lists every ``nn.Linear`` of a model: ``lm_head`` (and
any Linear whose in_features is not a multiple of the group size) stays fp16,
embeddings are not Linear layers and are never touched. Edit the dict (or
build one) and pass it to :func:`quantize_model`; keys may also be
``fnmatch`` patterns such as ``"*.mlp.down_proj"`` (exact names win, then the
first matching pattern in insertion order; unmatched Linears stay fp16).
:func:`save_quantized` / :func:`load_quantized` store the model with
safetensors, the policy in the file's metadata and the config beside it.
"""
from __future__ import annotations

import copy
import fnmatch
import json
from pathlib import Path
from typing import Iterable

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn
from tqdm.auto import tqdm

from t4lib.decoding.tokens import check_ids_tensor, vocab_size
from t4lib.quant.linear import QuantLinear
from t4lib.quant.quantize import check_weight_range
from t4lib.quant.w4a16 import GROUP_SIZES, HessianAccumulator, check_group_size

FORMATS = ("fp16", "w4a16")
METHODS = ("rtn", "gptq")
KEEP_FP16 = ("lm_head",)


def linear_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]


def default_policy(model: nn.Module, group_size: int = 128, method: str = "rtn",
                   keep_fp16: Iterable[str] = KEEP_FP16) -> dict[str, dict]:
    """name -> spec for every nn.Linear of ``model`` (see module docstring)."""
    _check_model(model)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(keep_fp16, str):
        raise TypeError(f"keep_fp16 must be an iterable of module names, not one string ({keep_fp16!r})")
    keep = tuple(keep_fp16)
    pol = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if name in keep or leaf in keep:
            pol[name] = {"format": "fp16", "reason": "kept fp16 by default (output head)"}
        elif mod.in_features % group_size:
            pol[name] = {"format": "fp16", "reason": f"in_features={mod.in_features} not a multiple of "
                                                     f"group_size={group_size}"}
        else:
            pol[name] = {"format": "w4a16", "group_size": group_size, "method": method}
    return pol


def group_size_for(model_or_hidden, min_groups: int = 4) -> int:
    """The W4A16 group size for a model of hidden size ``h`` (a model with ``config.hidden_size``, or ``h``):
    the largest of :data:`GROUP_SIZES` (32, 64, 128) that divides ``h`` with at least ``min_groups`` groups
    per row of ``h`` inputs. 128 for every ``h >= 512`` that 128 divides (Qwen2.5: 896, 1536, 2048), 64 for
    256, 32 for the project's 128-wide tiny models (128 there would be one scale per row)."""
    h = model_or_hidden
    if not isinstance(h, int):
        h = getattr(getattr(h, "config", None), "hidden_size", None)
    if isinstance(h, bool) or not isinstance(h, int) or h < 1:
        raise ValueError(f"model_or_hidden must be a model with config.hidden_size or a positive int, "
                         f"got {model_or_hidden!r}")
    for g in sorted(GROUP_SIZES, reverse=True):
        if h % g == 0 and h // g >= min_groups:
            return g
    raise ValueError(f"hidden size {h}: no group size of {GROUP_SIZES} divides it with at least {min_groups} "
                     f"groups per row")


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not linear_names(model) and not any(isinstance(m, QuantLinear) for m in model.modules()):
        raise ValueError(f"model ({type(model).__name__}) has no nn.Linear layers to quantize")


def _check_spec(name: str, spec) -> dict:
    if not isinstance(spec, dict) or spec.get("format") not in FORMATS:
        raise ValueError(f"policy[{name!r}] must be a dict with 'format' in {FORMATS}, got {spec!r}")
    if spec["format"] == "w4a16":
        g = spec.get("group_size", 128)
        if g not in GROUP_SIZES:
            raise ValueError(f"policy[{name!r}]: group_size must be one of {GROUP_SIZES}, got {g!r}")
        if spec.get("method", "rtn") not in METHODS:
            raise ValueError(f"policy[{name!r}]: method must be one of {METHODS}, got {spec.get('method')!r}")
    return spec


def resolve_policy(model: nn.Module, policy: dict | None) -> dict[str, dict]:
    """The spec of every nn.Linear of ``model`` under ``policy`` (patterns expanded)."""
    names = linear_names(model)
    if policy is None:
        return default_policy(model)
    if not isinstance(policy, dict):
        raise TypeError(f"policy must be a dict (module name -> spec), got {type(policy).__name__}")
    for k, v in policy.items():
        _check_spec(k, v)
        if not any(c in k for c in "*?[") and k not in names:
            raise ValueError(f"policy names {k!r}, which is not an nn.Linear of the model "
                             f"(first Linears: {names[:4]})")
    patterns = [(k, v) for k, v in policy.items() if any(c in k for c in "*?[")]
    out = {}
    for n in names:
        if n in policy:
            out[n] = policy[n]
            continue
        hit = next((v for k, v in patterns if fnmatch.fnmatchcase(n, k)), None)
        out[n] = hit if hit is not None else {"format": "fp16", "reason": "not named by the policy"}
    return out


@torch.no_grad()
def collect_hessians(model: nn.Module, names: list[str], calib: Iterable[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run ``model`` on calibration batches (input_ids tensors) and return H = sum x x^T of the inputs
    of each named Linear."""
    mods = dict(model.named_modules())
    acc = {n: HessianAccumulator(mods[n].in_features, mods[n].weight.device) for n in names}
    hooks = [mods[n].register_forward_hook(lambda m, inp, out, a=acc[n]: a.add(inp[0])) for n in names]
    n_batches = 0
    vocab = vocab_size(model)
    try:
        dev = next(model.parameters()).device
        for ids in calib:
            if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"calib must yield integer input_ids tensors, got "
                                f"{getattr(ids, 'dtype', type(ids).__name__)}")
            check_ids_tensor(ids, vocab, f"calib batch {n_batches}")   # before the embedding indexes them
            model(input_ids=ids.to(dev).reshape(-1, ids.shape[-1]))
            n_batches += 1
    finally:
        for h in hooks:
            h.remove()
    if n_batches == 0:
        raise ValueError("calib is empty: GPTQ needs at least one calibration batch")
    return {n: a.H / max(a.n, 1) for n, a in acc.items()}


def _linear(model: nn.Module, name: str) -> nn.Linear:
    parent_name, _, leaf = name.rpartition(".")
    return getattr(model.get_submodule(parent_name) if parent_name else model, leaf)


def _layer_error(name: str, e: Exception) -> Exception:
    """``e`` naming the layer it came from (same type for a TypeError/ValueError, else RuntimeError)."""
    cls = type(e) if type(e) in (TypeError, ValueError) else RuntimeError
    return cls(f"quantize_model: layer {name!r}: {e} (no layer was replaced)")


def _check_layer(name: str, lin: nn.Linear, spec: dict) -> None:
    """Group size, finite weights in the format's fp16 range (what :func:`.quantize.quantize_rtn` refuses)."""
    try:
        check_group_size(spec.get("group_size", 128), lin.in_features)
        if not torch.isfinite(lin.weight).all():
            raise ValueError("weight contains NaN or Inf")
        check_weight_range(lin.weight)
    except (TypeError, ValueError) as e:
        raise _layer_error(name, e) from e


def _quantized(name: str, lin: nn.Linear, spec: dict, hessian) -> QuantLinear:
    try:
        return QuantLinear.from_linear(lin, spec.get("group_size", 128), spec.get("method", "rtn"), hessian)
    except Exception as e:
        raise _layer_error(name, e) from e


@torch.no_grad()
def quantize_model(model: nn.Module, policy: dict | None = None, *, calib: Iterable[torch.Tensor] | None = None,
                   inplace: bool = True, progress: bool = False) -> nn.Module:
    """Replace the Linear layers of ``model`` by :class:`QuantLinear` per ``policy``.

    ``policy=None`` uses :func:`default_policy` (RTN, group 128, lm_head fp16).
    Modules whose spec has ``method="gptq"`` need ``calib``: an iterable of
    ``input_ids`` tensors run through the (unquantized) model once to collect
    each layer's input Hessian. Every layer is checked, then quantized, before
    any is replaced: a failure names the layer and leaves the model unchanged.
    The resolved policy is stored as ``model.t4lib_quant_policy``. Returns the
    model (a deep copy when ``inplace=False``).
    """
    _check_model(model)
    for name, v in (("inplace", inplace), ("progress", progress)):
        if not isinstance(v, bool):
            raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    if not linear_names(model):
        raise ValueError(f"model ({type(model).__name__}) has no nn.Linear layers left to quantize")
    pol = resolve_policy(model, policy)
    todo = [n for n, s in pol.items() if s["format"] == "w4a16"]
    if not todo:
        raise ValueError("the policy quantizes no module (every Linear is fp16)")
    for name in todo:   # the cheap checks of every layer, before copying, calibrating or quantizing
        _check_layer(name, _linear(model, name), pol[name])
    if not inplace:
        model = copy.deepcopy(model)
    gptq = [n for n in todo if pol[n].get("method", "rtn") == "gptq"]
    hess = {}
    if gptq:
        if calib is None:
            raise ValueError(f"policy asks for GPTQ on {len(gptq)} modules but calib is None")
        hess = collect_hessians(model, gptq, calib)
    it = todo
    if progress:
        it = tqdm(todo, desc="quantize", leave=False)
    # every layer is quantized before any is replaced: a layer that fails leaves the model as it was
    new = {}
    for name in it:
        spec = pol[name]
        new[name] = _quantized(name, _linear(model, name), spec, hess.pop(name, None))
    for name, q in new.items():
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, q)
    model.t4lib_quant_policy = pol
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers (tied tensors counted once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def save_quantized(model: nn.Module, path: str | Path) -> Path:
    """Write ``model.safetensors`` (with the policy in its metadata) and the HF config to ``path/``."""
    pol = getattr(model, "t4lib_quant_policy", None)
    if pol is None:
        raise ValueError("model was not quantized with t4lib.quant.quantize_model (no t4lib_quant_policy)")
    # load_quantized finds the layers by the policy's names: refuse a model whose layers moved
    # (e.g. stacked by t4lib.serving.fuse_projections) rather than write a file it cannot load.
    mods = dict(model.named_modules())
    moved = [n for n in pol if not isinstance(mods.get(n), (nn.Linear, QuantLinear))]
    if moved:
        raise ValueError(f"the policy's layers {moved[:3]} are no longer Linear/QuantLinear modules of the model; "
                         "if its projections are fused, call t4lib.serving.unfuse_projections(model) before saving")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "config") and hasattr(model.config, "save_pretrained"):
        model.config.save_pretrained(path)
    save_model(model, str(path / "model.safetensors"), metadata={"t4lib_quant_policy": json.dumps(pol),
                                                                  "format": "pt"})
    return path


def load_quantized(path: str | Path, model: nn.Module | None = None, device=None,
                   dtype: torch.dtype = torch.float16) -> nn.Module:
    """Rebuild a model saved by :func:`save_quantized`.

    ``model``: an unquantized skeleton of the same architecture; by default
    one is built from the saved config with ``AutoModelForCausalLM.from_config``.
    """
    path = Path(path)
    f = path / "model.safetensors"
    if not f.is_file():
        raise FileNotFoundError(f"{f} not found (expected a directory written by save_quantized)")
    with safe_open(str(f), "pt") as fh:
        meta = fh.metadata() or {}
    if "t4lib_quant_policy" not in meta:
        raise ValueError(f"{f} carries no t4lib_quant_policy metadata: not written by save_quantized")
    pol = json.loads(meta["t4lib_quant_policy"])
    if model is None:
        from transformers import AutoConfig, AutoModelForCausalLM  # optional: transformers (the train extra)

        cfg = AutoConfig.from_pretrained(path)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    mods = dict(model.named_modules())
    for name, spec in pol.items():
        if spec["format"] != "w4a16":
            continue
        lin = mods.get(name)
        if not isinstance(lin, nn.Linear):
            raise ValueError(f"saved policy quantizes {name!r}, which is not an nn.Linear of the given model")
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, QuantLinear(lin.in_features, lin.out_features, lin.bias is not None,
                                          spec.get("group_size", 128)))
    model = model.to(dtype)  # float params; QuantLinear int32 buffers are untouched by .to(dtype)
    load_model(model, str(f), strict=True)
    if device is not None:
        model = model.to(device)
    model.t4lib_quant_policy = pol
    model.eval()
    return model
