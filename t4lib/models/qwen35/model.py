"""The qwen35 model read from a GGUF file, weights kept in their GGUF formats.

Every matrix product goes through the op of its format: quantized tensors
through :func:`t4lib.ops.gguf.gguf_gemv` (the CUDA dequant-GEMV on a GPU, its
reference on CPU; on CUDA the formats with a GEMV layout keep only that
byte-permuted copy, same size), F32/F16 tensors through ``torch.matmul`` in
their own dtype. The token embedding is dequantized one row per lookup; the
output head is ``output.weight``, or the embedding when the file has none (tied:
on CUDA the head then holds its own GEMV-layout copy beside the rows kept for lookup).

Layers, in the order of the file (``full_attention_interval`` says which are full
attention; the others are Gated DeltaNet)::

    h = h + mixer(RMSNorm(h) * attn_norm);  h = h + FFN(RMSNorm(h) * post_attention_norm)
    FFN(x)       = ffn_down(SiLU(ffn_gate x) * ffn_up x)
    attention    : attn_q -> [query | gate] per head (head_dim each), q/k RMSNorm over head_dim,
                   neox rotary embedding on the first rope.dimension_count dims, grouped KV heads,
                   softmax(q k^T / sqrt(head_dim)) v, times sigmoid(gate), attn_output
    Gated DeltaNet: :func:`t4lib.ops.deltanet.gated_deltanet_decode` (GGUF head order)
    logits       = head(RMSNorm(h) * output_norm)

Norm weights are used as stored: the GGUF converter adds the 1 of Qwen3.5's
zero-centred RMSNorm (all but ``ssm_norm``). The residual stream and every norm
are fp32; ``dtype`` (fp16, the GEMV path, or fp32, a precision yardstick that
dequantizes each weight per product) is the dtype of the projections' inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from t4lib.ops.deltanet import gated_deltanet_decode
from t4lib.ops.gguf import FORMATS, gguf_dequant, gguf_gemv, gguf_gemv_packed, pack_for_gemv
from t4lib.ops.gguf import MAX_M as GEMV_MAX_M
from t4lib.ops.gguf import packing
from t4lib.quant.gguf import GGUFError, GGUFFile

__all__ = ["Qwen35Config", "Qwen35Model", "Linear", "Embedding", "AttentionMixer", "DeltaNetMixer", "Block",
           "FLOAT_TYPES", "COMPUTE_DTYPES"]

FLOAT_TYPES = {0: "F32", 1: "F16"}
COMPUTE_DTYPES = (torch.float16, torch.float32)
CONV_TAPS = 4


@dataclass(frozen=True)
class Qwen35Config:
    """Dimensions of a qwen35 file (from its metadata and tensor shapes)."""
    vocab: int
    hidden: int
    ffn: int
    n_layers: int            # main layers; the file's NextN/MTP blocks follow them
    layer_types: tuple       # "attention" | "deltanet" per main layer
    attn_heads: int
    attn_kv_heads: int
    head_dim: int
    rope_dim: int
    rope_base: float
    eps: float
    ssm_k_heads: int
    ssm_v_heads: int
    ssm_k_dim: int
    ssm_v_dim: int
    n_nextn: int = 0
    tied: bool = False

    @property
    def conv_dim(self) -> int:
        return 2 * self.ssm_k_heads * self.ssm_k_dim + self.ssm_v_heads * self.ssm_v_dim

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "Qwen35Config":
        if f.architecture != "qwen35":
            raise GGUFError(f"{f.path}: GGUF architecture is {f.architecture!r}, expected 'qwen35'")

        def need(key):
            v = f.key(key)
            if v is None:
                raise GGUFError(f"{f.path}: missing metadata key 'qwen35.{key}'")
            return v

        n_nextn = int(f.key("nextn_predict_layers", 0) or 0)
        n_layers = int(need("block_count")) - n_nextn
        interval = int(f.key("full_attention_interval", 4))
        if n_layers <= 0 or interval <= 0:
            raise GGUFError(f"{f.path}: block_count {n_layers + n_nextn} with {n_nextn} NextN layers and "
                            f"full_attention_interval {interval} leave no main layers")
        kernel = int(f.key("ssm.conv_kernel", CONV_TAPS))
        if kernel != CONV_TAPS:
            raise GGUFError(f"{f.path}: ssm.conv_kernel is {kernel}; the Gated DeltaNet step supports {CONV_TAPS}")
        if "token_embd.weight" not in f.tensors:
            raise GGUFError(f"{f.path}: missing tensor 'token_embd.weight'")
        vocab, hidden = f.info("token_embd.weight").shape
        H = int(need("ssm.time_step_rank"))
        heads = int(need("attention.head_count"))
        head_dim = int(f.key("attention.key_length", 0) or need("embedding_length") // heads)
        return cls(
            vocab=int(vocab), hidden=int(need("embedding_length")), ffn=int(need("feed_forward_length")),
            n_layers=n_layers,
            layer_types=tuple("attention" if (i + 1) % interval == 0 else "deltanet" for i in range(n_layers)),
            attn_heads=heads, attn_kv_heads=int(need("attention.head_count_kv")), head_dim=head_dim,
            rope_dim=int(f.key("rope.dimension_count", head_dim)), rope_base=float(f.key("rope.freq_base", 1e7)),
            eps=float(f.key("attention.layer_norm_rms_epsilon", 1e-6)),
            ssm_k_heads=int(need("ssm.group_count")), ssm_v_heads=H, ssm_k_dim=int(need("ssm.state_size")),
            ssm_v_dim=int(need("ssm.inner_size")) // H, n_nextn=n_nextn,
            tied="output.weight" not in f.tensors)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 RMSNorm over the last dim, times ``weight`` (as stored)."""
    return F.rms_norm(x.float(), (x.shape[-1],), weight, eps)


