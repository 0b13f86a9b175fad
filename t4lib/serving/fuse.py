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

from itertools import accumulate

import torch
from torch import nn

from ..quant.linear import QuantLinear
from ..quant.w4a16 import QuantizedWeight

GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


class FusedProjection(nn.Module):
    """The stacked layer of one group and the memo its slices share."""

    def __init__(self, inner: nn.Module, names: tuple[str, ...], sizes: list[int], has_bias: list[bool]):
        super().__init__()
        self.inner = inner
        self.names, self.sizes, self.has_bias = names, sizes, has_bias  # has_bias: for unfuse_projections
        self.offsets = list(accumulate(sizes, initial=0))
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
        return f"members={self.names}, out_features={self.sizes}"


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


def _rows(m: nn.Module) -> list[torch.Tensor]:
    """The tensors of a layer that are indexed by output row (stacked along dim 0)."""
    return [m.qweight, m.scales] if isinstance(m, QuantLinear) else [m.weight]


def _layer_like(template: nn.Module, rows: list[torch.Tensor], bias: torch.Tensor | None) -> nn.Module:
    """A layer of ``template``'s kind and input size holding ``rows`` (see :func:`_rows`) and ``bias``."""
    if isinstance(template, QuantLinear):
        qweight, scales = rows
        m = QuantLinear.from_quantized(QuantizedWeight(qweight, scales, qweight.shape[0], template.in_features,
                                                       template.group_size), bias)
        m.max_ctas, m.backend, m.activations = template.max_ctas, template.backend, template.activations
        return m
    w = rows[0]
    m = nn.Linear(template.in_features, w.shape[0], bias is not None, device=w.device, dtype=w.dtype)
    m.weight.copy_(w)
    if bias is not None:
        m.bias.copy_(bias)
    return m


def _stackable(members: list[nn.Module]) -> bool:
    first = members[0]
    if isinstance(first, QuantLinear):
        return all(isinstance(m, QuantLinear) and m.in_features == first.in_features
                   and m.group_size == first.group_size and m.qweight.device == first.qweight.device
                   for m in members)
    return type(first) is nn.Linear and all(
        type(m) is nn.Linear and m.in_features == first.in_features and m.weight.dtype == first.weight.dtype
        and m.weight.device == first.weight.device for m in members)


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
            if not _stackable(members):
                continue
            has_bias = [m.bias is not None for m in members]
            bias = None
            if any(has_bias):  # members without one get zeros in the stacked bias
                dtype = torch.float16 if isinstance(members[0], QuantLinear) else members[0].weight.dtype
                bias = torch.cat([m.bias.to(dtype) if m.bias is not None else
                                  torch.zeros(m.out_features, dtype=dtype, device=_rows(m)[0].device)
                                  for m in members])
            stacked = _layer_like(members[0], [torch.cat(ts) for ts in zip(*map(_rows, members))], bias)
            fused = FusedProjection(stacked.requires_grad_(False), names, [m.out_features for m in members],
                                    has_bias)
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
                bias = inner.bias[lo:hi] if fused.has_bias[i] else None
                setattr(parent, name, _layer_like(inner, [t[lo:hi] for t in _rows(inner)], bias))
            delattr(parent, fused_name)
            n += 1
    return n
