"""What a Tesla T4 would do: a time model fed by counters, checked against public T4 figures.

No T4 is available to the project. This module turns the *counters* of a kernel (bytes, instructions,
tensor-core FLOPs, launches; measured with Nsight Compute on the GPU at hand, or derived from the kernel's
access pattern by :mod:`t4lib.benchmarks.t4model`) into the time a T4 would take, at a stated SM clock.
Its inputs are counters, never our own timings: nothing here is fit to a kernel of this project.

Model, per kernel (one :class:`Counters` set per kernel; a sequence of kernels is summed)::

    dram   = dram_read_bytes / BW_READ + dram_write_bytes / BW_WRITE + fill(dram bytes)
    l2     = l2_bytes / (L2_BYTES_PER_CLK * f)
    shared = shared_wavefronts / (SMEM_WAVEFRONTS_PER_CLK_PER_SM * 40 SMs * f)
    issue  = instructions / (4 schedulers * 40 SMs * f)             (warp instructions, 1 per scheduler-cycle)
    tensor = tensor_flops / (TENSOR_FLOPS_PER_CLK * f * TENSOR_EFF)
    time   = max(dram, l2, shared, issue, tensor) + launches * T_LAUNCH + graph_nodes * T_NODE

and the term that is largest is the limit that binds (``launch`` when the fixed costs outweigh it).
``f`` is the SM clock: :data:`BOOST_MHZ` (1,590 MHz, the T4's boost) and :data:`SAG_MHZ` (1,200 MHz, what a
T4 holds under load) are both reported. DRAM does not follow the SM clock (its rates are not scaled).

The small-transfer efficiency curve: a DRAM-streaming kernel pays, beyond its bytes at the sustained rate,
a fixed cost ``fill(S) = T_FILL * min(1, S / S_FILL)`` (reaching full memory-level parallelism, the tail
wave); so the bandwidth a kernel of ``S`` bytes sees is ``S / (S / BW_READ + fill(S))``
(:func:`effective_bandwidth`). ``T_FILL`` and ``S_FILL`` are fit to one public figure, cuBLAS's 896x896 fp16
GEMV on a T4 (18.9 us, seed document 000_9ee4a9513fcd709e); below ``S_FILL`` the fill is assumed to shrink in
proportion (an assumption, checked by that document's 896x896 INT4 GEMV, which is held out).

Public T4 figures (measured by others on T4s; none measured by this project):

* Jia, Maggioni, Smith, Scarpazza, "Dissecting the NVIDIA Turing T4 GPU via Microbenchmarking"
  (arXiv:1903.07486, 2019; T4 at 1,590 MHz): DRAM copy 220 GiB/s (68.8% of 320 GB/s); L2 load 1,270 GB/s,
  L2 hit about 188 cycles; L1 hit 32 cycles; shared memory 19 cycles and 3,662 GiB/s; cuBLAS fp16 GEMM
  41.6 TFLOPS, with the clock falling to about 1,350-1,380 MHz under sustained GEMM (70 W cap).
* Colab T4 measurements (2025-2026 notebooks): copy about 240 GB/s, read-only about 278 GB/s; median SM
  clock during memory-bound kernels 1.11-1.22 GHz after a warm-up (hence :data:`SAG_MHZ`).
* cuBLAS fp16 GEMV on a T4, M = 1 (seed document 000_9ee4a9513fcd709e): 896x896 18.9 us and 896x4864 45.0 us;
  the same document's INT4 GEMV 9.2 us and 26.9 us. Another public measurement of 896->4864 reaches only
  106.7 GiB/s (about 76 us): the two disagree and both are checked. 4096x4096 fp16 GEMV about 133 us.
* Batch-1 decode of a 4-bit 7B model on a T4: TensorRT-LLM INT4-AWQ 50-60 tokens/s, AutoAWQ 33-35 tokens/s.

Which parameter rests on which figure (:data:`PARAMETERS` carries the same, with the values):
BW_READ on Colab's read-only 278 GB/s; BW_WRITE on Colab's 240 GB/s copy (read + write bytes); L2 on Jia's
1,270 GB/s; shared memory on Jia's 3,662 GiB/s; TENSOR_EFF on Jia's 41.6 TFLOPS at 1,365 MHz (the middle of
the clock he reports under sustained GEMM); T_FILL on the 896x896 cuBLAS GEMV. T_LAUNCH and T_NODE are
assumptions (no public T4 figure of either was found): 2 us between back-to-back stream launches, 1 us per
kernel node of a replayed CUDA graph, clock-independent. The check table (:func:`check_table`) marks each
public figure ``fit`` (a parameter rests on it: its ratio is 1 by construction) or ``held out``.
What the model cannot express: host time (Python dispatch of an eager framework), power-capping dynamics
(the clock is an input), caches other than a 4 MB L2, and a kernel's own latency chains (a kernel with too
few loads in flight is slower than its bytes say: the fill term covers only what the fit figure shows).
"""
from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from t4lib.benchmarks import t4model as kernel_counters
from t4lib.core import results

