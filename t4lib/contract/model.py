"""The reference Transformer and its optimized drop-in.

Contract
--------
``forward(x, valid_token_mask=None) -> y``

* ``x``: ``[B, S, D]``, the model's dtype and device. The benchmark contract is
  **fp16 weights and activations on CUDA** (``torch.float16``), with the
  attention softmax computed in fp32 and rounded back to fp16, exactly as the
  reference below does it. The CPU profile of the notebook runs the same code
  in fp32.
* ``valid_token_mask``: ``None`` (every token valid) or a ``torch.bool``
  ``[B, S]`` tensor on ``x``'s device. An invalid key is never attended; an
  invalid query position is exactly ``0`` in the output (and in the residual
  stream after every sub-layer).
* ``causal`` (a constructor argument): query ``i`` attends to keys ``j <= i``.
* ``y``: ``[B, S, D]`` in ``x``'s dtype.

Reference arithmetic (``BaselineTransformer``), per pre-norm block::

    h = LN1(x)
    q, k, v = Wq h + bq, Wk h + bk, Wv h + bv          # three separate Linear
    s = (q @ k^T) * (1 / sqrt(d_head))                  # fp16, explicit [B,H,S,S]
    s = s.masked_fill(~allowed, -inf)                   # allowed = key mask & causal
    p = softmax(s.float(), -1).to(fp16)                 # fp32 softmax
    x = x + Wo (p @ v) + bo;  x[invalid] = 0
    x = x + W2 gelu_exact(W1 LN2(x) + b1) + b2;  x[invalid] = 0
    y = LN_final(x);  y[invalid] = 0

An all-invalid row (every token of one batch element invalid) is a
documented safe path: its attention rows are NaN inside the block (softmax of
all ``-inf``) but every such row is an invalid query, so ``masked_fill``
replaces it by 0 and the output row is exactly zero; no NaN reaches a valid
position, because invalid keys get probability exactly 0 and their values are
finite (the residual stream there is zero).

``OptimizedTransformer`` has the same parameters (it *is* a
``BaselineTransformer`` subclass, so ``load_state_dict`` of a reference state
dict works unchanged, ``strict=True``) and dispatches each call through a
calibrated plan (``t4lib.contract.calibrate``) keyed by :func:`shape_key`. Per
layer it can run

* ``"ref"``: reference-order attention, with proven all-valid mask work removed
  (bit-identical: a ``masked_fill`` with an all-true mask is the identity);
* ``"fused"``: separate projections, reference operand layouts, but the score
  scale folded into the batched GEMM (``baddbmm(alpha=scale)``, which rounds
  once; bit-identical to the reference's two roundings when the scale is a
  power of two, e.g. ``d_head = 64``, otherwise one multiply in place), the
  mask applied in place, and one fp16-in/fp16-out softmax that computes in
  fp32 (it replaces the reference's ``float()``/softmax/``to(fp16)`` passes);
* ``"packed"``: one ``[Q; K; V]`` Linear (weights concatenated in that row
  order) and reference-order attention;
* ``"packed_fused"``: the packed projection and the fused attention above;
* ``"sdpa"``: the packed projection and ``F.scaled_dot_product_attention``;

Which of these keep the strict rule end to end is not assumed: the
calibration measures it on the device at hand.

and the whole forward can be replayed as a CUDA graph. A key that the plan
does not know runs ``BaselineTransformer.forward`` itself. The optimized model
is inference-only: its forward runs under ``torch.no_grad()``.

Mask proof: whether a mask is all-valid is decided once per tensor object
*and version* (``tensor._version``, which every in-place write bumps); a
cloned, mutated or different mask is inspected again. Tensors made under
``torch.inference_mode()`` carry no version counter and are inspected on
every call. Writes through ``mask.data`` bypass the version counter: call
``forget_masks()`` after such a write.

Output ownership on the CUDA-graph path: the graph writes into a static
buffer, and ``forward`` returns ``static_out.clone()`` (the copy is inside the
timed region), so a returned tensor is never overwritten by a later call.
"""
from __future__ import annotations

import functools
import math
import time
import weakref
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("ref", "fused", "packed", "packed_fused", "sdpa")
PACKED = ("packed", "packed_fused", "sdpa")


# ----------------------------------------------------------------------------- validation

