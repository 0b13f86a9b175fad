"""Launch each shared-memory layout's microbenchmark kernel a few times, for
Nsight Compute. Run on a GPU::

    ncu --kernel-name regex:swizzle_bench_kernel \\
        --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\\
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum \\
        python -m t4lib.ops.swizzle.ncu_probe

Kernel template arguments name the layout: ``<0, ...>`` naive, ``<1, ...>``
padded, ``<2, ...>`` swizzled; ``true`` is the one-warp latency mode, ``false``
the 8-warp throughput mode. The analytical expectation per layout is printed
first (``reference.conflict_table``): conflicts per 8 column reads.
"""
from __future__ import annotations

import torch

from . import LAYOUTS, bench_cycles, conflict_table


def main(iters: int = 64) -> None:
    for row in conflict_table():
        print("model", row)
    if not torch.cuda.is_available():
        print("no CUDA device: model only")
        return
    for layout in LAYOUTS:
        for warps in (1, 8):
            print(f"{layout:<9} warps={warps} cycles/access={bench_cycles(layout, warps=warps, iters=iters):.2f}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