# ---------------------------------------------------------------- T4 facts (NVIDIA T4 datasheet)
SMS = 40
SCHEDULERS_PER_SM = 4
L2_BYTES = 4 * 1024 * 1024
PEAK_DRAM_BW = 320e9                 # B/s, GDDR6 datasheet peak
BOOST_MHZ = 1590.0
SAG_MHZ = 1200.0
CLOCKS_MHZ = (BOOST_MHZ, SAG_MHZ)
# 320 tensor cores x 64 fp16 FMA per clock x 2 FLOPs: 65.1 TFLOPS at 1,590 MHz (the datasheet's 65)
TENSOR_FLOPS_PER_CLK = 320 * 64 * 2

# ---------------------------------------------------------------- public figures the rates rest on
GIB = 1024 ** 3
JIA = "Jia et al. 2019, Dissecting the NVIDIA Turing T4 GPU via Microbenchmarking (arXiv:1903.07486), T4 at 1,590 MHz"
COLAB = "Colab T4 measurements (2025-2026 notebooks)"
SEED = "seed document 000_9ee4a9513fcd709e (cuBLAS fp16 and INT4 GEMV on a T4, M = 1)"
OTHER_GEMV = "public measurement of an 896->4864 fp16 GEMV on a T4 (106.7 GiB/s)"
TRTLLM = "TensorRT-LLM INT4-AWQ batch-1 decode of a 4-bit 7B model on a T4 (50-60 tokens/s)"
AUTOAWQ = "AutoAWQ batch-1 decode of a 4-bit 7B model on a T4 (33-35 tokens/s)"

COLAB_READ_BW = 278e9
COLAB_COPY_BW = 240e9                # read + write bytes / s
JIA_COPY_BW = 220 * GIB
JIA_L2_BW = 1270e9
JIA_SMEM_BW = 3662 * GIB
JIA_GEMM_FLOPS = 41.6e12
JIA_GEMM_MHZ = 1365.0                # middle of the 1,350-1,380 MHz Jia et al. report under sustained GEMM
SEED_GEMV_896 = 18.9e-6              # cuBLAS fp16 GEMV 896x896, M = 1

# ---------------------------------------------------------------- model parameters
BW_READ = COLAB_READ_BW
BW_WRITE = 1.0 / (2.0 / COLAB_COPY_BW - 1.0 / COLAB_READ_BW)   # so that a copy of S bytes runs at 240 GB/s
L2_BYTES_PER_CLK = JIA_L2_BW / (BOOST_MHZ * 1e6)                 # about 799 B per SM-clock, all slices
SMEM_WAVEFRONTS_PER_CLK_PER_SM = JIA_SMEM_BW / (SMS * 128 * BOOST_MHZ * 1e6)  # 128-byte wavefronts
TENSOR_EFF = JIA_GEMM_FLOPS / (TENSOR_FLOPS_PER_CLK * JIA_GEMM_MHZ * 1e6)    # what cuBLAS reaches of peak
T_LAUNCH = 2.0e-6                    # assumption: GPU-side gap between back-to-back stream launches
T_NODE = 1.0e-6                      # assumption: per kernel node of a replayed CUDA graph
S_FILL = 896 * 896 * 2 + 2 * 896 * 2  # bytes of the fit figure (weights, x, y)
T_FILL = SEED_GEMV_896 - S_FILL / BW_READ - T_LAUNCH

