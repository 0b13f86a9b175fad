"""Reasoning traces in the five-tag schema of ``t4lib.models.schema``:

    <understand>Given: ... Find: ...</understand>
    <plan> 1. ... (one numbered step per computation) </plan>
    <compute> "<expression> = <value>", one line per plan step </compute>
    <verify> "<expression> = <value>" lines that re-derive a given quantity
             from the answer </verify>
    <answer> integer or reduced fraction </answer>

Problems come from the TRAIN templates of ``build_math`` (fresh samples, own
seed), so held-out math stays untouched. Every trace is certified before it is
written: ``schema.certify_trace`` re-checks each compute and verify line with
SymPy and compares the answer with the record's independent answer.

``traces_wide.jsonl`` holds more traces over more phrasings: the train templates plus
``WIDE_TEMPLATES``, phrasings written for SFT only (not in the pretraining corpus, and
sharing no run of six words with a held-out template, tested), so a small model meets each
structure in eight wordings instead of three.

Usage: ``python data/build_traces.py [--out DIR]`` (writes traces.jsonl, traces_wide.jsonl).
"""

from __future__ import annotations

import re

try:
    from _common import out_dir, write_jsonl
    from build_math import STRUCTURES, template_ids, unique_problems
except ImportError:
    from data._common import out_dir, write_jsonl
    from data.build_math import STRUCTURES, template_ids, unique_problems

from t4lib.models.schema import certify_trace, render_trace

SEED = 777
N_TRACES = 800
WIDE_SEED = 778
N_WIDE = 1600

