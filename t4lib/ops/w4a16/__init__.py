"""W4A16 GEMV/GEMM: fp16 activations times INT4 per-group-scaled weights.

``gemv(x, w)``: ``x [M, K] fp16`` with ``M = 1..8`` (decode), ``w`` a
:class:`.format.QuantizedWeight` ``[N, K]`` -> ``y [M, N] fp16``,
``y = x @ W_deq^T`` accumulated in fp32. One templated kernel
(kernels/gemv.cuh) reads each weight byte once with 16-byte loads and
dequantizes in registers.

``gemm(x, w)``: any M (prefill), WMMA m16n16k16 tensor cores on weight tiles
dequantized into shared memory, fp32 accumulation. ``warp_specialized=True``
runs its producer/consumer twin (the same bits; see :func:`gemm`).

``mma(x, w)``: ``M = 1..MMA_MAX_M`` (batched decode, speculative verify, small
prefill chunks), ``mma.sync.m16n8k8`` with the weight as the 16-row operand,
reading the tensor-core layout of :mod:`.layout` (a permuted copy of the
weight made on first use and cached per weight tensor: :func:`clear_mma_cache`
drops the copies). ``w`` may also be a :class:`.layout.MmaWeight`.

``matmul(x, w)`` (what QuantLinear calls) picks the kernel by M from the
recorded measurements (see ``MATMUL_MMA_M``): the GEMV, the MMA GEMM, or above
it dequantize-then-cuBLAS (``dequant_matmul``).

``activations="int8"`` (GEMV only, opt-in): W4A8. ``x`` is first quantized
to int8 per block of 32 values (:mod:`t4lib.ops.int8_activations`, one small
kernel), then the dot products run as DP4A integer sums, about a fifth of the
instructions of dequantizing to fp16: on an H200 it takes the M = 1 GEMV at the
27B shapes from about 0.5 to about 0.6 of copy bandwidth, quantization included
(results/nvidia-h200/w4a16_gemv.json). The result is
the product of the *quantized* activations, so it differs from the fp16 one by
up to :func:`t4lib.ops.int8_activations.error_bound`; against its own reference
(:func:`.reference.gemv_int8`) it is exact to fp32 summation.

``max_ctas`` caps the CUDA grid (occupancy pacing); every kernel is
grid-stride, so the result is bit-identical for any cap. The reference path
ignores it. Semantics and the kernels' error bound: :mod:`.reference`.
"""
from __future__ import annotations

import warnings
import weakref

import torch

from .._dispatch import check, check_grid_cap, use_cuda
from ..int8_activations import check_activations, empty_blocks
from . import binding, layout, reference
from .format import QuantizedWeight
from .layout import MmaWeight

__all__ = ["gemv", "gemm", "mma", "matmul", "dequant_matmul", "matmul_kernel", "clear_mma_cache", "QuantizedWeight",
           "MmaWeight", "GEMV_MAX_M", "MMA_MAX_M", "MATMUL_GEMV_MAX_M", "MATMUL_MMA_M", "MATMUL_GEMV_M2_MAX_N"]

GEMV_MAX_M = 8
MMA_MAX_M = 64
# matmul's kernel by M and shape, from the H200 run in results/nvidia-h200/w4a16_gemm.json (medians,
# CUDA-graph replay, cold L2; shapes KxN):
#   M = 1: the GEMV (faster than the MMA GEMM at 5 of the 6 shapes; 5120x17408: 22.6 against 24.8 us).
#   M = 2..64: the MMA GEMM. Against the GEMV it wins from M = 2 (5120x17408: 24.0 against 30.7 us;
#     896x4864: 3.8 against 3.9 us) except with few rows and long K: 4864x896 at M = 2 (GEMV 4.3
#     against 5.4 us; 8960x1536 ties, 7.6 against 7.7), hence MATMUL_GEMV_M2_MAX_N. Against the WMMA
#     GEMM it wins or ties at every shape up to M = 64 (5120x17408, M = 32: 52.8 against 65.4 us;
#     M = 64: 96.1 against 97.1 us; 896x4864, M = 64: 7.9 against 12.3 us).
#   M > 64: dequantize-then-cuBLAS (M = 128: 114.5 against 164.7 us for the WMMA GEMM at 5120x17408,
#     10.3 against 17.5 us at 896x4864; M = 512: 180.9 against 561.2 us).
# Above M = 16 none of them beats cuBLAS on fp16 weights at the large shapes (which the model does not
# hold): the MMA GEMM reads x through L1 once per 16 or 32 weight rows, and at M = 64 those reads
# alone take as long as cuBLAS (the lab's loads_only case).
MATMUL_MMA_M = (2, 64)
MATMUL_GEMV_M2_MAX_N = 1024  # at M = 2 layers with at most this many outputs keep the GEMV
# The W4A8 GEMV (activations="int8") keeps the rows it had before the MMA GEMM existed.
MATMUL_GEMV_MAX_M = 4