PARAMETERS: dict[str, dict[str, Any]] = {
    "bw_read_Bps": {"value": BW_READ, "from": f"{COLAB}: read-only 278 GB/s"},
    "bw_write_Bps": {"value": BW_WRITE, "from": f"{COLAB}: copy 240 GB/s (read + write) with reads at 278 GB/s"},
    "l2_bytes_per_clk": {"value": L2_BYTES_PER_CLK, "from": f"{JIA}: L2 load 1,270 GB/s"},
    "smem_wavefronts_per_clk_per_sm": {"value": SMEM_WAVEFRONTS_PER_CLK_PER_SM,
                                       "from": f"{JIA}: shared memory 3,662 GiB/s"},
    "tensor_eff": {"value": TENSOR_EFF, "from": f"{JIA}: cuBLAS fp16 GEMM 41.6 TFLOPS at about 1,365 MHz"},
    "t_fill_s": {"value": T_FILL, "from": f"{SEED}: cuBLAS fp16 GEMV 896x896 18.9 us"},
    "s_fill_bytes": {"value": S_FILL, "from": f"{SEED}: the bytes of the 896x896 GEMV"},
    "t_launch_s": {"value": T_LAUNCH, "from": "assumption (no public T4 figure found)"},
    "t_node_s": {"value": T_NODE, "from": "assumption (no public T4 figure found)"},
}

LIMITS = ("dram", "l2", "shared", "issue", "tensor")


@dataclass(frozen=True)
class Counters:
    """What one kernel (or one step, kernel by kernel: a list of these) does, in counts.

    ``instructions`` are warp-level instructions issued (Nsight Compute ``smsp__inst_executed.sum``);
    ``shared_wavefronts`` are shared-memory wavefronts (``l1tex__data_pipe_lsu_wavefronts_mem_shared.sum``);
    ``l2_bytes`` are bytes between the SMs and L2 (``lts__t_bytes.sum``); ``dram_*_bytes`` between L2 and
    DRAM (``dram__bytes_read.sum`` / ``dram__bytes_write.sum``); ``tensor_flops`` are FLOPs issued to tensor
    cores (an m16n8k8 MMA is 2048); ``launches`` are stream launches and ``graph_nodes`` kernel nodes of a
    replayed CUDA graph. Every field is required: :meth:`from_mapping` names the ones missing.
    """
    dram_read_bytes: float
    dram_write_bytes: float
    l2_bytes: float
    shared_wavefronts: float
    instructions: float
    tensor_flops: float
    launches: float
    graph_nodes: float

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"counter {f.name!r} must be a finite number >= 0, got {v!r}")

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "Counters":
        """Counters from a dict (a results file, an ncu parse); KeyError naming every missing field."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in m]
        if missing:
            raise KeyError(f"counter set is missing {', '.join(repr(n) for n in missing)} "
                           f"(a T4 prediction needs every one of {names})")
        return cls(**{n: m[n] for n in names})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _counters(c: Counters | Mapping[str, Any]) -> Counters:
    return c if isinstance(c, Counters) else Counters.from_mapping(c)


def fill(dram_bytes: float) -> float:
    """Seconds a DRAM-streaming kernel of ``dram_bytes`` pays beyond its bytes at the sustained rate."""
    return T_FILL * min(1.0, dram_bytes / S_FILL) if dram_bytes > 0 else 0.0


def effective_bandwidth(nbytes: float) -> float:
    """The sustained-bandwidth efficiency curve: B/s a read-only kernel of ``nbytes`` sees (fill included)."""
    return nbytes / (nbytes / BW_READ + fill(nbytes))


@dataclass(frozen=True)
class Prediction:
    """Seconds per term, the fixed costs, the total, and the limit that binds, at ``mhz``."""
    mhz: float
    terms: dict[str, float]
    fixed: float
    time: float
    binds: str

    def as_dict(self) -> dict[str, Any]:
        return {"mhz": self.mhz, "terms_s": dict(self.terms), "fixed_s": self.fixed, "time_s": self.time,
                "binds": self.binds}


def predict(counters: Counters | Mapping[str, Any], mhz: float = BOOST_MHZ) -> Prediction:
    """T4 time of one kernel's counters at SM clock ``mhz`` (see the module docstring for the formula)."""
    c = _counters(counters)
    if not mhz > 0:
        raise ValueError(f"mhz must be > 0, got {mhz!r}")
    f = mhz * 1e6
    terms = {
        "dram": c.dram_read_bytes / BW_READ + c.dram_write_bytes / BW_WRITE + fill(c.dram_bytes),
        "l2": c.l2_bytes / (L2_BYTES_PER_CLK * f),
        "shared": c.shared_wavefronts / (SMEM_WAVEFRONTS_PER_CLK_PER_SM * SMS * f),
        "issue": c.instructions / (SCHEDULERS_PER_SM * SMS * f),
        "tensor": c.tensor_flops / (TENSOR_FLOPS_PER_CLK * f * TENSOR_EFF),
    }
    fixed = c.launches * T_LAUNCH + c.graph_nodes * T_NODE
    top = max(LIMITS, key=lambda k: terms[k])
    binds = "launch" if fixed > terms[top] else top
    return Prediction(mhz, terms, fixed, terms[top] + fixed, binds)


