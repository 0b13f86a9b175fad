"""The shape table and the long-context (shape 14) blockwise evaluator.

Shapes 1-13 span D in {128, 512, 1024} (d_head 32 or 64), S from 128 to 4096,
batch 1 to 32, causal and not, padded and all-valid masks, 2 to 12 layers;
FFN width 4 D. Inputs are seeded: ``x ~ N(0, 1)`` in the model dtype; a
padded mask is right padding with per-row lengths drawn in ``[S/2, S)``; an
all-valid mask is an all-true tensor (so the reference does the mask work and
the optimized model may prove it away).

Shape 14 (B 32, S 100000, D 1024, 16 heads, 2 layers, causal, right padding)
needs a ``[B, H, S, S]`` score tensor of 10^13 elements in the reference: it
cannot run densely. :func:`long_context_forward` evaluates the same model
exactly by its semantics with bounded memory:

* one batch row at a time, generated on the device from its own seed;
* the row's valid tokens are compacted (order kept). That is exact for any
  mask: invalid keys are never attended, causality between valid tokens is
  their original order, and invalid positions are zero in the output;
* per layer, K and V of the whole row are formed once (``2 S D`` values), and
  queries are processed in blocks of ``q_block`` with SDPA over the key prefix
  the block may see (lower-right causal alignment), then the FFN per block;
* the output row is reduced to a checksum, or handed to ``sink``.

Peak memory is about ``6 S D`` fp16 values plus one block's FFN activation
and the weights, independent of B. The evaluator's arithmetic is SDPA's, not
the reference's, so it is held to the **judge** rule against the dense
reference on a reduced version (:data:`REDUCED`), with the strict result
reported beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Callable

import torch
import torch.nn.functional as F

from t4lib.contract.model import BaselineTransformer


@dataclass(frozen=True)
class Shape:
    id: int
    B: int
    S: int
    D: int
    H: int
    L: int
    causal: bool
    padded: bool

    @property
    def label(self) -> str:
        return (f"#{self.id} B{self.B} S{self.S} D{self.D} H{self.H} L{self.L} "
                f"{'causal' if self.causal else 'full'} {'padded' if self.padded else 'all-valid'}")

    def as_dict(self) -> dict:
        return {**asdict(self), "label": self.label}

    def flops(self) -> float:
        """Forward FLOPs: the 12 D^2 per token of the projections and FFN, plus
        4 S^2 D per row for scores and weighted sum (halved when causal)."""
        tok = self.B * self.S
        att = 4 * self.B * self.S * self.S * self.D * (0.5 if self.causal else 1.0)
        return float(self.L * (2 * tok * 12 * self.D * self.D + att))

    def min_bytes(self, elt: int = 2) -> float:
        """Bytes an ideal fused forward must move: weights once, x in, y out."""
        return float(self.L * 12 * self.D * self.D * elt + 2 * self.B * self.S * self.D * elt)


SHAPES: tuple[Shape, ...] = (
    Shape(1, 1, 128, 128, 4, 2, True, False),
    Shape(2, 8, 512, 512, 8, 6, False, False),
    Shape(3, 4, 1024, 512, 8, 6, True, False),
    Shape(4, 1, 4096, 512, 8, 4, True, False),
    Shape(5, 32, 128, 128, 4, 4, False, True),
    Shape(6, 16, 256, 1024, 16, 2, False, True),
    Shape(7, 2, 2048, 1024, 16, 4, True, True),
    Shape(8, 32, 512, 128, 4, 12, True, False),
    Shape(9, 1, 1024, 1024, 16, 12, False, False),
    Shape(10, 8, 128, 512, 8, 12, True, True),
    Shape(11, 4, 4096, 128, 4, 2, False, True),
    Shape(12, 16, 1024, 1024, 16, 2, True, False),
    Shape(13, 2, 256, 128, 4, 8, False, False),
)
LONG = Shape(14, 32, 100_000, 1024, 16, 2, True, True)
REDUCED = Shape(14, 2, 4096, 1024, 16, 2, True, True)   # shape 14 scaled down so the dense reference runs

# Tiny shapes for the CPU profile and the CPU tests (same structure, seconds on two cores).
CPU_SHAPES: tuple[Shape, ...] = (
    Shape(1, 1, 16, 32, 2, 2, True, False),
    Shape(2, 2, 32, 32, 4, 3, False, True),
    Shape(3, 2, 64, 64, 4, 2, True, True),
    Shape(4, 3, 24, 64, 2, 4, False, False),
)
CPU_LONG = Shape(14, 3, 700, 32, 2, 2, True, True)
CPU_REDUCED = Shape(14, 2, 96, 32, 2, 2, True, True)


def by_id(ids, table=SHAPES) -> list[Shape]:
    m = {s.id: s for s in table}
    bad = [i for i in ids if i not in m]
    if bad:
        raise ValueError(f"unknown shape ids {bad}; the table has {sorted(m)}")
    return [m[i] for i in ids]


def lengths(shape: Shape, seed: int) -> list[int]:
    """Valid lengths per row: S when all-valid, else drawn in [S/2, S)."""
    if not shape.padded:
        return [shape.S] * shape.B
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    lo = max(1, shape.S // 2)
    return [int(v) for v in torch.randint(lo, max(lo + 1, shape.S), (shape.B,), generator=g)]


def make_inputs(shape: Shape, seed: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded ``x [B,S,D]`` and ``valid_token_mask [B,S]`` (all-true when not padded)."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(shape.B, shape.S, shape.D, generator=g, device=dev, dtype=torch.float32).to(dtype)
    lens = torch.tensor(lengths(shape, seed), device=dev)
    mask = torch.arange(shape.S, device=dev)[None, :] < lens[:, None]
    return x, mask


def row_input(shape: Shape, seed: int, b: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``b`` of shape 14's input, generated on its own (``[S, D]``, ``[S]``)."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed * 1_000_003 + b)
    x = torch.randn(shape.S, shape.D, generator=g, device=dev, dtype=torch.float32).to(dtype)
    n = lengths(shape, seed)[b]
    return x, torch.arange(shape.S, device=dev) < n


def stacked_input(shape: Shape, seed: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense ``[B, S, D]`` input equal to the rows :func:`row_input` makes."""
    rows = [row_input(shape, seed, b, device, dtype) for b in range(shape.B)]
    return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def _attend_block(q, k, v, q0: int, causal: bool) -> torch.Tensor:
    """SDPA for queries ``q0 .. q0+n`` (``q [H,n,dh]``) over keys ``k [H,Sk,dh]``."""
    n = q.shape[1]
    if not causal:
        return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    kend = q0 + n
    kk, vv = k[:, :kend], v[:, :kend]
    try:
        from torch.nn.attention.bias import causal_lower_right  # newer torch only: the except below covers older torch

        return F.scaled_dot_product_attention(q[None], kk[None], vv[None],
                                              attn_mask=causal_lower_right(n, kend))[0]
    except ImportError:  # older torch: an explicit boolean mask for this block
        allowed = torch.arange(kend, device=q.device)[None, :] <= (q0 + torch.arange(n, device=q.device))[:, None]
        return F.scaled_dot_product_attention(q[None], kk[None], vv[None], attn_mask=allowed)[0]


