"""What the M = 1 GEMV labs (run_lab.py, m1_lab.py, dp4a_lab.py) share: the INT4 cases they time beside their
own variants (cuBLAS fp16 on fp16 weights as the baseline, the library's GEMV, a copy of the same byte count),
a lab variant as a case, and timing one shape's cases into the lab's JSON. Each case is (fn, make_args) for
t4lib.core.timing.compare, with fresh random weights per input set."""
import torch
import torch.nn.functional as F

from t4lib.core import timing as bench
from t4lib.ops.w4a16 import gemv
from t4lib.benchmarks.w4a16 import _qbytes, _rand_qw
from t4lib.quant.w4a16 import QuantizedWeight


def baseline_cases(K: int, N: int, lib_name: str = "library") -> dict:
    nb = _qbytes(1, K, N)
    return {
        "cublas_fp16": (lambda x, w: F.linear(x, w), lambda: (torch.randn(1, K, device="cuda").half(),
                                                              torch.randn(N, K, device="cuda").half())),
        lib_name: (lambda x, q, s: gemv(x, QuantizedWeight(q, s, N, K, 128), backend="cuda"),
                   lambda: (torch.randn(1, K, device="cuda").half(), *_rand_qw(N, K))),
        "copy_same_bytes": (lambda d, s_: d.copy_(s_), lambda: (torch.empty(nb // 2, dtype=torch.uint8, device="cuda"),
                                                                torch.empty(nb // 2, dtype=torch.uint8, device="cuda"))),
    }


def variant_case(call, K: int, N: int):
    """``call(q, s, x, y)`` runs one lab variant: y[1, N] = x[1, K] @ W(q, s)^T."""
    def mk():
        return (*_rand_qw(N, K), torch.randn(1, K, device="cuda").half(),
                torch.empty(1, N, device="cuda", dtype=torch.float16))
    return call, mk


def time_cases(cases: dict, baseline: str, nbytes: int, key: str, record: dict, **compare_kw) -> None:
    """Time one shape's cases against ``baseline`` in one process, store {case: {us, frac, x_<baseline>}} as
    ``record[key]`` and print them fastest first."""
    res = bench.compare(cases, baseline, bytes_moved=nbytes, **{"rounds": 3, "iters": 20, **compare_kw})
    ratio = "x_cublas" if baseline == "cublas_fp16" else f"x_{baseline}"
    record[key] = {n: {"us": st["median_s"] * 1e6, "frac": st.get("frac_copy_bw"), ratio: st["speedup_vs_baseline"]}
                   for n, st in res["cases"].items()}
    for n, st in sorted(record[key].items(), key=lambda kv: kv[1]["us"]):
        print(f"  {key:14s} {n:24s} {st['us']:8.2f} us  frac {st['frac']:.3f}  x{st[ratio]:.2f}", flush=True)