@dataclass(frozen=True)
class StepPrediction:
    """A sequence of kernels: total seconds, and the seconds each limit binds (summed over kernels)."""
    mhz: float
    time: float
    by_limit: dict[str, float]        # seconds of kernels whose binding term is this limit (terms only)
    fixed: float                      # launch and graph-node seconds
    kernels: list[Prediction]

    @property
    def binds(self) -> str:
        """The limit that accounts for the most time ('launch' for the fixed costs)."""
        shares = {**self.by_limit, "launch": self.fixed}
        return max(shares, key=lambda k: shares[k])

    def shares(self) -> dict[str, float]:
        """Fraction of the total time under each limit (the fixed costs as 'launch')."""
        shares = {**self.by_limit, "launch": self.fixed}
        return {k: v / self.time for k, v in shares.items() if v > 0}

    def words(self) -> str:
        """What binds, in the model's words."""
        parts = ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.shares().items(), key=lambda kv: -kv[1]))
        return f"at {self.mhz:.0f} MHz {self.time * 1e3:.3f} ms, bound by {self.binds} ({parts})"


def predict_sequence(kernels: Iterable[Counters | Mapping[str, Any]], mhz: float = BOOST_MHZ) -> StepPrediction:
    """T4 time of kernels run one after another (a decode step): the sum of :func:`predict` of each."""
    preds = [predict(k, mhz) for k in kernels]
    if not preds:
        raise ValueError("predict_sequence needs at least one kernel's counters")
    by = {k: 0.0 for k in LIMITS}
    fixed = 0.0
    for p in preds:
        top = max(LIMITS, key=lambda k: p.terms[k])
        by[top] += p.terms[top]
        fixed += p.fixed
    return StepPrediction(mhz, sum(p.time for p in preds), by, fixed, preds)


def byte_ceiling_time(kernels: Iterable[Counters | Mapping[str, Any]]) -> float:
    """Seconds the kernels' DRAM bytes take at the sustained rates alone (no fill, no launch): the byte ceiling."""
    t = 0.0
    for k in kernels:
        c = _counters(k)
        t += c.dram_read_bytes / BW_READ + c.dram_write_bytes / BW_WRITE
    return t


# ---------------------------------------------------------------- counters of the public figures' kernels
def copy_counters(nbytes: float, *, launches: int = 1) -> Counters:
    """A device-to-device copy of ``nbytes`` (read ``nbytes``, write ``nbytes``): 16-byte vector loads and stores."""
    return Counters(dram_read_bytes=nbytes, dram_write_bytes=nbytes, l2_bytes=2 * nbytes, shared_wavefronts=0,
                    instructions=2 * nbytes / (16 * 32) * 2, tensor_flops=0, launches=launches, graph_nodes=0)


def read_counters(nbytes: float) -> Counters:
    """A read-only (reduction) stream of ``nbytes``."""
    return Counters(dram_read_bytes=nbytes, dram_write_bytes=0, l2_bytes=nbytes, shared_wavefronts=0,
                    instructions=nbytes / (16 * 32) * 2, tensor_flops=0, launches=1, graph_nodes=0)


def l2_load_counters(nbytes: float) -> Counters:
    """Repeated loads of an L2-resident buffer (smaller than 4 MB): ``nbytes`` from L2, none from DRAM."""
    return Counters(dram_read_bytes=0, dram_write_bytes=0, l2_bytes=nbytes, shared_wavefronts=0,
                    instructions=nbytes / (16 * 32) * 1.5, tensor_flops=0, launches=1, graph_nodes=0)


