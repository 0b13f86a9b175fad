"""Add the Nsight Compute stall figures of a recorded ws_bench run to its results file.

The ws_bench run of results/nvidia-h200/w4a16_gemm_ws.json recorded "no ncu figures parsed": its parser
(t4lib.ops.w4a16.ws_bench.parse_ncu) takes ncu's "==PROF== Profiling ..." progress lines for kernels, so
its first rows carry no metrics. This drops those lines from the run's log and parses the rest with the
same parser, giving the figures the environment and time of the profiled run (not this machine's).

    python3 tools/w4a16_ws_ncu_figures.py results/nvidia-h200/w4a16_gemm_ws.json results/nvidia-h200/logs/ncu_w4a16_ws.log
"""
import json
import sys
from pathlib import Path

from t4lib import results
from t4lib.ops.w4a16 import ws_bench

ENV_KEYS = ("device", "driver", "torch", "clocks", "throttle", "when")


def main(res_path: str, log_path: str) -> None:
    doc = json.loads(Path(res_path).read_text())
    if any("stall" in f["name"] for f in doc["figures"]):
        raise SystemExit(f"{res_path} already holds stall figures")
    run_env = {k: next(f for f in doc["figures"] if f["tag"] == "MEASURED")[k] for k in ENV_KEYS}
    text = "\n".join(line for line in Path(log_path).read_text().splitlines() if not line.startswith("=="))
    figs = ws_bench.figures_from_ncu_log(text)
    if not figs:
        raise SystemExit(f"no stall figures in {log_path}")
    for f in figs:
        f.update(run_env)
    doc["figures"] += figs
    doc["errors"] = [e for e in doc.get("errors", []) if not e.startswith("no ncu figures parsed")]
    doc["ncu_note"] = (f"stall figures added after the run by tools/w4a16_ws_ncu_figures.py from the run's log "
                       f"({Path(log_path).name}), its '==PROF==' progress lines dropped (the run's parser took them "
                       f"for kernels and recorded 'no ncu figures parsed')")
    results.validate(doc)
    Path(res_path).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(figs)} figures added to {res_path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
