"""small-gpu on the enlarged validation copy set (``data/open_copy_validation.jsonl``: 30 tasks per kind, as test
has, of which the first 10 per kind were the whole set before), the base model greedy on the CPU (fp32), scored by
``open_eval.eval_copy`` (outputs of 100+ tokens, exact match of the whole output): the whole set, and the long
outputs among its first 70 records (the set as it was).

The question: does the larger set give a validation copy figure close enough to test's to choose a pretraining
recipe on? Writes copy_validation.json beside this file. Usage (a few minutes on two cores):
python labs/small_gpu_recipe/copy_validation.py
"""
import json
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import corpus, open_eval

FIRST = 70   # records the validation file held before it was enlarged


def main() -> None:
    torch.set_num_threads(2)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    model.eval()
    first = corpus.load_jsonl("open_copy_validation.jsonl")[:FIRST]
    n_first = sum(len(tok(r["output"], add_special_tokens=False)["input_ids"]) >= 100 for r in first)
    whole = open_eval.eval_copy(model, tok, "validation", "cpu")
    old = open_eval.eval_copy(model, tok, "validation", "cpu", n=n_first)   # eval_copy keeps file order
    doc = dict(results.lab_record("python labs/small_gpu_recipe/copy_validation.py"), seconds=round(time.time() - t, 1),
               settings=dict(model="small-gpu", dtype="float32", decoding="greedy", device="cpu",
                             first_records=FIRST), whole=whole, first_70=old)
    out = Path(__file__).with_name("copy_validation.json")
    results.atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("whole", "first_70")}, indent=1))
    print("->", out)


if __name__ == "__main__":
    main()