def shared_load_counters(nbytes: float) -> Counters:
    """Conflict-free 32-bit shared-memory loads of ``nbytes`` (one 128-byte wavefront per warp load)."""
    return Counters(dram_read_bytes=0, dram_write_bytes=0, l2_bytes=0, shared_wavefronts=nbytes / 128,
                    instructions=nbytes / 128 * 1.5, tensor_flops=0, launches=1, graph_nodes=0)


def cublas_gemm_counters(M: int, N: int, K: int) -> Counters:
    """cuBLAS fp16 GEMM [M, K] x [K, N] with 128x128 tiles: A and B read once from DRAM, C written; each tile
    pair re-read from L2 per output tile row/column; operands staged through shared memory."""
    tiles_m, tiles_n = math.ceil(M / 128), math.ceil(N / 128)
    l2 = 2 * K * (M * tiles_n + N * tiles_m) + 2 * M * N
    return Counters(dram_read_bytes=2 * (M * K + K * N), dram_write_bytes=2 * M * N, l2_bytes=l2,
                    shared_wavefronts=l2 / 128 * 2, instructions=2 * M * N * K / (16 * 8 * 8 * 2) * 1.5,
                    tensor_flops=2 * M * N * K, launches=1, graph_nodes=0)


# ---------------------------------------------------------------- the check
def _decode_7b_public_counters() -> list[Counters]:
    """A 4-bit 7B decode step as the public engines run it: Llama-2-7B's shape (32 layers, hidden 4096,
    intermediate 11008, vocabulary 32000; the usual '7B' of those reports, an assumption), INT4 g128 weights,
    fp16 lm_head, per layer fused q/k/v, o, fused gate/up and down GEMVs plus 6 small L2-resident kernels
    (norms, rotary, attention, activation), stream-launched."""
    H, I, L, V = 4096, 11008, 32, 32000
    g = kernel_counters.int4_gemv
    layer = [Counters.from_mapping(c) for c in (g(H, 3 * H), g(H, H), g(H, 2 * I), g(I, H))]
    small = Counters(dram_read_bytes=0, dram_write_bytes=0, l2_bytes=4 * H * 2, shared_wavefronts=0,
                     instructions=H, tensor_flops=0, launches=1, graph_nodes=0)
    return layer * L + [small] * (6 * L) + [Counters.from_mapping(kernel_counters.fp16_gemv(H, V))]


def _c(fn, *a: int) -> Counters:
    return Counters.from_mapping(fn(*a))


