"""small-gpu on the enlarged validation copy set (``data/open_copy_validation.jsonl``: 30 tasks per kind, as test
has, of which the first 10 per kind were the whole set before), the base model greedy on the CPU (fp32), scored
as ``open_eval.eval_copy`` scores (outputs of 100+ tokens, exact match of the whole output).

The question: does the larger set give a validation copy figure close enough to test's to choose a pretraining
recipe on? Writes copy_validation.json beside this file. Usage (about 20 minutes on two cores):
python labs/small_gpu_recipe/copy_validation.py
"""
import json
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import corpus
from t4lib.models.open_eval import _generate

MIN_TOKENS = 100
FIRST = 70   # records the validation file held before it was enlarged


def rate(oks: list[bool]) -> dict:
    return dict(rate=sum(oks) / len(oks), n=len(oks), exact=sum(oks)) if oks else dict(rate=None, n=0, exact=0)


def main() -> None:
    torch.set_num_threads(2)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    model.eval()
    recs = corpus.load_jsonl("open_copy_validation.jsonl")
    keep = [(i, r, L) for i, r in enumerate(recs)
            if (L := len(tok(r["output"], add_special_tokens=False)["input_ids"])) >= MIN_TOKENS]
    ok = {}
    for start in range(0, len(keep), 16):
        part = keep[start:start + 16]
        outs = _generate(model, tok, [corpus.copy_doc(r)[0] for _, r, _ in part], [L + 16 for *_, L in part],
                         16, "cpu")
        for (i, r, _), o in zip(part, outs):
            ok[i] = o.strip() == r["output"].strip()
        print(f"{start + len(part)}/{len(keep)} exact so far {sum(ok.values())}", flush=True)
    by_kind = {}
    for i, r, _ in keep:
        by_kind.setdefault(r["kind"], []).append(ok[i])
    doc = dict(results.lab_record("python labs/small_gpu_recipe/copy_validation.py"), seconds=round(time.time() - t, 1),
               settings=dict(model="small-gpu", dtype="float32", decoding="greedy", device="cpu",
                             min_output_tokens=MIN_TOKENS, records=len(recs)),
               all=rate([ok[i] for i, *_ in keep]),
               first_70=rate([ok[i] for i, *_ in keep if i < FIRST]),
               added=rate([ok[i] for i, *_ in keep if i >= FIRST]),
               by_kind={k: rate(v) for k, v in sorted(by_kind.items())})
    out = Path(__file__).with_name("copy_validation.json")
    results.atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("all", "first_70", "added", "by_kind")}, indent=1))
    print("->", out)


if __name__ == "__main__":
    main()