def check_inputs(model: "BaselineTransformer", x, valid_token_mask) -> None:
    """Raise TypeError/ValueError naming ``x`` or ``valid_token_mask``."""
    p = model.final_ln.weight
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"x must be 3-D [B, S, D], got shape {tuple(x.shape)}")
    if x.shape[-1] != model.d_model:
        raise ValueError(f"x must have width D={model.d_model} (x.shape[-1]), got {x.shape[-1]}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must have B >= 1 and S >= 1, got shape {tuple(x.shape)}")
    if x.dtype != p.dtype:
        raise TypeError(f"x must have the model's dtype {p.dtype}, got {x.dtype}")
    if x.device != p.device:
        raise ValueError(f"x must be on the model's device {p.device}, got {x.device}")
    m = valid_token_mask
    if m is None:
        return
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"valid_token_mask must be None or a torch.Tensor, got {type(m).__name__}")
    if m.dtype != torch.bool:
        raise TypeError(f"valid_token_mask must have dtype torch.bool, got {m.dtype}")
    if tuple(m.shape) != tuple(x.shape[:2]):
        raise ValueError(f"valid_token_mask must have shape [B, S] = {tuple(x.shape[:2])}, got {tuple(m.shape)}")
    if m.device != x.device:
        raise ValueError(f"valid_token_mask must be on x's device {x.device}, got {m.device}")


# ----------------------------------------------------------------------------- reference

