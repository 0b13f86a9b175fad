"""Which words of the failing rename request does small-gpu not read? Every validation rename worded
"Wherever {old} appears, write {new} instead." (the held-out construction) is copied back unchanged
(``copy_failures.json``), and twelve more training frames did not change that (``stream_arms.json``). Here the same
fresh validation tasks (same code, same two names) are asked for in that wording and in edits of it, one change
each, beside a training wording as the control. The committed model, greedy, fp32, on the CPU.

For each wording: exact matches, and how many tasks keep the old name on every line that had it (copied unchanged).
Writes rename_wording.json beside this file. Usage (a few minutes on two cores):
    python labs/small_gpu_recipe/rename_wording.py
"""
import json
import random
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import procedural, schema
from t4lib.models.open_eval import _generate

from copy_failures import words

N_TASKS, LINES, SEED = 24, (10, 14), 11
WORDINGS = {
    "held-out, as evaluated": "Wherever {old} appears, write {new} instead.",
    "without 'instead'": "Wherever {old} appears, write {new}.",
    "'write' -> 'rename it to'": "Wherever {old} appears, rename it to {new}.",
    "'write' -> 'replace it with'": "Wherever {old} appears, replace it with {new}.",
    "clauses swapped": "Write {new} instead wherever {old} appears.",
    "leading clause without the name": "Wherever it appears, rename {old} to {new}.",
    "leading phrase": "In every line, rename {old} to {new}.",
    "training verb first, then 'wherever'": "Rename {old} to {new} wherever it appears.",
    "training wording (control)": "Rename {old} to {new} everywhere.",
}


def old_and_new(d) -> tuple[str, str]:
    """A rename task's two names: the word only its input has, and the word only its output has."""
    return (set(words(d.input)) - set(words(d.output))).pop(), (set(words(d.output)) - set(words(d.input))).pop()


def draw_tasks() -> list:
    """The fresh validation rename tasks every wording is asked on, with their two names."""
    r = random.Random(SEED)
    docs = [procedural.render_copy(r, "validation", "rename", size=LINES) for _ in range(N_TASKS)]
    return [(d, *old_and_new(d)) for d in docs]


def ask(model, tok, tasks, frame: str) -> list[str]:
    """The model's greedy outputs for each task asked in ``frame``."""
    prompts = [schema.copy_prompt(frame.format(old=old, new=new), d.input) for d, old, new in tasks]
    lens = [len(tok(d.output, add_special_tokens=False)["input_ids"]) + 16 for d, _, _ in tasks]
    return _generate(model, tok, prompts, lens, 8, "cpu")


def main() -> None:
    torch.set_num_threads(2)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    tasks = draw_tasks()
    rows = {}
    for label, frame in WORDINGS.items():
        outs = ask(model, tok, tasks, frame)
        exact = sum(o.strip() == d.output.strip() for o, (d, _, _) in zip(outs, tasks))
        unchanged = sum(sum(old in words(ln) for ln in o.split("\n")) >= sum(old in words(ln) for ln in d.input.split("\n"))
                        for o, (d, old, _) in zip(outs, tasks))
        rows[label] = dict(instruction=frame, exact=exact, old_name_kept_everywhere=unchanged, n=len(tasks))
        print(f"{label:32s} exact {exact}/{len(tasks)}  old name kept on every line {unchanged}/{len(tasks)}", flush=True)
    doc = dict(results.lab_record("python labs/small_gpu_recipe/rename_wording.py"), seconds=round(time.time() - t, 1),
               settings=dict(n_tasks=N_TASKS, lines=LINES, seed=SEED, split="validation", model="small-gpu",
                             dtype="float32", decoding="greedy"), by_wording=rows)
    out = Path(__file__).with_name("rename_wording.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print("->", out)


if __name__ == "__main__":
    main()
