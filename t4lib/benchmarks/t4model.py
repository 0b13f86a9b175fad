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
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import Any

from t4lib.benchmarks import bitlevel
from t4lib.benchmarks import fused_adamw as adamw_bench
from t4lib.benchmarks.serving import build_random_model
from t4lib.core import results
from t4lib.models.shapes import QWEN25_05B, QWEN25_7B
from t4lib.ops import gguf
from t4lib.ops import w4a16 as ops
from t4lib.ops.deltanet import gated_deltanet_decode
from t4lib.ops.deltanet import reference as deltanet_ref
from t4lib.ops.fused_adamw import fused_adamw_
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
# Metric names valid on sm_75 .. sm_90 (Turing to Hopper). The tensor-pipe metric is the one name that varies:
# the first candidate the device's ncu lists is used (``--query-metrics``), the first one when the query fails.
NCU_TENSOR_CANDIDATES = ("sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__inst_executed_pipe_tensor.sum",
                         "smsp__inst_executed_pipe_tensor_op_hmma.sum")
NCU_TIMEOUT_S = 240          # the whole ncu run; ``$T4MODEL_NCU_TIMEOUT_S`` overrides
NCU_LAUNCH_COUNT = 400       # at most this many kernels profiled (a replay costs tens of ms each)
# ncu's options and why: counts do not depend on the clock (--clock-control none leaves it alone); only what the
# child brackets with cudaProfilerStart/Stop is profiled (--profile-from-start off), so building models, quantizing
# and torch.compile run unprofiled; raw units (--print-units base: bytes, not auto-scaled Kbyte/Mbyte); kernels
# inside a replayed CUDA graph profiled node by node (--graph-profiling node); child processes followed.
NCU_OPTIONS = ("--csv", "--print-units", "base", "--clock-control", "none", "--profile-from-start", "off",
               "--target-processes", "all", "--graph-profiling", "node", "--launch-count", str(NCU_LAUNCH_COUNT))
MARKER_KERNEL = "spin_kernel"   # torch.cuda._sleep's kernel: the child launches one before each section
_UNIT_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _metric_value(value: str, unit: str) -> float:
    """A metric value as a number in base units (``12.5`` with unit ``Mbyte`` -> 12.5e6)."""
    v = float(str(value).replace(",", ""))
    u = (unit or "").strip()
    if u[:1] in ("K", "M", "G", "T") and len(u) > 1 and u[1:2].islower():
        v *= _UNIT_SCALE[u[0]]
    return v


