"""The project's generated data sets (``data/*.jsonl``) and their rendering into
training text.

The data directory is ``$T4LIB_DATA`` when set, else ``data/`` at the
repository root. Files are produced by ``python data/build_all.py``; their
counts, seeds and sha256 are in ``data/manifest.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

from . import schema

#: training-side files (what pretraining and the tokenizer may read)
TRAIN_FILES = ("math_train.jsonl", "honesty_train.jsonl", "copy_train.jsonl", "traces.jsonl")
#: evaluation files (never trained on)
EVAL_FILES = ("math_heldout.jsonl", "copy_heldout.jsonl", "honesty_eval.jsonl")


def data_dir() -> Path:
    env = os.environ.get("T4LIB_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


def load_jsonl(name: str, root=None) -> list[dict]:
    """Records of ``data/<name>``; FileNotFoundError naming the build command."""
    path = Path(root or data_dir()) / name
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} not found; build it with `python data/build_all.py`")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sha256(name: str, root=None) -> str:
    path = Path(root or data_dir()) / name
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- rendering

def math_doc(rec: dict) -> tuple[str, str]:
    """(prompt, completion) in plain form for a math or honesty record."""
    answer = rec.get("answer")
    return schema.math_prompt(rec["question"]), schema.math_completion(rec.get("steps"), answer)


def copy_doc(rec: dict) -> tuple[str, str]:
    return schema.copy_prompt(rec["instruction"], rec["input"]), rec["output"]


def chat_doc(user: str, assistant: str, system: str | None = None) -> str:
    """ChatML text equal to what the tokenizer's chat template renders."""
    msgs = ([("system", system)] if system else []) + [("user", user), ("assistant", assistant)]
    return "".join(f"{schema.IM_START}{r}\n{c}{schema.IM_END}\n" for r, c in msgs)


def pretrain_pairs(root=None, seed: int = 0, chat_fraction: float = 0.2,
                   math_repeat: int = 1) -> list[tuple[str, str]]:
    """Pretraining documents as ``(prompt, completion)`` pairs (the completion
    ends with EOS), shuffled deterministically.

    Mix: math train problems (plain, ``math_repeat`` times), the honesty train
    set (plain), copy train tasks (plain) and a ``chat_fraction`` of the math
    and copy records again in ChatML form (prompt = everything up to the
    assistant turn). Reasoning traces are *not* included: they are kept for
    the SFT stage, whose effect would otherwise be hidden.
    """
    rng = random.Random(seed)
    docs = []
    for _ in range(math_repeat):
        for rec in load_jsonl("math_train.jsonl", root):
            docs.append(math_doc(rec))
    for rec in load_jsonl("honesty_train.jsonl", root):
        docs.append(math_doc(rec))
    for rec in load_jsonl("copy_train.jsonl", root):
        docs.append(copy_doc(rec))
    for rec in load_jsonl("math_train.jsonl", root) + load_jsonl("copy_train.jsonl", root):
        if rng.random() < chat_fraction:
            if "question" in rec:
                user, reply, system = (rec["question"], schema.math_completion(rec["steps"], rec["answer"]).strip(),
                                       schema.MATH_SYSTEM)
            else:
                p, reply = copy_doc(rec)
                user, system = p.rstrip("\n"), None
            full = chat_doc(user, reply, system)
            cut = full.rindex(schema.IM_START + "assistant\n") + len(schema.IM_START + "assistant\n")
            docs.append((full[:cut], full[cut:]))
    docs = [(p, c + schema.EOS) for p, c in docs]
    rng.shuffle(docs)
    return docs


def pretrain_documents(root=None, seed: int = 0, chat_fraction: float = 0.2,
                       math_repeat: int = 1) -> list[str]:
    """:func:`pretrain_pairs` joined into plain strings."""
    return [p + c for p, c in pretrain_pairs(root, seed, chat_fraction, math_repeat)]


def tokenizer_corpus(root=None) -> list[str]:
    """Texts the tokenizer is trained on: every training-side file rendered
    (plain and ChatML) plus the traces. No eval file is read."""
    texts = pretrain_documents(root, seed=0, chat_fraction=0.2)
    texts += [r["trace"] for r in load_jsonl("traces.jsonl", root)]
    return texts