class BaselineSelfAttention(nn.Module):
    """Explicit multi-head attention: separate Q/K/V Linear, explicit scores,
    masked fill, fp32 softmax, explicit weighted sum. ``[B, S, D] -> [B, S, D]``."""

    def __init__(self, d_model: int, n_heads: int, device=None, dtype=None):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        kw = dict(device=device, dtype=dtype)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_head)
        self.q_proj = nn.Linear(d_model, d_model, **kw)
        self.k_proj = nn.Linear(d_model, d_model, **kw)
        self.v_proj = nn.Linear(d_model, d_model, **kw)
        self.out_proj = nn.Linear(d_model, d_model, **kw)

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        B, S, _ = t.shape
        return t.view(B, S, self.n_heads, self.d_head).transpose(1, 2)      # [B, H, S, dh]

    def core(self, q, k, v, disallowed: torch.Tensor | None) -> torch.Tensor:
        """Reference-order attention on ``[B, H, S, dh]`` heads -> ``[B, S, D]``."""
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if disallowed is not None:
            scores = scores.masked_fill(disallowed, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        ctx = torch.matmul(probs, v)
        B, H, S, dh = ctx.shape
        return ctx.transpose(1, 2).reshape(B, S, H * dh)

    def fused_core(self, q, k, v, disallowed: torch.Tensor | None) -> torch.Tensor:
        """Same operand layouts as ``core``; scale folded into the GEMM, one
        fp16 softmax pass (fp32 inside). ``[B, H, S, dh]`` -> ``[B, S, D]``."""
        B, H, S, dh = q.shape
        q3 = q.reshape(B * H, S, dh)
        kt3 = k.transpose(-2, -1).reshape(B * H, dh, S)     # the layout torch.matmul gives bmm
        if _is_pow2(self.scale):
            scores = torch.baddbmm(q3.new_empty(B * H, S, S), q3, kt3, beta=0.0, alpha=self.scale)
        else:
            scores = torch.bmm(q3, kt3).mul_(self.scale)
        scores = scores.view(B, H, S, S)
        if disallowed is not None:
            scores.masked_fill_(disallowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v)
        return ctx.transpose(1, 2).reshape(B, S, H * dh)

    def forward(self, h: torch.Tensor, disallowed: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self.heads(self.q_proj(h)), self.heads(self.k_proj(h)), self.heads(self.v_proj(h))
        return self.out_proj(self.core(q, k, v, disallowed))


def _is_pow2(x: float) -> bool:
    m, _ = math.frexp(x)
    return m == 0.5


class BaselineBlock(nn.Module):
    """Pre-norm residual block: attention then a two-layer exact-GELU FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, eps: float, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.ln1 = nn.LayerNorm(d_model, eps=eps, **kw)
        self.attn = BaselineSelfAttention(d_model, n_heads, **kw)
        self.ln2 = nn.LayerNorm(d_model, eps=eps, **kw)
        self.fc1 = nn.Linear(d_model, d_ff, **kw)
        self.fc2 = nn.Linear(d_ff, d_model, **kw)

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="none"))

    def forward(self, x, disallowed, drop):
        x = x + self.attn(self.ln1(x), disallowed)
        if drop is not None:
            x = x.masked_fill(drop, 0.0)
        x = x + self.ffn(x)
        if drop is not None:
            x = x.masked_fill(drop, 0.0)
        return x


def reference_disallowed(mask: torch.Tensor | None, S: int, causal: bool, device) -> torch.Tensor | None:
    """``~allowed`` for the score matrix: ``[B,1,S,S]``, ``[B,1,1,S]``, ``[S,S]`` or None."""
    allowed = None
    if mask is not None:
        allowed = mask[:, None, None, :]
    if causal:
        tril = torch.ones(S, S, dtype=torch.bool, device=device).tril()
        allowed = tril if allowed is None else (allowed & tril)
    return None if allowed is None else ~allowed


class BaselineTransformer(nn.Module):
    """The reference: ``n_layers`` pre-norm blocks and a final LayerNorm.

    ``forward(x [B,S,D], valid_token_mask [B,S] bool | None) -> [B,S,D]``; see
    the module docstring for the exact semantics.
    """

    def __init__(self, d_model: int, n_heads: int, n_layers: int, d_ff: int | None = None, *,
                 causal: bool = False, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.d_ff = d_ff or 4 * d_model
        self.causal = bool(causal)
        self.layers = nn.ModuleList(BaselineBlock(d_model, n_heads, self.d_ff, eps, device=device, dtype=dtype)
                                    for _ in range(n_layers))
        self.final_ln = nn.LayerNorm(d_model, eps=eps, device=device, dtype=dtype)

    def config(self) -> dict:
        return dict(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers, d_ff=self.d_ff,
                    causal=self.causal, eps=self.final_ln.eps)

    def forward(self, x: torch.Tensor, valid_token_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_inputs(self, x, valid_token_mask)
        disallowed = reference_disallowed(valid_token_mask, x.shape[1], self.causal, x.device)
        drop = None if valid_token_mask is None else ~valid_token_mask[:, :, None]
        for blk in self.layers:
            x = blk(x, disallowed, drop)
        y = self.final_ln(x)
        if drop is not None:
            y = y.masked_fill(drop, 0.0)
        return y


# ----------------------------------------------------------------------------- dispatch key

@functools.lru_cache(maxsize=None)
def device_tag(device: torch.device) -> str:
    """``"sm90"`` for a CUDA device of capability 9.0, ``"cpu"`` otherwise."""
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


def shape_key(device, dtype, B: int, S: int, D: int, H: int, L: int, causal: bool, mask_kind: str) -> str:
    """The dispatch key: device capability, dtype, B, S, D, H, layers, causal, mask kind."""
    if mask_kind not in ("all_valid", "padded"):
        raise ValueError(f"mask_kind must be 'all_valid' or 'padded', got {mask_kind!r}")
    dt = str(dtype).replace("torch.", "")
    return (f"{device_tag(torch.device(device))}|{dt}|B{B}|S{S}|D{D}|H{H}|L{L}|"
            f"{'causal' if causal else 'full'}|{mask_kind}")


# ----------------------------------------------------------------------------- mask proof

class _Stamp:
    """Identity of a tensor's contents: the object (weakly), its version and storage."""

    __slots__ = ("ref", "version", "ptr")

    def __init__(self, t: torch.Tensor):
        self.ref = weakref.ref(t)
        self.version = _version(t)
        self.ptr = t.data_ptr()

    def matches(self, t: torch.Tensor) -> bool:
        v = _version(t)
        return v is not None and self.ref() is t and self.version == v and self.ptr == t.data_ptr()


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors track no version
        return None


class MaskProof:
    """Caches "this mask is all-valid" per tensor object and version.

    ``classify(mask)`` returns ``"all_valid"`` or ``"padded"``. The proof
    (``mask.all()``, one device sync) is redone when the object, its version
    or its storage differs from the cached one. ``inspections`` counts the
    proofs actually run and ``seconds`` their wall time (reported separately
    from inference latency).
    """

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self._cache: dict[int, tuple[_Stamp, str]] = {}
        self.inspections = 0
        self.seconds = 0.0

    def classify(self, mask: torch.Tensor | None) -> str:
        if mask is None:
            return "all_valid"
        hit = self._cache.get(id(mask))
        if hit is not None and hit[0].matches(mask):
            return hit[1]
        t0 = time.perf_counter()
        kind = "all_valid" if bool(mask.all()) else "padded"
        self.seconds += time.perf_counter() - t0
        self.inspections += 1
        if _version(mask) is not None:
            if len(self._cache) >= self.capacity:
                self._cache.pop(next(iter(self._cache)))
            self._cache[id(mask)] = (_Stamp(mask), kind)
        return kind

    def forget(self) -> None:
        self._cache.clear()


# ----------------------------------------------------------------------------- CUDA graph runner

class _GraphRunner:
    """One captured whole forward: static input/mask buffers, static output.

    ``__call__`` copies ``x`` into the static input (and the mask, unless the
    very same unchanged mask tensor was copied last time), replays, and
    returns a clone of the static output: the caller owns what it gets.
    """

    def __init__(self, fn, x: torch.Tensor, mask: torch.Tensor | None, warmup: int = 2):
        self.static_x = x.detach().clone()
        self.static_mask = None if mask is None else mask.detach().clone()
        self.mask_stamp = None if mask is None else _Stamp(mask)
        s = torch.cuda.Stream(device=x.device)
        s.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(s):
            for _ in range(warmup):
                fn(self.static_x, self.static_mask)
        torch.cuda.current_stream(x.device).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = fn(self.static_x, self.static_mask)

    def __call__(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        self.static_x.copy_(x)
        if mask is not None and (self.mask_stamp is None or not self.mask_stamp.matches(mask)):
            self.static_mask.copy_(mask)
            self.mask_stamp = _Stamp(mask) if _version(mask) is not None else None
        self.graph.replay()
        return self.static_out.clone()


# ----------------------------------------------------------------------------- optimized

class OptimizedTransformer(BaselineTransformer):
    """Drop-in for :class:`BaselineTransformer` dispatching through a calibrated plan.

    ``plan`` is a :class:`t4lib.contract.calibrate.Plan` (or anything with
    ``lookup(key) -> entry | None`` where ``entry`` has ``layers`` (one of
    ``MODES`` per layer) and ``graph`` (bool)), or None (every call runs the
    reference path). ``last_dispatch`` says what the latest call ran.
    """

    def __init__(self, *args, plan=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.proof = MaskProof()
        self._packed: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._graphs: dict[tuple, _GraphRunner] = {}
        self._causal: dict[tuple, torch.Tensor] = {}
        self.graph_captures = 0
        self.capture_seconds = 0.0
        self.last_dispatch: str | None = None
        self.register_load_state_dict_post_hook(lambda module, keys: module.invalidate())

    @classmethod
    def from_reference(cls, ref: BaselineTransformer, plan=None) -> "OptimizedTransformer":
        p = ref.final_ln.weight
        opt = cls(**ref.config(), plan=plan, device=p.device, dtype=p.dtype)
        opt.load_state_dict(ref.state_dict())
        return opt

    # -- caches --------------------------------------------------------------
    def invalidate(self) -> None:
        """Drop packed weights and captured graphs (after a weight change)."""
        self._packed = None
        self._graphs.clear()
        self._causal.clear()

    def forget_masks(self) -> None:
        self.proof.forget()
        for r in self._graphs.values():
            r.mask_stamp = None

    def _apply(self, fn, *args, **kwargs):
        self.invalidate()
        return super()._apply(fn, *args, **kwargs)

    def packed(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s ``[Q; K; V]`` weight ``[3D, D]`` and bias ``[3D]``."""
        if self._packed is None:
            with torch.no_grad():
                self._packed = [(torch.cat([b.attn.q_proj.weight, b.attn.k_proj.weight, b.attn.v_proj.weight]),
                                 torch.cat([b.attn.q_proj.bias, b.attn.k_proj.bias, b.attn.v_proj.bias]))
                                for b in self.layers]
        return self._packed[i]

    def _causal_disallowed(self, S: int, device) -> torch.Tensor:
        k = (S, device)
        t = self._causal.get(k)
        if t is None:
            t = self._causal[k] = ~torch.ones(S, S, dtype=torch.bool, device=device).tril()
        return t

    # -- dispatch ------------------------------------------------------------
    def mask_kind(self, valid_token_mask: torch.Tensor | None) -> str:
        return self.proof.classify(valid_token_mask)

    def key_for(self, x: torch.Tensor, kind: str) -> str:
        B, S, D = x.shape
        return shape_key(x.device, x.dtype, B, S, D, self.n_heads, self.n_layers, self.causal, kind)

    def forward(self, x: torch.Tensor, valid_token_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_inputs(self, x, valid_token_mask)
        kind = self.mask_kind(valid_token_mask)
        entry = self.plan.lookup(self.key_for(x, kind)) if self.plan is not None else None
        return self.run_entry(entry, x, valid_token_mask, kind=kind)

    def run_entry(self, entry, x: torch.Tensor, valid_token_mask: torch.Tensor | None = None, *,
                  kind: str | None = None) -> torch.Tensor:
        """Run one plan entry (``None``: the reference path) on validated inputs."""
        if kind is None:
            check_inputs(self, x, valid_token_mask)
            kind = self.mask_kind(valid_token_mask)
        with torch.no_grad():
            if entry is None or entry.layers is None:
                self.last_dispatch = "reference"
                return BaselineTransformer.forward(self, x, valid_token_mask)
            modes = tuple(entry.layers)
            if len(modes) != self.n_layers or any(m not in MODES for m in modes):
                raise ValueError(f"plan entry layers must be {self.n_layers} of {MODES}, got {modes}")
            mask = valid_token_mask if kind == "padded" else None
            if entry.graph and x.is_cuda:
                self.last_dispatch = f"graph:{','.join(modes)}"
                return self._graph_forward(modes, x, mask)
            self.last_dispatch = f"eager:{','.join(modes)}"
            return self.layers_forward(modes, x, mask)

    def _graph_forward(self, modes, x, mask):
        gk = (modes, tuple(x.shape), x.device, mask is not None)
        runner = self._graphs.get(gk)
        if runner is None:
            t0 = time.perf_counter()
            if self.causal:
                self._causal_disallowed(x.shape[1], x.device)
            if any(m in PACKED for m in modes):
                self.packed(0)
            runner = _GraphRunner(lambda xs, ms: self.layers_forward(modes, xs, ms), x, mask)
            torch.cuda.synchronize(x.device)
            self._graphs[gk] = runner
            self.graph_captures += 1
            self.capture_seconds += time.perf_counter() - t0
        return runner(x, mask)

    def layers_forward(self, modes: Sequence[str], x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The eager optimized forward. ``mask`` is None when proven all-valid."""
        B, S, D = x.shape
        H, dh = self.n_heads, self.d_model // self.n_heads
        drop = None if mask is None else ~mask[:, :, None]
        explicit = any(m != "sdpa" for m in modes)
        # explicit-attention mask (reference values) and the SDPA form of the same mask
        disallowed = sdpa_mask = None
        if mask is not None:
            allowed = mask[:, None, None, :]
            if self.causal:
                allowed = allowed & ~self._causal_disallowed(S, x.device)
            sdpa_mask = allowed
            disallowed = ~allowed if explicit else None
        elif self.causal and explicit:
            disallowed = self._causal_disallowed(S, x.device)
        sdpa_causal = self.causal and mask is None
        for i, blk in enumerate(self.layers):
            mode = modes[i]
            att = blk.attn
            h = blk.ln1(x)
            if mode not in PACKED:
                q, k, v = att.heads(att.q_proj(h)), att.heads(att.k_proj(h)), att.heads(att.v_proj(h))
            else:
                w, b = self.packed(i)
                q, k, v = (att.heads(t) for t in F.linear(h, w, b).split(D, dim=-1))
            if mode == "sdpa":
                ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, is_causal=sdpa_causal)
                ctx = ctx.transpose(1, 2).reshape(B, S, D)
            elif mode in ("fused", "packed_fused"):
                ctx = att.fused_core(q, k, v, disallowed)
            else:
                ctx = att.core(q, k, v, disallowed)
            x = x + att.out_proj(ctx)
            if drop is not None:
                x = x.masked_fill(drop, 0.0)
            x = x + blk.ffn(x)
            if drop is not None:
                x = x.masked_fill(drop, 0.0)
        y = self.final_ln(x)
        if drop is not None:
            y = y.masked_fill(drop, 0.0)
        return y


def build_pair(d_model: int, n_heads: int, n_layers: int, *, causal: bool, seed: int, device, dtype,
               d_ff: int | None = None, plan=None) -> tuple[BaselineTransformer, OptimizedTransformer]:
    """A seeded reference and an optimized model loaded from its state dict."""
    dev = torch.device(device)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        ref = BaselineTransformer(d_model, n_heads, n_layers, d_ff, causal=causal, device=dev, dtype=dtype).eval()
    opt = OptimizedTransformer.from_reference(ref, plan=plan).eval()
    return ref, opt


def describe(modes: Sequence[str], graph: bool) -> str:
    """Short name of a plan: e.g. ``packed_fused+sdpa2/graph`` (base mode, SDPA suffix depth)."""
    modes = list(modes)
    L, k = len(modes), 0
    while k < L and modes[L - 1 - k] == "sdpa":
        k += 1
    base = modes[:L - k]
    if len(set(base)) > 1:
        name = ",".join(modes)
    elif not base:
        name = "sdpa-all"
    else:
        name = base[0] + (f"+sdpa{k}" if k else "")
    return name + ("/graph" if graph else "/eager")


__all__ = ["BaselineTransformer", "OptimizedTransformer", "BaselineSelfAttention", "BaselineBlock", "MaskProof",
           "check_inputs", "shape_key", "device_tag", "build_pair", "describe", "MODES"]