def _validate(x, w, max_ctas, gemv_range: bool) -> None:
    if not isinstance(w, QuantizedWeight):
        raise TypeError(f"w must be a t4lib.quant.w4a16.QuantizedWeight, got {type(w).__name__}")
    w.validate()
    check("x", x, dtype=torch.float16, ndim=2, contiguous=False)
    M, K = x.shape
    if K != w.K:
        raise ValueError(f"x has K={K} columns but w was quantized with K={w.K} (in_features)")
    if gemv_range and not 1 <= M <= GEMV_MAX_M:
        raise ValueError(f"gemv takes M = 1..{GEMV_MAX_M} rows of x, got M={M}; use matmul (or gemm) for larger M")
    if x.device != w.device:
        raise ValueError(f"x is on {x.device} but w is on {w.device}")
    check_grid_cap("max_ctas", max_ctas)


def _aligned(x: torch.Tensor) -> torch.Tensor:
    """x contiguous, copied when its address is not 16-byte aligned (the kernels read x with 16-byte loads)."""
    x = x.contiguous()
    return x.clone() if x.data_ptr() % 16 else x


def _check_cuda_weight(qweight: torch.Tensor, scales: torch.Tensor) -> None:
    check("w.qweight", qweight, contiguous=True, align=16)
    check("w.scales", scales, contiguous=True)


@torch.library.custom_op("t4lib::w4a16_gemv", mutates_args=())
def _gemv_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
               max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)  # in the op's body: under torch.compile only it sees real addresses
    out = torch.empty(x.shape[0], qweight.shape[0], dtype=torch.float16, device=x.device)
    binding.gemv(x, qweight, scales, group_size, out, max_ctas)
    return out


@_gemv_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_gemv_int8", mutates_args=())
def _gemv_int8_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
                    max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)
    M, K = x.shape
    q, s = empty_blocks(M, K, x.device)  # K % 32 == 0: 16-byte aligned rows of q
    out = torch.empty(M, qweight.shape[0], dtype=torch.float16, device=x.device)
    binding.quantize_x8(x, q, s, max_ctas)
    binding.gemv_x8(q, s, qweight, scales, group_size, out, max_ctas)
    return out


@_gemv_int8_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_gemm", mutates_args=())
def _gemm_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
               max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)
    out = torch.empty(x.shape[0], qweight.shape[0], dtype=torch.float16, device=x.device)
    if x.shape[0] > 0:
        binding.gemm(x, qweight, scales, group_size, out, max_ctas)
    return out


@_gemm_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_gemm_ws", mutates_args=())
def _gemm_ws_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
                  max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    _check_cuda_weight(qweight, scales)
    out = torch.empty(x.shape[0], qweight.shape[0], dtype=torch.float16, device=x.device)
    if x.shape[0] > 0:
        binding.gemm_ws(x, qweight, scales, group_size, out, max_ctas)
    return out


@_gemm_ws_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


# (device, qweight ptr, scales ptr, N, K, group) -> (weakrefs to qweight and scales, their versions, MmaWeight)
_MMA_CACHE: dict[tuple, tuple] = {}


def clear_mma_cache() -> None:
    """Drop every cached tensor-core layout copy (they are rebuilt on next use)."""
    _MMA_CACHE.clear()


def _versions(*ts) -> tuple | None:
    try:
        return tuple(t._version for t in ts)
    except RuntimeError:  # inference tensors have no version counter: not cacheable
        return None


