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

Before judging, a completion is cut at its first end marker (:data:`END_MARKERS`, plus the tokenizer's EOS and
every id of its generation config's EOS list when a tokenizer is given: :func:`end_markers`), so a finished
chat turn (``... <|im_end|>``) reads as its content. An answer written ``\\boxed{7}``, ``$7$`` or ``**7**``
(what an Instruct model writes) is read by a bounded grammar (:func:`marked_answer`: numbers and
``\\frac{a}{b}``); what that grammar cannot read goes to math-verify behind
:func:`t4lib.train.evaluate.math_verify_safe`'s size and degree gate. No path runs code from the text.
"""
from __future__ import annotations

import re

from t4lib.models import schema
from t4lib.models.answers import rational_or_none
from t4lib.train import evaluate

REWARDS = {"correct": 1.0, "abstain_correct": 1.0, "answered_trap": -1.0, "false_abstain": -0.5,
           "wrong": 0.0, "unparsed": -0.25}
FORMATS = ("plain", "tags")
FORMAT_BONUS = 0.1
_PLAIN_RE = re.compile(r"^ ?(?:[^\n]*?\. )?The answer is -?[0-9]+(?:/[0-9]+)?\.$|^ ?" + re.escape(schema.ABSTAIN_TAG) + "$")
#: markers that end a turn or a text in the project's and Qwen's tokenizers; what follows one is not judged
END_MARKERS = (schema.IM_END, schema.EOS)
# the answer marks an Instruct model writes, each bounded in length (one level of braces inside \boxed{})
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}\n]|\{[^{}\n]{0,40}\}){1,80})\}")
_DOLLAR = re.compile(r"\$([^$\n]{1,80})\$")
_BOLD = re.compile(r"\*\*([^*\n]{1,80})\*\*")
_FRAC = re.compile(r"^([-+]?)\\[dt]?frac\s*\{\s*([-+]?[0-9]{1,30})\s*\}\s*\{\s*([0-9]{1,30})\s*\}$")
_LATEX_SPACE = re.compile(r"\\[,;:! ]|\\q?quad")


def _text(completion) -> str:
    """The completion's text. TRL passes strings (plain prompts) or ``[{"role", "content"}]`` lists (chat
    prompts); a message's content may be None (no text: "") or a list of parts (their ``text`` joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        msg = completion[-1]
        if not isinstance(msg, dict):
            raise TypeError(f"a chat completion must be a list of message dicts, got a list of {type(msg).__name__}")
        content = msg.get("content")
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, (list, tuple)):
            return "".join(p if isinstance(p, str) else p.get("text") or "" if isinstance(p, dict) and
                           isinstance(p.get("text"), (str, type(None))) else "" for p in content)
        raise TypeError(f"a message's content must be a string, a list of parts or None, got "
                        f"{type(content).__name__}")
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def end_markers(tokenizer=None, generation_config=None) -> tuple[str, ...]:
    """:data:`END_MARKERS` plus ``tokenizer``'s EOS token and the token of every id of ``generation_config``'s
    ``eos_token_id`` (an int or a list; default: none)."""
    out = list(END_MARKERS)
    if tokenizer is not None:
        if isinstance(getattr(tokenizer, "eos_token", None), str):
            out.append(tokenizer.eos_token)
        ids = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        for i in ids:
            t = tokenizer.convert_ids_to_tokens(int(i))
            if isinstance(t, str):
                out.append(t)
    return tuple(dict.fromkeys(m for m in out if m))


def _clean(text: str, markers=END_MARKERS) -> str:
    """The text before the first end marker, padding removed."""
    cut = len(text)
    for m in markers:
        k = text.find(m, 0, cut)
        if k >= 0:
            cut = k
    return text[:cut].replace(schema.PAD, "")


def marked_answer(text: str) -> str | None:
    """The last answer written ``\\boxed{...}`` (else ``**...**``, else ``$...$``) in ``text``, its LaTeX
    spacing and a trailing period removed, ``\\frac{a}{b}`` of integers written ``a/b``; None where there is
    none. Bounded: each mark holds at most 80 characters."""
    for pat in (_BOXED, _BOLD, _DOLLAR):
        found = None
        for found in pat.finditer(text):
            pass
        if found is not None:
            body = _LATEX_SPACE.sub("", found.group(1)).strip().rstrip(".").strip().strip("$").strip()
            m = _FRAC.match(body)
            if m:
                body = f"{m.group(1)}{m.group(2)}/{m.group(3)}"
            inner = _BOXED.fullmatch(body)   # **\boxed{7}** or $\boxed{7}$
            return inner.group(1).strip() if inner else body
    return None