class Linear:
    """y [M, N] = x [M, K] @ W^T with W [N, K] as the file stores it.

    Quantized W: fp16 x goes through the GGUF GEMV of its format (rows of x in
    groups of at most 8); on CUDA, formats with a GEMV layout keep only that copy.
    F32/F16 W: ``torch.matmul`` in W's dtype. ``activations="int8"`` takes the
    int8-activation GEMV where the format has one (see :mod:`t4lib.ops.gguf`).
    fp32 x (the yardstick) multiplies by W dequantized to fp32 once and kept: meant
    for models small enough to hold in fp32 (the oracle checks), not for decoding."""

    def __init__(self, name: str, data: torch.Tensor, type_id: int, N: int, K: int, activations: str = "fp16"):
        self.name, self.type, self.N, self.K = name, int(type_id), int(N), int(K)
        self.packed = self.raw = self.w = self._w32 = None
        if self.type in FLOAT_TYPES:
            self.w = data.reshape(N, K)
        elif data.is_cuda and packing.supports(self.type, K):
            self.packed = pack_for_gemv(data, self.type, N, K)   # the only copy kept (same bytes, GEMV layout)
        else:
            self.raw = data
        self.activations = activations if self.packed is not None else "fp16"

    @property
    def nbytes(self) -> int:
        t = next(x for x in (self.w, self.packed, self.raw) if x is not None)
        return t.numel() * t.element_size()

    def dequantized(self) -> torch.Tensor:
        """W [N, K] fp32 (a temporary)."""
        if self.w is not None:
            return self.w.float()
        if self.packed is not None:
            return packing.dequantize(self.packed, self.type, self.N, self.K).float()
        return gguf_dequant(self.raw, self.type, (self.N, self.K))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:   # the yardstick: W in fp32, kept after first use (small models)
            if self._w32 is None:   # the layout's CPU reference dequantizes on the host
                self._w32 = self.dequantized().to(x.device)
            return x @ self._w32.t()
        if self.w is not None:
            return (x.to(self.w.dtype) @ self.w.t()).to(x.dtype)
        outs = []
        for i in range(0, x.shape[0], GEMV_MAX_M):
            xi = x if x.shape[0] <= GEMV_MAX_M else x[i:i + GEMV_MAX_M].clone()  # clone: a fresh, aligned buffer
            if self.packed is not None:
                outs.append(gguf_gemv_packed(self.packed, self.type, xi, self.N, self.K,
                                             activations=self.activations))
            else:
                outs.append(gguf_gemv(self.raw, self.type, xi, self.N, self.K))
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class Embedding:
    """Token embedding lookup: the rows of the tokens, dequantized (fp32 out)."""

    def __init__(self, data: torch.Tensor, type_id: int, vocab: int, hidden: int):
        self.type, self.vocab, self.hidden = int(type_id), vocab, hidden
        if self.type in FLOAT_TYPES:
            self.rows = data.reshape(vocab, hidden)
        else:
            self.rows = data.reshape(vocab, -1)   # [vocab, bytes per row]

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        r = self.rows.index_select(0, tokens)
        if self.type in FLOAT_TYPES:
            return r.float()
        return gguf_dequant(r.reshape(-1), self.type, (tokens.shape[0], self.hidden))