def public_checks() -> list[dict[str, Any]]:
    """Every public figure the model can express: its counters, the public value, unit, clock, source,
    basis ('fit' or 'held out') and what the public value is (a time, a rate computed from a time)."""
    G = 1 << 30
    B896 = S_FILL
    return [
        dict(figure="dram_copy_jia", public=JIA_COPY_BW / 1e9, unit="GB/s", counters=copy_counters(G), rate=2 * G,
             mhz=BOOST_MHZ, source=f"{JIA}: DRAM copy 220 GiB/s", basis="held out"),
        dict(figure="dram_copy_colab", public=COLAB_COPY_BW / 1e9, unit="GB/s", counters=copy_counters(G),
             rate=2 * G, mhz=SAG_MHZ, source=f"{COLAB}: copy about 240 GB/s", basis="fit"),
        dict(figure="dram_read_colab", public=COLAB_READ_BW / 1e9, unit="GB/s", counters=read_counters(G), rate=G,
             mhz=SAG_MHZ, source=f"{COLAB}: read-only about 278 GB/s", basis="fit"),
        dict(figure="l2_load_jia", public=JIA_L2_BW / 1e9, unit="GB/s", counters=l2_load_counters(64 * G),
             rate=64 * G, mhz=BOOST_MHZ, source=f"{JIA}: L2 load 1,270 GB/s", basis="fit"),
        dict(figure="shared_memory_jia", public=JIA_SMEM_BW / 1e9, unit="GB/s", counters=shared_load_counters(64 * G),
             rate=64 * G, mhz=BOOST_MHZ, source=f"{JIA}: shared memory 3,662 GiB/s", basis="fit"),
        dict(figure="cublas_fp16_gemm_jia", public=JIA_GEMM_FLOPS / 1e12, unit="TFLOPS",
             counters=cublas_gemm_counters(8192, 8192, 8192), rate=2 * 8192 ** 3 / 1e3, mhz=JIA_GEMM_MHZ,
             source=f"{JIA}: cuBLAS fp16 GEMM 41.6 TFLOPS (8192^3 here; clock about 1,365 MHz)", basis="fit"),
        dict(figure="cublas_gemv_896x896", public=18.9, unit="us", counters=_c(kernel_counters.fp16_gemv, 896, 896),
             mhz=BOOST_MHZ, source=f"{SEED}: 18.9 us", basis="fit"),
        dict(figure="cublas_gemv_896x4864_seed", public=45.0, unit="us", counters=_c(kernel_counters.fp16_gemv, 896, 4864),
             mhz=BOOST_MHZ, source=f"{SEED}: 45.0 us", basis="held out"),
        dict(figure="cublas_gemv_896x4864_other", public=2 * 896 * 4864 / (106.7 * GIB) * 1e6, unit="us",
             counters=_c(kernel_counters.fp16_gemv, 896, 4864), mhz=BOOST_MHZ,
             source=f"{OTHER_GEMV}: weight bytes / 106.7 GiB/s", basis="held out"),
        dict(figure="cublas_gemv_4096x4096", public=133.0, unit="us", counters=_c(kernel_counters.fp16_gemv, 4096, 4096),
             mhz=BOOST_MHZ, source="public T4 measurement of a 4096x4096 fp16 GEMV: about 133 us", basis="held out"),
        dict(figure="int4_gemv_896x896_seed", public=9.2, unit="us", counters=_c(kernel_counters.int4_gemv, 896, 896),
             mhz=BOOST_MHZ, source=f"{SEED}: its INT4 GEMV 9.2 us (group 128 assumed)", basis="held out"),
        dict(figure="int4_gemv_896x4864_seed", public=26.9, unit="us", counters=_c(kernel_counters.int4_gemv, 896, 4864),
             mhz=BOOST_MHZ, source=f"{SEED}: its INT4 GEMV 26.9 us (group 128 assumed)", basis="held out"),
        dict(figure="decode_7b_int4_trtllm", public=55.0, public_range=(50.0, 60.0), unit="tokens/s",
             counters=_decode_7b_public_counters(), per_step=1, mhz=BOOST_MHZ, source=TRTLLM, basis="held out"),
        dict(figure="decode_7b_int4_autoawq", public=34.0, public_range=(33.0, 35.0), unit="tokens/s",
             counters=_decode_7b_public_counters(), per_step=1, mhz=BOOST_MHZ, source=AUTOAWQ, basis="held out"),
    ]


# Why a figure the model misses by more than 25% is missed: investigated, not tuned away.
MISS_REASONS = {
    "cublas_gemv_896x4864_other": (
        "the two public 896x4864 figures disagree by 1.7x (45.0 us against about 76 us); the model's fixed "
        "cost is fit to the seed document's 896x896 call and agrees with the same document's 896x4864, so it "
        "cannot agree with the other measurement too (a slower cuBLAS kernel choice, or host time in that timing)"),
    "int4_gemv_896x896_seed": (
        "the fill below the fit transfer size is an assumption (in proportion to bytes); this kernel, with its "
        "0.45 MB, reaches its bytes sooner or later than that line says"),
    "int4_gemv_896x4864_seed": (
        "the seed's INT4 kernel is not bound by its 2.25 MB of bytes on a T4: 26.9 us is about 84 GB/s; its "
        "dequantization and latency chains are not in these analytical counters (measured instruction counts "
        "of that kernel are not public)"),
    "decode_7b_int4_autoawq": (
        "AutoAWQ decodes eagerly from Python: hundreds of kernel launches per token, each paying host dispatch "
        "on Colab's CPU, which the model does not express (it models the GPU); the GPU side alone would allow "
        "the TensorRT-LLM rate"),
    "decode_7b_int4_trtllm": (
        "the public 7B model's shape and TensorRT-LLM's kernel list per layer are assumptions here"),
}


