"""Where small-gpu's copy tasks fail, by length: numbered lines and renames (the two kinds below 60% on test),
then bullets (the next lowest) and plain copies of the same lines, generated fresh from the validation split at fixed line counts, the base model
greedy on the CPU (fp32).

For each line count: exact matches; the first line that is wrong; for renames, how many output lines still hold
the old name; for bullets and numbered lines, which word of that line is first wrong (0: the line's first word,
the one whose tokens change when a prefix is put before it). The training copy tasks have 2-20 lines
(``procedural.copy_size``) and the evaluation sets 10-22 (``data/build_open.py``). Writes copy_failures.json
(``--kinds number,rename``, the default) or copy_failures_<kinds>.json beside this file. Usage (a few minutes a
kind on two cores): python labs/small_gpu_recipe/copy_failures.py [--kinds bullets]
"""
import argparse
import json
import random
import re
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import procedural, schema
from t4lib.models.open_eval import _generate

LINES = (6, 10, 14, 18, 22, 26)
PER_SIZE = 8
SEED = 7


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)


def first_wrong_line(out: str, ref: str) -> int | None:
    """1-based index of the first output line that differs from the reference (None: all equal)."""
    o, r = out.strip().split("\n"), ref.strip().split("\n")
    for i, want in enumerate(r):
        if i >= len(o) or o[i] != want:
            return i + 1
    return None if len(o) == len(r) else len(r) + 1


def first_wrong_word(out: str, ref: str, line: int | None, prefixed: bool) -> int | None:
    """0-based index of the first wrong word of a wrong line, after its "- " or "N. " prefix where ``prefixed``
    (None: a line missing)."""
    o, r = out.strip().split("\n"), ref.strip().split("\n")
    if line is None or line > min(len(o), len(r)):
        return None
    ow, rw = (x[line - 1].split()[int(prefixed):] for x in (o, r))
    return next((i for i, (a, b) in enumerate(zip(ow, rw)) if a != b), min(len(ow), len(rw)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="number,rename", help="comma-separated copy kinds, of number, rename, bullets, copy")
    a = ap.parse_args(argv)
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in ("number", "rename", "bullets", "copy"):
            ap.error(f"--kinds: {k!r} is not one of number, rename, bullets, copy")
    torch.set_num_threads(2)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    r = random.Random(SEED)
    rows = {}
    for kind in kinds:
        for n in LINES:
            docs = [procedural.render_copy(r, "validation", kind, size=(n, n)) for _ in range(PER_SIZE)]
            prompts = [schema.copy_prompt(d.instruction, d.input) for d in docs]
            lens = [len(tok(d.output, add_special_tokens=False)["input_ids"]) + 16 for d in docs]
            outs = _generate(model, tok, prompts, lens, PER_SIZE, "cpu")
            cell = dict(exact=sum(o.strip() == d.output.strip() for o, d in zip(outs, docs)), n=len(docs),
                        output_tokens=[x - 16 for x in lens])
            cell["first_wrong_line"] = [first_wrong_line(o, d.output) for o, d in zip(outs, docs)]
            if kind in ("number", "bullets", "copy"):
                cell["first_wrong_word"] = [first_wrong_word(o, d.output, w, kind != "copy")
                                            for o, d, w in zip(outs, docs, cell["first_wrong_line"])]
            if kind == "rename":   # the old name: the word of the input that the reference output no longer has
                olds = [(set(words(d.input)) - set(words(d.output))).pop() for d in docs]
                cell["output_lines_with_old_name"] = [sum(old in words(ln) for ln in o.split("\n"))
                                                      for o, old in zip(outs, olds)]
                cell["input_lines_with_old_name"] = [sum(old in words(ln) for ln in d.input.split("\n"))
                                                     for d, old in zip(docs, olds)]
            rows.setdefault(kind, {})[n] = cell
            print(kind, n, f"{cell['exact']}/{cell['n']}", cell["first_wrong_line"], flush=True)
    default = a.kinds == "number,rename"
    out = Path(__file__).with_name("copy_failures.json" if default else f"copy_failures_{'_'.join(kinds)}.json")
    doc = dict(results.lab_record("python labs/small_gpu_recipe/copy_failures.py"
                                  + ("" if default else f" --kinds {a.kinds}")), seconds=round(time.time() - t, 1),
               settings=dict(lines=LINES, per_size=PER_SIZE, seed=SEED, split="validation", model="small-gpu",
                             dtype="float32", decoding="greedy"), by_kind=rows)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print("->", out)


if __name__ == "__main__":
    main()
