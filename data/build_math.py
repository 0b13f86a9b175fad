"""Math word problems with exact, SymPy-verified answers.

Each problem comes from a *structure* (the arithmetic: which operations on
which quantities, 1 to 4 steps) and a *template* (one English phrasing of that
structure). Train and held-out sets use disjoint templates of the same
structures, so held-out accuracy measures whether a model learned the
operations rather than the wording.

Every record carries the step chain (``"12 + 5 = 17"``), and its answer is
checked three ways with SymPy: each step is an exact identity, the last step
equals an independent closed form (or ``sympy.solve`` for linear equations),
and the answer is a reduced rational.

Usage: ``python data/build_math.py [--out DIR]`` (writes math_train.jsonl,
math_heldout.jsonl).
"""

from __future__ import annotations

import random

import sympy

try:
    from _common import ITEMS, NAMES, out_dir, write_jsonl
except ImportError:  # imported as data.build_math
    from data._common import ITEMS, NAMES, out_dir, write_jsonl

SEED = 1234
N_TRAIN = 8000
N_HELDOUT = 800

R = sympy.Rational


def _pct_base(rng, pct, lo, hi):
    unit = 100 // sympy.gcd(pct, 100)
    return unit * rng.randint(max(1, -(-lo // unit)), max(1, hi // unit))


# Each structure: sample(rng) -> vars; steps: expression templates (t1, t2, ...
# name earlier results); check(v): independent SymPy value; plan: one line per
# step; verify: lines using {ans}; roles: what each given quantity is.
STRUCTURES = {
    "add": dict(
        sample=lambda r: dict(a=r.randint(3, 60), b=r.randint(2, 40)),
        steps=["{a} + {b}"], check=lambda v: R(v["a"]) + v["b"],
        plan=["Add the amount added to the starting amount."],
        verify=["{ans} - {b} = {a}"], roles=dict(a="starting amount", b="amount added")),
    "sub": dict(
        sample=lambda r: (lambda a: dict(a=a, b=r.randint(2, a - 3)))(r.randint(15, 90)),
        steps=["{a} - {b}"], check=lambda v: R(v["a"]) - v["b"],
        plan=["Subtract the amount removed from the starting amount."],
        verify=["{ans} + {b} = {a}"], roles=dict(a="starting amount", b="amount removed")),
    "mul": dict(
        sample=lambda r: dict(a=r.randint(2, 12), b=r.randint(2, 15)),
        steps=["{a} * {b}"], check=lambda v: R(v["a"]) * v["b"],
        plan=["Multiply the number of groups by the amount in each group."],
        verify=["{ans} / {b} = {a}"], roles=dict(a="number of groups", b="amount per group")),
    "div": dict(
        sample=lambda r: (lambda b, q: dict(a=b * q, b=b))(r.randint(2, 9), r.randint(2, 12)),
        steps=["{a} / {b}"], check=lambda v: R(v["a"], v["b"]),
        plan=["Divide the total by the number of equal parts."],
        verify=["{ans} * {b} = {a}"], roles=dict(a="total", b="number of equal parts")),
    "pct_of": dict(
        sample=lambda r: (lambda p: dict(pct=p, a=_pct_base(r, p, 20, 200)))(r.choice([10, 20, 25, 50, 75])),
        steps=["{a} * {pct} / 100"], check=lambda v: R(v["a"] * v["pct"], 100),
        plan=["Take the percentage of the whole: whole times percent over 100."],
        verify=["{ans} * 100 / {pct} = {a}"], roles=dict(a="whole", pct="percent")),
    "rate_dist": dict(
        sample=lambda r: dict(s=r.randint(3, 60), t=r.randint(2, 9)),
        steps=["{s} * {t}"], check=lambda v: R(v["s"]) * v["t"],
        plan=["Multiply the rate by the time."],
        verify=["{ans} / {t} = {s}"], roles=dict(s="rate", t="time")),
    "rate_time": dict(
        sample=lambda r: (lambda s, t: dict(s=s, d=s * t))(r.randint(2, 15), r.randint(2, 12)),
        steps=["{d} / {s}"], check=lambda v: R(v["d"], v["s"]),
        plan=["Divide the total amount by the rate."],
        verify=["{ans} * {s} = {d}"], roles=dict(d="total amount", s="rate")),
    "frac_add": dict(
        sample=lambda r: (lambda den: (lambda p: dict(den=den, p=p, q=r.randint(1, den - 1 - p)))(
            r.randint(1, den - 2)))(r.randint(3, 12)),
        steps=["{p}/{den} + {q}/{den}"], check=lambda v: R(v["p"], v["den"]) + R(v["q"], v["den"]),
        plan=["Add the two fractions with the same denominator."],
        verify=["{ans} - {q}/{den} = {pq}"], roles=dict(p="first part (numerator)", q="second part (numerator)",
                                                         den="denominator")),
    "frac_of": dict(
        sample=lambda r: (lambda den: dict(den=den, p=r.randint(1, den - 1), a=den * r.randint(2, 12)))(
            r.choice([2, 3, 4, 5, 8, 10])),
        steps=["{a} * {p} / {den}"], check=lambda v: R(v["a"] * v["p"], v["den"]),
        plan=["Take the fraction of the whole: whole times numerator over denominator."],
        verify=["{ans} * {den} / {p} = {a}"], roles=dict(a="whole", p="numerator", den="denominator")),
    "lin": dict(
        sample=lambda r: (lambda x, a, b: dict(a=a, b=b, c=a * x + b))(
            r.randint(2, 15), r.randint(2, 9), r.randint(1, 30)),
        steps=["{c} - {b}", "{t1} / {a}"],
        check=lambda v: sympy.solve(sympy.Eq(v["a"] * sympy.Symbol("x") + v["b"], v["c"]))[0],
        plan=["Subtract the added amount from the result.", "Divide by the multiplier."],
        verify=["{a} * {ans} + {b} = {c}"], roles=dict(a="multiplier", b="amount added", c="result")),
    "add_mul": dict(
        sample=lambda r: dict(a=r.randint(2, 9), b=r.randint(2, 9), c=r.randint(2, 12)),
        steps=["{a} + {b}", "{t1} * {c}"], check=lambda v: R(v["a"] + v["b"]) * v["c"],
        plan=["Add the two group counts.", "Multiply by the amount per group."],
        verify=["{ans} / {c} - {b} = {a}"], roles=dict(a="first count", b="second count", c="amount each")),
    "mul_sub": dict(
        sample=lambda r: (lambda a, b: dict(a=a, b=b, c=r.randint(1, a * b - 1)))(r.randint(2, 9), r.randint(3, 12)),
        steps=["{a} * {b}", "{t1} - {c}"], check=lambda v: R(v["a"]) * v["b"] - v["c"],
        plan=["Multiply to get the total.", "Subtract the amount taken away."],
        verify=["({ans} + {c}) / {b} = {a}"], roles=dict(a="number of groups", b="amount per group",
                                                         c="amount taken away")),
    "pct_off": dict(
        sample=lambda r: (lambda p: dict(pct=p, a=_pct_base(r, p, 20, 200)))(r.choice([10, 20, 25, 50])),
        steps=["{a} * {pct} / 100", "{a} - {t1}"], check=lambda v: R(v["a"]) * (1 - R(v["pct"], 100)),
        plan=["Find the percentage taken off.", "Subtract it from the original amount."],
        verify=["{ans} + {a} * {pct} / 100 = {a}"], roles=dict(a="original amount", pct="percent taken off")),
    "sub_div": dict(
        sample=lambda r: (lambda b, c, q: dict(a=b + c * q, b=b, c=c))(r.randint(1, 20), r.randint(2, 8), r.randint(2, 10)),
        steps=["{a} - {b}", "{t1} / {c}"], check=lambda v: R(v["a"] - v["b"], v["c"]),
        plan=["Subtract the amount kept aside.", "Divide the rest into equal parts."],
        verify=["{ans} * {c} + {b} = {a}"], roles=dict(a="total", b="amount set aside", c="number of parts")),
    "two_products": dict(
        sample=lambda r: dict(a=r.randint(2, 9), b=r.randint(2, 12), c=r.randint(2, 9), d=r.randint(2, 12)),
        steps=["{a} * {b}", "{c} * {d}", "{t1} + {t2}"], check=lambda v: R(v["a"] * v["b"] + v["c"] * v["d"]),
        plan=["Compute the first product.", "Compute the second product.", "Add the two products."],
        verify=["{ans} - {t2} = {t1}"], roles=dict(a="first count", b="first size", c="second count",
                                                    d="second size")),
    "shop_change": dict(
        sample=lambda r: (lambda a, b, c, d: dict(a=a, b=b, c=c, d=d, e=a * b + c * d + r.randint(1, 40)))(
            r.randint(2, 6), r.randint(2, 9), r.randint(2, 6), r.randint(2, 9)),
        steps=["{a} * {b}", "{c} * {d}", "{t1} + {t2}", "{e} - {t3}"],
        check=lambda v: R(v["e"] - v["a"] * v["b"] - v["c"] * v["d"]),
        plan=["Cost or amount of the first kind.", "Cost or amount of the second kind.", "Add them.",
              "Subtract the sum from the starting amount."],
        verify=["{e} - {ans} - {t2} = {t1}"], roles=dict(a="first count", b="first price", c="second count",
                                                          d="second price", e="starting amount")),
}

# Template phrasings: (structure, text). Train and held-out lists share no template.
TRAIN_TEMPLATES = {
    "add": [
        "{n1} has {a} {items}. {n2} gives {n1} {b} more {items}. How many {items} does {n1} have now?",
        "There are {a} {items} in a box. {n1} puts {b} more {items} in the box. How many {items} are in the box now?",
        "{n1} collected {a} {items} on Monday and {b} {items} on Tuesday. How many {items} did {n1} collect in total?"],
    "sub": [
        "{n1} has {a} {items}. {n1} gives {b} {items} to {n2}. How many {items} does {n1} have left?",
        "A shelf holds {a} {items}. {n1} takes {b} {items} away. How many {items} are left on the shelf?",
        "{n1} had {a} {items} and lost {b} of them. How many {items} are left?"],
    "mul": [
        "{n1} has {a} bags with {b} {items} in each bag. How many {items} does {n1} have in total?",
        "There are {a} rows of {items} with {b} {items} in each row. How many {items} are there in total?",
        "{n1} buys {a} packs of {items}. Each pack has {b} {items}. How many {items} does {n1} buy in total?"],
    "div": [
        "{n1} shares {a} {items} equally among {b} friends. How many {items} does each friend get?",
        "{a} {items} are packed into bags of {b} {items} each. How many bags are filled?",
        "{n1} has {a} {items} and puts them into {b} equal groups. How many {items} are in each group?"],
    "pct_of": [
        "{n1} has {a} {items}. {pct}% of them are red. How many red {items} does {n1} have?",
        "A school has {a} students and {pct}% of them walk to school. How many students walk to school?",
        "What is {pct}% of {a}?"],
    "rate_dist": [
        "A car travels at {s} km per hour for {t} hours. How many km does it travel?",
        "{n1} walks {s} km each day for {t} days. How many km does {n1} walk in total?",
        "A machine makes {s} {items} per hour. How many {items} does it make in {t} hours?"],
    "rate_time": [
        "A car travels {d} km at {s} km per hour. How many hours does the trip take?",
        "{n1} reads {s} pages per day. How many days does {n1} need to read {d} pages?",
        "A pump fills {s} liters per minute. How many minutes does it take to fill {d} liters?"],
    "frac_add": [
        "{n1} eats {p}/{den} of a pizza and {n2} eats {q}/{den} of it. What fraction of the pizza did they eat together?",
        "{n1} paints {p}/{den} of a fence in the morning and {q}/{den} of it in the afternoon. What fraction of the fence is painted?",
        "A tank is {p}/{den} full. {n1} adds {q}/{den} of a tank of water. What fraction of the tank is full now?"],
    "frac_of": [
        "{n1} has {a} {items} and gives away {p}/{den} of them. How many {items} does {n1} give away?",
        "A class has {a} students. {p}/{den} of the students play chess. How many students play chess?",
        "What is {p}/{den} of {a}?"],
    "lin": [
        "{n1} thinks of a number, multiplies it by {a} and adds {b}. The result is {c}. What is the number?",
        "Solve for x: {a}x + {b} = {c}. What is x?",
        "{n1} buys {a} equal boxes of {items} and {b} loose {items}, {c} {items} in all. How many {items} are in each box?"],
    "add_mul": [
        "{n1} buys {a} red packs and {b} blue packs of {items}. Each pack has {c} {items}. How many {items} does {n1} buy?",
        "There are {a} boys and {b} girls. Each child gets {c} {items}. How many {items} are given out?",
        "{n1} works {a} hours on Monday and {b} hours on Tuesday and earns {c} dollars per hour. How many dollars does {n1} earn?"],
    "mul_sub": [
        "{n1} has {a} boxes with {b} {items} in each box and gives {c} {items} to {n2}. How many {items} does {n1} have left?",
        "A baker makes {a} trays of {b} cookies and sells {c} cookies. How many cookies are left?",
        "{n1} buys {a} pens at {b} dollars each and pays with a coupon worth {c} dollars. How many dollars does {n1} pay?"],
    "pct_off": [
        "A jacket costs {a} dollars. It is on sale for {pct}% off. What is the sale price in dollars?",
        "{n1} has {a} dollars and spends {pct}% of it. How many dollars does {n1} have left?",
        "A tank holds {a} liters. {pct}% of the water leaks out. How many liters are left?"],
    "sub_div": [
        "{n1} has {a} {items}, keeps {b} and shares the rest equally among {c} friends. How many {items} does each friend get?",
        "There are {a} seats. {b} seats are broken and the rest are split into {c} equal rows. How many seats are in each row?",
        "{n1} picks {a} {items}, throws away {b} bad ones and packs the rest into {c} equal bags. How many {items} are in each bag?"],
    "two_products": [
        "{n1} buys {a} notebooks at {b} dollars each and {c} pens at {d} dollars each. How many dollars does {n1} spend?",
        "A farm has {a} pens with {b} hens each and {c} pens with {d} ducks each. How many birds are on the farm?",
        "{n1} runs {a} km a day for {b} days and then {c} km a day for {d} days. How many km does {n1} run?"],
    "shop_change": [
        "{n1} buys {a} apples at {b} dollars each and {c} pears at {d} dollars each and pays with {e} dollars. How much change does {n1} get?",
        "{n1} has {e} dollars, buys {a} tickets at {b} dollars each and {c} drinks at {d} dollars each. How many dollars are left?",
        "A box holds {e} {items}. {n1} takes {a} bags of {b} {items} and {n2} takes {c} bags of {d} {items}. How many {items} are left in the box?"],
}

HELDOUT_TEMPLATES = {
    "add": ["{n1} had {a} {items} and then found {b} more. How many {items} does {n1} have in total now?"],
    "sub": ["There were {a} {items} in a bag. {n2} removed {b} {items} from the bag. How many {items} are left in the bag?"],
    "mul": ["{n2} fills {a} boxes and puts {b} {items} in each box. How many {items} are in the boxes in total?"],
    "div": ["{n2} splits {a} {items} equally into {b} boxes. How many {items} go in each box?"],
    "pct_of": ["A farm has {a} animals, and {pct}% of the animals are sheep. How many sheep are on the farm?"],
    "rate_dist": ["A train moves at {s} km per hour. How many km does it cover in {t} hours?"],
    "rate_time": ["A cyclist rides {d} km at a speed of {s} km per hour. How many hours does the ride take?"],
    "frac_add": ["{n2} walked {p}/{den} of a mile and then ran {q}/{den} of a mile. What fraction of a mile did {n2} cover in total?"],
    "frac_of": ["A garden has {a} flowers and {p}/{den} of them are yellow. How many flowers are yellow?"],
    "lin": ["If {a} times a number plus {b} equals {c}, what is the number?"],
    "add_mul": ["A team has {a} old and {b} new players, and every player gets {c} {items}. How many {items} does the team get?"],
    "mul_sub": ["{n2} packs {a} crates with {b} {items} each, then {c} {items} break. How many {items} are still whole?"],
    "pct_off": ["A bike is priced at {a} dollars, and the shop gives a {pct}% discount. How many dollars does the bike cost after the discount?"],
    "sub_div": ["{n2} bakes {a} muffins, eats {b}, and divides the others equally among {c} plates. How many muffins are on each plate?"],
    "two_products": ["A hall has {a} rows of {b} chairs and another {c} rows of {d} chairs. How many chairs are in the hall?"],
    "shop_change": ["{n2} starts with {e} dollars, buys {a} books at {b} dollars each and {c} maps at {d} dollars each. How many dollars remain?"],
}


def template_ids(split: str) -> dict[str, tuple[str, str]]:
    """``{template_id: (structure, text)}`` for ``split`` in {"train", "heldout"}."""
    src = {"train": TRAIN_TEMPLATES, "heldout": HELDOUT_TEMPLATES}[split]
    return {f"{split}/{s}/{i}": (s, t) for s in STRUCTURES for i, t in enumerate(src[s])}


def _fmt(x) -> str:
    return str(sympy.Rational(x))


def solve(structure: str, v: dict) -> dict:
    """Run the step chain with exact arithmetic; return steps, answer, verify lines.
    Raises AssertionError if any step disagrees with SymPy or the closed form."""
    st = STRUCTURES[structure]
    env = {k: _fmt(x) for k, x in v.items()}
    steps, vals = [], []
    for i, tmpl in enumerate(st["steps"]):
        expr = tmpl.format(**env)
        val = sympy.sympify(expr, rational=True)
        assert val.is_Rational, (structure, expr)
        steps.append(f"{expr} = {_fmt(val)}")
        vals.append(val)
        env[f"t{i + 1}"] = _fmt(val)
    ans = vals[-1]
    check = sympy.Rational(st["check"](v))
    assert ans == check, (structure, v, ans, check)
    assert ans > 0, (structure, v, ans)
    env["ans"] = _fmt(ans)
    if structure == "frac_add":
        env["pq"] = _fmt(sympy.Rational(v["p"], v["den"]))
    verify = [ln.format(**env) for ln in st["verify"]]
    for ln in verify:  # each verify line must be a true identity
        lhs, rhs = ln.split("=")
        assert sympy.sympify(lhs, rational=True) == sympy.sympify(rhs, rational=True), (structure, ln)
    return dict(steps=steps, answer=_fmt(ans), verify=verify, values=[_fmt(x) for x in vals])


def make_problem(rng: random.Random, tid: str, structure: str, text: str, names=NAMES, items=ITEMS) -> dict:
    v = STRUCTURES[structure]["sample"](rng)
    n1, n2 = rng.sample(names, 2)
    items_pl, item_sg = rng.choice(items)
    q = text.format(n1=n1, n2=n2, items=items_pl, item=item_sg, **v)
    sol = solve(structure, v)
    return dict(template=tid, structure=structure, n_steps=len(sol["steps"]), question=q,
                answer=sol["answer"], steps=sol["steps"], verify=sol["verify"],
                values={k: int(x) for k, x in v.items()})


def unique_problems(split: str, seed: int, templates: dict[str, tuple[str, str]] | None = None):
    """Problems from ``split``'s templates (or ``templates``, ``{template_id: (structure, text)}``), cycling
    through them in id order, each question text at most once (a generator; deterministic for a seed)."""
    rng = random.Random(seed)
    tids = sorted((templates or template_ids(split)).items())
    seen, i = set(), 0
    while True:
        tid, (structure, text) = tids[i % len(tids)]
        i += 1
        rec = make_problem(rng, tid, structure, text)
        if rec["question"] not in seen:
            seen.add(rec["question"])
            yield tid, structure, rec


def build_split(split: str, n: int, seed: int) -> list[dict]:
    out = []
    for _, _, rec in unique_problems(split, seed):
        if len(out) == n:
            break
        rec["id"] = f"math-{split}-{len(out):05d}"
        rec["split"] = split
        out.append(rec)
    return out


def build(out=None) -> list[dict]:
    out = out_dir() if out is None else out
    return [
        dict(write_jsonl(out / "math_train.jsonl", build_split("train", N_TRAIN, SEED)), seed=SEED),
        dict(write_jsonl(out / "math_heldout.jsonl", build_split("heldout", N_HELDOUT, SEED + 1)), seed=SEED + 1),
    ]


if __name__ == "__main__":
    for entry in build():
        print(entry)