# SFT-only phrasings of each structure (same variables as build_math's templates; some name the
# quantities in another order than the computation uses them).
WIDE_TEMPLATES = {
    "add": [
        "{n1} starts the day with {a} {items} and gets {b} more from {n2}. How many {items} does {n1} end up with?",
        "A jar holds {a} {items}. Later {b} {items} are added to the jar. How many {items} does the jar hold now?",
        "{n2} gave {n1} {b} {items}. Before that, {n1} owned {a} {items}. How many {items} does {n1} own after the gift?",
        "What is {a} plus {b}?",
        "A library had {a} {items} on loan and lent out {b} more this week. How many {items} are on loan now?"],
    "sub": [
        "{n1} baked {a} {items} and {n2} ate {b} of them. How many {items} remain?",
        "A store had {a} {items} in stock and sold {b}. How many {items} are still in stock?",
        "{n1} spent {b} of the {a} dollars in a wallet. How many dollars are still in the wallet?",
        "What is {a} minus {b}?",
        "A parking lot held {a} cars. Then {b} cars drove away. How many cars are still parked?"],
    "mul": [
        "Each of {a} tables has {b} {items} on it. How many {items} are on the tables?",
        "{n1} saves {b} dollars a week for {a} weeks. How many dollars does {n1} save?",
        "A crate holds {b} {items}. How many {items} do {a} crates hold?",
        "What is {a} times {b}?",
        "{n2} plants {a} rows of trees with {b} trees in every row. How many trees does {n2} plant?"],
    "div": [
        "{a} {items} are shared by {b} children so that each child gets the same number. How many {items} does each child get?",
        "A rope {a} meters long is cut into {b} equal pieces. How long is each piece in meters?",
        "{n1} needs to put {a} {items} onto {b} shelves, the same number on each. How many {items} are on one shelf?",
        "What is {a} divided by {b}?",
        "The {b} members of a club split a bill of {a} dollars evenly. How many dollars does each member pay?"],
    "pct_of": [
        "Of the {a} {items} in a shop, {pct}% are sold today. How many {items} are sold today?",
        "{n1} scored {pct}% on a test with {a} points. How many points did {n1} score?",
        "{pct}% of the {a} people at a concert are children. How many children are at the concert?",
        "Find {pct} percent of {a}.",
        "A field of {a} square meters is {pct}% grass. How many square meters are grass?"],
    "rate_dist": [
        "A bird flies {s} km every hour. How far does it fly in {t} hours, in km?",
        "{n1} types {s} words a minute. How many words does {n1} type in {t} minutes?",
        "For {t} hours a boat sails {s} km each hour. How far does the boat sail, in km?",
        "A printer prints {s} pages a minute for {t} minutes. How many pages does it print?",
        "{n2} earns {s} dollars an hour and works {t} hours. How many dollars does {n2} earn?"],
    "rate_time": [
        "A snail crawls {s} meters each hour. How many hours does it need to crawl {d} meters?",
        "{n1} saves {s} dollars a week. How many weeks until {n1} has saved {d} dollars?",
        "At {s} drops per second, how many seconds does a tap need to drip {d} drops?",
        "A runner covers {d} meters at {s} meters per second. For how many seconds does the runner run?",
        "A factory packs {s} boxes every hour. How many hours does it take to pack {d} boxes?"],
    "frac_add": [
        "{n1} read {p}/{den} of a book on Saturday and {q}/{den} of it on Sunday. What fraction of the book has {n1} read?",
        "A jug is filled {p}/{den} with juice and {q}/{den} with water. What fraction of the jug is filled?",
        "In a bag, {p}/{den} of the {items} are red and {q}/{den} are blue. What fraction of the {items} are red or blue?",
        "What is {p}/{den} plus {q}/{den}?",
        "A road crew paves {p}/{den} of a road in one week and {q}/{den} of it the next week. What fraction of the road is paved?"],
    "frac_of": [
        "{n1} has {a} dollars and spends {p}/{den} of them on a game. How many dollars does the game cost?",
        "Of the {a} {items} in a basket, {p}/{den} are green. How many green {items} are there?",
        "{p}/{den} of the {a} seats on a bus are taken. How many seats are taken?",
        "Find {p}/{den} of {a}.",
        "A bakery made {a} rolls and sold {p}/{den} of them by noon. How many rolls were sold by noon?"],
    "lin": [
        "A number is multiplied by {a}, then {b} is added, giving {c}. What is the number?",
        "{n1} pays {b} dollars to enter a fair and {a} dollars for each ride, {c} dollars in all. How many rides does {n1} take?",
        "{c} is {b} more than a number multiplied by {a}. Find the number.",
        "Find x if {a} * x + {b} = {c}.",
        "A taxi charges {b} dollars plus {a} dollars per km. A ride costs {c} dollars. How many km long is the ride?"],
    "add_mul": [
        "{n1} has {a} small boxes and {b} big boxes, and every box holds {c} {items}. How many {items} are in all the boxes?",
        "A school sends {a} buses on Monday and {b} buses on Friday, each carrying {c} students. How many students travel?",
        "{n2} reads {c} pages a day on {a} weekdays and {b} weekend days. How many pages does {n2} read?",
        "What is ({a} + {b}) times {c}?",
        "A shelter has {a} cats and {b} dogs, and each animal eats {c} treats. How many treats are eaten?"],
    "mul_sub": [
        "{n1} buys {a} sheets of {b} stickers and uses {c} of the stickers. How many stickers are left?",
        "A hotel has {a} floors with {b} rooms on each floor, and {c} rooms are booked. How many rooms are free?",
        "{c} of the {items} in {a} boxes of {b} {items} each are damaged. How many {items} are undamaged?",
        "What is {a} times {b} minus {c}?",
        "{n2} plants {a} rows of {b} tulips, but {c} tulips do not grow. How many tulips grow?"],
    "pct_off": [
        "A game is {a} dollars, but this week it is {pct}% cheaper. What is its price this week, in dollars?",
        "{n1} had {a} {items} and gave away {pct}% of them. How many {items} does {n1} still have?",
        "A museum had {a} visitors last month and {pct}% fewer this month. How many visitors came this month?",
        "What is {a} decreased by {pct}%?",
        "A lamp priced {a} dollars is marked down by {pct}%. What is the new price in dollars?"],
    "sub_div": [
        "{n1} has {a} dollars, pays a {b} dollar fee and splits the rest equally among {c} charities. How many dollars does each charity get?",
        "A class of {a} students has {b} students absent, and the rest form {c} equal teams. How many students are on each team?",
        "Out of {a} {items}, {n2} keeps {b} and gives the rest in equal shares to {c} neighbors. How many {items} does each neighbor get?",
        "What is ({a} - {b}) divided by {c}?",
        "A farmer collects {a} eggs, {b} of which crack, and packs the rest into {c} equal cartons. How many eggs go in each carton?"],
    "two_products": [
        "{n1} buys {a} shirts for {b} dollars each and {c} hats for {d} dollars each. What does {n1} pay in total, in dollars?",
        "{n1} stacks {b} books on each of {a} shelves and {d} books on each of {c} other shelves. How many books are stacked?",
        "What is {a} times {b} plus {c} times {d}?",
        "{n2} sells {a} tickets at {b} dollars and {c} tickets at {d} dollars. How many dollars does {n2} take in?",
        "{n2} swims {a} laps a day for {b} days and {c} laps a day for {d} days. How many laps does {n2} swim?"],
    "shop_change": [
        "{n1} pays for {a} cakes costing {b} dollars each and {c} cookies costing {d} dollars each with {e} dollars. How many dollars of change does {n1} get?",
        "{n2} brings {e} dollars to a market and spends it on {a} melons costing {b} dollars each and {c} jars of honey costing {d} dollars each. How much money, in dollars, is left?",
        "A tank has {e} liters. {a} buckets of {b} liters and {c} buckets of {d} liters are drawn from it. How many liters remain in the tank?",
        "What is {e} minus the sum of {a} times {b} and {c} times {d}?",
        "{n1} has {e} {items}, gives {a} friends {b} {items} each and {c} cousins {d} {items} each. How many {items} does {n1} keep?"],
}


