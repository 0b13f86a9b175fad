"""Does more line-prefix practice teach small-gpu to re-spell a line's first word? Bullets fail where a prefix
changes the first word's tokens (``copy_failures_bullets.json``). A short probe on the CPU before any pretraining
run: the committed model is fine-tuned briefly on train-split bulleted and numbered tasks, half of the batch plain
pretraining documents, then asked the validation bullets of ``copy_failures.py --kinds bullets`` again (the same
texts, 6-18 lines).

The control (``--tasks plain``) is the same fine-tune on plain copies of the same texts, so that a gain from
fine-tuning on copies at all is not taken for a gain from the prefixes. Writes prefix_probe.json (both arms, one
run each) beside this file. Usage (about ten minutes an arm on two cores):
    python labs/small_gpu_recipe/prefix_probe.py --tasks prefixed
    python labs/small_gpu_recipe/prefix_probe.py --tasks plain
"""
import argparse
import json
import random
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import grammar, procedural, schema
from t4lib.models.open_eval import _generate

from copy_failures import PER_SIZE, SEED, first_wrong_line, first_wrong_word
from rename_probe import BATCH, LR, MAX_TOKENS, PROBE_SEED, STEPS, train

LINES = (6, 10, 14, 18)
PSEUDO_WORDS = 0.4         # the preset's share of made-up words in copy tasks


def draw_tasks() -> list:
    """copy_failures.py's validation bullets at 6-18 lines: the same seed and order, so the same texts."""
    r = random.Random(SEED)
    return [procedural.render_copy(r, "validation", "bullets", size=(n, n)) for n in LINES for _ in range(PER_SIZE)]


def judge(model, tok, tasks) -> dict:
    prompts = [schema.copy_prompt(d.instruction, d.input) for d in tasks]
    lens = [len(tok(d.output, add_special_tokens=False)["input_ids"]) + 16 for d in tasks]
    outs = _generate(model, tok, prompts, lens, PER_SIZE, "cpu")
    lines = [first_wrong_line(o, d.output) for o, d in zip(outs, tasks)]
    word = [first_wrong_word(o, d.output, w, True) for o, d, w in zip(outs, tasks, lines)]
    return dict(exact=sum(w is None for w in lines), n=len(tasks), first_wrong_line=lines, first_wrong_word=word,
                failures_at_first_word=sum(w == 0 for w in word))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", choices=("prefixed", "plain"), required=True,
                    help="fine-tune on bulleted and numbered copies, or on plain copies of the same texts")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    torch.manual_seed(PROBE_SEED)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    tasks = draw_tasks()
    before = judge(model, tok, tasks)
    print(f"before: exact {before['exact']}/{before['n']}, at the first word {before['failures_at_first_word']}", flush=True)
    tr = random.Random(PROBE_SEED)

    def draw():
        pairs = []
        for i in range(BATCH):
            if i % 2 == 0:
                d = procedural.render_copy(tr, "train", "bullets" if i % 4 == 0 else "number", size=(4, 14),
                                           pseudo_words=PSEUDO_WORDS)
                plain = grammar.sample(tr, "copy:copy", "train")    # drawn in both arms: the same texts
                if a.tasks == "prefixed":
                    pairs.append((schema.copy_prompt(d.instruction, d.input), d.output + schema.EOS))
                else:
                    pairs.append((schema.copy_prompt(plain, d.input), d.input + schema.EOS))
            else:
                _, p, c = procedural.document(tr, "train")
                pairs.append((p, c))
        return pairs
    losses = train(model, tok, draw)
    after = judge(model, tok, tasks)
    print(f"after: exact {after['exact']}/{after['n']}, at the first word {after['failures_at_first_word']}")
    arm = dict(results.lab_record(f"python labs/small_gpu_recipe/prefix_probe.py --tasks {a.tasks}"),
               seconds=round(time.time() - t, 1),
               settings=dict(tasks=a.tasks, steps=STEPS, batch=BATCH, lr=LR, max_tokens=MAX_TOKENS, seed=PROBE_SEED,
                             copy_share=0.5, train_lines=[4, 14], pseudo_words=PSEUDO_WORDS, eval_lines=LINES,
                             eval_per_size=PER_SIZE, eval_seed=SEED, split="validation", model="small-gpu",
                             dtype="float32", decoding="greedy"),
               before=before, after=after, losses=losses)
    out = Path(__file__).with_name("prefix_probe.json")
    doc = json.loads(out.read_text()) if out.is_file() else {"arms": {}}
    doc["arms"][a.tasks] = arm
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print("->", out)


if __name__ == "__main__":
    main()