def check_table() -> list[dict[str, Any]]:
    """Rows {figure, predicted, public, ratio, unit, mhz, basis, source, binds, within_25pct, reason?}."""
    rows = []
    for chk in public_checks():
        c = chk["counters"]
        if isinstance(c, list):
            step = predict_sequence(c, chk["mhz"])
            t, binds = step.time, step.binds
        else:
            p = predict(c, chk["mhz"])
            t, binds = p.time, p.binds
        if chk["unit"] == "us":
            pred = t * 1e6
        elif chk["unit"] == "tokens/s":
            pred = 1.0 / t
        elif chk["unit"] == "TFLOPS":
            pred = chk["rate"] * 1e3 / t / 1e12
        else:  # GB/s
            pred = chk["rate"] / t / 1e9
        ratio = pred / chk["public"]
        row = {"figure": chk["figure"], "predicted": pred, "public": chk["public"], "ratio": ratio,
               "unit": chk["unit"], "mhz": chk["mhz"], "basis": chk["basis"], "source": chk["source"],
               "binds": binds, "within_25pct": abs(ratio - 1.0) <= 0.25}
        if "public_range" in chk:
            row["public_range"] = list(chk["public_range"])
        if not row["within_25pct"]:
            row["reason"] = MISS_REASONS.get(chk["figure"], "not investigated")
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the record: check, counters, projections
SOURCE = "t4lib.evidence.t4model"
ESTIMATE_NOTE = ("ESTIMATED by the T4 model (t4lib.evidence.t4model): max of DRAM (278 GB/s read, 211 GB/s write, "
                 "fill fit to a public cuBLAS 896x896 GEMV), L2, shared, issue and tensor terms at T4 rates on 40 SMs, "
                 "plus 1 us per graph node / 2 us per launch (assumed); not measured on a T4")


def _step_counters(doc: dict[str, Any], name: str) -> list[Counters]:
    step = [Counters.from_mapping(c) for c in doc["analytical"]["steps"][name]]
    return step


def _clocked(name: str, mhz: float) -> str:
    """The record name at ``mhz``: bare at the boost clock, ``_<mhz>mhz`` at another."""
    return name if mhz == BOOST_MHZ else f"{name}_{mhz:.0f}mhz"


