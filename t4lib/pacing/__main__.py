"""``python -m t4lib.pacing sweep --out DIR`` | ``python -m t4lib.pacing decide --sweep FILE``."""
from __future__ import annotations

import argparse
import json
import sys

from . import controller, grid, recorded, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m t4lib.pacing", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="run the sustained sweep on this GPU and save pacing_sweep.json + PNGs")
    s.add_argument("--out", required=True, help="output folder, e.g. results/<device-slug>/")
    s.add_argument("--window-s", type=float, default=None,
                   help="seconds per cap per kernel (default: 60 on a T4, 15 elsewhere)")
    s.add_argument("--settle-s", type=float, default=None, help="seconds discarded at the start of each window "
                                                                "(default: window / 5)")
    s.add_argument("--caps", type=float, nargs="+", default=list(grid.DEFAULT_CAPS))
    s.add_argument("--kernels", nargs="+", default=["int4_dequant", "w4a16_gemm"])
    s.add_argument("--interval", type=float, default=0.05, help="NVML sampling interval (s)")
    d = sub.add_parser("decide", help="run the controller on a recorded sweep")
    d.add_argument("--sweep", required=True, help="a pacing_sweep.json")
    d.add_argument("--budget", type=float, default=controller.T4_BUDGET_W, help="power budget in W (default 70)")
    d.add_argument("--kernel", default="int4_dequant")
    a = ap.parse_args(argv)
    if a.cmd == "sweep":
        from .sweep import run_sweep
        try:
            sw = run_sweep(a.kernels, a.caps, window_s=a.window_s, settle_s=a.settle_s, interval=a.interval)
        except (RuntimeError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        path, figs = report.save(sw, a.out)
        for n, e in sw["kernels"].items():
            print(report.clock_finding(sw, n) if e.get("rows") else f"{n}: {e.get('skipped')}")
            if e.get("error"):
                print(f"{n}: {e['error']}")
        print(f"wrote {path} ({len(figs)} figures)")
        return 0
    try:
        sw = recorded.load_sweep(a.sweep)
        dec = controller.choose(sw, a.kernel, a.budget)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(dec.as_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
