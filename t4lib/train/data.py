"""SFT data: certified five-tag traces as a prompt/completion ``datasets.Dataset``,
and the parser that checks a completion against the schema.

A training example is::

    prompt     = chat template (system: schema.MATH_SYSTEM, user: the question)
                 + the assistant header "<|im_start|>assistant\\n"
    completion = the five-tag trace + "<|im_end|>"   (TRL appends the EOS token)

so TRL's completion-only loss trains exactly the assistant turn. Records that
cannot be used (trace not certified, gold answer unparseable, prompt and
completion longer than ``max_length`` tokens) are never dropped silently:
they are counted in a :class:`DataReport` by reason, or raised with
``on_error="raise"``.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from t4lib.models import corpus, procedural, schema
from t4lib.models.answers import Unparseable

#: columns an SFT data set must have (TRL's prompt/completion format)
REQUIRED_COLUMNS = ("prompt", "completion")


@dataclass
class DataReport:
    """What happened to each input record: kept, or rejected with a reason."""

    n_in: int = 0
    n_kept: int = 0
    rejected: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)   # reason -> first offending record id and message

    def reject(self, reason: str, rec_id, msg: str) -> None:
        self.rejected[reason] += 1
        self.examples.setdefault(reason, f"{rec_id}: {msg}")

    def as_dict(self) -> dict:
        return dict(n_in=self.n_in, n_kept=self.n_kept, rejected=dict(self.rejected), examples=self.examples)


def chat_prompt(tokenizer, question: str, system: str | None = schema.MATH_SYSTEM) -> str:
    """The question in the tokenizer's chat template, ending with the assistant header."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def completion_text(trace: str) -> str:
    """The assistant turn: the trace closed by ``<|im_end|>`` (TRL adds EOS after it)."""
    return trace + schema.IM_END


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "count"):
        raise ValueError(f"on_error must be 'raise' or 'count', got {on_error!r}")


def traces_dataset(tokenizer, records: list[dict] | None = None, *, max_length: int = 512,
                   on_error: str = "count", certify: bool = True):
    """``(datasets.Dataset, DataReport)`` of prompt/completion pairs from trace records.

    ``records``: dicts with ``question``, ``trace``, ``answer`` (default: ``data/traces.jsonl``);
    other keys (``id``, ``structure``, ``n_steps``) are kept as columns. ``certify`` re-checks
    each trace with :func:`schema.certify_trace` against its answer. A pair whose tokens
    (prompt + completion + EOS) exceed ``max_length`` is rejected (TRL would truncate it).
    """
    from datasets import Dataset  # optional: datasets (the train extra)

    _check_on_error(on_error)
    if not isinstance(max_length, int) or max_length < 8:
        raise ValueError(f"max_length must be an int >= 8, got {max_length!r}")
    if records is None:
        records = corpus.load_jsonl("traces.jsonl")
    rep = DataReport(n_in=len(records))
    rows = []
    for i, r in enumerate(records):
        rid = r.get("id", i)
        try:
            missing = [k for k in ("question", "trace", "answer") if k not in r]
            if missing:
                raise _Reject("missing_field", f"record has no {', '.join(missing)}")
            try:
                gold = schema.normalize_answer(r["answer"])
            except Unparseable as e:
                raise _Reject("unparseable_gold", str(e)) from None
            if certify:
                try:
                    schema.certify_trace(r["trace"], gold)
                except ValueError as e:
                    raise _Reject("not_certified", str(e)) from None
            prompt = chat_prompt(tokenizer, r["question"])
            completion = completion_text(r["trace"])
            n_tok = len(tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]) + 1
            if n_tok > max_length:
                raise _Reject("too_long", f"{n_tok} tokens > max_length={max_length}")
        except _Reject as e:
            if on_error == "raise":
                raise ValueError(f"record {rid}: {e.reason}: {e.msg}") from None
            rep.reject(e.reason, rid, e.msg)
            continue
        rows.append(dict(prompt=prompt, completion=completion, id=str(rid), structure=r.get("structure", ""),
                         n_steps=int(r.get("n_steps", 0)), n_tokens=n_tok))
    rep.n_kept = len(rows)
    if not rows:
        raise ValueError(f"no usable record among {len(records)} (rejected: {dict(rep.rejected)})")
    return Dataset.from_list(rows), rep


#: where plain-format replay comes from: the committed tiny-model corpus, or the procedural generator
REPLAY_SOURCES = ("math_train", "procedural")
#: a trace spec that generates certified traces rather than reading a file: ``procedural:<count>``
PROCEDURAL_TRACES = "procedural:"


