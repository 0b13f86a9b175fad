"""``FusedAdamWLinear``: a Linear layer whose weight takes its AdamW step inside backward.

Forward is an ordinary fp16 matmul with the fp16 working copy ``weight``. Backward computes
``dx = dy @ weight`` with the pre-update weight, then updates the fp32 master weight, the fp32
moments and the fp16 copy with :func:`t4lib.ops.fused_adamw.fused_adamw_` (``g = dy^T x`` on
tensor cores, AdamW in the GEMM's epilogue): the weight gradient never exists in memory and
``master.grad`` stays ``None``, so an ordinary optimizer over ``model.parameters()`` skips it.
The bias, when present, is an ordinary fp32 parameter with a ``.grad`` for that optimizer.

What a fused update cannot do, and what happens instead (an error where the layer can see it; where it
cannot, the limit is stated here and the fallback is ``fused=False``):

* Gradient accumulation over micro-batches, weight reuse within one step, or activation
  checkpointing (forward run twice): the update happens at the first backward, so a second
  forward before that backward raises ``RuntimeError``. Use ``fused=False``.
* Global-norm gradient clipping needs every gradient before any update: ``clip`` is not an
  argument of the fused path, and ``step()`` / ``grad_norm_sq()`` raise on it. An external
  ``clip_grad_norm_(model.parameters())`` cannot be seen: it skips ``master`` (no ``.grad``) and
  clips the other parameters only. Use ``fused=False``.

* Dynamic fp16 loss scaling (``torch.amp.GradScaler``, the Trainer's ``fp16=True``): the update would
  see the scaled gradient before any inf/NaN check or unscaling, and an overflowed step cannot be
  skipped. The layer cannot see a scaler, so this is not detected. Use a static loss scale S (a power
  of two) with ``eps`` times S: AdamW takes the same step on gradients S g when eps is S eps (moments
  S m and S^2 v); SFT's ``optimizer="fused_linear"`` does this and stops on an overflow. Or fp16
  without loss scaling, or ``fused=False`` and ``step(grad_scale=1 / scale)`` after checking ``grad_buffer``.
  Inputs are fp16, or cast to fp16 under fp16 autocast (as autocast casts F.linear's input).

``fused=False`` (the documented fallback, the unfused path (a)): backward accumulates dW (fp32,
``grad_buffer``) with the same GEMM core; ``grad_norm_sq()`` feeds a global norm, and
``step(grad_scale=...)`` applies the same AdamW (a separate kernel) and zeroes the buffer.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from t4lib.core import results
from t4lib.models import load
from t4lib.ops import fused_adamw as ops

__all__ = ["FusedAdamWLinear", "replace_linears", "restore_linears"]


class _FusedLinearFn(torch.autograd.Function):
    """y = x @ weight^T + bias; backward returns dx and dbias and updates the layer's weight."""

    @staticmethod
    def forward(ctx, x, master, bias, layer):
        ctx.layer = layer
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x)
        return F.linear(x, layer.weight, None if bias is None else bias.to(x.dtype))

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        dy = dy.contiguous()
        dx = dy @ layer.weight if ctx.needs_input_grad[0] else None  # before the update, same stream
        dy2, x2 = dy.reshape(-1, layer.out_features), x.reshape(-1, layer.in_features)
        db = dy2.float().sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        layer._backward_update(dy2, x2)
        return dx, None, db, None


