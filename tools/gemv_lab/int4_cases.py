"""The cases the INT4 M = 1 labs time beside their own variants (run_lab.py, m1_lab.py): cuBLAS fp16 on
fp16 weights (the baseline), the library's GEMV, a copy of the same byte count; and a lab variant as a case.
Each case is (fn, make_args) for t4lib.bench.compare, with fresh random weights per input set."""
import torch
import torch.nn.functional as F

from t4lib.ops.w4a16 import gemv
from t4lib.ops.w4a16.bench import _qbytes, _rand_qw
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
