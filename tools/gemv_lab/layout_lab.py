"""Q5_K and Q3_K in GEMV layouts (q5k_trait.cuh, q3k_trait.cuh; a lab, not part of the library).

    python tools/gemv_lab/layout_lab.py --cpu       # packers + traits on the CPU against the reference GEMV
    python tools/gemv_lab/layout_lab.py [Q5_K,Q3_K] # GPU: check, then time against the library
                                                    # (writes $OUT/layout_lab.json)

The library reads Q5_K and Q3_K as GGUF stores them (byte loads per value;
0.13-0.16 of copy bandwidth at the 27B FFN shapes on an H200). This lab packs
the blocks into aligned planes (see the trait headers), checks the traits
against the reference on the CPU (as tests/test_gguf.py checks the library's
traits), and on a GPU times them against the library's GEMV, cuBLAS fp16 and a
same-size copy, M = 1 and 2, after checking them against the library.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from t4lib import _build
from t4lib.ops.gguf import reference as ref

Q5_K, Q3_K = 13, 11
HERE = Path(__file__).parent


def pack_q5k(raw: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """GGUF Q5_K bytes of W [N, K] -> QA, QB, HD (as Q4_K's layout) and HB (see q5k_trait.cuh)."""
    nb, nc = K // 256, K // 64
    b = raw.reshape(N, nb, 176)
    qs = b[:, :, 48:176].reshape(N, nb, 4, 2, 16).permute(3, 0, 1, 2, 4)  # [half, N, nb, p, 16]
    qh = b[:, :, 16:48].to(torch.int64)                                    # [N, nb, 32]
    u = torch.zeros(N, nb, 4, 2, dtype=torch.int64)                         # [N, nb, p, s]
    for p in range(4):
        for s in range(2):
            for ww in range(4):
                for k in range(4):
                    for e in range(2):
                        bit = (qh[:, :, 16 * s + 4 * ww + k] >> (2 * p + e)) & 1
                        u[:, :, p, s] |= bit << (8 * k + 2 * ww + e)
    hb = u.to(torch.int32).view(torch.uint8).reshape(N, nc, 8)  # little-endian words
    return torch.cat([qs.reshape(-1), b[:, :, 0:16].reshape(-1), hb.reshape(-1)]).contiguous()


def pack_q3k(raw: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """GGUF Q3_K bytes of W [N, K] -> QA, HB, SC, D (see q3k_trait.cuh)."""
    nb, nc = K // 256, K // 64
    b = raw.reshape(N, nb, 110).to(torch.int64)
    i = torch.arange(256)
    q2 = (b[:, :, 32 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i & 127) >> 5))) & 3   # [N, nb, 256]
    hb = (b[:, :, i & 31] >> (i >> 5)) & 1
    v = torch.arange(64)
    w_, j, k = v >> 4, (v >> 2) & 3, v & 3                                            # v = 16w + 4j + k
    qa = torch.zeros(N, nb, 4, 4, dtype=torch.int64)                                  # [N, nb, p, word]
    s_, jj = v >> 5, (v >> 2) & 7                                                     # v = 32s + 4jj + k
    hw = torch.zeros(N, nb, 4, 2, dtype=torch.int64)
    for p in range(4):
        for t in range(64):
            qa[:, :, p, w_[t]] |= q2[:, :, 64 * p + t] << (8 * k[t] + 2 * j[t])
            hw[:, :, p, s_[t]] |= hb[:, :, 64 * p + t] << (8 * k[t] + jj[t])
    qa = qa.to(torch.int32).view(torch.uint8).reshape(N, nc, 16)
    hw = hw.to(torch.int32).view(torch.uint8).reshape(N, nc, 8)
    b = b.to(torch.uint8)
    return torch.cat([qa.reshape(-1), hw.reshape(-1), b[:, :, 96:108].reshape(-1), b[:, :, 108:110].reshape(-1)])


PACK = {Q5_K: pack_q5k, Q3_K: pack_q3k}
NAMES = {"Q5_K": Q5_K, "Q3_K": Q3_K}


