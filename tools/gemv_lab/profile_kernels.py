"""Launch each M = 1 GEMV of interest once, for Nsight Compute to profile (not part of the library):

    ncu --clock-control none -k regex:gemv_kernel --section SpeedOfLight --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section InstructionStats python tools/gemv_lab/profile_kernels.py

Order of launches (ncu reports them in this order): INT4-g128 5120x17408 (K x N),
then the packed GGUF Q4_K, Q6_K, IQ4_XS and Q8_0 GEMV at N=17408, K=5120.
"""
import torch

from t4lib.ops.gguf import gguf_gemv_packed, pack_for_gemv, reference as gref, type_id
from t4lib.ops.w4a16 import gemv
from t4lib.ops.w4a16.bench import _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight

K, N = 5120, 17408
x = torch.randn(1, K, device="cuda").half()
q, s = _rand_qw(N, K)
w = QuantizedWeight(q, s, N, K, 128)
gguf = []
for fmt in ("Q4_K", "Q6_K", "IQ4_XS", "Q8_0"):
    t = type_id(fmt)
    nv = 256 if fmt != "Q8_0" else 32
    raw = gref.random_blocks(t, N * K // nv, seed=7, scale=0.01).reshape(-1).cuda()
    gguf.append((fmt, t, pack_for_gemv(raw, t, N, K)))
torch.cuda.synchronize()
print("launch 1: int4 g128", flush=True)
gemv(x, w, backend="cuda")
for i, (fmt, t, packed) in enumerate(gguf):
    print(f"launch {i + 2}: gguf {fmt}", flush=True)
    gguf_gemv_packed(packed, t, x, N, K, backend="cuda")
torch.cuda.synchronize()