def predicted(completion, fmt: str = "plain") -> str | None:
    """``"abstain"``, a normalised value, or None (nothing parseable: the answer grammar of
    :mod:`t4lib.models.answers` runs no code and refuses what it cannot bound, so this never raises on text)."""
    p = _predicted(completion, fmt)
    return p if p is None or p == "abstain" else _rational(p)


def _rational(text: str) -> str | None:
    v = rational_or_none(text)
    return None if v is None else str(v)


def _predicted(completion, fmt: str, markers=END_MARKERS) -> str | None:
    """``"abstain"``, the answer text as written (a rational when it parses as one), or None."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    text = _clean(_text(completion), markers)
    if fmt == "plain":
        p = schema.extract_answer(text)
        if p is not None:
            return p
        return marked_answer(text)
    if schema.ABSTAIN_TAG in text and "<answer>" not in text:
        return "abstain"
    try:
        body = schema.parse_trace(text)["answer"].strip()
    except ValueError:
        return None
    v = _rational(body)
    return v if v is not None else marked_answer(body) or body or None


def outcome(completion, target: str, fmt: str = "plain", markers=END_MARKERS) -> str:
    """Which row of the reward table (module docstring) a completion falls in. ``markers``: the end markers
    cut at (:func:`end_markers`). An answer that is no rational (``\\sqrt{4}``) is compared by math-verify
    behind its safety gate (:func:`t4lib.train.evaluate.is_correct`)."""
    if not isinstance(target, str) or not target:
        raise ValueError(f"target must be the answer string or {schema.ABSTAIN_TAG!r}, got {target!r}")
    p = _predicted(completion, fmt, markers)
    trap = target == schema.ABSTAIN_TAG
    if p is None:
        return "unparsed"
    if p == "abstain":
        return "abstain_correct" if trap else "false_abstain"
    if trap:
        return "answered_trap"
    v = _rational(p)
    if v is not None:
        return "correct" if v == schema.normalize_answer(target) else "wrong"
    try:
        gold = evaluate.parse_gold(target)
    except ValueError:
        return "wrong"
    latex = "\\" in p and "$" not in p   # math-verify reads LaTeX between delimiters
    return "correct" if evaluate.is_correct(gold, f"${p}$" if latex else p) else "wrong"


def honesty_reward(completions, target, fmt: str = "plain", markers=END_MARKERS, **_) -> list[float]:
    """TRL reward function: ``REWARDS[outcome]`` per completion (``target`` is the data set column)."""
    if len(completions) != len(target):
        raise ValueError(f"completions ({len(completions)}) and target ({len(target)}) differ in length")
    return [REWARDS[outcome(c, t, fmt, markers)] for c, t in zip(completions, target)]


def is_formatted(completion, fmt: str = "plain", markers=END_MARKERS) -> bool:
    """In the expected format: plain, ``The answer is X.`` after its steps, a lone ``<abstain>``, or (a chat
    model's) one ``\\boxed{}`` answer at the end; tags, a five-tag trace or a lone ``<abstain>``."""
    text = _clean(_text(completion), markers)
    if fmt == "plain":
        t = text.rstrip()
        return bool(_PLAIN_RE.match(t)) or (t.count("\\boxed") == 1 and _BOXED.search(t[-90:]) is not None
                                            and t.endswith(("}", "}.", "}$", "}$.")))
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if text.strip() == schema.ABSTAIN_TAG:
        return True
    try:
        schema.parse_trace(text)
        return True
    except ValueError:
        return False


def format_reward(completions, fmt: str = "plain", markers=END_MARKERS, **_) -> list[float]:
    """TRL reward function: ``FORMAT_BONUS`` for a completion in the expected format, else 0."""
    return [FORMAT_BONUS if is_formatted(c, fmt, markers) else 0.0 for c in completions]
