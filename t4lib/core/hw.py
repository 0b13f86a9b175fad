"""Hardware facts: the T4 budget every kernel is written for, the device at
hand, and its copy bandwidth measured once per process."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, asdict


@dataclass(frozen=True)
class GPUBudget:
    name: str
    sms: int
    smem_per_block: int          # bytes a block may use (opt-in maximum)
    smem_per_sm: int
    max_warps_per_sm: int
    regs_per_sm: int
    l2_bytes: int
    peak_bw: float               # bytes/s, datasheet
    sustained_bw: float          # bytes/s, what copy kernels reach
    fp16_tensor_flops: float     # dense FLOP/s
    fp32_flops: float
    tdp_watts: float
    boost_mhz: int
    base_mhz: int


# Tesla T4 (TU104, sm_75), from NVIDIA's T4 datasheet and the Turing tuning
# guide; sustained bandwidth is what a streaming copy reaches on GDDR6.
T4 = GPUBudget(name="Tesla T4", sms=40, smem_per_block=64 * 1024, smem_per_sm=64 * 1024,
               max_warps_per_sm=32, regs_per_sm=65536, l2_bytes=4 * 1024 * 1024,
               peak_bw=320e9, sustained_bw=260e9, fp16_tensor_flops=65e12, fp32_flops=8.1e12,
               tdp_watts=70.0, boost_mhz=1590, base_mhz=585)

# What sm_75 has and lacks, compared with later architectures.
SM75_FEATURES = {
    "fp16 tensor cores (mma m16n8k8, wmma m16n16k16)": (75, True),
    "int8/int4 tensor cores (mma m8n8k16 / m8n8k32)": (75, True),
    "lop3.b32 / prmt.b32 bit tricks": (50, True),
    "ldmatrix": (75, True),
    "cp.async (async global->shared copy)": (80, False),
    "bf16 arithmetic and tensor cores": (80, False),
    "mma m16n8k16 fp16": (80, False),
    "FP8 tensor cores": (89, False),
    "TMA (bulk tensor copy)": (90, False),
    "wgmma (warpgroup MMA)": (90, False),
    "thread block clusters / DSMEM": (90, False),
}


def feature_matrix(capability: tuple[int, int] | None = None) -> list[dict]:
    """Rows of (feature, minimum sm, on T4, on this device)."""
    cc = None if capability is None else capability[0] * 10 + capability[1]
    rows = []
    for feat, (min_sm, on_t4) in SM75_FEATURES.items():
        rows.append({"feature": feat, "min_sm": min_sm, "T4 (sm_75)": "yes" if on_t4 else "no",
                     "this device": "n/a (no GPU)" if cc is None else ("yes" if cc >= min_sm else "no")})
    return rows


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@functools.lru_cache(maxsize=None)
def device_info(index: int = 0) -> dict:
    """Name, capability, SMs, memory, L2, driver and library versions."""
    import torch  # torch-free import path (t4lib.core.results imports hw)

    info = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if not torch.cuda.is_available():
        info.update(name="cpu", slug="cpu", capability=None, driver=None)
        return info
    p = torch.cuda.get_device_properties(index)
    info.update(name=p.name, slug=slug(p.name), capability=(p.major, p.minor), sms=p.multi_processor_count,
                memory_bytes=p.total_memory, l2_bytes=getattr(p, "L2_cache_size", 0), driver=_driver_version())
    return info


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py may be missing: the except below returns None

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def device_slug() -> str:
    return device_info()["slug"]


def l2_bytes() -> int:
    return device_info().get("l2_bytes") or T4.l2_bytes


@functools.lru_cache(maxsize=None)
def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write bytes), measured
    once per process with CUDA events over repeated ``copy_`` calls."""
    import torch  # torch-free import path (t4lib.core.results imports hw)

    if not torch.cuda.is_available():
        raise RuntimeError("copy_bandwidth() needs a CUDA device")
    n = nbytes // 2
    src = torch.empty(n, dtype=torch.float16, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    del src, dst
    return 2 * n * 2 / times[len(times) // 2]


def t4_time_estimate(nbytes: float, sustained: bool = True) -> float:
    """Roofline time in seconds for moving ``nbytes`` on a T4 (ESTIMATED)."""
    return nbytes / (T4.sustained_bw if sustained else T4.peak_bw)


def budget_dict() -> dict:
    return asdict(T4)