def cpu_check():
    exe = Path(tempfile.gettempdir()) / "layout_host"
    subprocess.run([_build.find_nvcc(), "-std=c++17", "-O1", "-arch=compute_75", "-I", str(_build.kernels_dir()),
                    "-I", str(Path(ref.__file__).parent), "-o", str(exe), str(HERE / "layout_host.cu")], check=True)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name, t in NAMES.items():
            worst = 0.0
            for (N, K), (M, R) in zip(((37, 1024), (5, 2560), (9, 4096), (3, 256), (7, 1280)),
                                      ((1, 2), (3, 2), (8, 1), (1, 1), (1, 4))):
                raw = ref.random_blocks(t, N * K // 256, seed=N + M, scale=0.05).reshape(-1)
                x = torch.randn(M, K, generator=torch.Generator().manual_seed(M)).half()
                packed = PACK[t](raw, N, K)
                assert packed.numel() == raw.numel()
                packed.numpy().tofile(d / "w.bin")
                x.view(torch.int16).numpy().tofile(d / "x.bin")
                subprocess.run([str(exe), str(t), str(N), str(K), str(M), str(R), str(d / "w.bin"), str(d / "x.bin"),
                                str(d / "y.bin")], check=True)
                y = torch.from_numpy(np.fromfile(d / "y.bin", dtype=np.float32)).reshape(M, N).double()
                w = ref.dequantize(raw, t, (N, K)).double()
                err = ((y - x.double() @ w.t()).abs() / (x.double().abs() @ w.abs().t())).max().item()
                worst = max(worst, err)
                # fp32 sums of exact products, as the library's Q4_K trait (tests/test_gguf.py)
                assert err <= 2.0 ** -16, (name, N, K, M, R, err)
            print(f"{name} GEMV layout on the CPU: matches the reference GEMV, worst error {worst:.2e} of sum |x w|")


def gpu_run(names):
    import ctypes

    from labbuild import load
    from t4lib import bench
    from t4lib.ops.deltanet.bench import FFN, HIDDEN
    from t4lib.ops.gguf import FORMATS, gguf_dequant, gguf_gemv

    lib = load("layout_lab.cu")
    lib.lab_layout_gemv.argtypes = [ctypes.c_int] * 2 + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]

    def lab(t, M, w, x, y, N, K):
        st = lib.lab_layout_gemv(t, M, w.data_ptr(), x.data_ptr(), y.data_ptr(), N, K,
                                 torch.cuda.current_stream().cuda_stream)
        if st:
            raise RuntimeError(f"lab_layout_gemv: CUDA error {st}")
        return y

    out = {"device": torch.cuda.get_device_name(), "gemv": {}, "check": {}}
    for name in names:
        t = NAMES[name]
        for M in (1, 2):
            for N, K in ((FFN, HIDDEN), (HIDDEN, FFN)):
                key = f"{name}/M{M}/N{N}_K{K}"
                raw = ref.random_blocks(t, N * K // 256, seed=7, scale=0.01).reshape(-1)
                packed = PACK[t](raw, N, K).cuda()
                raw = raw.cuda()
                x = torch.randn(M, K, device="cuda").half()
                want = gguf_gemv(raw, t, x, N, K, backend="cuda", layout="gguf").float()
                got = lab(t, M, packed, x, torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16), N, K)
                err = float((got.float() - want).abs().max() / want.abs().max())
                out["check"][key] = err
                if not err <= 2e-3:  # fp16 partials of the library's raw path, relative to the largest output
                    raise SystemExit(f"{key}: the lab GEMV differs from the library's: {err:.2e}")
                w16 = gguf_dequant(raw, t, (N, K), out_dtype=torch.float16)

                def mk(w):
                    return lambda: (w.clone(), torch.randn(M, K, device="cuda").half(),
                                    torch.empty(M, N, device="cuda", dtype=torch.float16))

                nbytes = N * K // 256 * FORMATS[t][2] + 2 * M * (K + N)
                cases = {
                    "lib_gguf_layout": (lambda w, x, y: gguf_gemv(w, t, x, N, K, backend="cuda", layout="gguf", out=y),
                                        mk(raw)),
                    "lab_gemv_layout": (lambda w, x, y: lab(t, M, w, x, y, N, K), mk(packed)),
                    "cublas_fp16": (lambda w, x, y: torch.matmul(x, w.t(), out=y), mk(w16)),
                    "copy_same_bytes": (lambda d, s_: d.copy_(s_),
                                        lambda: (torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
                                                 torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"))),
                }
                res = bench.compare(cases, "lib_gguf_layout", bytes_moved=nbytes, rounds=3, iters=20, max_sets=8)
                out["gemv"][key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"),
                                        "x_lib": st["speedup_vs_baseline"]} for n, st in res["cases"].items()}
                for n, st in sorted(out["gemv"][key].items(), key=lambda kv: kv[1]["us"]):
                    print(f"  {key:24s} {n:16s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st['x_lib']:.3f}",
                          flush=True)
                del raw, packed, w16
                torch.cuda.empty_cache()
    json.dump(out, open(f"{os.environ.get('OUT', '/tmp/out')}/layout_lab.json", "w"), indent=1)


if __name__ == "__main__":
    if "--cpu" in sys.argv:
        cpu_check()
    else:
        gpu_run(sys.argv[1].split(",") if len(sys.argv) > 1 else list(NAMES))
