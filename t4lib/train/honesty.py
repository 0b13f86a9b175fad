"""Honest-abstention data for GRPO on the procedural corpus's models (``small-gpu``), and prompts for any model.

* **RL prompts** (:func:`rl_records`): word problems drawn fresh from the procedural generator's *training*
  productions and pools (:func:`t4lib.models.procedural.render_problem`, split ``train``). Each trap (a needed
  count vague, missing or contradicted) comes beside its answerable twin: the same structure with a trap's
  surface (a vague count about someone else, a restatement that agrees) or, for a missing count, with it
  stated. ``trap_fraction`` below one half adds answerable problems without a twin.
* **Evaluation** (:func:`eval_records`): ``open_traps_<split>`` (every record a trap, target ``<abstain>``)
  and ``open_math_<split>`` (the answerable problems with at least one step), split ``validation`` (choosing)
  or ``test`` (reporting). Both use held-out productions and pools only, so no RL prompt shares a sentence frame
  or a name with them (checked in the tests).
* **Prompts** (:func:`prompt_for`): a tokenizer with a chat template gets the question in that template with a
  system prompt that states the answer format and names ``<abstain>``; the project's plain-format models keep
  the ``Question: ...\\nAnswer:`` text they were pretrained on.
"""
from __future__ import annotations

import random

from t4lib.models import corpus, procedural, schema
from t4lib.train.data import chat_prompt

#: the evaluation splits: validation chooses a recipe, test reports it
EVAL_SPLITS = ("validation", "test")
FORMATS = ("plain", "tags")
#: the seed of the RL prompt stream (any seed gives training-split problems; this one is the sweep's)
RL_SEED = 7001
#: system prompt of the tag format: the one the SFT traces were trained under (states the abstention tag)
TAGS_SYSTEM = schema.MATH_SYSTEM
#: system prompt for a chat model answering in prose: the final-answer forms the rewards read, and the tag
PLAIN_SYSTEM = ("Solve the problem. End with 'The answer is N.' or \\boxed{N}. If a quantity the answer needs "
                "is missing, vague or contradictory, reply with exactly " + schema.ABSTAIN_TAG + " and nothing else.")


def check_split(split) -> str:
    if split not in EVAL_SPLITS:
        raise ValueError(f"split must be one of {list(EVAL_SPLITS)}, got {split!r}")
    return split


def check_fraction(trap_fraction) -> float:
    if isinstance(trap_fraction, bool) or not isinstance(trap_fraction, (int, float)) or not 0 < trap_fraction < 1:
        raise ValueError(f"trap_fraction must be a number in (0, 1), got {trap_fraction!r}")
    return float(trap_fraction)


def uses_chat(tokenizer, fmt: str = "tags") -> bool:
    """Whether prompts go through ``tokenizer``'s chat template: it has one, and the model reads chat (the tag
    format is trained in the template; a tokenizer without the project's ``<abstain>`` token is a hub model's).
    The project's own models in their plain format keep their pretraining text."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if not getattr(tokenizer, "chat_template", None):
        return False
    return fmt == "tags" or schema.ABSTAIN_TAG not in tokenizer.get_vocab()


def system_prompt(fmt: str = "tags") -> str:
    """The system prompt of ``fmt``: the answer format and the abstention tag."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    return TAGS_SYSTEM if fmt == "tags" else PLAIN_SYSTEM


def prompt_for(tokenizer, question: str, fmt: str = "tags", system: str | None = None) -> str:
    """The prompt text of ``question``: the chat template with ``system`` (default :func:`system_prompt`) where
    :func:`uses_chat`, else the plain ``Question: ...\\nAnswer:``."""
    if uses_chat(tokenizer, fmt):
        return chat_prompt(tokenizer, question, system if system is not None else system_prompt(fmt))
    return schema.math_prompt(question)


def rl_records(n: int, seed: int = RL_SEED, trap_fraction: float = 0.5) -> list[dict]:
    """``n`` RL records ``{question, target, trap, trap_kind, structure, frames}`` from the generator's training
    split: round(``trap_fraction`` n) traps, each followed by its answerable twin while answerable places remain,
    the rest answerable problems; deterministic in ``seed``. ``target`` is the exact answer or ``<abstain>``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    f = check_fraction(trap_fraction)
    r = random.Random(procedural.check_seed(seed) * 7919 + 11)
    n_traps = min(n - 1, max(1, round(f * n)))
    n_twins = min(n_traps, n - n_traps)
    # the structures a trap can be made of (the test traps' too: every structure but the linear equation)
    structures = [s for s in procedural.STRUCTURES if s != "lin"]
    out = []

    def rec(doc, kind):
        return dict(question=doc.question, target=schema.ABSTAIN_TAG if doc.trap else doc.answer,
                    trap=bool(doc.trap), trap_kind=doc.trap or "", twin_of=kind, structure=doc.structure,
                    frames=[list(fr) for fr in doc.frames])

    for i in range(n_traps):
        s = structures[i % len(structures)]
        kind = procedural.TRAPS[r.randrange(len(procedural.TRAPS))]
        trap = procedural.render_problem(r, "train", s, trap=kind)   # the kind it became (no amount: vague)
        out.append(rec(trap, ""))
        if i < n_twins:
            decoy = trap.trap if trap.trap in procedural.DECOYS else None
            out.append(rec(procedural.render_problem(r, "train", s, decoy=decoy), trap.trap))
    while len(out) < n:
        out.append(rec(procedural.render_problem(r, "train"), ""))
    return out


def rl_dataset(tokenizer, n: int, seed: int = RL_SEED, trap_fraction: float = 0.5, fmt: str = "tags",
               shuffle_seed: int = 0):
    """A ``datasets.Dataset`` of :func:`rl_records` (columns ``prompt`` (:func:`prompt_for`), ``target``,
    ``trap``, ``trap_kind``, ``structure``), shuffled by ``shuffle_seed`` (a trap and its twin land in different
    steps; the trainer's sampler shuffles again with the run's seed)."""
    from datasets import Dataset  # optional: datasets (the train extra)

    recs = rl_records(n, seed, trap_fraction)
    random.Random(shuffle_seed).shuffle(recs)
    return Dataset.from_list([dict(prompt=prompt_for(tokenizer, x["question"], fmt), target=x["target"],
                                   trap=x["trap"], trap_kind=x["trap_kind"], structure=x["structure"])
                              for x in recs])


def eval_records(split: str, n_traps: int | None = None, n_answerable: int | None = None) -> list[dict]:
    """Evaluation records ``{id, question, target, trap, structure, n_steps}`` of ``split``: the traps of
    ``open_traps_<split>.jsonl`` then the answerable problems (one step or more) of ``open_math_<split>.jsonl``;
    ``n_traps`` / ``n_answerable`` keep the first that many (every structure comes in order, so a cut keeps
    the first structures: for a quick look, not a figure)."""
    check_split(split)
    for name, v in (("n_traps", n_traps), ("n_answerable", n_answerable)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be a positive int or None, got {v!r}")
    traps = [dict(id=x["id"], question=x["question"], target=schema.ABSTAIN_TAG, trap=True, trap_kind=x["trap"],
                  structure=x["structure"], n_steps=0) for x in corpus.load_jsonl(f"open_traps_{split}.jsonl")]
    ans = [dict(id=x["id"], question=x["question"], target=x["answer"], trap=False, trap_kind="",
                structure=x["structure"], n_steps=int(x["n_steps"]))
           for x in corpus.load_jsonl(f"open_math_{split}.jsonl") if x["n_steps"] >= 1]
    return traps[:n_traps] + ans[:n_answerable]
