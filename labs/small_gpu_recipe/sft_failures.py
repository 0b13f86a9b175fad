"""Which operation small-gpu's SFT picks where it gets the simplest structures wrong (validation split).

A short SFT on the CPU (the gpu recipe's traces and learning rate, 120 steps at batch 16: half an epoch, not
the recipe's three) is enough to show the failure: for each of add, add_add, add_sub and mul, the first
operation of the <compute> block, right and wrong, and the first few wrong outputs with their questions.
Writes sft_failures.json beside this file. Usage (about 8 minutes on two cores):
    python labs/small_gpu_recipe/sft_failures.py
With ``--method lora --lr 1e-3`` the same run trains a LoRA adapter instead (does a constrained update keep the
base model's reading of held-out wording?) and writes sft_failures_lora_0.001.json.
"""
import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path

import torch

from t4lib.core import results
from t4lib.models import corpus
from t4lib.train import sft

STRUCTURES = ("add", "add_add", "add_sub", "mul")
STEPS, BATCH, LR = 120, 16, 3e-4


def first_operation(output: str) -> str:
    """The operator of the first line of <compute> ('?' when there is none)."""
    m = re.search(r"<compute>\s*([^\n]*)", output)
    op = re.search(r"\d\s*([-+*/])\s*\d", m.group(1)) if m else None
    return op.group(1) if op else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("full", "lora"), default="full")
    ap.add_argument("--lr", type=float, default=LR)
    args = ap.parse_args()
    torch.set_num_threads(2)
    settings = sft.SFTSettings(method=args.method, max_steps=STEPS, batch_size=BATCH, lr=args.lr, logging_steps=20)
    t = time.time()
    rec = sft.run("small-gpu", base="fp32", settings=settings, device="cpu", output_dir="/tmp/t4lib_sft_failures",
                  eval_sets=("open_validation_1_2",), train_records=corpus.load_jsonl("open_traces.jsonl"),
                  keep_rows=True, progress=True)
    after = rec["after"]["open_validation_1_2"]
    questions = {r["id"]: r for r in corpus.load_jsonl("open_math_validation.jsonl")}
    ops, wrong = {}, {}
    for r in after["rows"]:
        if r["structure"] in STRUCTURES:
            key = f"{'right' if r['correct'] else 'wrong'} {first_operation(r['output'])}"
            ops.setdefault(r["structure"], Counter())[key] += 1
            if not r["correct"] and len(wrong.setdefault(r["structure"], [])) < 4:
                q = questions[r["id"]]
                wrong[r["structure"]].append(dict(question=q["question"], answer=q["answer"], output=r["output"]))
    default = (args.method, args.lr) == ("full", LR)
    out = Path(__file__).with_name("sft_failures.json" if default else f"sft_failures_{args.method}_{args.lr:g}.json")
    command = "python labs/small_gpu_recipe/sft_failures.py" + ("" if default else f" --method {args.method} --lr {args.lr:g}")
    doc = dict(results.lab_record(command), seconds=round(time.time() - t, 1),
               settings=dict(method=args.method, steps=STEPS, batch=BATCH, lr=args.lr, traces="open_traces.jsonl",
                             split="validation"),
               grounded_pass=after["overall"]["grounded"],
               grounded_by_structure={s: v["grounded"] for s, v in after["by_structure"].items()},
               first_operation={s: dict(c) for s, c in ops.items()}, wrong_examples=wrong)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["first_operation"]), f"grounded {after['overall']['grounded']['rate']:.3f}", f"-> {out}")


if __name__ == "__main__":
    main()
