"""Counters of the project's kernels for the T4 model (:mod:`t4lib.evidence.t4model`): DRAM bytes read and
written, L2 bytes, shared-memory wavefronts, warp instructions issued, tensor-core FLOPs, launches / graph
nodes, per kernel.

Two sources, recorded side by side, never mixed silently:

* **analytical** (any machine, no GPU): derived from shapes and the kernels' access patterns in
  ``kernels/*.cu`` (the GEMV template of ``gemv.cuh`` with the ``Int4G`` trait, the small-M ``mma.sync``
  GEMM of ``w4a16.cu``) and from what :class:`t4lib.serving.StaticEngine` runs per decode step. A decode
  step at batch 1 of a W4A16 Qwen2.5 model (group 128, fp16 ``lm_head``, fused q/k/v and gate/up, torch.compile
  fusing the elementwise work, one CUDA graph) is, per layer: 4 weight-streaming GEMVs plus
  :data:`SMALL_NODES_PER_LAYER` small kernels on L2-resident activations (RMSNorm, rotary + bias, two cache
  writes, attention, SiLU-gate, residual), then :data:`STEP_NODES` step kernels (final norm, token choice,
  input updates) and the ``lm_head`` GEMV. The small-kernel counts are estimates; the GPU run measures them.
* **ncu** (a GPU with Nsight Compute): ``--ncu`` runs each kernel once under ``ncu`` and parses the metrics
  of :data:`NCU_METRICS`. Counters measured on an H100/H200 are of the compute_75 PTX JIT-compiled for that
  GPU and of its 50 MB L2; they are inputs to a T4 model, not T4 counters.

``python -m t4lib bench t4model`` runs :func:`t4lib.evidence.t4model.run`, which takes the counters from
here (``measure``), checks the model against public T4 figures and writes the projections.
"""
from __future__ import annotations

import csv
import io
import math
import shutil
import subprocess
import sys
from typing import Any

from t4lib.benchmarks.serving import build_random_model
from t4lib.models.shapes import QWEN25_05B, QWEN25_7B
from t4lib.ops import w4a16 as ops
from t4lib.quant import quantize_model
from t4lib.quant.w4a16 import quantize_rtn
from t4lib.serving.engine import StaticEngine
from t4lib.serving.fuse import fuse_projections

FIELDS = ("dram_read_bytes", "dram_write_bytes", "l2_bytes", "shared_wavefronts", "instructions", "tensor_flops",
          "launches", "graph_nodes")
GROUP = 128
SMALL_NODES_PER_LAYER = 8        # estimate: norm, rotary+bias, 2 cache writes, attention (2), SiLU-gate, residual+norm
STEP_NODES = 6                   # estimate: final norm, argmax, token / position / slot updates
GEMV_INSTR_PER_8 = 28.0          # Int4G: per lane per packed word (kernels/w4a16.cu, the W4A8 trait's comment)
MMA_INSTR_PER_WORD = 9 + 4 + 3   # dequant_int4x8_mma (9), 4 HMUL2 by the scales, loads and loop (about 3)
NCU_METRICS = {"dram__bytes_read.sum": "dram_read_bytes", "dram__bytes_write.sum": "dram_write_bytes",
               "lts__t_bytes.sum": "l2_bytes", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "shared_wavefronts",
               "smsp__inst_executed.sum": "instructions",
               "sm__inst_executed_pipe_tensor_op_hmma.sum": "tensor_hmma_instructions"}
FLOPS_PER_HMMA_1688 = 2 * 16 * 8 * 8


def counters(**kw: float) -> dict[str, float]:
    """A counter dict with every field (absent ones 0)."""
    unknown = set(kw) - set(FIELDS)
    if unknown:
        raise KeyError(f"unknown counter(s) {sorted(unknown)}; fields are {FIELDS}")
    return {f: kw.get(f, 0) for f in FIELDS}


def _node(launch: bool) -> dict[str, int]:
    return {"launches": 0, "graph_nodes": 1} if not launch else {"launches": 1, "graph_nodes": 0}


