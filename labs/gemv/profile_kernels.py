"""Launch each M = 1 GEMV of interest once, for Nsight Compute to profile (not part of the library):

    ncu --clock-control none --cache-control all -k regex:gemv_kernel --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
        --section InstructionStats python labs/gemv/profile_kernels.py [--gguf-only]

Order of launches (ncu reports them in this order, each also printed): INT4-g128 5120x17408 (K x N)
unless --gguf-only, then every GGUF format of the 27B quant mix at N=17408, K=5120 (the FFN gate/up
shape): Q8_0, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS in the GEMV layout, IQ4_NL and IQ3_S as stored.
"""
import sys

import torch

from t4lib.ops.gguf import gguf_gemv, gguf_gemv_packed, pack_for_gemv, reference as gref, type_id
from t4lib.ops.gguf.packing import PACKED

K, N = 5120, 17408
x = torch.randn(1, K, device="cuda").half()
launches = []
if "--gguf-only" not in sys.argv:
    from t4lib.ops.w4a16 import gemv
    from t4lib.benchmarks.w4a16 import _rand_qw
    from t4lib.quant.w4a16 import QuantizedWeight

    q, s = _rand_qw(N, K)
    w = QuantizedWeight(q, s, N, K, 128)
    launches.append(("int4 g128", lambda: gemv(x, w, backend="cuda")))
for fmt in ("Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ4_NL", "IQ3_S"):
    t = type_id(fmt)
    nv = 32 if fmt in ("Q8_0", "IQ4_NL") else 256
    raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).cuda()
    if t in PACKED:
        packed = pack_for_gemv(raw, t, N, K)
        launches.append((f"gguf {fmt} packed", lambda p=packed, t=t: gguf_gemv_packed(p, t, x, N, K, backend="cuda")))
    else:
        launches.append((f"gguf {fmt} as stored", lambda r=raw, t=t: gguf_gemv(r, t, x, N, K, backend="cuda")))
torch.cuda.synchronize()
for i, (name, fn) in enumerate(launches):
    print(f"launch {i + 1}: {name}", flush=True)
    fn()
torch.cuda.synchronize()