def parse_ncu_csv(text: str, metrics: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Kernel launches, in ncu's order, from ``ncu --csv --metrics ...`` output (one row per launch and metric):
    ``[{"id", "kernel", "stream", "block", "grid", <counter>: value, ...}]``. ``metrics`` maps ncu metric names to
    counter names (default :data:`NCU_METRICS`); every one must have a number for every launch, else ValueError
    naming the metric and the kernel (a name this GPU's ncu does not know shows as a missing or ``n/a`` value).
    Values are read in base units whatever ncu printed (``Mbyte`` scaled to bytes). The HMMA instruction count
    becomes ``tensor_flops`` at 2,048 FLOPs each (``mma.sync.m16n8k8``, what the compute_75 kernels issue; a
    native Hopper cuBLAS kernel's larger MMAs are undercounted), and is kept as ``tensor_hmma_instructions``."""
    metrics = NCU_METRICS if metrics is None else metrics
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no ncu CSV table in the output (no header row starting with \"ID\")")
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        rid, name, metric = row.get("ID"), row.get("Kernel Name"), row.get("Metric Name")
        if rid is None or name is None or not str(rid).strip().isdigit():
            continue   # a repeated header or a line ncu printed inside the table
        d = launches.setdefault(rid, {"id": int(rid), "kernel": name, "stream": row.get("Stream"),
                                      "block": row.get("Block Size"), "grid": row.get("Grid Size")})
        if metric not in metrics:
            continue
        raw = str(row.get("Metric Value", "")).strip()
        try:
            v = _metric_value(raw, row.get("Metric Unit", ""))
        except ValueError:
            raise ValueError(f"metric {metric!r} of kernel {name!r} (ncu ID {rid}) has no number: {raw!r}") from None
        d[metrics[metric]] = d.get(metrics[metric], 0) + v
    out = []
    for d in sorted(launches.values(), key=lambda d: d["id"]):
        missing = [m for m, key in metrics.items() if key not in d]
        if missing:
            raise ValueError(f"ncu output lacks metric(s) {missing} for kernel {d['kernel']!r} (ncu ID {d['id']}): "
                             f"not collected on this GPU, or a name its ncu does not know")
        if "tensor_hmma_instructions" in d:
            d["tensor_flops"] = d["tensor_hmma_instructions"] * FLOPS_PER_HMMA_1688
        d.setdefault("tensor_flops", 0)
        d["launches"], d["graph_nodes"] = 1, 0
        out.append(d)
    return out


def group_sections(launches: list[dict[str, Any]], sections: list[dict[str, Any]]) -> dict[str, Any]:
    """The parsed launches split at the marker kernels into the child's sections (``[{"name", "graph"}]``, in the
    order run): ``{name: {"kernels": [...], "total": {field: sum}}}``, markers dropped. A section run as a CUDA
    graph replay counts its kernels as graph nodes. ValueError when the markers and the sections disagree."""
    marks = [i for i, d in enumerate(launches) if MARKER_KERNEL in d["kernel"]]
    if len(marks) != len(sections):
        raise ValueError(f"{len(marks)} marker kernels ({MARKER_KERNEL}) in the ncu output for {len(sections)} "
                         f"sections run: cannot tell which kernel belongs to which section")
    out: dict[str, Any] = {}
    for k, (i, sec) in enumerate(zip(marks, sections)):
        ks = [dict(d) for d in launches[i + 1: marks[k + 1] if k + 1 < len(marks) else len(launches)]]
        if sec.get("graph"):
            for d in ks:
                d["launches"], d["graph_nodes"] = 0, 1
        out[sec["name"]] = {"kernels": ks, "total": {f: sum(d.get(f, 0) for d in ks) for f in FIELDS},
                            **{k2: v for k2, v in sec.items() if k2 not in ("name",)}}
    return out


def _sections() -> list[tuple[str, bool, Any]]:
    """(name, run as a graph replay, setup) of what the child profiles: ``setup()`` builds the inputs (not
    profiled) and returns the call to profile. Every kernel family once at one shape, then one decode step of
    the serving engine at each serving shape (2 layers of the shape's widths: per-layer kernels repeat)."""
    import torch  # the child process that ncu profiles (a GPU); importing this module needs no torch

    dev = "cuda"
    out = []
    for (K, N) in ((896, 4864), (3584, 18944)):
        def setup(K=K, N=N, M=1, fp16=False):
            w = torch.randn(N, K, dtype=torch.float16, device=dev)
            x = torch.randn(M, K, dtype=torch.float16, device=dev)
            if fp16:
                return lambda: torch.matmul(x, w.t())
            q = quantize_rtn(w, GROUP)
            return lambda: ops.matmul(x, q)
        out += [(f"w4a16_gemv/{K}x{N}/m1", False, setup),
                (f"w4a16_mma/{K}x{N}/m16", False, lambda s=setup: s(M=16)),
                (f"cublas_fp16_gemv/{K}x{N}/m1", False, lambda s=setup: s(fp16=True)),
                (f"cublas_fp16/{K}x{N}/m16", False, lambda s=setup: s(M=16, fp16=True))]
    n = 1 << 24
    for fam, variant in (("int4", "cuda"), ("int3", "cuda_staged"), ("fp8", "cuda")):
        def setup(fam=fam, variant=variant):
            fn, make = bitlevel._dequant_cases(n)[fam][0][variant]
            args = make()
            return lambda: fn(*args)
        out.append((f"{fam}_dequant/{n >> 20}M", False, setup))

    def gguf_setup(fmt="Q4_K", N=4864, K=896):
        t = gguf.type_id(fmt)
        raw = gguf.reference.random_blocks(t, N * K // gguf.FORMATS[t][1], seed=7, scale=0.01).reshape(-1).to(dev)
        x = torch.randn(1, K, device=dev, dtype=torch.float16)
        return lambda: gguf.gguf_gemv(raw, t, x, N, K, backend="cuda")
    out.append(("gguf_gemv/Q4_K/4864x896/m1", False, gguf_setup))

    def deltanet_setup(B=1, H=48, HK=16):
        L = deltanet_ref.random_layer(H, HK, seed=1, device=dev)
        X = deltanet_ref.random_step(B, H, HK, seed=0, device=dev)
        S = deltanet_ref.random_state(B, H, HK, seed=0, device=dev)
        return lambda: gated_deltanet_decode(X["qkv"], X["z"], X["alpha"], X["beta"], S["conv_state"], S["state"],
                                             L["conv_w"], L["ssm_a"], L["dt_bias"], L["ssm_norm"], num_k_heads=HK,
                                             head_order="gguf", backend="cuda")
    out.append(("deltanet_decode/b1_h48", False, deltanet_setup))

    def adamw_setup(T=2048, N=896, K=896):
        state, (dy, x) = adamw_bench._state(N, K), adamw_bench._inputs(T, N, K)
        return lambda: fused_adamw_(dy, x, *state, step=1, backend="cuda", **adamw_bench.HP)
    out.append(("fused_adamw/896x896/t2048", False, adamw_setup))

    for name, cfg in SERVING_SHAPES.items():
        def step_setup(cfg=cfg):
            m = build_random_model({**cfg, "num_hidden_layers": 2})
            quantize_model(m)
            fuse_projections(m)
            eng = StaticEngine(m, max_len=64)
            ids = torch.randint(0, cfg["vocab_size"], (1, 8), device=dev)
            r = eng.generate_with_stats(ids, 4)   # compile and capture the decode step (not profiled)
            if eng.graph is None:
                raise RuntimeError(f"no decode graph: {r.graph_error}")
            return eng.graph.replay
        out.append((f"decode_step/{name}/2_layers", True, step_setup))
    return out


def _run_kernels_once(sections_out: str | None = None) -> None:
    """The child ncu profiles: each section's setup unprofiled, then (profiled) a marker kernel and the call
    once, on the current stream, synchronized. A section that fails is recorded and the others run; the sections
    run are written as JSON to ``sections_out`` (the parent splits ncu's output at the markers)."""
    import torch  # the child process that ncu profiles

    torch.manual_seed(0)
    ran, errors = [], []
    for name, graph, setup in _sections():
        try:
            fn = setup()
            fn()                              # warm: build and load kernels, choose algorithms (unprofiled)
            torch.cuda.synchronize()
        except Exception as e:  # a section that cannot run here: recorded, the others still run
            errors.append(f"{name}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=2)}")
            torch.cuda.synchronize()
            continue
        torch.cuda.profiler.start()
        torch.cuda._sleep(1)                  # the marker: one spin_kernel before the section's kernels
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        ran.append({"name": name, "graph": graph})
        del fn
        torch.cuda.empty_cache()
        print(f"t4model ncu section done: {name}", flush=True)
    if sections_out:
        results.write_json(sections_out, {"sections": ran, "errors": errors})


def ncu_path() -> str | None:
    """``$NCU``, else ``ncu`` on PATH, else the CUDA toolkit's (``$CUDA_HOME/bin/ncu``, /usr/local/cuda/bin/ncu)."""
    for cand in (os.environ.get("NCU"), shutil.which("ncu"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def ncu_metrics(ncu: str) -> dict[str, str]:
    """:data:`NCU_METRICS` with the tensor-pipe metric this device's ncu lists (``ncu --query-metrics``)."""
    base = {k: v for k, v in NCU_METRICS.items() if v != "tensor_hmma_instructions"}
    try:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60)
        known = {line.split()[0] for line in q.stdout.splitlines() if line.strip()}
    except (OSError, subprocess.SubprocessError):
        known = set()
    pick = next((m for m in NCU_TENSOR_CANDIDATES if m.split(".")[0] in known), NCU_TENSOR_CANDIDATES[0])
    return {**base, pick: "tensor_hmma_instructions"}


def measure_ncu(timeout_s: int | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(counters per section, None) measured by Nsight Compute, or (None, why not); partial results on a
    timeout come back with the reason. ``timeout_s``: the whole run (default ``$T4MODEL_NCU_TIMEOUT_S`` or
    :data:`NCU_TIMEOUT_S`); the child is killed with its process group when it runs past it."""
    if timeout_s is None:
        timeout_s = int(os.environ.get("T4MODEL_NCU_TIMEOUT_S", NCU_TIMEOUT_S))
    ncu = ncu_path()
    if ncu is None:
        return None, "ncu not found ($NCU, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    metrics = ncu_metrics(ncu)
    with tempfile.TemporaryDirectory() as tmp:
        log, secs = os.path.join(tmp, "ncu.csv"), os.path.join(tmp, "sections.json")
        cmd = [ncu, *NCU_OPTIONS, "--metrics", ",".join(metrics), "--log-file", log, sys.executable, "-m",
               "t4lib.benchmarks.t4model", "--kernels-once", secs]
        why = None
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            child_out, _ = p.communicate(timeout=timeout_s)
            if p.returncode != 0:
                why = f"ncu exited {p.returncode}: {child_out[-1500:]}"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)   # ncu and the profiled python child
            child_out, _ = p.communicate()
            why = f"ncu timed out after {timeout_s} s (sections finished before it are kept)"
        text = open(log).read() if os.path.exists(log) else ""
        if "ERR_NVGPUCTRPERM" in text + child_out:
            return None, "ncu: no permission for GPU performance counters (ERR_NVGPUCTRPERM) on this machine"
        ran = json.loads(open(secs).read()) if os.path.exists(secs) else None
    try:
        launches = parse_ncu_csv(text, metrics)
    except ValueError as e:
        return None, f"ncu output not parsed: {e}" + (f"; {why}" if why else "")
    doc: dict[str, Any] = {"command": shlex.join(cmd[:-1] + ["SECTIONS.json"]), "metrics": metrics,
                           "child_errors": (ran or {}).get("errors", [])}
    if ran is None:   # killed before the child wrote its sections: the finished ones are whole markers
        n = sum(1 for d in launches if MARKER_KERNEL in d["kernel"])
        sections = [{"name": f"section_{i}", "graph": False} for i in range(n)]
        why = (why or "") + "; the child's section list was not written: sections are numbered in run order"
    else:
        sections = ran["sections"][:sum(1 for d in launches if MARKER_KERNEL in d["kernel"])]
    try:
        doc["sections"] = group_sections(launches, sections)
    except ValueError as e:
        doc["launches"] = launches
        why = f"{why}; {e}" if why else str(e)
    return doc, why


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
    if "--kernels-once" in sys.argv:   # the child that measure_ncu runs under ncu
        i = sys.argv.index("--kernels-once")
        _run_kernels_once(sys.argv[i + 1] if len(sys.argv) > i + 1 else None)
