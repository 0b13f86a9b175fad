"""Shared validation and backend choice for every op.

Public ops call ``check`` on each tensor argument (a clear error naming the
argument), then ``use_cuda`` to pick the backend: the CUDA library when the
inputs live on a CUDA device and the family builds, the reference otherwise.
``backend="cuda"`` or ``"reference"`` forces one; ``T4LIB_REQUIRE_CUDA=1``
turns a silent fallback to the reference into an error.
"""
from __future__ import annotations

import ctypes
import os

import torch

from .. import _build

BACKENDS = ("auto", "cuda", "reference")


def check(name: str, t, *, dtype=None, ndim: int | None = None, device: torch.device | str | None = None,
          contiguous: bool = True, align: int = 0) -> None:
    """Raise TypeError/ValueError naming ``name`` when ``t`` is not as required."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None:
        allowed = dtype if isinstance(dtype, (tuple, list)) else (dtype,)
        if t.dtype not in allowed:
            raise TypeError(f"{name} must have dtype {' or '.join(map(str, allowed))}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (got strides {t.stride()}); call .contiguous()")
    if align and t.is_cuda and t.data_ptr() % align:
        raise ValueError(f"{name} must be {align}-byte aligned (data_ptr % {align} = {t.data_ptr() % align})")


def check_grid_cap(name: str, value) -> None:
    """A launch-grid cap (``max_blocks``/``max_ctas``, used by occupancy pacing): None or a positive int."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


def same_device(**tensors: torch.Tensor) -> torch.device:
    devs = {n: t.device for n, t in tensors.items() if t is not None}
    if len(set(devs.values())) > 1:
        raise ValueError("tensors must be on one device, got " + ", ".join(f"{n}: {d}" for n, d in devs.items()))
    return next(iter(devs.values()))


def check_group_scales(name: str, t: torch.Tensor, n_values: int, scales, group_size, multiple: int) -> None:
    """Checks shared by the grouped-scale dequant ops: ``group_size`` a positive
    multiple of ``multiple``; ``scales`` (optional) fp16 [n_values / group_size]
    on the same device as ``t`` (named ``name``)."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size <= 0 or group_size % multiple:
        raise ValueError(f"group_size must be a positive multiple of {multiple}, got {group_size!r}")
    if scales is None:
        return
    check("scales", scales, dtype=torch.float16, ndim=1)
    if n_values % group_size:
        raise ValueError(f"{name} holds {n_values} values, not a multiple of group_size={group_size}")
    if scales.numel() != n_values // group_size:
        raise ValueError(f"scales must have {n_values // group_size} entries ({n_values} values / group_size "
                         f"{group_size}), got {scales.numel()}")
    same_device(**{name: t, "scales": scales})


def use_cuda(backend: str, family: str, device: torch.device) -> bool:
    """True to run the CUDA library, False to run the reference."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "reference":
        return False
    on_cuda = device.type == "cuda"
    if torch.compiler.is_compiling():
        # Under torch.compile the library was already loaded by the eager call that
        # preceded tracing; checking again would trace file-system calls.
        return on_cuda
    if backend == "cuda":
        if not on_cuda:
            raise ValueError(f"backend='cuda' needs CUDA tensors, got tensors on {device}")
        _build.load(family)  # raises BuildError with the nvcc log
        return True
    if on_cuda and _build.available(family):
        return True
    if os.environ.get("T4LIB_REQUIRE_CUDA") == "1":
        why = "inputs are on the CPU" if not on_cuda else f"kernel family {family!r} does not build"
        if on_cuda:
            _build.load(family)  # surface the build error itself
        raise RuntimeError(f"T4LIB_REQUIRE_CUDA=1 but {why}")
    return False


def ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


def stream(device: torch.device) -> ctypes.c_void_p:
    """PyTorch's current stream on ``device``, so launches join graph capture."""
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
