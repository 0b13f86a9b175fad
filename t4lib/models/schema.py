"""Text formats shared by the data generators, the tokenizer and the models.

Everything that turns a data record into model text lives here, so the data
scripts in ``data/``, the tiny-model trainer and the notebooks agree on one
format.

Plain prompts (no chat template, no few-shot examples)::

    Question: <problem text>
    Answer: 12 + 5 = 17. 17 * 3 = 51. The answer is 51.

A trap (a problem whose needed quantity is missing or contradictory) is
answered with the fixed abstention tag only::

    Question: <problem text>
    Answer: <abstain>

Input-grounded (copy/edit) tasks::

    Task: <instruction>
    Input:
    <input text>
    Output:
    <output text>

Reasoning traces use five tags, in this order, each exactly once, nothing
outside them but whitespace::

    <understand> what is given and what is asked </understand>
    <plan> numbered steps, one per computation </plan>
    <compute> one line per step: "<expression> = <value>" </compute>
    <verify> one or more lines "<expression> = <value>" that re-derive a
             known quantity from the answer </verify>
    <answer> the final value (integer or reduced fraction p/q) </answer>

A trace is *certified* when every ``<compute>`` and ``<verify>`` line is an
exact identity in rational arithmetic (parsed by the grammar of
:mod:`t4lib.models.answers`, which runs no code), the number of compute lines
equals the number of plan steps, the last compute value equals the
``<answer>``, and the answer equals the record's independently computed
answer (see :func:`certify_trace`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from .answers import Unparseable, parse_rational

#: the five trace tags, in the order they must appear
TRACE_TAGS = ("understand", "plan", "compute", "verify", "answer")
#: the fixed abstention tag a model must emit on a trap
ABSTAIN_TAG = "<abstain>"
#: end-of-text / end-of-document marker (also the EOS token)
EOS = "<|endoftext|>"
PAD = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CHAT_MARKERS = (IM_START, IM_END)
#: every special token of the project tokenizer, in id order after EOS/PAD
SPECIAL_TOKENS = (EOS, PAD, IM_START, IM_END, ABSTAIN_TAG) + tuple(
    t for tag in TRACE_TAGS for t in (f"<{tag}>", f"</{tag}>"))

#: Qwen-style chat template (ChatML)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MATH_SYSTEM = "Solve the problem. If a needed quantity is missing or contradictory, reply " + ABSTAIN_TAG + "."


# ----------------------------------------------------------------------------- plain formats

def math_prompt(question: str) -> str:
    """Plain prompt for a word problem: ``Question: ...\\nAnswer:``."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    return f"Question: {question}\nAnswer:"


def math_completion(steps: list[str] | None, answer: str | None) -> str:
    """Plain answer text (leading space included): the computation lines then
    ``The answer is X.``; for a trap (``answer is None``) the abstention tag."""
    if answer is None:
        return " " + ABSTAIN_TAG
    body = "".join(f" {s}." for s in (steps or []))
    return f"{body} The answer is {answer}."


def copy_prompt(instruction: str, input_text: str) -> str:
    """Plain prompt for an input-grounded task; the output follows on a new line."""
    return f"Task: {instruction}\nInput:\n{input_text}\nOutput:\n"


# ASCII digits only: ``\d`` would also take Unicode digits, which the answer grammar refuses
_ANSWER_RE = re.compile(r"answer is\s*(-?[0-9]+(?:\s*/\s*[0-9]+)?)")


def extract_answer(text: str) -> str | None:
    """Final answer from generated plain text: ``"abstain"`` when the tag is
    there first, the value after ``The answer is`` (normalised ``p/q``), or None."""
    m = _ANSWER_RE.search(text)
    a = text.find(ABSTAIN_TAG)
    if a >= 0 and (m is None or a < m.start()):
        return "abstain"
    if m is None:
        return None
    try:
        return normalize_answer(m.group(1))
    except Unparseable:  # generated text such as "3/0" or 200 digits: no number, so no answer
        return None


def normalize_answer(value) -> str:
    """Canonical string of an exact rational: ``"17"``, ``"-3/4"`` (``"02"`` -> ``"2"``, ``"0.5"`` -> ``"1/2"``,
    ``"12%"`` -> ``"3/25"``). Text is parsed by :func:`t4lib.models.answers.parse_rational` (a grammar, no code
    runs); :class:`~t4lib.models.answers.Unparseable` (a ValueError) when ``value`` is no exact rational."""
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
        return str(Fraction(value))
    try:
        return str(parse_rational(str(value)))
    except Unparseable as e:
        raise Unparseable(f"answer {str(value)[:80]!r} is not an exact rational number ({e})") from None


# ----------------------------------------------------------------------------- traces