def check_traces(spec) -> int | None:
    """ValueError naming ``traces`` unless ``spec`` is a JSONL file in ``data/`` or ``procedural:N`` (N > 0);
    the count N, or None for a file. Checked before any model loads."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"traces must be a data file name or 'procedural:N', got {spec!r}")
    if spec.startswith(PROCEDURAL_TRACES):
        count = spec[len(PROCEDURAL_TRACES):]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"traces: 'procedural:N' needs a positive count N, got {spec!r}")
        return int(count)
    if not (corpus.data_dir() / spec).is_file():
        raise ValueError(f"traces: no data file {spec!r} in {corpus.data_dir()} (or give 'procedural:N')")
    return None


def load_traces(spec: str) -> list[dict]:
    """The SFT trace records named by ``spec`` (:func:`check_traces`): a JSONL file in ``data/``
    (``open_traces.jsonl``), or ``procedural:N``, N certified traces from the procedural generator
    (:func:`t4lib.models.procedural.certified_traces`; its first 4000 are ``open_traces.jsonl``)."""
    count = check_traces(spec)
    return corpus.load_jsonl(spec) if count is None else procedural.certified_traces(count)


def replay_dataset(n: int, seed: int = 0, source: str = "math_train"):
    """``n`` problems in the base model's own plain format (columns ``prompt``, ``completion``), to mix into
    SFT: the plain arithmetic the model already does is rehearsed while the tag schema is learned.
    ``source``: ``math_train`` (problems of ``math_train.jsonl`` that no trace of ``traces.jsonl`` uses, for the
    models of the committed corpus) or ``procedural`` (fresh training-split problems of the procedural
    generator, for the models trained on it)."""
    from datasets import Dataset  # optional: datasets (the train extra)

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if source not in REPLAY_SOURCES:
        raise ValueError(f"source must be one of {REPLAY_SOURCES}, got {source!r}")
    if source == "procedural":
        pairs = procedural.plain_problems(n, seed)
    else:
        traced = {r["question"] for r in corpus.load_jsonl("traces.jsonl")}
        recs = [r for r in corpus.load_jsonl("math_train.jsonl") if r["question"] not in traced]
        if n > len(recs):
            raise ValueError(f"n={n} exceeds the {len(recs)} math_train problems that no trace uses")
        random.Random(seed).shuffle(recs)
        pairs = [(schema.math_prompt(r["question"]), schema.math_completion(r["steps"], r["answer"]))
                 for r in recs[:n]]
    # no EOS in the text: TRL appends it, as for the traces (completion_text)
    return Dataset.from_list([dict(prompt=p, completion=c) for p, c in pairs])


def with_replay(traces, n: int, seed: int = 0, source: str = "math_train"):
    """The trace data set ``traces`` (:func:`traces_dataset`) followed by ``n`` plain-format problems
    (:func:`replay_dataset`); ``n`` = 0 gives ``traces`` unchanged. The Trainer shuffles them together."""
    if n == 0:
        return traces
    from datasets import concatenate_datasets  # optional: datasets (the train extra)

    return concatenate_datasets([traces.select_columns(list(REQUIRED_COLUMNS)), replay_dataset(n, seed, source)])


class _Reject(Exception):
    def __init__(self, reason: str, msg: str):
        super().__init__(msg)
        self.reason, self.msg = reason, msg


def check_columns(dataset, required, purpose: str) -> None:
    """TypeError unless ``dataset`` is a ``datasets.Dataset``; ValueError naming what is missing
    unless it has every column of ``required`` (``purpose`` says who needs them)."""
    cols = getattr(dataset, "column_names", None)
    if cols is None:
        raise TypeError(f"dataset must be a datasets.Dataset, got {type(dataset).__name__}")
    missing = [c for c in required if c not in cols]
    if missing:
        raise ValueError(f"dataset has no {' / '.join(missing)} column (columns: {cols}); {purpose} needs "
                         f"{tuple(required)}")


def check_prompt_completion(dataset) -> None:
    """ValueError unless ``dataset`` (a ``datasets.Dataset``) has prompt/completion columns."""
    check_columns(dataset, REQUIRED_COLUMNS, "SFT")


# ----------------------------------------------------------------------------- completion parser

@dataclass
class ParsedCompletion:
    """A generated assistant turn checked against the five-tag schema."""

    valid: bool
    sections: dict | None = None   # the five tag bodies when valid
    answer: str | None = None      # the <answer> body (stripped) when valid
    error: str | None = None       # why it is not valid


def strip_turn_end(text: str) -> str:
    """The text before the first ``<|im_end|>`` or EOS (what a stopped generation would show)."""
    for marker in (schema.IM_END, schema.EOS):
        k = text.find(marker)
        if k >= 0:
            text = text[:k]
    return text.replace(schema.PAD, "")


def parse_completion(text: str) -> ParsedCompletion:
    """Schema validity of a completion: all five tags, in order, once each, non-empty,
    nothing outside them, and an ``<answer>`` that parses as an exact rational (by the answer grammar of
    :mod:`t4lib.models.answers`: never raises on text, whatever it holds).
    (Arithmetic truth is not checked here: that is :func:`schema.certify_trace`.)"""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    body = strip_turn_end(text)
    try:
        sec = schema.parse_trace(body)
    except ValueError as e:
        return ParsedCompletion(False, error=str(e))
    try:
        schema.normalize_answer(sec["answer"])
    except Unparseable as e:
        return ParsedCompletion(False, sections=sec,
                                error=f"trace: <answer> {sec['answer'][:80]!r} does not parse ({e})")
    return ParsedCompletion(True, sections=sec, answer=sec["answer"])
