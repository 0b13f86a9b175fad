"""CP-Hybrid: a Component-and-Phase hybrid precision policy for rollouts.

A :class:`CPHybridPolicy` is a plain object that extends the W4A16
quantization policy of :mod:`t4lib.quant` (module name -> spec) with

* **component** precision: a calibration pass (:func:`layer_sensitivity`)
  measures the per-token ``KL(p_fp16 || p_q)`` that quantizing each Linear
  *alone* (RTN INT4) causes on calibration text; the most sensitive modules
  stay fp16 as long as the rollout copy's Linear weights fit ``budget_bytes``;
* **phase** precision: ``phases = {"prefill": ..., "decode": ...}``, which
  precision the quantized modules run in for the prompt's prefill and for
  the sampled (decode) tokens. ``{"prefill": "fp16", "decode": "w4a16"}``
  makes the prompt's KV cache exact, but a module that runs both precisions
  keeps both weights (counted by :meth:`CPHybridPolicy.weight_bytes`, so it
  costs more memory than fp16 alone); the default is INT4 in both phases.

``policy.precision`` is an ordinary :func:`t4lib.quant.quantize_model` policy
and every choice is inspectable: ``policy.sensitivity`` (KL per module),
``policy.fp16_modules``, ``policy.reasons``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..quant.model import default_policy, resolve_policy
from ..quant.quantize import quantize_rtn
from ..tokens import check_ids_tensor, vocab_size

PRECISIONS = ("fp16", "w4a16")
PHASES = ("prefill", "decode")


@dataclass
class CPHybridPolicy:
    precision: dict[str, dict]                  # t4lib.quant policy: name -> {"format": "fp16" | "w4a16", ...}
    phases: dict[str, str] = field(default_factory=lambda: {"prefill": "w4a16", "decode": "w4a16"})
    sensitivity: dict[str, float] = field(default_factory=dict)   # calibration KL per Linear (nats / token)
    budget_bytes: int | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.precision, dict):
            raise TypeError(f"precision must be a dict (module name -> spec), got {type(self.precision).__name__}")
        if set(self.phases) != set(PHASES) or any(v not in PRECISIONS for v in self.phases.values()):
            raise ValueError(f"phases must map each of {PHASES} to one of {PRECISIONS}, got {self.phases!r}")

    @property
    def fp16_modules(self) -> list[str]:
        return [n for n, s in self.precision.items() if s["format"] == "fp16"]

    @property
    def quantized_modules(self) -> list[str]:
        return [n for n, s in self.precision.items() if s["format"] == "w4a16"]

    def check(self, model: nn.Module) -> dict[str, dict]:
        """The resolved policy for ``model``; ValueError if it names a module the model lacks."""
        return resolve_policy(model, self.precision)

    def weight_bytes(self, model: nn.Module) -> int:
        """Bytes of the rollout copy's Linear weights (fp16 = 2 B/param, W4A16 = 0.5 B + fp16 scales;
        a module whose phases differ keeps both)."""
        mods = dict(model.named_modules())
        both = self.phases["prefill"] != self.phases["decode"]
        total = 0
        for n, s in self.check(model).items():
            total += _linear_bytes(mods[n], s, keep_fp16=both)
        return total

    def to_dict(self) -> dict:
        return {"precision": self.precision, "phases": self.phases, "sensitivity": self.sensitivity,
                "budget_bytes": self.budget_bytes, "fp16_modules": self.fp16_modules, "reasons": self.reasons}


def _linear_bytes(lin: nn.Linear, spec: dict, keep_fp16: bool = False) -> int:
    n = lin.in_features * lin.out_features
    if spec["format"] == "fp16":
        return 2 * n
    q = n // 2 + 2 * n // spec.get("group_size", 128)
    return q + (2 * n if keep_fp16 else 0)


def fp16_policy(model: nn.Module) -> CPHybridPolicy:
    """Every Linear fp16 (the unquantized rollout arm)."""
    pol = {n.replace(".base_layer", ""): {"format": "fp16"} for n, m in model.named_modules()
           if isinstance(m, nn.Linear) and "lora_" not in n}
    return CPHybridPolicy(pol, phases={"prefill": "fp16", "decode": "fp16"})


def rtn_policy(model: nn.Module, group_size: int = 128) -> CPHybridPolicy:
    """Plain RTN INT4 everywhere the default W4A16 policy quantizes, in both phases."""
    return CPHybridPolicy(default_policy(model, group_size, "rtn"), phases={"prefill": "w4a16", "decode": "w4a16"})


@torch.no_grad()
def layer_sensitivity(model: nn.Module, calib: torch.Tensor, modules: list[str] | None = None,
                      group_size: int = 128, mask: torch.Tensor | None = None) -> dict[str, float]:
    """KL(p_model || p_model with one Linear RTN-quantized), per token, for each module in ``modules``
    (default: those the W4A16 default policy quantizes). ``calib``: ``[B, T]`` input_ids; ``mask``:
    ``[B, T]`` positions to average over (default all). The weight is swapped in place and restored."""
    from .importance import token_kl

    if not isinstance(calib, torch.Tensor) or calib.dim() != 2 or calib.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"calib must be a [B, T] integer tensor of input_ids, got "
                         f"{getattr(calib, 'shape', type(calib).__name__)}")
    check_ids_tensor(calib, vocab_size(model), "calib")   # before the embedding indexes them
    pol = default_policy(model, group_size, "rtn")
    names = [n for n, s in pol.items() if s["format"] == "w4a16"] if modules is None else list(modules)
    mods = dict(model.named_modules())
    for n in names:
        if not isinstance(mods.get(n), nn.Linear):
            raise ValueError(f"modules names {n!r}, which is not an nn.Linear of the model")
    dev = next(model.parameters()).device
    calib = calib.to(dev)
    ref = model(input_ids=calib).logits
    out = {}
    for n in names:
        lin = mods[n]
        w = lin.weight.data.clone()
        lin.weight.data.copy_(quantize_rtn(w, group_size).dequantize(torch.float32).to(w.dtype))
        try:
            out[n] = token_kl(ref, model(input_ids=calib).logits, mask)
        finally:
            lin.weight.data.copy_(w)
    return out


def build_cp_hybrid(model: nn.Module, calib: torch.Tensor, budget_bytes: int, group_size: int = 128,
                    phases: dict[str, str] | None = None, mask: torch.Tensor | None = None,
                    sensitivity: dict[str, float] | None = None) -> CPHybridPolicy:
    """Component part: start from the W4A16 default policy, then keep the most sensitive modules
    (largest calibration KL first) fp16 while the rollout copy's Linear weights fit ``budget_bytes``.
    ValueError if the budget is below what the always-fp16 modules (and the INT4 rest) need."""
    if not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool) or budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive int, got {budget_bytes!r}")
    pol = default_policy(model, group_size, "rtn")
    phases = dict(phases or {"prefill": "w4a16", "decode": "w4a16"})
    base = CPHybridPolicy(dict(pol), phases=phases)
    floor = base.weight_bytes(model)
    if budget_bytes < floor:
        raise ValueError(f"budget_bytes={budget_bytes} is below the {floor} bytes the always-fp16 modules "
                         f"({base.fp16_modules}) and the INT4 rest need")
    sens = sensitivity if sensitivity is not None else layer_sensitivity(model, calib, None, group_size, mask)
    mods = dict(model.named_modules())
    used, reasons = floor, {n: s.get("reason", "always fp16") for n, s in pol.items() if s["format"] == "fp16"}
    both = phases["prefill"] != phases["decode"]
    for n in sorted(sens, key=sens.get, reverse=True):
        if pol[n]["format"] != "w4a16":
            continue
        extra = _linear_bytes(mods[n], {"format": "fp16"}) - _linear_bytes(mods[n], pol[n], keep_fp16=both)
        if used + extra <= budget_bytes:
            pol[n] = {"format": "fp16", "reason": f"calibration KL {sens[n]:.3g} (rank by sensitivity)"}
            reasons[n] = pol[n]["reason"]
            used += extra
    return CPHybridPolicy(pol, phases=phases, sensitivity=sens, budget_bytes=budget_bytes, reasons=reasons)