def _mma_layout(qweight: torch.Tensor, scales: torch.Tensor, N: int, K: int, group_size: int) -> MmaWeight:
    """The tensor-core layout of (qweight, scales), cached while both tensors live unchanged.

    Keyed by address, not object: under torch.compile the op may see another tensor object for the
    same buffer. An entry is valid while the tensors it was made from are alive (so the addresses
    still hold them) and their version counters (shared by views) have not moved."""
    key = (str(qweight.device), qweight.data_ptr(), scales.data_ptr(), N, K, group_size)
    ent = _MMA_CACHE.get(key)
    if ent is not None:
        rq, rs = ent[0](), ent[1]()
        if rq is not None and rs is not None and _versions(rq, rs) == ent[2]:
            return ent[3]
    lw = layout.pack(QuantizedWeight(qweight, scales, N, K, group_size))
    vers = _versions(qweight, scales)
    if vers is None:
        return lw
    if qweight.is_cuda and torch.cuda.is_current_stream_capturing():
        # Made inside a graph capture, the copy would hold data only after the first replay:
        # the graph repacks on every replay instead. Run the layer once before capturing.
        warnings.warn("t4lib.ops.w4a16.mma: the tensor-core layout was made during CUDA graph capture "
                      "(slow: repacked on every replay); call the layer once before capturing", RuntimeWarning)
        return lw

    def drop(_ref, key=key):
        _MMA_CACHE.pop(key, None)

    _MMA_CACHE[key] = (weakref.ref(qweight, drop), weakref.ref(scales, drop), vers, lw)
    return lw


def _mma_run(x: torch.Tensor, lw: MmaWeight, max_ctas: int) -> torch.Tensor:
    x = _aligned(x)
    out = torch.empty(x.shape[0], lw.N, dtype=torch.float16, device=x.device)
    binding.mma(x, lw.tiles, lw.scales, lw.N, lw.group_size, out, max_ctas)
    return out


@torch.library.custom_op("t4lib::w4a16_mma", mutates_args=())
def _mma_cuda(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size: int,
              max_ctas: int) -> torch.Tensor:
    _check_cuda_weight(qweight, scales)
    N, K = qweight.shape[0], qweight.shape[1] * 8
    return _mma_run(x, _mma_layout(qweight, scales, N, K, group_size), max_ctas)


@_mma_cuda.register_fake
def _(x, qweight, scales, group_size, max_ctas):
    return x.new_empty(x.shape[0], qweight.shape[0])


@torch.library.custom_op("t4lib::w4a16_mma_tiles", mutates_args=())
def _mma_tiles_cuda(x: torch.Tensor, tiles: torch.Tensor, scales: torch.Tensor, N: int, K: int, group_size: int,
                    max_ctas: int) -> torch.Tensor:
    check("w.tiles", tiles, contiguous=True, align=16)
    check("w.scales", scales, contiguous=True, align=4)
    return _mma_run(x, MmaWeight(tiles, scales, N, K, group_size), max_ctas)


@_mma_tiles_cuda.register_fake
def _(x, tiles, scales, N, K, group_size, max_ctas):
    return x.new_empty(x.shape[0], N)


def gemv(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto",
         activations: str = "fp16") -> torch.Tensor:
    """[M, K] fp16 (M = 1..8) @ W_deq[N, K]^T -> [M, N] fp16 (see module docstring)."""
    _validate(x, w, max_ctas, gemv_range=True)
    if check_activations(activations) == "int8":
        if use_cuda(backend, binding.FAMILY, x.device):
            return _gemv_int8_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
        return reference.gemv_int8(x, w)
    if use_cuda(backend, binding.FAMILY, x.device):
        return _gemv_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
    return reference.gemv(x, w)


