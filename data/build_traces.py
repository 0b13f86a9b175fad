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

Usage: ``python data/build_traces.py [--out DIR]`` (writes traces.jsonl).
"""

from __future__ import annotations

import re

try:
    from _common import out_dir, write_jsonl
    from build_math import STRUCTURES, unique_problems
except ImportError:
    from data._common import out_dir, write_jsonl
    from data.build_math import STRUCTURES, unique_problems

from t4lib.models.schema import certify_trace, render_trace

SEED = 777
N_TRACES = 800


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


def build_traces(n: int, seed: int) -> list[dict]:
    out = []
    for tid, structure, rec in unique_problems("train", seed):
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
    return [dict(write_jsonl(out / "traces.jsonl", build_traces(N_TRACES, SEED)), seed=SEED)]


if __name__ == "__main__":
    for entry in build():
        print(entry)