def rope_tables(rope_dim: int, base: float, max_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_len, rope_dim // 2] fp32 (the frequencies of transformers' default rope)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.float) / rope_dim))
    freqs = torch.arange(max_len, dtype=torch.float)[:, None] * inv_freq[None]
    return freqs.cos().to(device), freqs.sin().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox rotation of the first 2 * cos.shape[-1] dims of x [B, heads, D]; cos/sin [B, 1, R/2]."""
    r = cos.shape[-1]
    x1, x2, rest = x[..., :r], x[..., r:2 * r], x[..., 2 * r:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


# ---------------------------------------------------------------- the step's elementwise parts
# Pure functions of tensors (no module state), so one torch.compile of each serves every layer of the same
# shape. Between two matrix products a decode step runs dozens of small kernels (norms, rotary embedding,
# the attention over the cache, gates, residual adds); on a GPU whose GEMVs take tens of microseconds their
# launches add up to a third of a step. StepFunctions(compiled=True) fuses each function into a few kernels;
# EAGER runs the same code as written (the CPU and the fp32 yardstick).

def norm_to(h: torch.Tensor, w: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    return rms_norm(h, w, eps).to(dtype)


def add_norm(h, y, w, eps: float, dtype: torch.dtype):
    """(h + y, RMSNorm(h + y) in ``dtype``): the residual add and the next norm."""
    h = h + y.float()
    return h, rms_norm(h, w, eps).to(dtype)


def residual_add(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return h + y.float()


def swiglu(g: torch.Tensor, u: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (F.silu(g.float()) * u.float()).to(dtype)


def float_proj_split(x: torch.Tensor, w: torch.Tensor, n: int):
    """x @ w^T with w a float matrix (the DeltaNet alpha and beta rows stacked), split after row ``n``."""
    ct = torch.promote_types(x.dtype, w.dtype)   # fp32 when either is (the yardstick stays fp32)
    y = (x.to(ct) @ w.t().to(ct)).to(x.dtype)
    return y[:, :n].contiguous(), y[:, n:].contiguous()


def attention_inputs(qg, k, v, q_norm, k_norm, cos_t, sin_t, pos, eps: float, cache_dtype: torch.dtype):
    """From the q (with its output gate), k and v products: q and k normed per head and rotated, the gate,
    and k, v as the cache stores them ([B, kv_heads, 1, head_dim])."""
    B, D = qg.shape[0], q_norm.shape[0]
    H, G = qg.shape[1] // (2 * D), k.shape[1] // D
    qg = qg.float().view(B, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(B, H * D)
    q = rms_norm(q, q_norm, eps)
    k = rms_norm(k.float().view(B, G, D), k_norm, eps)
    cos, sin = cos_t.index_select(0, pos)[:, None], sin_t.index_select(0, pos)[:, None]
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q, gate, k[:, :, None].to(cache_dtype), v.view(B, G, 1, D).to(cache_dtype)


def attend(q, gate, k_cache, v_cache, pos, dtype: torch.dtype) -> torch.Tensor:
    """Softmax attention of q [1, heads, D] (one decode row) over the cache [1, kv_heads, T, D] up to ``pos``
    [1] (grouped KV heads), times the sigmoid output gate: the input of the output projection, in ``dtype``."""
    B, H, D = q.shape
    G, T = k_cache.shape[1], k_cache.shape[2]
    scores = torch.einsum("bgrd,bgtd->bgrt", q.view(B, G, H // G, D), k_cache.float()) / math.sqrt(D)
    future = torch.arange(T, device=q.device) > pos   # keys not written yet
    p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    o = torch.einsum("bgrt,bgtd->bgrd", p, v_cache.float()).reshape(B, H * D)
    return (o * torch.sigmoid(gate)).to(dtype)


def attend_rows(q, gate, k_cache, v_cache, pos, dtype: torch.dtype) -> torch.Tensor:
    """:func:`attend` for R rows of one sequence at positions ``pos`` [R] (a draft being verified): each row over
    the cache up to its own position. Run as written, never compiled (see :class:`StepFunctions`)."""
    R, H, D = q.shape
    G, T = k_cache.shape[1], k_cache.shape[2]
    scores = torch.einsum("bgrd,gtd->bgrt", q.view(R, G, H // G, D), k_cache[0].float()) / math.sqrt(D)
    future = torch.arange(T, device=q.device) > pos.view(R, 1, 1, 1)   # keys after the row's own position
    p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    o = torch.einsum("bgrt,gtd->bgrd", p, v_cache[0].float()).reshape(R, H * D)
    return (o * torch.sigmoid(gate)).to(dtype)


class StepFunctions:
    """The step's elementwise parts, as written (``compiled=False``) or each wrapped in ``torch.compile``
    (Inductor, static shapes, one graph per function: a graph break is an error, not a silent slowdown)."""

    NAMES = ("norm", "add_norm", "add", "swiglu", "float_proj_split", "attention_inputs", "attend")

    # shapes one process may meet: decode (1 row), verify rows of several draft lengths, the NextN block, a
    # second model; past dynamo's default limit a function would silently run uncompiled
    RECOMPILE_LIMIT = 64

    def __init__(self, compiled: bool = False):
        self.compiled = bool(compiled)
        if compiled:
            import torch._dynamo.config as dynamo  # only a compiled engine sets dynamo's options
            key = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
            setattr(dynamo, key, max(getattr(dynamo, key), self.RECOMPILE_LIMIT))
        fns = (norm_to, add_norm, residual_add, swiglu, float_proj_split, attention_inputs, attend)
        for name, fn in zip(self.NAMES, fns):
            setattr(self, name, torch.compile(fn, dynamic=False, fullgraph=True) if compiled else fn)


EAGER = StepFunctions(compiled=False)


class AttentionMixer:
    """Gated full attention with a preallocated KV cache [1, kv_heads, max_len, head_dim]. A call takes R rows
    of one sequence (R = 1: a decode step; R > 1: consecutive positions, e.g. a draft being verified)."""
    kind = "attention"

    def __init__(self, cfg: Qwen35Config, q: Linear, k: Linear, v: Linear, o: Linear, q_norm, k_norm):
        self.cfg, self.q, self.k, self.v, self.o, self.q_norm, self.k_norm = cfg, q, k, v, o, q_norm, k_norm
        self.k_cache = self.v_cache = self.cos = self.sin = None

    def linears(self):
        return [self.q, self.k, self.v, self.o]

    def allocate(self, batch: int, max_len: int, dtype: torch.dtype, device) -> None:
        c = self.cfg
        shape = (batch, c.attn_kv_heads, max_len, c.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.cos, self.sin = rope_tables(c.rope_dim, c.rope_base, max_len, device)

    def reset(self) -> None:
        self.k_cache.zero_()
        self.v_cache.zero_()

    def __call__(self, x: torch.Tensor, pos: torch.Tensor, fns: "StepFunctions | None" = None) -> torch.Tensor:
        """x [R, hidden] (normed, compute dtype), pos [R] long on x's device (the rows' positions)."""
        fns = fns or EAGER
        q, gate, k, v = fns.attention_inputs(self.q(x), self.k(x), self.v(x), self.q_norm, self.k_norm,
                                             self.cos, self.sin, pos, self.cfg.eps, self.k_cache.dtype)
        # in place, outside the compiled parts: the cache is never copied; every row's key is written before
        # any row attends, so rows see the earlier rows of the same call
        self.k_cache.index_copy_(2, pos, k.permute(2, 1, 0, 3))
        self.v_cache.index_copy_(2, pos, v.permute(2, 1, 0, 3))
        # one row: the compiled attention; several (a verify): as written. With one compiled function for both,
        # a GPU decode disagreed with the uncompiled step (rel. err 0.36, gpu_checks) though the function alone
        # agreed (1e-4); the single-row form is the one checked compiled on a GPU
        att = fns.attend if x.shape[0] == 1 else attend_rows
        return self.o(att(q, gate, self.k_cache, self.v_cache, pos, x.dtype))


class DeltaNetMixer:
    """Gated DeltaNet layer: projections, then the fused decode step (GGUF head order).

    A call with R > 1 rows (consecutive positions of one sequence) projects all rows in one pass over the
    weights, then steps the recurrence row by row; with snapshots allocated
    (:meth:`allocate_snapshots`) the state after each row is kept, so a verifier that accepts only the first
    ``a + 1`` rows restores the state after row ``a`` (:meth:`restore`) instead of recomputing."""
    kind = "deltanet"

    def __init__(self, cfg: Qwen35Config, qkv: Linear, gate: Linear, alpha: Linear, beta: Linear, out: Linear,
                 conv_w, ssm_a, dt_bias, ssm_norm):
        self.cfg, self.qkv, self.gate, self.alpha, self.beta, self.out = cfg, qkv, gate, alpha, beta, out
        self.conv_w, self.ssm_a, self.dt_bias, self.ssm_norm = conv_w, ssm_a, dt_bias, ssm_norm
        self.state = self.conv_state = None
        self.snap_state = self.snap_conv = None
        # alpha and beta stored as floats of one dtype (the usual case): one product for both
        self.ab = None
        if alpha.w is not None and beta.w is not None and alpha.w.dtype == beta.w.dtype:
            self.ab = Linear("ssm_alpha+ssm_beta", torch.cat([alpha.w, beta.w]), alpha.type,
                             alpha.N + beta.N, alpha.K)
            self.alpha = self.beta = None   # held once, in self.ab
        self.n_heads = cfg.ssm_v_heads

    def linears(self):
        return [self.qkv, self.gate] + ([self.ab] if self.ab is not None else [self.alpha, self.beta]) + [self.out]

    def allocate(self, batch: int, max_len: int, dtype: torch.dtype, device) -> None:
        c = self.cfg
        self.state = torch.zeros(batch, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim, dtype=torch.float32, device=device)
        self.conv_state = torch.zeros(batch, CONV_TAPS - 1, c.conv_dim, dtype=dtype, device=device)

    def reset(self) -> None:
        self.state.zero_()
        self.conv_state.zero_()

    def allocate_snapshots(self, rows: int) -> None:
        """Room for the state and conv state after each row but the last of calls of up to ``rows`` rows (after
        the last row the state itself is that row's)."""
        self.snap_state = torch.empty((rows - 1,) + tuple(self.state.shape[1:]), dtype=self.state.dtype,
                                      device=self.state.device)
        self.snap_conv = torch.empty((rows - 1,) + tuple(self.conv_state.shape[1:]), dtype=self.conv_state.dtype,
                                     device=self.conv_state.device)

    def restore(self, row: int) -> None:
        """The state as it was after row ``row`` (not the last) of the last multi-row call."""
        self.state[0].copy_(self.snap_state[row])
        self.conv_state[0].copy_(self.snap_conv[row])

    def _step(self, qkv, z, a, b, dtype):
        return gated_deltanet_decode(qkv, z, a, b, self.conv_state, self.state, self.conv_w, self.ssm_a,
                                     self.dt_bias, self.ssm_norm, num_k_heads=self.cfg.ssm_k_heads,
                                     head_order="gguf", eps=self.cfg.eps, out_dtype=dtype)

    def __call__(self, x: torch.Tensor, pos: torch.Tensor, fns: "StepFunctions | None" = None) -> torch.Tensor:
        if self.ab is not None:
            a, b = (fns or EAGER).float_proj_split(x, self.ab.w, self.n_heads)
        else:
            a, b = self.alpha(x), self.beta(x)
        qkv, z = self.qkv(x), self.gate(x)
        R = x.shape[0]
        if R == 1:
            return self.out(self._step(qkv, z, a, b, x.dtype))
        if self.snap_state is not None and R - 1 > self.snap_state.shape[0]:
            raise ValueError(f"{R} rows but snapshots for calls of {self.snap_state.shape[0] + 1}")
        outs = []
        for i in range(R):   # the recurrence is sequential in the position
            outs.append(self._step(qkv[i:i + 1], z[i:i + 1], a[i:i + 1], b[i:i + 1], x.dtype))
            if self.snap_state is not None and i < R - 1:
                self.snap_state[i].copy_(self.state[0])
                self.snap_conv[i].copy_(self.conv_state[0])
        return self.out(torch.cat(outs))


class Block:
    """One main layer: norms, mixer (attention or Gated DeltaNet), SwiGLU FFN."""

    def __init__(self, index: int, attn_norm, mixer, post_norm, ffn_gate: Linear, ffn_up: Linear,
                 ffn_down: Linear, eps: float):
        self.index, self.attn_norm, self.mixer, self.post_norm = index, attn_norm, mixer, post_norm
        self.ffn_gate, self.ffn_up, self.ffn_down, self.eps = ffn_gate, ffn_up, ffn_down, eps

    @property
    def kind(self) -> str:
        return self.mixer.kind

    def linears(self):
        return self.mixer.linears() + [self.ffn_gate, self.ffn_up, self.ffn_down]

    def __call__(self, h: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype,
                 fns: "StepFunctions | None" = None) -> torch.Tensor:
        fns = fns or EAGER
        h, x = fns.add_norm(h, self.mixer(fns.norm(h, self.attn_norm, self.eps, dtype), pos, fns), self.post_norm,
                            self.eps, dtype)
        return fns.add(h, self.ffn_down(fns.swiglu(self.ffn_gate(x), self.ffn_up(x), dtype)))


NEXTN_TENSORS = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight")


def layer_tensor_names(cfg: Qwen35Config, i: int) -> list[str]:
    """The tensors layer ``i`` needs (GGUF names); ``i == cfg.n_layers``: the NextN (MTP) block, a full-attention
    layer plus :data:`NEXTN_TENSORS`."""
    p = f"blk.{i}."
    common = ["attn_norm.weight", "post_attention_norm.weight", "ffn_gate.weight", "ffn_up.weight",
              "ffn_down.weight"]
    if i == cfg.n_layers:
        common += list(NEXTN_TENSORS)
    if i == cfg.n_layers or cfg.layer_types[i] == "attention":
        own = ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight",
               "attn_k_norm.weight"]
    else:
        own = ["attn_qkv.weight", "attn_gate.weight", "ssm_alpha.weight", "ssm_beta.weight", "ssm_out.weight",
               "ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight"]
    return [p + n for n in common + own]