class FusedAdamWLinear(nn.Module):
    """Linear ``[in_features] -> [out_features]`` trained by AdamW inside backward.

    State: ``master`` (fp32 Parameter, never given a ``.grad``), ``weight`` (fp16 working copy
    used by forward), ``exp_avg`` and ``exp_avg_sq`` (fp32), ``step_count``. Hyperparameters
    follow ``torch.optim.AdamW`` and may be changed between steps (``layer.lr = ...``).
    Inputs are fp16 ``[..., in_features]``. Do not ``.half()`` the module: ``master`` must stay
    fp32 (forward raises otherwise).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 fused: bool = True, backend: str = "auto", device=None):
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        ops.check_hparams(lr, betas, eps, weight_decay)
        self.in_features, self.out_features = in_features, out_features
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.fused, self.backend = bool(fused), backend
        master = torch.empty(out_features, in_features, dtype=torch.float32, device=device)
        nn.init.kaiming_uniform_(master, a=math.sqrt(5))  # nn.Linear's initialisation
        self.master = nn.Parameter(master)
        self.register_buffer("weight", master.detach().half())
        self.register_buffer("exp_avg", torch.zeros_like(master))
        self.register_buffer("exp_avg_sq", torch.zeros_like(master))
        self.register_buffer("grad_buffer", torch.zeros_like(master) if not self.fused else None)
        if bias:
            bound = 1 / math.sqrt(in_features)
            self.bias = nn.Parameter(torch.empty(out_features, device=device).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)
        self.step_count = 0
        self._pending = False

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kw) -> "FusedAdamWLinear":
        """A layer with ``linear``'s weight (as fp32 master) and bias, on its device."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, device=linear.weight.device,
                    **kw)
        with torch.no_grad():
            layer.master.copy_(linear.weight.float())
            layer.weight.copy_(layer.master)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.float())
        return layer

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"lr={self.lr}, fused={self.fused}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.master.dtype != torch.float32:
            raise TypeError(f"master must stay float32 (got {self.master.dtype}); do not .half() a FusedAdamWLinear")
        if (isinstance(x, torch.Tensor) and x.dtype != torch.float16 and torch.is_autocast_enabled(x.device.type)
                and torch.get_autocast_dtype(x.device.type) == torch.float16):
            x = x.half()  # what fp16 autocast does to F.linear's input
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float16:
            raise TypeError(f"x must be a float16 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x has {x.shape[-1]} features, the layer takes in_features={self.in_features}")
        if not torch.is_grad_enabled():
            return F.linear(x, self.weight, None if self.bias is None else self.bias.to(x.dtype))
        if self.fused and self._pending:
            raise RuntimeError("FusedAdamWLinear: a second forward before the backward of the first. The fused "
                               "update happens in backward, so gradient accumulation over micro-batches, weight "
                               "reuse and activation checkpointing cannot be fused: build the layer with "
                               "fused=False (dW accumulates in grad_buffer, then call step()), or run evaluation "
                               "under torch.no_grad()")
        self._pending = True
        return _FusedLinearFn.apply(x, self.master, self.bias, self)

    def _hp(self, step: int) -> dict:
        return dict(step=step, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)

    @torch.no_grad()
    def _backward_update(self, dy: torch.Tensor, x: torch.Tensor) -> None:
        self._pending = False
        if self.fused:
            self.step_count += 1
            ops.fused_adamw_(dy, x, self.master, self.exp_avg, self.exp_avg_sq, self.weight,
                             backend=self.backend, **self._hp(self.step_count))
        else:
            self.grad_buffer.add_(ops.weight_grad(dy, x, backend=self.backend))

    @torch.no_grad()
    def grad_norm_sq(self) -> torch.Tensor:
        """Squared L2 norm of the accumulated dW (``fused=False`` only), for a global-norm clip."""
        self._require_unfused("grad_norm_sq")
        return self.grad_buffer.pow(2).sum()

    @torch.no_grad()
    def step(self, grad_scale: float = 1.0) -> None:
        """Apply AdamW to the accumulated dW times ``grad_scale`` and zero it (``fused=False`` only)."""
        self._require_unfused("step")
        if not isinstance(grad_scale, (int, float)) or isinstance(grad_scale, bool) or not math.isfinite(grad_scale):
            raise ValueError(f"grad_scale must be a finite number, got {grad_scale!r}")
        if grad_scale != 1.0:
            self.grad_buffer.mul_(grad_scale)
        self.step_count += 1
        ops.adamw_(self.grad_buffer, self.master, self.exp_avg, self.exp_avg_sq, self.weight, backend=self.backend,
                   **self._hp(self.step_count))
        self.grad_buffer.zero_()

    def _require_unfused(self, what: str) -> None:
        if self.fused:
            raise RuntimeError(f"{what}() needs fused=False: a fused layer updates its weight inside backward and "
                               f"never holds dW (no accumulation, no clipping)")


def replace_linears(model: nn.Module, names=None, **kw) -> list[str]:
    """Replace ``nn.Linear`` submodules (all, or those whose qualified name contains one of
    ``names``) by :class:`FusedAdamWLinear` with ``kw``; returns the replaced names."""
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and (names is None or any(s in n for s in names))]
    for name, lin in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, FusedAdamWLinear.from_linear(lin, **kw))
    return [n for n, _ in targets]


def restore_linears(model: nn.Module) -> list[str]:
    """The inverse of :func:`replace_linears`: every :class:`FusedAdamWLinear` becomes an ``nn.Linear`` holding its
    fp32 master weight (and bias), for evaluation, generation and ``save_pretrained``; returns the restored names.
    The optimizer state (moments, step count) is dropped."""
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, FusedAdamWLinear)]
    for name, layer in targets:
        if layer.fused and layer._pending:
            raise RuntimeError(f"{name}: a forward is waiting for its backward (and its weight update); run it first")
        lin = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                        device=layer.master.device, dtype=torch.float32)
        with torch.no_grad():
            lin.weight.copy_(layer.master)
            if layer.bias is not None:
                lin.bias.copy_(layer.bias)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, lin)
    return [n for n, _ in targets]


