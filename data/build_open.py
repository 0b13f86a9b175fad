"""The procedural corpus's committed parts: its tokenizer, evaluation sets and SFT traces.

The pretraining text itself is never written: :func:`t4lib.models.procedural.stream` renders it
while a model trains. What is committed:

* ``tokenizer_open/``: byte-level BPE (8192 tokens, the same pipeline and special tokens as
  ``data/tokenizer``) trained on 60,000 training-split documents;
* ``open_math_{validation,test}.jsonl``: answerable word problems of every structure, held-out
  productions and held-out pools; ``open_traps_{validation,test}.jsonl``: their vague, missing
  and contradicted twins; ``open_copy_{validation,test}.jsonl``: copy/edit tasks with long
  outputs (held-out instruction productions, held-out vocabulary). Validation chooses recipes, test
  reports them; no question text is in both. Every sentence of these sets is a held-out production
  of :mod:`t4lib.models.grammar`, never a training one;
* ``open_traces.jsonl``: five-tag traces of training-split problems, each certified with SymPy
  (``schema.certify_trace``) before it is written (the cold-start SFT data).

Usage: ``python data/build_open.py [--out DIR]``.
"""

from __future__ import annotations

import random

try:
    from _common import out_dir, sha256_file, write_jsonl
    from build_tokenizer import _portable_config, train_tokenizer, wrap
except ImportError:
    from data._common import out_dir, sha256_file, write_jsonl
    from data.build_tokenizer import _portable_config, train_tokenizer, wrap

from t4lib.models import procedural as P

SEED = 4242
TOKENIZER_DOCS = 60_000
VOCAB_SIZE = 8192
PER_STRUCTURE = {"validation": 20, "test": 40}
TRAPS_PER_STRUCTURE = {"validation": 6, "test": 12}
COPY_PER_KIND = {"validation": 10, "test": 30}
# Drawn after the test split, so the records before them stay as they were: ten per kind (about 55 outputs of
# 100+ tokens) could not tell two pretraining recipes apart, so validation gets as many as test.
COPY_VALIDATION_EXTRA = 20
N_TRACES = 4000
COPY_EVAL_SIZE = (10, 22)


def _math_record(doc: P.MathDoc, split: str, i: int) -> dict:
    rec = dict(id=f"open-{split}-{i:05d}", split=split, structure=doc.structure, n_steps=doc.n_steps,
               question=doc.question, answer=doc.answer, steps=doc.steps)
    if doc.trap:
        rec.update(trap=doc.trap, answer=None)
    return rec


def eval_docs(seed: int = SEED) -> dict[str, dict[str, list]]:
    """``{split: {"math": docs, "traps": docs, "copy": docs}}`` for validation and test (one generator, so no
    question is in both); the documents keep the productions they were rendered with."""
    r = random.Random(seed)
    seen: set[str] = set()
    out = {}

    def fresh(make):
        while True:
            d = make()
            text = getattr(d, "question", None) or getattr(d, "input")
            if text not in seen:
                seen.add(text)
                return d

    for split in ("validation", "test"):
        math, traps, copies = [], [], []
        for s in P.STRUCTURES:
            for _ in range(PER_STRUCTURE[split]):
                math.append(fresh(lambda: P.render_problem(r, split, s)))
        for _ in range(PER_STRUCTURE[split] * 2):
            math.append(fresh(lambda: P.render_lookup(r, split)))
        for s in P.STRUCTURES:
            if s == "lin":
                continue
            for _ in range(TRAPS_PER_STRUCTURE[split]):
                traps.append(fresh(lambda: P.render_problem(r, split, s, trap=r.choice(P.TRAPS))))
        for k in P.COPY_KINDS:
            for _ in range(COPY_PER_KIND[split]):
                copies.append(fresh(lambda: P.render_copy(r, split, k, COPY_EVAL_SIZE)))
        out[split] = dict(math=math, traps=traps, copy=copies)
    for k in P.COPY_KINDS:
        for _ in range(COPY_VALIDATION_EXTRA):
            out["validation"]["copy"].append(fresh(lambda: P.render_copy(r, "validation", k, COPY_EVAL_SIZE)))
    return out


def eval_sets(seed: int = SEED) -> dict[str, list[dict]]:
    """``{file name: records}`` of the validation and test sets."""
    out = {}
    for split, docs in eval_docs(seed).items():
        out[f"open_math_{split}.jsonl"] = [_math_record(d, split, i) for i, d in enumerate(docs["math"])]
        out[f"open_traps_{split}.jsonl"] = [_math_record(d, split, i) for i, d in enumerate(docs["traps"])]
        out[f"open_copy_{split}.jsonl"] = [dict(id=f"open-copy-{split}-{i:04d}", split=split, kind=c.kind,
                                                instruction=c.instruction, input=c.input, output=c.output)
                                           for i, c in enumerate(docs["copy"])]
    return out


def tokenizer_texts(n: int = TOKENIZER_DOCS, seed: int = SEED + 2) -> list[str]:
    g = P.stream(seed, "train")
    texts = [p + c for _, p, c in (next(g) for _ in range(n))]
    return texts + [t["trace"] for t in P.certified_traces(500, seed + 1)]


def build(out=None) -> list[dict]:
    out = out_dir() if out is None else out
    entries = [dict(write_jsonl(out / name, recs), seed=SEED) for name, recs in eval_sets().items()]
    entries.append(dict(write_jsonl(out / "open_traces.jsonl", P.certified_traces(N_TRACES)), seed=P.TRACE_SEED))
    fast = wrap(train_tokenizer(tokenizer_texts(), VOCAB_SIZE))
    tdir = out / "tokenizer_open"
    fast.save_pretrained(str(tdir))
    _portable_config(tdir)
    entries.append(dict(path="tokenizer_open/tokenizer.json", vocab_size=len(fast), seed=SEED + 2,
                        sha256=sha256_file(tdir / "tokenizer.json")))
    return entries


if __name__ == "__main__":
    import argparse
    from pathlib import Path
    ap = argparse.ArgumentParser(description="Rebuild the procedural corpus's tokenizer, eval sets and traces.")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: data/)")
    for entry in build(ap.parse_args().out):
        print(entry)
