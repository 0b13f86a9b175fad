"""One matrix product for sibling projections that read the same input.

A batch-1 decode step launches one GEMV per projection. In a Hugging Face
decoder layer, ``q_proj``, ``k_proj`` and ``v_proj`` read the same hidden
state, and so do ``gate_proj`` and ``up_proj``; the small ones (``k_proj``,
``v_proj`` with grouped-query attention) cost a launch each, not their bytes.
:func:`fuse_projections` stacks each group's weights into one
:class:`FusedProjection` (a ``QuantLinear`` or ``nn.Linear`` with the rows of
all members; registered on the parent as ``qkv_proj`` / ``gate_up_proj``) and
replaces the members by :class:`ProjectionSlice` views, so the model's own
forward code runs unchanged: the first slice called with an input computes
the stacked product, its siblings take their columns of the same result.

Outputs agree with the separate layers within the kernels' stated tolerance,
not bit for bit: a kernel's K-split and cuBLAS's algorithm depend on the
output count, so the fp32 summation order of a row can change. The memo relies on the model calling the members with
the same tensor object and not modifying it in place between the calls, which
holds for the attention and MLP blocks of Llama, Qwen2/3 and Mistral; a group
whose members read different inputs just computes the product once per member.
:func:`unfuse_projections` restores separate layers; ``save_quantized`` refuses a fused model.
"""
from __future__ import annotations

import torch
from torch import nn

from ..quant.linear import QuantLinear

GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


class FusedProjection(nn.Module):
    """The stacked layer of one group and the memo its slices share."""

    def __init__(self, inner: nn.Module, names: tuple[str, ...], sizes: list[int]):
        super().__init__()
        self.inner = inner
        self.names = names
        self.offsets = [0]
        for s in sizes:
            self.offsets.append(self.offsets[-1] + s)
        self._memo = None  # [input, output, slices served]

    def output_for(self, x: torch.Tensor, index: int) -> torch.Tensor:
        memo = self._memo
        if memo is None or memo[0] is not x:
            memo = [x, self.inner(x), 0]
        memo[2] += 1
        # Dropped once every member has its columns, so no activation outlives the layer call.
        self._memo = None if memo[2] == len(self.names) else memo
        return memo[1][..., self.offsets[index]:self.offsets[index + 1]]

    def extra_repr(self) -> str:
        return f"members={self.names}, out_features={self.offsets[1:]}"


class ProjectionSlice(nn.Module):
    """Stands in for one member: its columns of the fused product (no parameters of its own)."""

    def __init__(self, fused: FusedProjection, index: int, in_features: int, out_features: int):
        super().__init__()
        object.__setattr__(self, "fused", fused)  # not a submodule: the parent owns the fused layer once
        self.index, self.in_features, self.out_features = index, in_features, out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.output_for(x, self.index)

    def extra_repr(self) -> str:
        return f"{self.fused.names[self.index]} of the fused projection, out_features={self.out_features}"


def _stack(members: list[nn.Module]) -> nn.Module | None:
    """One layer with the rows of all members, or None when they cannot be stacked."""
    first = members[0]
    has_bias = [m.bias is not None for m in members]
    if isinstance(first, QuantLinear):
        if not all(isinstance(m, QuantLinear) and m.in_features == first.in_features
                   and m.group_size == first.group_size and m.qweight.device == first.qweight.device
                   for m in members):
            return None
        out = QuantLinear(first.in_features, sum(m.out_features for m in members), any(has_bias),
                          first.group_size, device=first.qweight.device)
        out.qweight.copy_(torch.cat([m.qweight for m in members]))
        out.scales.copy_(torch.cat([m.scales for m in members]))
        out.max_ctas, out.backend = first.max_ctas, first.backend
    elif type(first) is nn.Linear:
        w = first.weight
        if not all(type(m) is nn.Linear and m.in_features == first.in_features and m.weight.dtype == w.dtype
                   and m.weight.device == w.device for m in members):
            return None
        out = nn.Linear(first.in_features, sum(m.out_features for m in members), any(has_bias),
                        device=w.device, dtype=w.dtype)
        with torch.no_grad():
            out.weight.copy_(torch.cat([m.weight for m in members]))
    else:
        return None
    if any(has_bias):
        with torch.no_grad():
            out.bias.copy_(torch.cat([m.bias.to(out.bias.dtype) if m.bias is not None
                                      else torch.zeros(m.out_features, dtype=out.bias.dtype, device=out.bias.device)
                                      for m in members]))
    out.requires_grad_(False)
    return out


@torch.no_grad()
def fuse_projections(model: nn.Module) -> int:
    """Fuse every q/k/v and gate/up group of ``model`` in place (see module docstring); returns the count.

    Members must all be ``QuantLinear`` (same in_features, group_size) or all
    ``nn.Linear`` (same in_features, dtype, device); other groups are left alone.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    n = 0
    for parent in list(model.modules()):
        for fused_name, names in GROUPS.items():
            members = [getattr(parent, name, None) for name in names]
            if any(m is None or isinstance(m, ProjectionSlice) for m in members):
                continue
            if hasattr(parent, fused_name):
                raise ValueError(f"{type(parent).__name__} already has an attribute {fused_name!r}; "
                                 "cannot register the fused projection under that name")
            stacked = _stack(members)
            if stacked is None:
                continue
            fused = FusedProjection(stacked, names, [m.out_features for m in members])
            setattr(parent, fused_name, fused)
            for i, (name, m) in enumerate(zip(names, members)):
                setattr(parent, name, ProjectionSlice(fused, i, m.in_features, m.out_features))
            n += 1
    return n


@torch.no_grad()
def unfuse_projections(model: nn.Module) -> int:
    """Undo :func:`fuse_projections` in place: separate layers again; returns the number of groups split."""
    n = 0
    for parent in list(model.modules()):
        for fused_name in GROUPS:
            fused = getattr(parent, fused_name, None)
            if not isinstance(fused, FusedProjection):
                continue
            inner = fused.inner
            for i, name in enumerate(fused.names):
                lo, hi = fused.offsets[i], fused.offsets[i + 1]
                bias = inner.bias[lo:hi] if inner.bias is not None else None
                if isinstance(inner, QuantLinear):
                    m = QuantLinear(inner.in_features, hi - lo, bias is not None, inner.group_size,
                                    device=inner.qweight.device)
                    m.qweight.copy_(inner.qweight[lo:hi])
                    m.scales.copy_(inner.scales[lo:hi])
                    m.max_ctas, m.backend = inner.max_ctas, inner.backend
                else:
                    m = nn.Linear(inner.in_features, hi - lo, bias is not None, device=inner.weight.device,
                                  dtype=inner.weight.dtype)
                    m.weight.copy_(inner.weight[lo:hi])
                if bias is not None:
                    m.bias.copy_(bias)
                setattr(parent, name, m)
            delattr(parent, fused_name)
            n += 1
    return n
