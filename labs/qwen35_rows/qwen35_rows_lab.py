"""Where does a qwen35 verify forward of R rows (MTP drafts) spend its time at the 27B widths? Not part of the
library. Graph replays (t4lib.benchmarks.qwen35.graph_us, 20 each, L2 warm) of one middle Gated DeltaNet block
and one middle attention block of an 8-layer model of the 27B widths (random weights in the 27B quant mix), of
their mixers and every GEMV, and of the head, for R = 1..4 rows:

    python labs/qwen35_rows/qwen35_rows_lab.py fp16 [--out DIR]   # blocks, mixers, GEMVs, head; fp16 activations
    python labs/qwen35_rows/qwen35_rows_lab.py int8 [--out DIR]   # the GEMVs and the head with int8 activations

Writes qwen35_rows_lab_<part>.json (a lab record) to DIR (default: $OUT or .).
"""
import argparse
import json
import os
import sys

import torch

from t4lib.core import results
from t4lib.benchmarks.qwen35 import config_27b, graph_us, random_model
from t4lib.models.qwen35.model import StepFunctions


NOTE = ("microseconds per graph replay (20 replays, L2 warm) at R = 1..4 rows, 27B widths, random weights in the 27B "
        "quant mix; keys: <kind>/R<rows>/<part>, <kind>/R<rows>/gemv/<tensor>/<N>x<K>/t<ggml type>, "
        "int8/R<rows>/<tensor>/<N>x<K>/t<ggml type>")


def timed(out: dict, key: str, fn) -> None:
    try:
        us = graph_us(fn, 20)
    except Exception as e:   # one part failing leaves the others
        print(key, "FAILED", type(e).__name__, str(e)[:200], flush=True)
        return
    out[key] = us
    print(f"{key:60s} {us:9.1f} us", flush=True)


def gemvs(out: dict, head: str, lins, R: int) -> None:
    for lin in lins:
        xi = torch.randn(R, lin.K, device="cuda", dtype=torch.float16)
        timed(out, f"{head}/{lin.name}/{lin.N}x{lin.K}/t{lin.type}", lambda: lin(xi))


def fp16_part(out: dict) -> None:
    cfg = config_27b(8)   # layers 2..5 are middle layers (the common formats)
    model = random_model(cfg, mtp=True)
    fns = StepFunctions(compiled=True)
    for b in model.blocks:
        b.mixer.allocate(1, 128, torch.float16, "cuda")
        if b.kind == "deltanet":
            b.mixer.allocate_snapshots(4)
    for kind, li in (("deltanet", 2), ("attention", 3)):
        blk = model.blocks[li]
        for R in (1, 2, 3, 4):
            h = torch.randn(R, cfg.hidden, device="cuda")
            x = torch.randn(R, cfg.hidden, device="cuda", dtype=torch.float16)
            pos = torch.arange(40, 40 + R, device="cuda")
            timed(out, f"{kind}/R{R}/block", lambda: blk(h, pos, torch.float16, fns))
            timed(out, f"{kind}/R{R}/mixer", lambda: blk.mixer(x, pos, fns))
            gemvs(out, f"{kind}/R{R}/gemv", blk.linears(), R)
    for R in (1, 2, 3, 4):
        xi = torch.randn(R, cfg.hidden, device="cuda", dtype=torch.float16)
        timed(out, f"head/R{R}", lambda: model.head(xi))


def int8_part(out: dict) -> None:
    model = random_model(config_27b(8), mtp=False, activations="int8")
    lins = [lin for lin in model.blocks[2].linears() if lin.activations == "int8"] + [model.head]
    for R in (1, 2, 3, 4):
        gemvs(out, f"int8/R{R}", lins, R)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=("fp16", "int8"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    torch.manual_seed(0)
    us: dict = {}
    (fp16_part if a.part == "fp16" else int8_part)(us)
    doc = results.lab_record(f"python labs/qwen35_rows/qwen35_rows_lab.py {a.part}")
    doc["note"] = NOTE
    doc["us"] = us
    path = os.path.join(a.out, f"qwen35_rows_lab_{a.part}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
