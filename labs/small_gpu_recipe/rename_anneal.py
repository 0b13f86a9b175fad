"""Does the rename probe's short fine-tune help as a step after pretraining, judged as a pretraining arm is judged?
The probe (``rename_probe.py``) fine-tuned the committed small-gpu for 60 steps and asked one rename wording on 24
tasks; in the pretraining stream the same wordings did nothing (``compositional_arms.json``). Here the same
fine-tune (its draws, steps and rate) is followed by the whole evaluation (``open_eval.evaluate`` on the validation
and test splits, the weights rounded to fp16 and computed in fp32, as training saves and judges them), beside the
committed model's own counts under the same judgement (``cpu_eval.json``). The control (``--wordings library``)
fine-tunes on the train split's own rename wordings; ``compositional_mixed`` gives a quarter of each batch to the
other copy kinds, which the renames-only fine-tune lets slip.

Writes rename_anneal.json (one arm a run) beside this file. Usage (the compositional arm took 26 minutes on two
cores shared with the test suite; rename_anneal.json records each arm's seconds):
    python labs/small_gpu_recipe/rename_anneal.py --wordings compositional
    python labs/small_gpu_recipe/rename_anneal.py --wordings library
    python labs/small_gpu_recipe/rename_anneal.py --wordings compositional_mixed
"""
import argparse
import json
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import open_eval

from cpu_eval import KEYS
from rename_probe import BATCH, LR, PROBE_SEED, STEPS, fine_tune, wordings

HERE = Path(__file__).parent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordings", choices=("compositional", "library", "compositional_mixed"), required=True,
                    help="the rename requests fine-tuned on: clause-separated names, the train split's own, or "
                         "clause-separated with other copy kinds in a quarter of the batch")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    torch.manual_seed(PROBE_SEED)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    losses = fine_tune(model, tok, a.wordings, wordings())
    model.half().float()                  # judged as a training run's saved fp16 checkpoint is
    after = {split: open_eval.evaluate(model, tok, split, "cpu") for split in ("validation", "test")}
    before = json.loads((HERE / "cpu_eval.json").read_text())
    rows = {f"{s}/{k}": dict(before=before["counts"][f"{s}/{k}"]["cpu"], after=[after[s][k]["k"], after[s][k]["n"]])
            for s in after for k in KEYS}
    by_kind = {s: dict(before={k: v["k"] for k, v in before["copy_by_kind"][s].items()},
                       after={k: v["k"] for k, v in after[s]["copy_by_kind"].items()}) for s in after}
    arm = dict(results.lab_record(f"python labs/small_gpu_recipe/rename_anneal.py --wordings {a.wordings}"),
               seconds=round(time.time() - t, 1),
               settings=dict(wordings=a.wordings, steps=STEPS, batch=BATCH, lr=LR, seed=PROBE_SEED, rename_share=0.5,
                             other_copy_share=0.25 if a.wordings == "compositional_mixed" else 0.0,
                             model="small-gpu", dtype="float32, weights rounded to fp16 before judging",
                             decoding="greedy", device="cpu"),
               validation_score=dict(before=open_eval.score(_rates(before, "validation")),
                                     after=open_eval.score(after["validation"])),
               counts=rows, copy_by_kind=by_kind, losses=losses)
    out = HERE / "rename_anneal.json"
    doc = json.loads(out.read_text()) if out.is_file() else {"arms": {}}
    doc["arms"][a.wordings] = arm
    results.write_json(out, doc)
    for k, v in rows.items():
        print(f"{k:40s} before {v['before']}  after {v['after']}")
    print(f"validation score {arm['validation_score']}; copy by kind {by_kind['validation']}")
    print("->", out)


def _rates(doc: dict, split: str) -> dict:
    return {k: {"rate": doc["counts"][f"{split}/{k}"]["cpu"][0] / doc["counts"][f"{split}/{k}"]["cpu"][1]} for k in KEYS}


if __name__ == "__main__":
    main()