def fp16_gemv(K: int, N: int, *, graph: bool = False, instr_per_8: float = 8.0) -> dict[str, float]:
    """fp16 GEMV y[N] = W[N, K] x[K] at M = 1 (cuBLAS, or the fp16 ``lm_head``): W once from DRAM with
    16-byte loads, x from L2 (re-read by each group of 8 rows), y written."""
    w = 2 * N * K
    return counters(dram_read_bytes=w + 2 * K, dram_write_bytes=2 * N, l2_bytes=w + 2 * K * max(1, N // 8) + 2 * N,
                    instructions=N * K / 256 * instr_per_8, **_node(not graph))


def int4_gemv(K: int, N: int, group_size: int = GROUP, *, graph: bool = False,
              instr_per_8: float = GEMV_INSTR_PER_8) -> dict[str, float]:
    """W4A16 GEMV at M = 1 (gemv.cuh with Int4G): N*K/2 weight bytes and N*K/group*2 scale bytes once from
    DRAM with 16-byte loads, x from L2, y written; ``instr_per_8`` warp instructions per lane per packed word."""
    w = N * K // 2 + N * (K // group_size) * 2
    return counters(dram_read_bytes=w + 2 * K, dram_write_bytes=2 * N, l2_bytes=w + 2 * K * max(1, N // 8) + 2 * N,
                    instructions=N * K / 256 * instr_per_8, **_node(not graph))


def int4_mma(M: int, K: int, N: int, group_size: int = GROUP, *, graph: bool = False) -> dict[str, float]:
    """W4A16 small-M tensor-core GEMM (w4a16_mma_kernel, M = 2..64): weights streamed once from DRAM in
    16x64 tiles (16 bytes per lane), x [M, K] from L2 per row tile, m16n8k8 MMAs on ceil(M/8) M-tiles, a
    shared-memory reduction of 3 warps' partials per row tile. Split-K partials (when chosen) are not counted."""
    MT = math.ceil(M / 8)
    words = N * K / 8
    w = N * K // 2 + N * (K // group_size) * 2
    row_tiles = math.ceil(N / 16)
    return counters(dram_read_bytes=w + 2 * M * K, dram_write_bytes=2 * M * N,
                    l2_bytes=w + row_tiles * 2 * M * K + 2 * M * N,
                    shared_wavefronts=row_tiles * 3 * MT * 4 * 2,
                    instructions=words / 32 * (MMA_INSTR_PER_WORD + 2 * MT),
                    tensor_flops=2 * 8 * MT * K * N, **_node(not graph))


def cublas_fp16_gemm(M: int, K: int, N: int, *, graph: bool = False, tile_m: int = 64) -> dict[str, float]:
    """cuBLAS fp16 GEMM [M, K] x [N, K]^T at small M: W [N, K] once from DRAM, x from L2, M padded to the
    smallest Turing HMMA tile (``tile_m`` rows, an assumption) in tensor work."""
    mp = max(M, tile_m)
    w = 2 * N * K
    return counters(dram_read_bytes=w + 2 * M * K, dram_write_bytes=2 * M * N,
                    l2_bytes=w + math.ceil(N / 128) * 2 * M * K + 2 * M * N,
                    shared_wavefronts=(w + math.ceil(N / 128) * 2 * mp * K) / 128 * 2,
                    instructions=2 * mp * N * K / 2048 * 1.5, tensor_flops=2 * mp * N * K, **_node(not graph))


def int4_dequant(n_values: int) -> dict[str, float]:
    """Bulk INT4 dequant (kernels/int4.cu): n/2 bytes read, 2n bytes of fp16 written, 16-byte accesses."""
    return counters(dram_read_bytes=n_values // 2, dram_write_bytes=2 * n_values, l2_bytes=2.5 * n_values,
                    instructions=n_values / 8 * 12 / 32, launches=1)


def small_kernel(activation_bytes: float) -> dict[str, float]:
    """An elementwise kernel of a decode step: its activations stay in the 4 MB L2 (no DRAM stream)."""
    return counters(l2_bytes=activation_bytes, instructions=activation_bytes / 16, graph_nodes=1)


def attention_decode(cfg: dict, B: int, cache_len: int) -> dict[str, float]:
    """One layer's decode attention over a static cache of ``cache_len`` slots (HF SDPA reads every slot)."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv = 2 * B * cfg["num_key_value_heads"] * hd * cache_len * 2
    return counters(dram_read_bytes=kv, l2_bytes=kv + 4 * B * cfg["hidden_size"],
                    instructions=kv / 16 * 2, graph_nodes=1)


def decode_step(cfg: dict, *, cache_len: int = 152, quantized_head: bool = False,
                fused: bool = True) -> list[dict[str, float]]:
    """Counters of one batch-1 decode step of a W4A16 model of Qwen2 config ``cfg`` (kernel by kernel), as
    the serving engine runs it: one CUDA graph, compiled step. ``cache_len`` is the static cache length (the
    serving benchmark's 16 + 128 + 8); ``quantized_head``: an INT4 ``lm_head`` instead of fp16."""
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = H // cfg["num_attention_heads"]
    kvd = cfg["num_key_value_heads"] * hd
    g = dict(graph=True)
    if fused:
        gemvs = [int4_gemv(H, H + 2 * kvd, **g), int4_gemv(H, H, **g), int4_gemv(H, 2 * I, **g), int4_gemv(I, H, **g)]
    else:
        gemvs = [int4_gemv(H, H, **g), int4_gemv(H, kvd, **g), int4_gemv(H, kvd, **g), int4_gemv(H, H, **g),
                 int4_gemv(H, I, **g), int4_gemv(H, I, **g), int4_gemv(I, H, **g)]
    small = [small_kernel(6 * H) for _ in range(SMALL_NODES_PER_LAYER - 1)]
    layer = gemvs + small + [attention_decode(cfg, 1, cache_len)]
    head = int4_gemv(H, V, **g) if quantized_head else fp16_gemv(H, V, graph=True)
    return layer * cfg["num_hidden_layers"] + [small_kernel(2 * V) for _ in range(STEP_NODES)] + [head]


SERVING_SHAPES = {"qwen2.5-0.5b-shape": QWEN25_05B, "qwen2.5-7b-shape": QWEN25_7B}


def analytical() -> dict[str, Any]:
    """Every analytical counter set this module derives: kernel families at the benchmarks' shapes and the
    serving decode steps."""
    out: dict[str, Any] = {"kernels": {}, "steps": {}}
    k = out["kernels"]
    for (K, N) in ((896, 896), (896, 4864), (4864, 896), (3584, 18944), (18944, 3584), (5120, 17408)):
        k[f"w4a16_gemv/{K}x{N}"] = int4_gemv(K, N)
        k[f"cublas_fp16_gemv/{K}x{N}"] = fp16_gemv(K, N)
    for (K, N) in MMA_SHAPES:
        k[f"w4a16_mma/{K}x{N}/m16"] = int4_mma(16, K, N)
        k[f"cublas_fp16/{K}x{N}/m16"] = cublas_fp16_gemm(16, K, N)
    k["int4_dequant/64M"] = int4_dequant(64 << 20)
    for name, cfg in SERVING_SHAPES.items():
        out["steps"][name] = decode_step(cfg)
        out["steps"][f"{name}/int4_head"] = decode_step(cfg, quantized_head=True)
    return out


# the MMA GEMM shapes of the w4a16 benchmark (K x N)
MMA_SHAPES = [(5120, 17408), (17408, 5120), (1536, 8960), (8960, 1536), (896, 4864), (4864, 896)]


# ---------------------------------------------------------------- Nsight Compute (GPU)
def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """{kernel name: {counter: summed value}} from ``ncu --csv --metrics ...`` output (one row per kernel and
    metric); the HMMA instruction count becomes ``tensor_flops`` (m16n8k8: 2048 FLOPs each)."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no ncu CSV table in the output")
    out: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        name, metric, value = row.get("Kernel Name"), row.get("Metric Name"), row.get("Metric Value")
        if metric not in NCU_METRICS or name is None:
            continue
        v = float(str(value).replace(",", ""))
        d = out.setdefault(name, {"launches": 0})
        key = NCU_METRICS[metric]
        if key == "tensor_hmma_instructions":
            key, v = "tensor_flops", v * FLOPS_PER_HMMA_1688
        d[key] = d.get(key, 0) + v
        if metric == "smsp__inst_executed.sum":
            d["launches"] += 1
    for d in out.values():
        d.setdefault("tensor_flops", 0)
        d.setdefault("graph_nodes", 0)
    return out


def _run_kernels_once() -> None:
    """The kernels ncu profiles: each family once at one shape (called in the profiled child process)."""
    import torch  # the child process that ncu profiles


    torch.manual_seed(0)
    for (K, N) in ((896, 4864), (3584, 18944)):
        w = torch.randn(N, K, dtype=torch.float16, device="cuda")
        q = quantize_rtn(w, GROUP)
        for M in (1, 16):
            x = torch.randn(M, K, dtype=torch.float16, device="cuda")
            ops.matmul(x, q)
            torch.matmul(x, w.t())
    torch.cuda.synchronize()


def measure_ncu(timeout_s: int = 540) -> tuple[dict[str, Any] | None, str | None]:
    """(counters per kernel, None) measured by Nsight Compute, or (None, why not)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None, "ncu not found on PATH"
    cmd = [ncu, "--csv", "--metrics", ",".join(NCU_METRICS), sys.executable, "-m", "t4lib.benchmarks.t4model",
           "--kernels-once"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"ncu timed out after {timeout_s} s"
    if p.returncode != 0:
        return None, f"ncu exited {p.returncode}: {(p.stderr or p.stdout)[-2000:]}"
    try:
        return parse_ncu_csv(p.stdout), None
    except ValueError as e:
        return None, f"ncu output not parsed: {e}"


def decode_kernels_per_step(cfg: dict, steps: int = 16) -> float:
    """Kernels launched per replayed decode step of StaticEngine (W4A16, fused, compiled, graph), counted by
    torch.profiler over ``steps`` decode steps (GPU)."""
    import torch  # optional here: GPU measurement only


    cfg = {**cfg, "num_hidden_layers": 2}   # nodes per layer from a 2-layer model of the same widths
    m = build_random_model(cfg)
    quantize_model(m)
    fuse_projections(m)
    eng = StaticEngine(m, max_len=64)
    ids = torch.randint(0, cfg["vocab_size"], (1, 8), device="cuda")
    eng.generate(ids, 4)
    counts = []
    for n in (1, 1 + steps):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            eng.generate(ids, n)
            torch.cuda.synchronize()
        counts.append(sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))
    return (counts[1] - counts[0]) / steps


def measure() -> dict[str, Any]:
    """Counters for the T4 model: the analytical sets always; on a GPU, ncu's (when ncu exists) and the
    engine's kernels per decode step (profiler), with what failed recorded in ``errors``."""
    out = {"analytical": analytical(), "ncu": None, "kernels_per_step": None, "errors": []}
    try:
        import torch  # optional here: the CPU part needs no GPU
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        out["errors"].append("no CUDA device: analytical counters only")
        return out
    out["ncu"], why = measure_ncu()
    if why:
        out["errors"].append(why)
    try:
        out["kernels_per_step"] = {name: decode_kernels_per_step(cfg) for name, cfg in SERVING_SHAPES.items()}
    except Exception as e:  # recorded, the analytical estimate stands
        out["errors"].append(f"kernels per step: {type(e).__name__}: {e}")
    return out


if __name__ == "__main__":
    if "--kernels-once" in sys.argv:
        _run_kernels_once()