# ---------------------------------------------------------------- end-to-end step time

def _step_fn(model, opt, ids, scaler=None):
    """One training step under fp16 autocast: forward, loss, backward, optimizer step (the fused
    layers take theirs in backward)."""
    def step():
        with torch.autocast(ids.device.type, dtype=torch.float16):
            loss = model(input_ids=ids, labels=ids).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def _time_steps(step, warmup: int, steps: int) -> tuple[float, float]:
    """(median seconds per step, last loss) of ``steps`` timed steps after ``warmup``."""
    for _ in range(warmup):
        step()
    times, loss = [], None
    for _ in range(steps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], float(loss)


def compare_step_time(model_id: str = "tiny-gpu", *, batch: int = 16, seq: int = 256, warmup: int = 3,
                      steps: int = 10, lr: float = 1e-4, device: str = "cuda", backend: str = "auto") -> dict:
    """Median full-fine-tuning step time of ``model_id`` two ways, same data, same process:

    * ``torch_amp``: what a user picks: fp32 weights, fp16 autocast, ``GradScaler`` and
      ``torch.optim.AdamW(fused=True)`` (the Trainer's ``fp16=True``);
    * ``fused``: the same model and autocast with the decoder projections replaced by
      :class:`FusedAdamWLinear` (fp32 masters, AdamW in backward, no loss scaling: the fused update
      cannot follow a GradScaler); the other parameters (embeddings, norms, biases) under
      ``torch.optim.AdamW(fused=True)``.

    Returns ``{"torch_amp_s", "fused_s", "speedup", "tokens", "replaced", "loss_*"}``."""
    ids = torch.randint(0, 1000, (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    hp = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    out = {"tokens": batch * seq}

    model, _ = load(model_id, dtype=torch.float32, device=device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), fused=device == "cuda", **hp)
    scaler = torch.amp.GradScaler("cuda") if device == "cuda" else None
    out["torch_amp_s"], out["loss_torch_amp"] = _time_steps(_step_fn(model, opt, ids, scaler), warmup, steps)
    del model, opt

    model, _ = load(model_id, dtype=torch.float32, device=device)
    model.train()
    out["replaced"] = len(replace_linears(model, names=[".layers."], backend=backend, **hp))
    rest = [p for n, p in model.named_parameters() if not n.endswith(".master")]
    opt = torch.optim.AdamW(rest, fused=device == "cuda", **hp)
    out["fused_s"], out["loss_fused"] = _time_steps(_step_fn(model, opt, ids), warmup, steps)
    out["speedup"] = out["torch_amp_s"] / out["fused_s"]
    return out


def write_step_time(out_dir, model_id: str = "tiny-gpu", **kw):
    """Run :func:`compare_step_time` on the GPU and write ``fused_adamw_step.json`` under ``out_dir``."""
    r = compare_step_time(model_id, **kw)
    env = results.environment()
    src = "t4lib.train.fused_adamw.compare_step_time"
    p = f"fused_adamw_step/{model_id}"
    figs = [results.figure(f"{p}/torch_amp/step_time", r["torch_amp_s"] * 1e3, "ms", "MEASURED", src, env=env,
                           note="fp32 weights, fp16 autocast, GradScaler, torch.optim.AdamW(fused=True); median"),
            results.figure(f"{p}/fused/step_time", r["fused_s"] * 1e3, "ms", "MEASURED", src, env=env,
                           replaced=r["replaced"], note=f"{r['replaced']} decoder projections as FusedAdamWLinear, "
                                                        f"fp16 autocast, no loss scaling; median"),
            results.figure(f"{p}/fused/speedup_vs_torch_amp", r["speedup"], "x", "ARITHMETIC", src,
                           note="median step time torch_amp / fused, same process, same batch"),
            results.figure(f"{p}/loss_after_steps/torch_amp", r["loss_torch_amp"], "nats", "MEASURED", src, env=env),
            results.figure(f"{p}/loss_after_steps/fused", r["loss_fused"], "nats", "MEASURED", src, env=env,
                           note="the same batch and number of steps as torch_amp: the two should be close")]
    return results.write(Path(out_dir) / "fused_adamw_step.json", figs, tokens_per_step=r["tokens"],
                         note="kernels: compute_75 PTX JIT-compiled on this GPU")
