"""Shared-memory bank conflicts of each layout, counted by Nsight Compute.

``python -m t4lib bench swizzle-ncu`` (or :func:`run`) runs this module's probe under ``ncu`` (the command is
``NCU_CMD``, with this interpreter for ``python3``) and writes ``swizzle_ncu.json``; run alone, the module is
the probe: it launches each layout's microbenchmark kernel a few times and prints the cycles per access.

Kernel template arguments name the layout: ``<0, ...>`` naive, ``<1, ...>``
padded, ``<2, ...>`` swizzled; ``true`` is the one-warp latency mode, ``false``
the 8-warp throughput mode. The analytical expectation per layout is printed
first (``reference.conflict_table``): conflicts per 8 column reads.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from t4lib.ops.swizzle import LAYOUTS, bench_cycles, conflict_table
from t4lib.core import results

METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")
# --clock-control none: ncu leaves the clocks as they are (counts do not depend on them)
NCU_OPTIONS = ("--clock-control", "none", "--kernel-name", "regex:swizzle_bench_kernel", "--metrics", ",".join(METRICS))
PROBE = ("-m", "t4lib.benchmarks.swizzle_ncu")
NCU_CMD = ("ncu", *NCU_OPTIONS, "python3", *PROBE)


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


def figures_from_ncu_log(text: str, source: str = "t4lib.benchmarks.swizzle_ncu under ncu") -> list[dict]:
    """MEASURED figures from the output of ``NCU_CMD``.

    A 16-byte-per-lane shared load moves 512 bytes, so 4 wavefronts per
    instruction is the conflict-free minimum: ncu's bank-conflict counter then
    reads 3 per instruction. We report wavefronts per instruction (ideal 4) and
    the excess over the ideal, per layout and mode.
    """
    names = {0: "naive", 1: "padded", 2: "swizzled"}
    figs, cur = [], None
    vals: dict[tuple, dict] = {}
    for line in text.splitlines():
        m = re.search(r"swizzle_bench_kernel<(\d), (\d)>", line)
        if m:
            cur = (names[int(m.group(1))], "latency" if m.group(2) == "1" else "throughput")
            vals.setdefault(cur, {})
            continue
        m = re.search(r"(l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld|"
                      r"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld)\.sum\s+([\d,]+)", line)
        if m and cur:
            vals[cur]["conflicts" if "conflicts" in m.group(1) else "wavefronts"] = int(m.group(2).replace(",", ""))
    for (layout, mode), v in sorted(vals.items()):
        if "wavefronts" not in v or "conflicts" not in v:
            continue
        instr = v["wavefronts"] - v["conflicts"]  # ncu counts one non-conflict wavefront per instruction
        figs.append(results.figure(f"swizzle/ncu/{mode}/{layout}/wavefronts_per_load", v["wavefronts"] / instr,
                                   "wavefronts", "MEASURED", source, raw=v,
                                   note="16-byte loads: 4 wavefronts per warp instruction is conflict-free"))
        figs.append(results.figure(f"swizzle/ncu/{mode}/{layout}/excess_wavefronts", v["wavefronts"] - 4 * instr,
                                   "wavefronts", "ARITHMETIC", source,
                                   note="measured wavefronts minus the conflict-free 4 per 16-byte warp load"))
    return figs


def run(out_dir: str | Path, ncu: str = "ncu", timeout_s: int = 600) -> Path:
    """Run the probe under Nsight Compute and write ``swizzle_ncu.json``. An ncu that is missing, fails or
    gives no figure raises, and the previous file stays as it was."""
    cmd = [ncu, *NCU_OPTIONS, sys.executable, *PROBE]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise RuntimeError(f"ncu not found ({ncu!r}): Nsight Compute is needed to count bank conflicts") from None
    log = proc.stdout + proc.stderr
    figs = figures_from_ncu_log(log)
    if proc.returncode != 0 or not figs:
        raise RuntimeError(f"ncu exited {proc.returncode} with {len(figs)} figures; its output ends:\n{log[-2000:]}")
    return results.write(Path(out_dir) / "swizzle_ncu.json", figs, command=shlex.join(NCU_CMD),
                         note="bank-conflict counters of 16-byte shared loads per layout; ncu leaves the clocks "
                              "as they are (--clock-control none) and records none")


if __name__ == "__main__":
    main()
