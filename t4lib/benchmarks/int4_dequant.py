"""Bulk INT4 dequant benchmark: fraction of copy bandwidth, against the
PyTorch reference run on the same GPU in the same process."""
from __future__ import annotations

from pathlib import Path

import torch

from t4lib.core import timing, results
from t4lib.ops.int4 import int4_dequant, reference

SOURCE = "t4lib.benchmarks.int4_dequant"


def run(out_dir: str | Path, n_values: int = 1 << 27, group_size: int = 128, quick: bool = False) -> list[dict]:
    """Times dequant of ``n_values`` (default 128 Mi values: 64 MiB in, 256 MiB out)."""
    if quick:
        n_values //= 4
    dev = "cuda"

    def make():
        packed = torch.randint(-2**31, 2**31 - 1, (n_values // 8,), dtype=torch.int32, device=dev)
        scales = torch.rand(n_values // group_size, dtype=torch.float16, device=dev) + 0.5
        return packed, scales

    nbytes = n_values // 2 + n_values * 2 + (n_values // group_size) * 2
    p, s = make()
    torch.testing.assert_close(int4_dequant(p, s, group_size, backend="cuda"),
                               reference.int4_dequant(p, s, group_size), rtol=0, atol=0)
    del p, s
    res = timing.compare({
        "torch_reference": (lambda p, s: reference.int4_dequant(p, s, group_size), make),
        "lop3_kernel": (lambda p, s: int4_dequant(p, s, group_size, backend="cuda"), make),
    }, baseline="torch_reference", bytes_moved=nbytes, rounds=3, iters=10 if quick else 20, max_sets=8)
    figs = [timing.copy_bandwidth_figure(SOURCE)] + timing.to_figures(res, "int4_dequant", SOURCE)
    results.write(Path(out_dir) / "int4_dequant.json", figs, n_values=n_values, group_size=group_size)
    return figs
