"""Grid size of the library's M = 1 GEMVs: does the last, partly filled round
of the persistent grid cost time? (not part of the library)

    python labs/gemv/grid_lab.py      # writes $OUT/grid_lab.json

The GEMV template launches at most one resident wave of CTAs, which walk the
row-group tasks in a grid-stride loop. When the task count is not a multiple
of the grid, the CTAs that take one more task than the rest set the time
while most SMs idle. This lab times the library kernels (INT4-g128, GGUF
packed Q4_K/Q6_K/IQ4_XS/Q8_0) through their `max_ctas` cap: the default grid
against caps that give every CTA the same number of tasks and plain multiples
of the SM count. Results do not depend on the grid (the template's rule), so
every cap is checked bit for bit against the default.
"""
import json
import math
import os
import sys

import torch

from t4lib.core import timing as bench
from t4lib.benchmarks.gguf import FFN, GEMV_FORMATS, HIDDEN
from t4lib.ops.gguf import FORMATS, gguf_gemv_packed, pack_for_gemv, reference as gref, type_id
from t4lib.ops.w4a16 import gemv
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight
from t4lib.core.results import lab_record

OUT = os.environ.get("OUT", "/tmp/out")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
WARPS_WANTED = SMS * 16  # gemv.cuh choose_split


def tasks(N, K, R, chunk):
    """Row-group tasks of one launch, as gemv.cuh counts them."""
    groups = -(-N // R)
    split = 1 if groups >= WARPS_WANTED or K // chunk < 128 else 4
    return -(-groups // (4 // split))


def caps(T):
    """Grid caps to time: equal tasks per CTA for 1..8 tasks each, and k x SMs."""
    c = {math.ceil(T / r) for r in range(1, 9)} | {SMS * k for k in (2, 3, 4, 6, 8)}
    return sorted(v for v in c if v <= 8 * SMS)


def sweep(key, run, make, nbytes, T):
    run(*make(), 0)  # build and warm up
    args = make()
    y0 = run(*args, 0)
    for c in caps(T):
        if not torch.equal(run(*args, c), y0):
            raise SystemExit(f"{key}: max_ctas={c} changes the result")
    cases = {"default": (lambda *a: run(*a, 0), make)}
    for c in caps(T):
        cases[f"cap{c}"] = ((lambda c_: lambda *a: run(*a, c_))(c), make)
    cases["copy_same_bytes"] = (lambda d, s_: d.copy_(s_),
                                lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                         torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")))
    res = bench.compare(cases, "default", bytes_moved=nbytes, rounds=3, iters=20, max_sets=8)
    rows = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"), "x_default": st["speedup_vs_baseline"]}
            for n, st in res["cases"].items()}
    for n, st in sorted(rows.items(), key=lambda kv: kv[1]["us"])[:6]:
        print(f"  {key:28s} T={T:5d} {n:16s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_default']:.3f}",
              flush=True)
    return {"tasks": T, "cases": rows}


out = {"sms": SMS, "int4": {}, "gguf": {}}
# (K, N): the 27B and 0.5B shapes of the W4A16 issue, and the 7B decode GEMVs (fused qkv, o, gate+up, down)
for K, N in ((5120, 17408), (17408, 5120), (5120, 10240), (896, 4864), (4864, 896),
             (3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584)):
    def make(K=K, N=N):
        return (torch.randn(1, K, device="cuda").half(), *_rand_qw(N, K))

    def run(x, q, s, cap, K=K, N=N):
        return gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda", max_ctas=cap or None)

    out["int4"][f"{K}x{N}"] = sweep(f"int4 {K}x{N}", run, make, _qbytes(1, K, N), tasks(N, K, 2, 32))

for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
    for fmt in GEMV_FORMATS:
        t = type_id(fmt)
        nv, nb = FORMATS[t][1], FORMATS[t][2]
        packed = pack_for_gemv(gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).cuda(), t, N, K)

        def make(packed=packed, K=K):
            return (packed.clone(), torch.randn(1, K, device="cuda").half())

        def run(w, x, cap, t=t, N=N, K=K):
            return gguf_gemv_packed(w, t, x, N, K, backend="cuda", max_ctas=cap or None)

        out["gguf"][f"{fmt}/N{N}_K{K}"] = sweep(f"{fmt} N{N} K{K}", run, make, N * K // nv * nb + 2 * (K + N),
                                                tasks(N, K, 4, 64))
        del packed
        torch.cuda.empty_cache()
json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/grid_lab.json", "w"), indent=1)