def _find(question: str) -> str:
    parts = re.split(r"(?<=[.:])\s+", question)
    return parts[-1]


def _given(rec: dict) -> str:
    st = STRUCTURES[rec["structure"]]
    v = rec["values"]
    if rec["structure"] == "frac_add":
        items = [("first fraction", f"{v['p']}/{v['den']}"), ("second fraction", f"{v['q']}/{v['den']}")]
    else:
        items = [(role, str(v[k])) for k, role in st["roles"].items()]
    return ", ".join(f"{role} = {val}" for role, val in items)


def make_trace(rec: dict) -> str:
    st = STRUCTURES[rec["structure"]]
    return render_trace(
        understand=f"Given: {_given(rec)}. Find: {_find(rec['question'])}",
        plan=list(st["plan"]), compute=list(rec["steps"]), verify=list(rec["verify"]),
        answer=rec["answer"])


def wide_problems(seed: int):
    """Problems cycling through the train templates and ``WIDE_TEMPLATES``, each question at most once."""
    wide = {f"wide/{s}/{i}": (s, t) for s, ts in WIDE_TEMPLATES.items() for i, t in enumerate(ts)}
    return unique_problems("train", seed, {**template_ids("train"), **wide})


def build_traces(n: int, seed: int, problems=None) -> list[dict]:
    out = []
    for tid, structure, rec in (problems or unique_problems("train", seed)):
        if len(out) == n:
            break
        trace = make_trace(rec)
        certify_trace(trace, expected_answer=rec["answer"])   # raises if anything is off
        out.append(dict(id=f"trace-{len(out):04d}", template=tid, structure=structure,
                        n_steps=rec["n_steps"], question=rec["question"], answer=rec["answer"],
                        trace=trace, certified=True))
    return out


def build(out=None) -> list[dict]:
    out = out_dir() if out is None else out
    return [dict(write_jsonl(out / "traces.jsonl", build_traces(N_TRACES, SEED)), seed=SEED),
            dict(write_jsonl(out / "traces_wide.jsonl", build_traces(N_WIDE, WIDE_SEED, wide_problems(WIDE_SEED))),
                 seed=WIDE_SEED)]


if __name__ == "__main__":
    for entry in build():
        print(entry)