def nextn_bytes(f: GGUFFile, cfg: Qwen35Config) -> int:
    """Bytes of the NextN (MTP) block's tensors in the file (0 without one)."""
    if not cfg.n_nextn:
        return 0
    return sum(f.info(n).n_bytes for n in layer_tensor_names(cfg, cfg.n_layers) if n in f.tensors)


def layer_bytes(f: GGUFFile, cfg: Qwen35Config) -> list[int]:
    """Bytes of each main layer's tensors in the file."""
    return [sum(f.info(n).n_bytes for n in layer_tensor_names(cfg, i) if n in f.tensors)
            for i in range(cfg.n_layers)]


class Qwen35Model:
    """Weights of a qwen35 GGUF on one or more devices (see the module docstring).

    ``devices``: one device per main layer (from :func:`t4lib.models.qwen35.split.plan_stages`
    for a split); the embedding lives with layer 0, the final norm and head with the last layer.
    ``mtp``: the file's NextN block as an :class:`~.mtp.MTPHead` (on the last layer's device), or None when
    the file has none or ``from_gguf(mtp=False)``. ``mtp_embed``: the embedding the block reads, on its device
    (the model's own when that is the first layer's device, else a copy of the table there)."""

    def __init__(self, cfg: Qwen35Config, embed: Embedding, blocks: list[Block], output_norm, head: Linear,
                 devices: list, path: Path | None = None, mtp=None):
        self.cfg, self.embed, self.blocks, self.output_norm, self.head = cfg, embed, blocks, output_norm, head
        self.devices, self.path, self.mtp = devices, path, mtp
        self.mtp_embed = None
        if mtp is not None:   # compared on tensors: a device given as "cuda" has no index, its tensors do
            dev = mtp.enorm.device
            self.mtp_embed = embed if embed.rows.device == dev else Embedding(embed.rows.to(dev), embed.type,
                                                                                embed.vocab, embed.hidden)

    @classmethod
    def from_gguf(cls, path_or_file, device="cpu", devices: list | None = None,
                  activations: str = "fp16", mtp: bool = True) -> "Qwen35Model":
        if activations not in ("fp16", "int8"):
            raise ValueError(f"activations must be 'fp16' or 'int8', got {activations!r}")
        f = path_or_file if isinstance(path_or_file, GGUFFile) else GGUFFile(path_or_file)
        cfg = Qwen35Config.from_gguf(f)
        devices = [torch.device(d) for d in (devices or [device] * cfg.n_layers)]
        if len(devices) != cfg.n_layers:
            raise ValueError(f"devices must list one device per main layer ({cfg.n_layers}), got {len(devices)}")
        with_mtp = bool(mtp) and cfg.n_nextn > 0
        for i in range(cfg.n_layers + with_mtp):
            for n in layer_tensor_names(cfg, i):
                if n not in f.tensors:
                    kind = "NextN/MTP" if i == cfg.n_layers else cfg.layer_types[i]
                    raise GGUFError(f"{f.path}: missing tensor {n!r} (layer {i}, {kind})")
        for n in ("output_norm.weight",):
            if n not in f.tensors:
                raise GGUFError(f"{f.path}: missing tensor {n!r}")

        def supported(n):
            t = f.info(n)
            if t.type_id not in FLOAT_TYPES and t.type_id not in FORMATS:
                ok = ", ".join(list(FLOAT_TYPES.values()) + [v[0] for v in FORMATS.values()])
                raise GGUFError(f"{f.path}: tensor {n!r} has unsupported GGUF tensor type {t.type_name}; "
                                f"supported: {ok}")
            return t

        def data(n, dev):
            t = supported(n)
            if t.type_id in FLOAT_TYPES:
                return f.dequantize(n, device=dev, out_dtype=torch.float32 if t.type_id == 0 else torch.float16)
            return f.raw(n).to(dev)

        def lin(n, dev, shape):
            t = supported(n)
            if tuple(t.shape) != tuple(shape):
                raise GGUFError(f"{f.path}: tensor {n!r} has shape {t.shape}, expected {tuple(shape)}")
            return Linear(n, data(n, dev), t.type_id, shape[0], shape[1], activations)

        def vec(n, dev, shape):
            t = supported(n)
            if tuple(t.shape) != tuple(shape):
                raise GGUFError(f"{f.path}: tensor {n!r} has shape {t.shape}, expected {tuple(shape)}")
            return f.dequantize(n, device=dev).float().contiguous()

        c = cfg

        def block(i, dev):
            p = f"blk.{i}."
            if i == c.n_layers or c.layer_types[i] == "attention":
                qd, kd = c.attn_heads * c.head_dim, c.attn_kv_heads * c.head_dim
                mixer = AttentionMixer(c, lin(p + "attn_q.weight", dev, (2 * qd, c.hidden)),
                                       lin(p + "attn_k.weight", dev, (kd, c.hidden)),
                                       lin(p + "attn_v.weight", dev, (kd, c.hidden)),
                                       lin(p + "attn_output.weight", dev, (c.hidden, qd)),
                                       vec(p + "attn_q_norm.weight", dev, (c.head_dim,)),
                                       vec(p + "attn_k_norm.weight", dev, (c.head_dim,)))
            else:
                H, vd = c.ssm_v_heads, c.ssm_v_heads * c.ssm_v_dim
                mixer = DeltaNetMixer(c, lin(p + "attn_qkv.weight", dev, (c.conv_dim, c.hidden)),
                                      lin(p + "attn_gate.weight", dev, (vd, c.hidden)),
                                      lin(p + "ssm_alpha.weight", dev, (H, c.hidden)),
                                      lin(p + "ssm_beta.weight", dev, (H, c.hidden)),
                                      lin(p + "ssm_out.weight", dev, (c.hidden, vd)),
                                      vec(p + "ssm_conv1d.weight", dev, (c.conv_dim, CONV_TAPS)),
                                      vec(p + "ssm_a", dev, (H,)), vec(p + "ssm_dt.bias", dev, (H,)),
                                      vec(p + "ssm_norm.weight", dev, (c.ssm_v_dim,)))
            return Block(i, vec(p + "attn_norm.weight", dev, (c.hidden,)), mixer,
                         vec(p + "post_attention_norm.weight", dev, (c.hidden,)),
                         lin(p + "ffn_gate.weight", dev, (c.ffn, c.hidden)),
                         lin(p + "ffn_up.weight", dev, (c.ffn, c.hidden)),
                         lin(p + "ffn_down.weight", dev, (c.hidden, c.ffn)), c.eps)

        blocks = [block(i, devices[i]) for i in range(c.n_layers)]
        t = supported("token_embd.weight")
        embed = Embedding(data("token_embd.weight", devices[0]), t.type_id, c.vocab, c.hidden)
        last = devices[-1]
        head_name = "token_embd.weight" if c.tied else "output.weight"
        head = lin(head_name, last, (c.vocab, c.hidden))
        head_block = None
        if with_mtp:
            p = f"blk.{c.n_layers}."
            head_block = MTPHead(c, lin(p + "nextn.eh_proj.weight", last, (c.hidden, 2 * c.hidden)),
                                 vec(p + "nextn.enorm.weight", last, (c.hidden,)),
                                 vec(p + "nextn.hnorm.weight", last, (c.hidden,)), block(c.n_layers, last),
                                 vec(p + "nextn.shared_head_norm.weight", last, (c.hidden,)))
        return cls(cfg, embed, blocks, vec("output_norm.weight", last, (c.hidden,)), head, devices, f.path,
                   mtp=head_block)

    def weight_bytes(self) -> int:
        """Bytes of every weight the decode step reads (embedding: the whole table is held, one row read)."""
        n = sum(lin.nbytes for b in self.blocks for lin in b.linears())
        n += sum(t.numel() * t.element_size() for b in self.blocks for t in self._small(b))
        return n + self.head.nbytes + self.output_norm.numel() * 4

    @staticmethod
    def _small(b: Block):
        m = b.mixer
        extra = [m.q_norm, m.k_norm] if m.kind == "attention" else [m.conv_w, m.ssm_a, m.dt_bias, m.ssm_norm]
        return [b.attn_norm, b.post_norm] + extra

    def bytes_per_token(self) -> int:
        """Weight bytes read per decoded token: every layer and the head, plus one embedding row."""
        return self.weight_bytes() + self.embed.nbytes // self.cfg.vocab