def projections(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows {name, value, unit, mhz, note, words} of the projections from a counters document
    (:func:`t4lib.benchmarks.t4model.measure`)."""
    rows = []
    for shape in kernel_counters.SERVING_SHAPES:
        for variant, suffix in (("", ""), ("/int4_head", "/int4_head")):
            step = _step_counters(doc, shape + variant)
            ceiling = byte_ceiling_time(step)
            for mhz in CLOCKS_MHZ:
                p = predict_sequence(step, mhz)
                base = f"serving/{shape}{suffix}"
                head = "INT4 lm_head" if variant else "fp16 lm_head"
                what = (f"W4A16 g128, {head}, batch 1, {len(step)} kernels per step (analytical counters); "
                        f"{p.words()}")
                rows.append(dict(name=_clocked(f"{base}/t4_projected_tokens_per_s", mhz), value=1.0 / p.time,
                                 unit="tokens/s", mhz=mhz, words=p.words(), note=what))
                rows.append(dict(name=_clocked(f"{base}/t4_projected_fraction_of_byte_ceiling", mhz),
                                 value=ceiling / p.time, unit="fraction", mhz=mhz, words=p.words(),
                                 note=f"byte ceiling {ceiling * 1e3:.3f} ms ({1 / ceiling:.0f} tokens/s: DRAM bytes "
                                      f"at 278/211 GB/s, no fixed costs) over the projected step; {what}"))
    for mhz in CLOCKS_MHZ:
        logs = []
        for (K, N) in kernel_counters.MMA_SHAPES:
            ours = predict(doc["analytical"]["kernels"][f"w4a16_mma/{K}x{N}/m16"], mhz)
            cub = predict(doc["analytical"]["kernels"][f"cublas_fp16/{K}x{N}/m16"], mhz)
            r = cub.time / ours.time
            logs.append(math.log(r))
            rows.append(dict(name=_clocked(f"w4a16/mma/{K}x{N}/t4_projected_speedup_vs_cublas_m16", mhz), value=r,
                             unit="x", mhz=mhz, words=f"W4A16 MMA bound by {ours.binds}, cuBLAS fp16 by {cub.binds}",
                             note=f"K={K} N={N} M=16: cuBLAS fp16 {cub.time * 1e6:.1f} us ({cub.binds}) over W4A16 "
                                  f"MMA {ours.time * 1e6:.1f} us ({ours.binds}), stream launches"))
        rows.append(dict(name=_clocked("w4a16/mma/t4_projected_speedup_vs_cublas_m16", mhz),
                         value=math.exp(sum(logs) / len(logs)), unit="x", mhz=mhz, words="geometric mean",
                         note=f"geometric mean over the w4a16 benchmark's MMA shapes {kernel_counters.MMA_SHAPES}"))
    return rows


def ncu_predictions(ncu: dict[str, Any] | None) -> dict[str, Any]:
    """T4 time of each section that Nsight Compute measured (its counters, kernel by kernel), at both clocks:
    ``{section: {"<mhz>mhz": {"time_us", "binds", "words"}}}``; counters measured on another GPU (its L2, its JIT
    of the compute_75 PTX), so an input to compare with the analytical sets, not a T4 measurement."""
    out: dict[str, Any] = {}
    for name, sec in ((ncu or {}).get("sections") or {}).items():
        if not sec.get("kernels"):
            continue
        out[name] = {}
        for mhz in CLOCKS_MHZ:
            p = predict_sequence(sec["kernels"], mhz)
            out[name][f"{mhz:.0f}mhz"] = {"time_us": p.time * 1e6, "binds": p.binds, "words": p.words()}
    return out


def run(out_dir) -> list[dict[str, Any]]:
    """``python -m t4lib bench t4model``: counters (analytical; ncu and kernels per step on a GPU), the check
    table against public T4 figures, and the projections. Writes ``t4model_check.json`` and
    ``t4model_projection.json`` under ``out_dir``; returns every figure."""
    out_dir = Path(out_dir)
    doc = kernel_counters.measure()
    na = {"device": "n/a", "driver": "n/a", "torch": "n/a", "clocks": {}, "throttle": []}
    table = check_table()
    check_figs = []
    for r in table:
        lo_hi = f" (range {r['public_range'][0]:g}-{r['public_range'][1]:g})" if "public_range" in r else ""
        check_figs.append(results.figure(
            f"t4model/check/{r['figure']}/ratio_to_public", r["ratio"], "x", "ARITHMETIC", SOURCE, env=na,
            note=f"predicted {r['predicted']:.4g} {r['unit']} (ESTIMATED, T4 model at {r['mhz']:.0f} MHz, bound by "
                 f"{r['binds']}) / public {r['public']:.4g} {r['unit']}{lo_hi}, cited not measured by us: "
                 f"{r['source']}; basis: {r['basis']}" + (f"; missed by more than 25%: {r['reason']}"
                                                         if not r["within_25pct"] else "")))
        check_figs.append(results.figure(
            f"t4model/check/{r['figure']}/predicted", r["predicted"], r["unit"], "ESTIMATED", SOURCE, env=na,
            note=f"{ESTIMATE_NOTE}; at {r['mhz']:.0f} MHz; public figure {r['public']:.4g} {r['unit']} ({r['source']})"))
    meta = dict(parameters=PARAMETERS, check_table=table)
    results.write(out_dir / "t4model_check.json", check_figs, producer=__file__, **meta)
    proj = projections(doc)
    proj_figs = [results.figure(r["name"], r["value"], r["unit"], "ESTIMATED", SOURCE, env=na,
                                note=f"{ESTIMATE_NOTE}; clock {r['mhz']:.0f} MHz; {r['note']}") for r in proj]
    errors = [e for e in doc["errors"] if not e.startswith("no CUDA device")]
    kept = {"kernels": doc["analytical"]["kernels"],
            "step_totals": {k: {f: sum(c[f] for c in v) for f in kernel_counters.FIELDS}
                            for k, v in doc["analytical"]["steps"].items()},
            "ncu": doc["ncu"], "kernels_per_step": doc["kernels_per_step"]}
    results.write(out_dir / "t4model_projection.json", proj_figs, producer=__file__, counters=kept,
                  ncu_t4_predictions=ncu_predictions(doc["ncu"]),
                  counters_device=results.environment()["device"], errors=errors,
                  counters_note="the analytical counters feed the projections; ncu counters and kernels per step, "
                                "when present, were measured on counters_device (not a T4)")
    return check_figs + proj_figs
