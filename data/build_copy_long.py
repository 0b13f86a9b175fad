"""A held-out set of long input-grounded tasks: outputs of 100+ tokens that mostly copy the input.

The workload where a drafter that copies from the prompt (prompt lookup) should pay most: the answer is
the input again with a small change or a new layout. Two kinds, both from templates that occur nowhere
in ``copy_train.jsonl`` (other instructions, other input layouts; tested):

* ``fix_code_long``: a short Python module (four functions drawn from a pool, random names and
  constants) with one bug injected; the instruction names the function and the fix; the output is the
  whole module, fixed.
* ``reformat_records``: six to nine records, one JSON object per line; the output re-lays them out
  (CSV with a header row, a Markdown table, or ``key: value`` blocks).

Held out only (no training split). Plain rendering: ``t4lib.models.schema.copy_prompt(instruction,
input)`` then ``output``.

Usage: ``python data/build_copy_long.py [--out DIR]`` (``build_all.py`` runs it).
"""

from __future__ import annotations

import json
import random

try:
    from _common import NAMES, out_dir, write_jsonl
    from build_copy import CITIES, LAST, WORDS
except ImportError:
    from data._common import NAMES, out_dir, write_jsonl
    from data.build_copy import CITIES, LAST, WORDS

SEED = 3031
N_HELDOUT = 80

# Function templates: ({placeholders} filled per sample, the lines, the bugs that can be injected).
# A bug: (line index, the correct text, the buggy text, what the instruction says to fix).
FUNCS = [
    (["def {f}(values):",
      "    total = 0",
      "    for v in values:",
      "        if v > {a}:",
      "            total = total + v",
      "    return total"],
     [(3, "v > {a}", "v < {a}", "it must keep values greater than {a}"),
      (4, "total + v", "total - v", "it must add each kept value")]),
    (["def {f}(items, rate):",
      "    out = []",
      "    for i in range(len(items)):",
      "        out.append(items[i] * rate + {a})",
      "    return out"],
     [(2, "range(len(items))", "range(len(items) - 1)", "the loop must visit every item"),
      (3, "* rate", "/ rate", "it must multiply by rate")]),
    (["def {f}(text):",
      "    words = text.split()",
      "    count = 0",
      "    for w in words:",
      "        if len(w) >= {a}:",
      "            count += 1",
      "    return count"],
     [(4, "len(w) >= {a}", "len(w) > {a}", "words of exactly {a} letters must count"),
      (5, "count += 1", "count -= 1", "it must count up")]),
    (["def {f}(rows, key):",
      "    best = None",
      "    for row in rows:",
      "        if best is None or row[key] > best[key]:",
      "            best = row",
      "    return best"],
     [(3, "row[key] > best[key]", "row[key] < best[key]", "it must return the row with the largest key"),
      (4, "best = row", "best = rows[0]", "it must keep the current row")]),
    (["def {f}(n):",
      "    result = 1",
      "    for i in range(1, n + 1):",
      "        result = result * i % {a}",
      "    return result"],
     [(2, "range(1, n + 1)", "range(1, n)", "the loop must include n"),
      (3, "result * i", "result + i", "it must multiply")]),
    (["def {f}(a, b):",
      "    if b == 0:",
      "        return {a}",
      "    return a // b"],
     [(1, "b == 0", "b != 0", "it must guard against division by zero"),
      (3, "a // b", "a // a", "it must divide a by b")]),
]
VERBS = ["sum", "scale", "count", "pick", "reduce", "check", "score", "merge"]
NOUNS = ["prices", "orders", "words", "rows", "totals", "items", "scores", "steps"]


def fix_code_long(rng):
    picks = rng.sample(range(len(FUNCS)), 4)
    names = rng.sample([f"{v}_{n}" for v in VERBS for n in NOUNS], 4)
    lines_ok, lines_bad = [], []
    buggy = rng.randrange(4)
    for j, (fi, name) in enumerate(zip(picks, names)):
        lines, bugs = FUNCS[fi]
        a = rng.randint(2, 99)
        body = [ln.format(f=name, a=a) for ln in lines]
        good = list(body)
        if j == buggy:
            idx, right, wrong, why = bugs[rng.randrange(len(bugs))]
            right, wrong, why = right.format(a=a), wrong.format(a=a), why.format(a=a)
            assert right in body[idx]
            body[idx] = body[idx].replace(right, wrong, 1)
            instruction = f"fix the bug in {name}: {why}. Return the whole module."
        if j:
            lines_ok.append("")
            lines_bad.append("")
        lines_ok += good
        lines_bad += body
    return instruction, "\n".join(lines_bad), "\n".join(lines_ok)


def _records(rng, n):
    recs = []
    for _ in range(n):
        recs.append({"name": f"{rng.choice(NAMES)} {rng.choice(LAST)}", "city": rng.choice(CITIES),
                     "item": rng.choice(WORDS), "qty": rng.randint(1, 40), "code": f"R{rng.randint(100, 999)}"})
    return recs


def reformat_records(rng):
    recs = _records(rng, rng.randint(6, 9))
    keys = list(recs[0])
    src = "\n".join(json.dumps(r) for r in recs)
    style = rng.choice(["csv", "markdown", "blocks"])
    if style == "csv":
        out = "\n".join([",".join(keys)] + [",".join(str(r[k]) for k in keys) for r in recs])
        return "rewrite the records as CSV with a header row.", src, out
    if style == "markdown":
        rows = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        rows += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in recs]
        return "rewrite the records as a Markdown table.", src, "\n".join(rows)
    blocks = ["\n".join(f"{k}: {r[k]}" for k in keys) for r in recs]
    return "rewrite each record as key: value lines, one blank line between records.", src, "\n\n".join(blocks)


KINDS = {"fix_code_long": fix_code_long, "reformat_records": reformat_records}


def build_heldout(n=N_HELDOUT, seed=SEED):
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    out, seen, i = [], set(), 0
    while len(out) < n:
        kind = kinds[i % len(kinds)]
        i += 1
        instr, inp, outp = KINDS[kind](rng)
        if instr + "\n" + inp in seen:
            continue
        seen.add(instr + "\n" + inp)
        out.append(dict(id=f"copy-long-{len(out):05d}", split="heldout", kind=kind,
                        instruction=instr, input=inp, output=outp))
    return out


def build(out=None) -> list[dict]:
    out = out_dir() if out is None else out
    return [dict(write_jsonl(out / "copy_long_heldout.jsonl", build_heldout()), seed=SEED)]


if __name__ == "__main__":
    for entry in build():
        print(entry)
