"""Input-grounded tasks whose answers mostly copy spans of the prompt: the
workload where prompt-lookup and other drafters of speculative decoding pay
off.

Four kinds: ``edit_record`` (change one field of a record), ``reformat_list``
(comma list -> numbered / bulleted / one-per-line), ``fix_code`` (set one
constant in a Python snippet), ``extract_fields`` (pull fields of a sentence
into JSON). Train and held-out are drawn with different seeds; no held-out
prompt occurs in train (tested).

Plain rendering: ``t4lib.models.schema.copy_prompt(instruction, input)`` then
``output``.

Usage: ``python data/build_copy.py [--out DIR]``.
"""

from __future__ import annotations

import json
import random

try:
    from _common import NAMES, out_dir, write_jsonl
except ImportError:
    from data._common import NAMES, out_dir, write_jsonl

SEED = 2024
N_TRAIN = 3000
N_HELDOUT = 300

LAST = ["Lopez", "Chen", "Novak", "Silva", "Okafor", "Berg", "Rossi", "Kim", "Haddad", "Weber",
        "Costa", "Ivanova", "Mendes", "Tanaka", "Dubois", "Larsen"]
CITIES = ["Porto", "Lima", "Oslo", "Quito", "Riga", "Accra", "Hanoi", "Perth", "Dakar", "Turin",
          "Bergen", "Leeds", "Cusco", "Graz", "Malmo", "Tunis"]
WORDS = ["apple", "river", "pencil", "garden", "window", "tiger", "pebble", "rocket", "violin",
         "basket", "ladder", "mirror", "saddle", "pepper", "harbor", "meadow", "button", "castle",
         "jacket", "parrot", "lemon", "marble", "noodle", "pillow", "ribbon", "turnip"]
VARS = ["MAX_RETRIES", "TIMEOUT", "BATCH_SIZE", "PORT", "WORKERS", "BUFFER", "LIMIT", "DEPTH",
        "STEPS", "WIDTH", "HEIGHT", "CACHE_SIZE"]
FUNCS = ["load", "parse", "fetch", "store", "clean", "merge", "split", "render"]


def _record(rng):
    first, last = rng.choice(NAMES), rng.choice(LAST)
    return {"name": f"{first} {last}", "city": rng.choice(CITIES), "age": str(rng.randint(18, 80)),
            "id": str(rng.randint(1000, 9999))}


def edit_record(rng):
    rec = _record(rng)
    field = rng.choice(sorted(rec))
    if field == "name":
        new = f"{rng.choice(NAMES)} {rng.choice(LAST)}"
    elif field == "city":
        new = rng.choice([c for c in CITIES if c != rec["city"]])
    elif field == "age":
        new = str(rng.randint(18, 80))
    else:
        new = str(rng.randint(1000, 9999))
    line = "; ".join(f"{k}={v}" for k, v in rec.items())
    rec2 = dict(rec, **{field: new})
    out = "; ".join(f"{k}={v}" for k, v in rec2.items())
    return f"change {field} to {new}.", line, out


def reformat_list(rng):
    items = rng.sample(WORDS, rng.randint(3, 6))
    style = rng.choice(["numbered", "bulleted", "lines"])
    src = ", ".join(items)
    if style == "numbered":
        return "write the items as a numbered list.", src, "\n".join(f"{i + 1}. {w}" for i, w in enumerate(items))
    if style == "bulleted":
        return "write the items as a bulleted list.", src, "\n".join(f"- {w}" for w in items)
    return "write one item per line.", src, "\n".join(items)


def fix_code(rng):
    names = rng.sample(VARS, rng.randint(2, 4))
    vals = {n: rng.randint(1, 512) for n in names}
    fn = rng.choice(FUNCS)
    target = rng.choice(names)
    new = rng.choice([x for x in range(1, 513) if x != vals[target]])
    body = lambda vv: "\n".join(f"{n} = {vv[n]}" for n in names) + \
        f"\n\ndef {fn}(x):\n    return x * {names[0]}"
    return f"set {target} to {new}.", body(vals), body(dict(vals, **{target: new}))


def extract_fields(rng):
    oid, first, last = rng.randint(1000, 9999), rng.choice(NAMES), rng.choice(LAST)
    city = rng.choice(CITIES)
    day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    text = f"Order {oid} for {first} {last} was shipped to {city} on {day}."
    fields = rng.choice([("order", "customer", "city"), ("customer", "date"), ("order", "city", "date")])
    vals = {"order": str(oid), "customer": f"{first} {last}", "city": city, "date": day}
    out = json.dumps({f: vals[f] for f in fields})
    return f"extract {', '.join(fields)} as JSON.", text, out


KINDS = {"edit_record": edit_record, "reformat_list": reformat_list, "fix_code": fix_code,
         "extract_fields": extract_fields}


def build_split(split, n, seed, exclude=()):
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    out, seen = [], set(exclude)
    i = 0
    while len(out) < n:
        kind = kinds[i % len(kinds)]
        i += 1
        instr, inp, outp = KINDS[kind](rng)
        key = instr + "\n" + inp
        if key in seen:
            continue
        seen.add(key)
        out.append(dict(id=f"copy-{split}-{len(out):05d}", split=split, kind=kind,
                        instruction=instr, input=inp, output=outp))
    return out


def build(out=None) -> list[dict]:
    out = out_dir() if out is None else out
    train = build_split("train", N_TRAIN, SEED)
    held = build_split("heldout", N_HELDOUT, SEED + 1,
                       exclude={r["instruction"] + "\n" + r["input"] for r in train})
    return [dict(write_jsonl(out / "copy_train.jsonl", train), seed=SEED),
            dict(write_jsonl(out / "copy_heldout.jsonl", held), seed=SEED + 1)]


if __name__ == "__main__":
    for entry in build():
        print(entry)