_TRACE_RE = re.compile(
    r"^\s*" + r"\s*".join(rf"<{t}>(?P<{t}>.*?)</{t}>" for t in TRACE_TAGS) + r"\s*$",
    re.DOTALL)


def render_trace(understand: str, plan: list[str], compute: list[str],
                 verify: list[str], answer: str) -> str:
    """Assemble a five-tag trace (see module docstring)."""
    plan_txt = "\n".join(f"{i + 1}. {p}" for i, p in enumerate(plan))
    return (f"<understand>{understand}</understand>\n"
            f"<plan>\n{plan_txt}\n</plan>\n"
            f"<compute>\n" + "\n".join(compute) + "\n</compute>\n"
            f"<verify>\n" + "\n".join(verify) + "\n</verify>\n"
            f"<answer>{answer}</answer>")


#: longest text read as a trace (many times a real one: a generated completion is untrusted input)
MAX_TRACE_CHARS = 65536


def parse_trace(text: str) -> dict:
    """Split a trace into its five sections; ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError("trace must be a string")
    if len(text) > MAX_TRACE_CHARS:
        raise ValueError(f"trace: {len(text)} characters, more than {MAX_TRACE_CHARS}")
    for t in TRACE_TAGS:
        for tok in (f"<{t}>", f"</{t}>"):
            n = text.count(tok)
            if n != 1:
                raise ValueError(f"trace: tag {tok} appears {n} times (expected exactly once)")
    m = _TRACE_RE.match(text)
    if m is None:
        raise ValueError("trace: tags out of order or text outside the five tags "
                         f"(expected order: {', '.join(TRACE_TAGS)})")
    out = {t: m.group(t).strip() for t in TRACE_TAGS}
    for t in TRACE_TAGS:
        if not out[t]:
            raise ValueError(f"trace: <{t}> is empty")
    return out


class FalseStepError(ValueError):
    """A well-formed step ``<arithmetic> = <number>`` whose two sides differ."""


def check_identity(line: str, where: str):
    """The exact value (a Fraction) of a step ``<arithmetic> = <number>``; ValueError naming the line when it is
    malformed or does not evaluate (a division by zero, a size limit of :mod:`t4lib.models.answers`),
    :class:`FalseStepError` when it is false."""
    if line.count("=") != 1:
        raise ValueError(f"trace: {where} line {line[:120]!r} must have exactly one '='")
    lhs, rhs = (s.strip() for s in line.split("="))
    if not re.fullmatch(r"[0-9+\-*/() .]+", lhs) or not re.fullmatch(r"-?[0-9]+(/[0-9]+)?", rhs):
        raise ValueError(f"trace: {where} line {line[:120]!r} is not '<arithmetic> = <number>'")
    try:
        lv, rv = parse_rational(lhs), parse_rational(rhs)
    except Unparseable as e:
        raise ValueError(f"trace: {where} line {line[:120]!r} does not evaluate ({e})") from None
    if lv != rv:
        raise FalseStepError(f"trace: {where} line {line!r} is false ({lhs} = {lv})")
    return rv


def certify_trace(text: str, expected_answer: str | None = None) -> dict:
    """Validate the schema and re-check every step in exact rational arithmetic (:func:`check_identity`).

    Returns the parsed sections plus ``values`` (compute results). Raises
    ValueError (naming the offending line) if anything fails.
    """
    sec = parse_trace(text)
    plan = [ln.strip() for ln in sec["plan"].splitlines() if ln.strip()]
    for i, ln in enumerate(plan):
        if not ln.startswith(f"{i + 1}. "):
            raise ValueError(f"trace: plan line {ln!r} should start with '{i + 1}. '")
    compute = [ln.strip() for ln in sec["compute"].splitlines() if ln.strip()]
    if len(compute) != len(plan):
        raise ValueError(f"trace: {len(compute)} compute lines for {len(plan)} plan steps")
    values = [check_identity(ln, "compute") for ln in compute]
    verify = [ln.strip() for ln in sec["verify"].splitlines() if ln.strip()]
    if not verify:
        raise ValueError("trace: <verify> has no check line")
    for ln in verify:
        check_identity(ln, "verify")
    ans = normalize_answer(sec["answer"])
    num = re.compile(r"(?<![\d/])" + re.escape(ans) + r"(?![\d/])")
    if not any(num.search(ln.split("=")[0]) for ln in verify):
        raise ValueError(f"trace: no <verify> line uses the answer {ans}")
    if ans != normalize_answer(values[-1]):
        raise ValueError(f"trace: <answer> {ans} differs from the last compute value {values[-1]}")
    if expected_answer is not None and ans != normalize_answer(expected_answer):
        raise ValueError(f"trace: <answer> {ans} differs from the expected answer {expected_answer}")
    sec["values"] = [str(v) for v in values]
    return sec