class MTPHead:
    """The NextN block's weights and its KV cache: multi-token prediction (see :mod:`t4lib.models.qwen35.mtp`)."""

    def __init__(self, cfg: Qwen35Config, eh_proj: Linear, enorm, hnorm, block: Block, shared_head_norm):
        self.cfg, self.eh_proj, self.enorm, self.hnorm = cfg, eh_proj, enorm, hnorm
        self.block, self.shared_head_norm = block, shared_head_norm

    def linears(self):
        return [self.eh_proj] + self.block.linears()

    @property
    def nbytes(self) -> int:
        """Bytes of the block's own weights (the embedding row and the head it shares are not counted)."""
        small = [self.enorm, self.hnorm, self.shared_head_norm, self.block.attn_norm, self.block.post_norm,
                 self.block.mixer.q_norm, self.block.mixer.k_norm]
        return sum(lin.nbytes for lin in self.linears()) + sum(t.numel() * t.element_size() for t in small)

    def allocate(self, max_len: int, dtype: torch.dtype, device) -> None:
        self.block.mixer.allocate(1, max_len, dtype, device)

    def reset(self) -> None:
        self.block.mixer.reset()

    def __call__(self, tokens: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor, embed, head: Linear,
                 dtype: torch.dtype, fns: StepFunctions | None = None):
        """tokens [R] long (token t + 1 of each row), hidden [R, H] (the main model's normed hidden state at t,
        compute dtype), pos [R] long (t) -> (logits [R, vocab] fp32, out [R, H] in ``dtype``: the next
        draft step's hidden state)."""
        fns = fns or EAGER
        eps = self.cfg.eps
        x = torch.cat([fns.norm(embed(tokens), self.enorm, eps, dtype), fns.norm(hidden, self.hnorm, eps, dtype)],
                      dim=-1)
        h = self.block(self.eh_proj(x).float(), pos, dtype, fns)   # the residual stream is fp32, as in the model
        out = fns.norm(h, self.shared_head_norm, eps, dtype)
        return head(out).float(), out
