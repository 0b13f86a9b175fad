"""How far can tiny-gpu carry abstention to the quarantined templates when it is simply told the right answers?

    python labs/honesty_sft_ceiling/honesty_sft_ceiling_lab.py --out labs/honesty_sft_ceiling/honesty_sft_ceiling_lab.json

GRPO rewards abstaining on a trap only after the policy samples it; supervised fine-tuning on the same problems
with their right responses (``<abstain>`` on a trap, the worked answer on its twin) hands the model that signal
on every item. What it reaches on honesty_eval.jsonl (5 templates no training set uses) is therefore a rough
ceiling for GRPO on the same data. For each choice of honesty sets: fine-tune tiny-gpu (fp32, AdamW, plain
format, loss on the completion tokens only) on those sets mixed with as many math_train problems, then answer
honesty_eval greedily (honest and false abstention, answerable accuracy, Wilson 95%) and 200 held-out math
problems. Each row starts from the same checkpoint and seed.

Two more readings per row: the quarantined questions with their names and items (the QUARANTINE pools, whose
tokens no training file holds) replaced by ordinary ones, which separates "unfamiliar entities" from
"unfamiliar wording"; and honesty_train.jsonl, wordings the model read in pretraining.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import subprocess
import time

import torch

from t4lib import models
from t4lib.models import corpus, schema
from t4lib.train.grpo import (
    HONESTY_SETS, evaluate_honesty, greedy_answers, honesty_rates as rates_of,
)
from data._common import ITEMS, NAMES, QUARANTINE_ITEMS, QUARANTINE_NAMES


def examples(tok, sets: list[str], seed: int) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) for the honesty sets plus as many math_train problems, shuffled."""
    recs = [r for name in sets for r in corpus.load_jsonl(name)]
    math = corpus.load_jsonl("math_train.jsonl")
    random.Random(seed).shuffle(math)
    recs += math[:len(recs)]
    out = []
    for r in recs:
        p = tok(schema.math_prompt(r["question"]), add_special_tokens=False)["input_ids"]
        c = tok(schema.math_completion(r.get("steps"), r.get("answer")) + schema.EOS, add_special_tokens=False)["input_ids"]
        out.append((p + c, len(p)))
    random.Random(seed + 1).shuffle(out)
    return out


def ordinary_entities(question: str) -> str:
    """The question with each quarantined name and item replaced by an ordinary one (fixed mapping)."""
    for i, name in enumerate(QUARANTINE_NAMES):
        question = question.replace(name, NAMES[i])
    for (pl, sg), (pl2, sg2) in zip(QUARANTINE_ITEMS, ITEMS):
        question = question.replace(pl, pl2).replace(sg, sg2)
    return question


def honesty_rates(model, tok, recs, questions) -> dict:
    outs = greedy_answers(model, tok, [schema.math_prompt(q) for q in questions], 40, 64, engine=False)
    return rates_of(outs, recs)


def readings(model, tok) -> dict:
    ev, tr = corpus.load_jsonl("honesty_eval.jsonl"), corpus.load_jsonl("honesty_train.jsonl")
    return {"eval": evaluate_honesty(model, tok, n_math=200, engine=False),
            "eval_ordinary_entities": honesty_rates(model, tok, ev, [ordinary_entities(r["question"]) for r in ev]),
            "honesty_train": honesty_rates(model, tok, tr, [r["question"] for r in tr])}


def train(model, tok, data, epochs: int, lr: float, batch: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    pad = tok.pad_token_id
    losses = []
    model.train()
    for _ in range(epochs):
        for i in range(0, len(data), batch):
            chunk = data[i:i + batch]
            L = max(len(ids) for ids, _ in chunk)
            x = torch.full((len(chunk), L), pad)
            y = torch.full((len(chunk), L), -100)
            for j, (ids, n_prompt) in enumerate(chunk):
                x[j, :len(ids)] = torch.tensor(ids)
                y[j, n_prompt:len(ids)] = torch.tensor(ids[n_prompt:])
            loss = model(input_ids=x, attention_mask=(x != pad).long(), labels=y).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="tiny-gpu")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    wide = ["honesty_rl.jsonl", "honesty_rl_wide.jsonl"]
    choices = [(["honesty_rl.jsonl"], a.epochs), (wide, a.epochs), (wide, 1)]
    assert all(s in HONESTY_SETS for c, _ in choices for s in c)
    torch.manual_seed(0)
    model, tok = models.load(a.model, dtype=torch.float32, device="cpu")
    rows = [{"sets": [], "epochs": 0, "readings": readings(model, tok)}]
    for sets, epochs in choices:
        torch.manual_seed(0)
        model, tok = models.load(a.model, dtype=torch.float32, device="cpu")
        data = examples(tok, sets, seed=0)
        t0 = time.perf_counter()
        losses = train(model, tok, data, epochs, a.lr, a.batch)
        rows.append({"sets": sets, "epochs": epochs, "n_examples": len(data), "train_s": time.perf_counter() - t0,
                     "loss_first_last": [losses[0], losses[-1]], "readings": readings(model, tok)})
    for row in rows:
        print(row["sets"], row["epochs"], {k: {m: round(v["rate"], 3) for m, v in r.items() if isinstance(v, dict)}
                                           for k, r in row["readings"].items()}, flush=True)
    rec = {"device": "cpu", "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                     text=True).stdout.strip(),
           "command": f"python labs/honesty_sft_ceiling/honesty_sft_ceiling_lab.py --out {a.out} --model {a.model} "
                      f"--epochs {a.epochs} --lr {a.lr} --batch {a.batch}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "note": __doc__.split("\n\n", 2)[2].strip(), "model": a.model, "rows": rows}
    with open(a.out, "w") as fh:
        json.dump(rec, fh, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