@torch.no_grad()
def long_context_forward(model: BaselineTransformer, shape: Shape, seed: int, *, q_block: int = 8192,
                         sink: Callable[[int, torch.Tensor], None] | None = None, progress=None) -> dict:
    """Evaluate ``model`` on shape ``shape`` row by row with bounded memory.

    The model supplies the weights (its dims must match ``shape``). Returns a
    summary: per-row checksums (sum and sum of |y| in float64), the number of
    valid tokens, and whether every value was finite. ``sink(b, y_row)``
    receives each ``[S, D]`` output row when given.
    """
    p = model.final_ln.weight
    dev, dt = p.device, p.dtype
    if (model.d_model, model.n_heads, model.n_layers, model.causal) != (shape.D, shape.H, shape.L, shape.causal):
        raise ValueError(f"model (D={model.d_model}, H={model.n_heads}, L={model.n_layers}, causal={model.causal}) "
                         f"does not match shape {shape.label}")
    H, dh, D = shape.H, shape.D // shape.H, shape.D
    sums, abs_sums, finite, valid = [], [], True, 0
    for b in range(shape.B):
        x_row, m_row = row_input(shape, seed, b, dev, dt)
        idx = m_row.nonzero().squeeze(1)
        xv = x_row.index_select(0, idx)                       # [Sv, D] valid tokens, in order
        del x_row
        Sv = xv.shape[0]
        valid += Sv
        for blk in model.layers:
            att = blk.attn
            h = blk.ln1(xv)
            k = att.k_proj(h).view(Sv, H, dh).transpose(0, 1).contiguous()  # [H, Sv, dh], once per layer
            v = att.v_proj(h).view(Sv, H, dh).transpose(0, 1).contiguous()
            out = torch.empty_like(xv)
            for q0 in range(0, Sv, q_block):
                q1 = min(Sv, q0 + q_block)
                q = att.q_proj(h[q0:q1]).view(q1 - q0, H, dh).transpose(0, 1)
                ctx = _attend_block(q, k, v, q0, shape.causal).transpose(0, 1).reshape(q1 - q0, D)
                r = xv[q0:q1] + att.out_proj(ctx)
                out[q0:q1] = r + blk.ffn(r)
            del h, k, v
            xv = out
        yv = model.final_ln(xv)
        y = torch.zeros(shape.S, D, device=dev, dtype=dt)
        y.index_copy_(0, idx, yv)
        del xv, yv
        s_, a_, ok = 0.0, 0.0, True
        for c0 in range(0, shape.S, q_block):                 # checksums in blocks: no full-row fp64 copy
            yc = y[c0:c0 + q_block].double()
            s_ += float(yc.sum())
            a_ += float(yc.abs().sum())
            ok = ok and bool(torch.isfinite(yc).all())
        sums.append(s_)
        abs_sums.append(a_)
        finite = finite and ok
        if sink is not None:
            sink(b, y)
        del y
        if progress:
            progress(b)
    return {"rows": shape.B, "valid_tokens": valid, "finite": finite, "row_sum": sums, "row_abs_sum": abs_sums}


def long_context_dense(model: BaselineTransformer, shape: Shape, seed: int, q_block: int = 8192) -> tuple:
    """(dense reference output, blockwise output) on ``shape`` (a reduced one)."""
    x, mask = stacked_input(shape, seed, model.final_ln.weight.device, model.final_ln.weight.dtype)
    with torch.no_grad():
        ref = model(x, mask)
    rows = torch.empty_like(ref)

    def sink(b, y):
        rows[b] = y

    long_context_forward(model, shape, seed, q_block=q_block, sink=sink)
    return ref, rows


def estimate_long_peak_bytes(shape: Shape, q_block: int = 8192, elt: int = 2) -> float:
    """Activation bytes the evaluator holds at its peak (ESTIMATED model):
    x row, compacted row, LN output, K, V, output row (6 S D) plus one block's
    Q, context and FFN hidden (q_block (3 D + 4 D)), plus the weights."""
    return float(elt * (6 * shape.S * shape.D + q_block * 7 * shape.D + shape.L * 12 * shape.D ** 2))

