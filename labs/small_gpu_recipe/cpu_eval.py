"""Does judging a pretraining arm on the CPU give the GPU's counts? The committed small-gpu evaluated as training
evaluates it (``open_eval.evaluate``: the validation and test splits, greedy, the saved fp16 weights computed in
fp32), here on the CPU, against the counts its training record holds from the GPU it was trained on. Where they
agree, a device call can stop after training and send back the weights, and the arm is judged here.

Writes cpu_eval.json beside this file. Usage (about six and a half minutes on two cores):
python labs/small_gpu_recipe/cpu_eval.py
"""
import json
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import corpus, open_eval, tiny

KEYS = ("math_1step_exact", "math_2step_exact", "math_3_4step_exact", "copy_exact_match", "trap_abstention")


def main() -> None:
    torch.set_num_threads(2)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    cpu = {split: open_eval.evaluate(model, tok, split, "cpu") for split in ("validation", "test")}
    record = json.loads((tiny.checkpoint_dir("small-gpu") / "training_record.json").read_text())
    rows = {}
    for split in ("validation", "test"):
        for key in KEYS:
            gpu, here = record["eval"][split][key], cpu[split][key]
            rows[f"{split}/{key}"] = dict(cpu=[here["k"], here["n"]], gpu=[gpu["k"], gpu["n"]])
    # the validation copy set was enlarged after training: the record's GPU count covers its first 55 long outputs
    doc = dict(results.lab_record("python labs/small_gpu_recipe/cpu_eval.py"), seconds=round(time.time() - t, 1),
               settings=dict(model="small-gpu", dtype="float32", decoding="greedy", device="cpu"),
               gpu_device=record["device"], gpu_provenance=record["provenance"],
               counts=rows, copy_by_kind={s: cpu[s]["copy_by_kind"] for s in cpu},
               tokenizer_sha256=corpus.sha256("tokenizer_open/tokenizer.json"))
    out = Path(__file__).with_name("cpu_eval.json")
    results.write_json(out, doc)
    for k, v in rows.items():
        print(f"{k:40s} cpu {v['cpu']}  gpu {v['gpu']}")
    print("->", out)


if __name__ == "__main__":
    main()