def gemm(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto",
         warp_specialized: bool = False) -> torch.Tensor:
    """[M, K] fp16 (any M) @ W_deq[N, K]^T -> [M, N] fp16 on tensor cores (see module docstring).

    ``warp_specialized=True`` runs the producer/consumer twin (producer warps load and dequantize, consumer
    warps run the WMMAs; never split along K): the same bits as the plain kernel when that one uses one split."""
    _validate(x, w, max_ctas, gemv_range=False)
    if not isinstance(warp_specialized, bool):
        raise TypeError(f"warp_specialized must be a bool, got {warp_specialized!r}")
    if use_cuda(backend, binding.FAMILY, x.device):
        op = _gemm_ws_cuda if warp_specialized else _gemm_cuda
        return op(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
    return reference.gemm(x, w)


def mma(x: torch.Tensor, w: QuantizedWeight | MmaWeight, *, max_ctas: int | None = None,
        backend: str = "auto") -> torch.Tensor:
    """[M, K] fp16 (M = 1..MMA_MAX_M) @ W_deq[N, K]^T -> [M, N] fp16 on mma.sync m16n8k8 (see module docstring).

    ``w``: a :class:`QuantizedWeight` (its tensor-core layout is made once and cached) or a
    :class:`.layout.MmaWeight`."""
    if isinstance(w, MmaWeight):
        w.validate()
        check("x", x, dtype=torch.float16, ndim=2, contiguous=False)
        if x.shape[1] != w.K:
            raise ValueError(f"x has K={x.shape[1]} columns but w (MmaWeight) has K={w.K} (in_features)")
        if x.device != w.device:
            raise ValueError(f"x is on {x.device} but w is on {w.device}")
        check_grid_cap("max_ctas", max_ctas)
    else:
        _validate(x, w, max_ctas, gemv_range=False)
    M = x.shape[0]
    if not 1 <= M <= MMA_MAX_M:
        raise ValueError(f"mma takes M = 1..{MMA_MAX_M} rows of x, got M={M}; use matmul (or gemm) for larger M")
    if use_cuda(backend, binding.FAMILY, x.device):
        if isinstance(w, MmaWeight):
            return _mma_tiles_cuda(x, w.tiles, w.scales, w.N, w.K, w.group_size, max_ctas or 0)
        return _mma_cuda(x, w.qweight, w.scales, w.group_size, max_ctas or 0)
    if isinstance(w, MmaWeight):
        return reference.matmul(x, w)
    return reference.mma(x, w)


def matmul(x: torch.Tensor, w: QuantizedWeight, *, max_ctas: int | None = None, backend: str = "auto",
           activations: str = "fp16") -> torch.Tensor:
    """What QuantLinear calls: the GEMV for M = 1, the MMA GEMM for M in ``MATMUL_MMA_M``,
    dequantize-then-cuBLAS above it (:func:`matmul_kernel` names the choice).

    ``activations="int8"`` applies to the GEMV (decode) only, for M <= ``MATMUL_GEMV_MAX_M``; the
    other rows keep fp16 activations."""
    check_activations(activations)
    M = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
    kernel = matmul_kernel(M, activations, getattr(w, "N", None))
    if kernel == "gemv":
        return gemv(x, w, max_ctas=max_ctas, backend=backend, activations=activations)
    if kernel == "mma":
        return mma(x, w, max_ctas=max_ctas, backend=backend)
    return dequant_matmul(x, w, backend=backend)


def matmul_kernel(M: int, activations: str = "fp16", N: int | None = None) -> str:
    """The kernel :func:`matmul` runs for ``M`` rows (of a weight with ``N`` outputs): "gemv", "mma" or
    "dequant_cublas" (see ``MATMUL_MMA_M``)."""
    if activations == "int8" and 1 <= M <= MATMUL_GEMV_MAX_M:
        return "gemv"
    if 1 <= M < MATMUL_MMA_M[0] or (M == 2 and N is not None and N <= MATMUL_GEMV_M2_MAX_N):
        return "gemv"
    if MATMUL_MMA_M[0] <= M <= MATMUL_MMA_M[1]:
        return "mma"
    return "dequant_cublas"


def dequant_matmul(x: torch.Tensor, w: QuantizedWeight, *, backend: str = "auto") -> torch.Tensor:
    """[M, K] fp16 @ W_deq^T -> [M, N] fp16 by dequantizing W (the INT4 dequant kernel, a transient
    fp16 [N, K]) and one cuBLAS fp16 GEMM: what matmul runs above ``MATMUL_MMA_M`` (prefill)."""
    _validate(x, w, None, gemv_range=False)
    if use_cuda(backend, binding.FAMILY, x.device):
        from ..int4 import int4_dequant

        wd = int4_dequant(w.qweight.view(-1), w.scales.view(-1), w.group_size, backend="cuda").view(w.N, w.K)
        return torch.nn.functional.linear(x, wd)
    return reference.matmul(x, w)
