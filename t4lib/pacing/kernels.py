"""The kernels the sweep paces: a registry of slots, one per kernel.

Each slot says how many warps one CTA has (for the cap -> grid mapping), what
one call's unit of work is (bytes moved or FLOPs), and how to build inputs
and a ``call(ctas)`` that launches the kernel with its grid capped at ``ctas``.

* ``int4_dequant`` (memory-bound): ``t4lib.ops.int4.int4_dequant`` with
  ``max_blocks``; 256-thread CTAs; work = DRAM bytes read + written.
* ``w4a16_gemm`` (compute-bound): ``t4lib.ops.w4a16.gemm(x, w, max_ctas=)``,
  the WMMA m16n16k16 prefill GEMM; work = 2*M*N*K FLOPs. The slot is
  pluggable: when that op is not importable the slot reports why and the
  sweep skips it; ``register`` installs any other capped kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class Workload:
    """Inputs built once; ``call(ctas)`` launches the kernel on them (``None``: uncapped)."""
    call: Callable[[int | None], torch.Tensor]
    work_per_call: float
    shape: dict[str, Any]


@dataclass
class PacedKernel:
    name: str
    kind: str                      # "memory-bound" | "compute-bound"
    unit: str                      # unit of work: "B" (bytes) or "FLOP"
    warps_per_cta: Callable[[], int]
    build: Callable[[torch.device, str], Workload]   # (device, size name) -> Workload
    cap_kwarg: str = "max_ctas"    # keyword of the public op that takes the grid cap
    why_unavailable: Callable[[], str | None] = lambda: None
    description: str = ""
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- memory-bound
_INT4_THREADS = 256  # kernels/int4.cu kThreads
_INT4_WORDS = {"gpu": 1 << 25, "test": (1 << 18) + 37, "tiny": 1 << 10}


def _int4_build(device: torch.device, size: str) -> Workload:
    from ..ops.int4 import int4_dequant

    n_words, group = _INT4_WORDS[size], 128
    n_words -= n_words % (group // 8)  # whole groups
    g = torch.Generator(device=device).manual_seed(0)
    packed = torch.randint(-2 ** 31, 2 ** 31 - 1, (n_words,), dtype=torch.int32, device=device, generator=g)
    scales = (torch.rand(n_words * 8 // group, device=device, generator=g) + 0.5).to(torch.float16)
    backend = "cuda" if device.type == "cuda" else "reference"

    def call(ctas: int | None) -> torch.Tensor:
        return int4_dequant(packed, scales, group, backend=backend, max_blocks=None if ctas is None else int(ctas))

    nbytes = n_words * 4 + n_words * 8 * 2 + scales.numel() * 2  # read packed + scales, write fp16
    return Workload(call, float(nbytes), {"n_words": n_words, "values": n_words * 8, "group_size": group})


# --------------------------------------------------------------- compute-bound
_GEMM_SHAPES = {"gpu": (4096, 4096, 4096), "test": (272, 512, 384), "tiny": (32, 128, 128)}  # M, N, K
_GEMM_DEFAULT_WARPS = 4


def _w4a16_why() -> str | None:
    try:
        from ..ops import w4a16  # noqa: F401
        from ..quant.w4a16 import quantize_rtn  # noqa: F401
    except Exception as e:  # not written yet, or broken: say so, do not fail the sweep
        return f"t4lib.ops.w4a16.gemm / t4lib.quant.w4a16.quantize_rtn not importable ({type(e).__name__}: {e})"
    if not hasattr(w4a16, "gemm"):
        return "t4lib.ops.w4a16 has no gemm()"
    return None


def _w4a16_warps() -> int:
    """Warps per CTA of the W4A16 GEMM, read from the op module when it says so."""
    try:
        from ..ops import w4a16 as op
    except Exception:
        return _GEMM_DEFAULT_WARPS
    for attr in ("GEMM_WARPS_PER_CTA", "GEMM_WARPS"):
        if isinstance(getattr(op, attr, None), int):
            return getattr(op, attr)
    for attr in ("GEMM_THREADS_PER_CTA", "GEMM_THREADS"):
        if isinstance(getattr(op, attr, None), int):
            return getattr(op, attr) // 32
    return _GEMM_DEFAULT_WARPS


def _w4a16_build(device: torch.device, size: str) -> Workload:
    from ..ops.w4a16 import gemm
    from ..quant.w4a16 import quantize_rtn

    M, N, K = _GEMM_SHAPES[size]
    g = torch.Generator(device=device).manual_seed(0)
    dt = torch.float16
    w = (torch.randn(N, K, device=device, generator=g, dtype=torch.float32) * 0.02).to(dt)
    qw = quantize_rtn(w, group_size=128)
    x = torch.randn(M, K, device=device, generator=g, dtype=torch.float32).to(dt)

    def call(ctas: int | None) -> torch.Tensor:
        return gemm(x, qw, max_ctas=None if ctas is None else int(ctas))

    return Workload(call, float(2 * M * N * K), {"M": M, "N": N, "K": K, "group_size": 128})


KERNELS: dict[str, PacedKernel] = {}


def register(k: PacedKernel) -> None:
    """Install (or replace) a paced kernel slot."""
    KERNELS[k.name] = k


register(PacedKernel(
    name="int4_dequant", kind="memory-bound", unit="B", warps_per_cta=lambda: _INT4_THREADS // 32,
    build=_int4_build, cap_kwarg="max_blocks",
    description="signed INT4 -> fp16 bulk dequant with per-group scales (LOP3), grid-stride, 256-thread CTAs"))
register(PacedKernel(
    name="w4a16_gemm", kind="compute-bound", unit="FLOP", warps_per_cta=_w4a16_warps, build=_w4a16_build,
    cap_kwarg="max_ctas", why_unavailable=_w4a16_why,
    description="W4A16 WMMA m16n16k16 prefill GEMM (fp16 activations, INT4 group-128 weights), persistent CTAs"))


def get(name: str) -> PacedKernel:
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {name!r}")
    return KERNELS[name]
