"""Rewards for honest abstention, in TRL's reward-function signature.

Each completion is classified against its record's ``target`` (the exact
answer, or ``<abstain>`` for a trap) by :func:`t4lib.models.schema.extract_answer`
(plain format) or the five-tag parser :func:`t4lib.models.schema.parse_trace`
(``fmt="tags"``, for a model fine-tuned on the tag schema):

=====================  ==========================  =======
outcome                 when                        reward
=====================  ==========================  =======
``correct``             answerable, right value      +1.0
``abstain_correct``     trap, ``<abstain>``          +1.0
``answered_trap``       trap, any value              -1.0
``false_abstain``       answerable, ``<abstain>``    -0.5
``wrong``               answerable, wrong value       0.0
``unparsed``            no answer found              -0.25
=====================  ==========================  =======

The false-abstention penalty keeps "always abstain" from paying as much as
answering: on a mix with fraction ``f`` of traps it earns ``f - 0.5 (1 - f)``.
GRPO compares completions of one prompt, though: on a trap abstaining beats
answering by 2, on a twin answered right with probability ``a`` answering beats
abstaining by ``a + 0.5``. A policy that cannot yet tell a trap from its twin is
pushed towards abstaining on both (the GRPO runs in ``results/`` show it).
:func:`format_reward` adds ``+0.1`` for a completion in the expected format.
"""
from __future__ import annotations

import re

from ..models import schema

REWARDS = {"correct": 1.0, "abstain_correct": 1.0, "answered_trap": -1.0, "false_abstain": -0.5,
           "wrong": 0.0, "unparsed": -0.25}
FORMATS = ("plain", "tags")
FORMAT_BONUS = 0.1
_PLAIN_RE = re.compile(r"^ (?:[^\n]*?\. )?The answer is -?[0-9]+(?:/[0-9]+)?\.$|^ " + re.escape(schema.ABSTAIN_TAG) + "$")


def _text(completion) -> str:
    """TRL passes strings (plain prompts) or ``[{"role", "content"}]`` lists (chat prompts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content", "")
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _clean(text: str) -> str:
    return text.split(schema.EOS)[0].replace(schema.PAD, "")


def predicted(completion, fmt: str = "plain") -> str | None:
    """``"abstain"``, a normalised value, or None (nothing parseable: the answer grammar of
    :mod:`t4lib.models.answers` runs no code and refuses what it cannot bound, so this never raises on text)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    text = _clean(_text(completion))
    if fmt == "plain":
        return schema.extract_answer(text)
    if schema.ABSTAIN_TAG in text and "<answer>" not in text:
        return "abstain"
    try:
        return schema.normalize_answer(schema.parse_trace(text)["answer"])
    except ValueError:
        return None


def outcome(completion, target: str, fmt: str = "plain") -> str:
    """Which row of the reward table (module docstring) a completion falls in."""
    if not isinstance(target, str) or not target:
        raise ValueError(f"target must be the answer string or {schema.ABSTAIN_TAG!r}, got {target!r}")
    p = predicted(completion, fmt)
    trap = target == schema.ABSTAIN_TAG
    if p is None:
        return "unparsed"
    if p == "abstain":
        return "abstain_correct" if trap else "false_abstain"
    if trap:
        return "answered_trap"
    return "correct" if p == schema.normalize_answer(target) else "wrong"


def honesty_reward(completions, target, fmt: str = "plain", **_) -> list[float]:
    """TRL reward function: ``REWARDS[outcome]`` per completion (``target`` is the data set column)."""
    if len(completions) != len(target):
        raise ValueError(f"completions ({len(completions)}) and target ({len(target)}) differ in length")
    return [REWARDS[outcome(c, t, fmt)] for c, t in zip(completions, target)]


def is_formatted(completion, fmt: str = "plain") -> bool:
    text = _clean(_text(completion))
    if fmt == "plain":
        return bool(_PLAIN_RE.match(text.rstrip()))
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if text.strip() == schema.ABSTAIN_TAG:
        return True
    try:
        schema.parse_trace(text)
        return True
    except ValueError:
        return False


def format_reward(completions, fmt: str = "plain", **_) -> list[float]:
    """TRL reward function: ``FORMAT_BONUS`` for a completion in the expected format, else 0."""
    return [FORMAT_BONUS if is_formatted(c, fmt) else 0.0 for c in completions]
