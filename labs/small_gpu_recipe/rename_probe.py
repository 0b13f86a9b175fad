"""Can small-gpu learn to read which name is old and which is new, rather than a fixed "{old} to {new}" pattern
(``rename_wording.json``)? A short probe on the CPU before any pretraining run: the committed model is
fine-tuned briefly on train-split rename tasks asked for in compositional wordings, where a clause names the old
name and a later clause gives the new one through a pronoun ("The code uses {old}; call it {new}."), half of the
batch plain pretraining documents. None of these wordings uses a word of the held-out construction ("wherever",
"appears", "write", "instead"). Then the held-out wording is asked again on rename_wording.py's validation tasks.

The control (``--wordings library``) is the same fine-tune with the train split's own rename wordings, so that a
gain from fine-tuning on renames at all is not taken for a gain from the wordings. A transfer here says the stream
should carry such wordings; no transfer from a short fine-tune says little either way. Writes
rename_probe.json (both arms, one run each) beside this file. Usage (about ten minutes an arm on two cores):
    python labs/small_gpu_recipe/rename_probe.py --wordings compositional
    python labs/small_gpu_recipe/rename_probe.py --wordings library
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

from rename_wording import LINES, N_TASKS, SEED, WORDINGS, ask, draw_tasks, old_and_new

STEPS, BATCH, LR, MAX_TOKENS, PROBE_SEED = 60, 8, 1e-4, 512, 5
HELD_OUT_WORDS = {"wherever", "appears", "write", "instead"}
SUBJECT = ["{old} (is used|shows up|occurs) in (the code|several lines|the text)",
           "(The code|The text|This code) (uses|has|mentions) {old}",
           "(Look at|Find|Take) (each|every) {old}",
           "As for {old}", "There is a name {old} in (the code|the text)"]
LINK = [", and ", "; ", ". ", ": "]
PREDICATE = ["(change|turn|rename) it (to|into) {new}", "(call|name) it {new}", "it should (be|read) {new}",
             "use {new} for it", "put {new} in its place", "(replace|swap) it (with|for) {new}"]


def expand(pattern: str) -> list[str]:
    return [grammar._tidy(t) for t, _, _ in grammar._expand(grammar._parse(pattern)[0])]


def wordings() -> list[str]:
    out = []
    for s in (x for p in SUBJECT for x in expand(p)):
        for link in LINK:
            for p in (x for q in PREDICATE for x in expand(q)):
                p = (p[0].upper() if link == ". " else p[0].lower()) + p[1:]
                out.append(f"{s}{link}{p}.")
    bad = [w for w in out if HELD_OUT_WORDS & set(w.lower().replace(".", " ").replace(",", " ").split())]
    assert not bad, bad[:3]
    return out


def batch_loss(model, tok, pairs, prompt_weight: float = 0.0):
    ids, mask = [], []
    for p, c in pairs:
        a = tok(p, add_special_tokens=False)["input_ids"]
        b = tok(c, add_special_tokens=False)["input_ids"]
        x = (a + b)[:MAX_TOKENS]
        ids.append(x)
        mask.append(([prompt_weight] * len(a) + [1] * len(b))[:MAX_TOKENS])
    n = max(map(len, ids))
    pad = tok.pad_token_id
    dev = next(model.parameters()).device
    x = torch.tensor([s + [pad] * (n - len(s)) for s in ids], device=dev)
    m = torch.tensor([s + [0] * (n - len(s)) for s in mask], dtype=torch.float32, device=dev)
    lengths = torch.tensor([len(s) for s in ids], device=dev)
    logits = model(input_ids=x, attention_mask=(torch.arange(n, device=dev)[None] < lengths[:, None]).long()).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
    return (loss * m[:, 1:].reshape(-1)).sum() / m[:, 1:].sum()


def train(model, tok, draw, steps: int = STEPS, lr: float = LR, decay: bool = False,
          prompt_weight: float = 0.0) -> list[float]:
    """``steps`` AdamW steps, each on the (prompt, completion) pairs ``draw()`` returns. ``decay``: the rate falls
    linearly to zero over the steps (an anneal) instead of staying at ``lr``. ``prompt_weight``: the loss weight of
    prompt tokens (0: the completion alone; pretraining weighs them 0.25). Runs where the model's weights are.
    Returns the batch losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, (lambda s: 1 - s / steps) if decay else (lambda s: 1.0))
    model.train()
    losses = []
    for step in range(steps):
        loss = batch_loss(model, tok, draw(), prompt_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(round(loss.item(), 4))
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    model.eval()
    return losses


def fine_tune(model, tok, arm: str, frames: list[str], steps: int = STEPS, lr: float = LR, batch: int = BATCH,
              seed: int = PROBE_SEED, decay: bool = False, prompt_weight: float = 0.0) -> list[float]:
    """The probe's fine-tune (``train``): batches of ``batch``, half train-split renames of 4-8 lines asked in
    ``frames`` (``arm`` "compositional") or in the library's own wording ("library"), half pretraining documents.
    Both arms draw the same tasks, frames and documents. "compositional_mixed" asks its renames as
    "compositional" does and gives every other document's place to another kind of copy task (4-14 lines), so
    that the renames are not the only copy practice ("library_mixed": the same with the library's wording);
    "documents" draws pretraining documents alone."""
    other_kinds = [k for k in procedural.COPY_KINDS if k != "rename"]
    tr = random.Random(seed)

    def draw():
        pairs = []
        for i in range(batch):
            if arm == "documents":                       # continued pretraining alone: no task practised
                _, p, c = procedural.document(tr, "train")
                pairs.append((p, c))
            elif i % 2 == 0:
                d = procedural.render_copy(tr, "train", "rename", size=(4, 8))
                old, new = old_and_new(d)
                request = tr.choice(frames).format(old=old, new=new)   # drawn in both arms: the same tasks and documents
                request = d.instruction if arm.startswith("library") else request
                pairs.append((schema.copy_prompt(request, d.input), d.output + schema.EOS))
            elif arm.endswith("_mixed") and i % 4 == 3:
                kind = tr.choices(other_kinds, weights=[procedural.COPY_WEIGHTS[k] for k in other_kinds])[0]
                d = procedural.render_copy(tr, "train", kind, size=(4, 14))
                pairs.append((schema.copy_prompt(d.instruction, d.input), d.output + schema.EOS))
            else:
                _, p, c = procedural.document(tr, "train")
                pairs.append((p, c))
        return pairs
    return train(model, tok, draw, steps, lr, decay, prompt_weight)


def judge(model, tok, tasks, labels):
    out = {}
    for label in labels:
        outs = ask(model, tok, tasks, WORDINGS[label])
        out[label] = sum(o.strip() == d.output.strip() for o, (d, _, _) in zip(outs, tasks))
        print(f"  {label:40s} exact {out[label]}/{len(tasks)}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordings", choices=("compositional", "library"), required=True,
                    help="the rename requests fine-tuned on: clause-separated names, or the train split's own")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    torch.manual_seed(PROBE_SEED)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32)
    tasks = draw_tasks()             # rename_wording.py's tasks
    labels = ["held-out, as evaluated", "'write' -> 'rename it to'", "training wording (control)"]
    frames = wordings()
    print(f"{len(frames)} training wordings, e.g. {frames[0]!r}, {frames[-1]!r}")
    losses = fine_tune(model, tok, a.wordings, frames)
    print("after the probe's fine-tune:")
    after = judge(model, tok, tasks, labels)
    before = json.loads(Path(__file__).with_name("rename_wording.json").read_text())["by_wording"]
    arm = dict(results.lab_record(f"python labs/small_gpu_recipe/rename_probe.py --wordings {a.wordings}"),
               seconds=round(time.time() - t, 1),
               settings=dict(wordings=a.wordings, steps=STEPS, batch=BATCH, lr=LR, max_tokens=MAX_TOKENS, seed=PROBE_SEED,
                             rename_share=0.5, n_training_wordings=len(frames), eval_tasks=N_TASKS, eval_seed=SEED,
                             eval_lines=LINES, split="validation", model="small-gpu", dtype="float32",
                             decoding="greedy"),
               exact_before={k: before[k]["exact"] for k in labels}, exact_after=after, losses=losses,
               example_wordings=frames[::max(1, len(frames) // 8)] if a.wordings == "compositional" else None)
    out = Path(__file__).with_name("rename_probe.json")
    doc = json.loads(out.read_text()) if out.is_file() else {"arms": {}}
    doc["arms"][a.wordings] = arm
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print("->", out)


if __name__ == "__main__":
    main()
