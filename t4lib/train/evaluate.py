"""Evaluation of math answers: exact match, schema validity, grounded pass.

* **exact match**: gold and prediction are parsed as exact rationals by the
  answer grammar (:mod:`t4lib.models.answers`: no code runs, sizes bounded);
  where both parse, rational equality decides. Otherwise ``math_verify.verify``
  decides on ``math_verify.parse`` of each side, called only on text that
  :func:`math_verify_safe` admits (short, a whitelist of LaTeX commands, at most
  one small power, no factorial), so that no answer can make SymPy hang.
* **schema validity**: :func:`t4lib.train.data.parse_completion`.
* **grounded pass**: schema-valid *and* correct (the answer taken from ``<answer>``).

Formats: ``"tags"`` prompts in the chat template and reads ``<answer>``;
``"plain"`` prompts ``Question: ...\\nAnswer:`` and reads ``The answer is X``
(the base model's own format; no schema, so no grounded pass).
Generation is greedy through :class:`t4lib.serving.StaticEngine`; batches of
prompts of different lengths go in as ragged batches, so every row decodes
exactly as it would alone.

Records come from ``math_heldout`` (held-out templates), ``open_validation``/``open_test`` (the procedural
corpus's held-out productions and pools, ``data/open_math_*.jsonl``, reading questions left out), ``honesty_answerable``
(the answerable half of the quarantined honesty set), a local ``.jsonl`` or a
Hugging Face data set (``datasets.load_dataset``, e.g. ``openai/gsm8k``):
question column ``question`` or ``problem``, gold column ``answer`` (GSM8K's
``... #### 72`` is cut at ``####``).
"""
from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from pathlib import Path

from tqdm.auto import tqdm

from t4lib.models import corpus, schema
from t4lib.models.answers import rational_or_none
from t4lib.serving import StaticEngine
from t4lib.train.data import chat_prompt, parse_completion, strip_turn_end

FORMATS = ("tags", "plain")


# ----------------------------------------------------------------------------- records

def load_eval_records(source: str, *, split: str = "test", n: int | None = None,
                      max_steps: int | None = None, min_steps: int | None = None) -> list[dict]:
    """Evaluation records ``{id, question, answer, structure, n_steps}`` (see module docstring)."""
    if not isinstance(source, str) or not source:
        raise ValueError(f"source must be a non-empty string, got {source!r}")
    if source == "math_heldout":
        recs = [dict(id=r["id"], question=r["question"], answer=r["answer"], structure=r["structure"],
                     n_steps=int(r["n_steps"])) for r in corpus.load_jsonl("math_heldout.jsonl")]
    elif source in ("open_validation", "open_test"):   # the procedural corpus's held-out problems
        recs = [dict(id=r["id"], question=r["question"], answer=r["answer"], structure=r["structure"],
                     n_steps=int(r["n_steps"])) for r in corpus.load_jsonl(f"open_math_{source[5:]}.jsonl")
                if r["n_steps"] >= 1]
    elif source == "honesty_answerable":
        recs = [dict(id=r["id"], question=r["question"], answer=r["answer"], structure=r["structure"],
                     n_steps=len(r["steps"])) for r in corpus.load_jsonl("honesty_eval.jsonl") if not r["trap"]]
    else:
        recs = _external_records(source, split)
    if max_steps is not None:
        recs = [r for r in recs if r["n_steps"] <= max_steps]
    if min_steps is not None:
        recs = [r for r in recs if r["n_steps"] >= min_steps]
    return recs[:n] if n is not None else recs


def _external_records(source: str, split: str) -> list[dict]:
    p = Path(source)
    if p.suffix == ".jsonl":
        if not p.is_file():
            raise FileNotFoundError(f"source {source!r} is not a file")
        rows = corpus.load_jsonl(p.name, root=p.parent)
    else:
        from datasets import load_dataset  # optional: datasets (the train extra), only for hub sources
        rows = list(load_dataset(source, split=split))
    if not rows:
        raise ValueError(f"source {source!r} has no rows")
    qcol = next((c for c in ("question", "problem") if c in rows[0]), None)
    if qcol is None or "answer" not in rows[0]:
        raise ValueError(f"source {source!r} needs a question (or problem) column and an answer column, "
                         f"got columns {sorted(rows[0])}")
    out = []
    for i, r in enumerate(rows):
        ans = str(r["answer"])
        if "####" in ans:  # GSM8K: the reasoning, then "#### <number>"
            ans = ans.rsplit("####", 1)[1].strip().replace(",", "")
        out.append(dict(id=r.get("id", r.get("unique_id", i)), question=r[qcol], answer=ans,
                        structure=r.get("structure", r.get("type", r.get("subject", "all"))),
                        n_steps=int(r.get("n_steps", r.get("level", 0)) or 0)))
    return out


# ----------------------------------------------------------------------------- answers

#: longest text handed to math-verify
MATH_VERIFY_MAX_CHARS = 200
# LaTeX commands math-verify may see: the forms of a number, a fraction, a root or a boxed answer. Any other
# (\Gamma, \binom, \sum, ...) may ask SymPy for an unbounded computation.
_LATEX_OK = frozenset(("frac", "dfrac", "tfrac", "sqrt", "pi", "boxed", "left", "right", "cdot", "times", "div",
                       "text", "mathrm", "mathbf", "%", "$", ",", ";", "!", " ", "{", "}", "dots", "ldots"))
_LATEX_CMD = re.compile(r"\\([A-Za-z]+|.)")
_POWER = re.compile(r"\*\*|\^")
# a power whose exponent is at most two digits or one letter, and not itself raised to a power
_SMALL_POWER = re.compile(r"(?:\*\*|\^)\s*(?:\{\s*[-+]?\s*(?:[0-9]{1,2}|[A-Za-z])\s*\}|[-+]?[0-9]{1,2}(?![0-9.])|"
                          r"[A-Za-z](?![A-Za-z]))")


#: most distinct letters (symbols) and most roots an expression handed to math-verify may hold
MATH_VERIFY_MAX_SYMBOLS = 2
MATH_VERIFY_MAX_ROOTS = 2
#: highest power of a bracketed expression: SymPy expands ``(a+b+...)^n`` and ``(sqrt 2 + sqrt 3 + ...)^n``
#: into a number of terms that grows as a binomial in ``n`` (n = 99 over seven symbols never finishes)
MATH_VERIFY_MAX_GROUP_POWER = 3
# a power of a bracketed group: ")^", "}^", "]^" (or "**"), and its exponent
_GROUP_POWER = re.compile(r"[)}\]]\s*(?:\*\*|\^)\s*\{?\s*([-+]?\s*[0-9A-Za-z]+)")
_TEXT_BODY = re.compile(r"\\(?:text|mathrm|mathbf)\s*\{[^{}]*\}")


def math_verify_safe(text: str) -> bool:
    """Whether ``text`` may go to ``math_verify.parse``: at most :data:`MATH_VERIFY_MAX_CHARS` printable ASCII
    characters, no literal over 100 digits, LaTeX commands of ``_LATEX_OK`` only, no factorial, at most one power
    with a small exponent, and a size and degree gate on what SymPy would expand: a bracketed group raised at
    most to :data:`MATH_VERIFY_MAX_GROUP_POWER`, at most :data:`MATH_VERIFY_MAX_SYMBOLS` distinct letters and
    :data:`MATH_VERIFY_MAX_ROOTS` roots. math-verify parses expressions with SymPy (``parse_expr`` only on
    digits and operators, LaTeX by a grammar), so it runs no code from the text; what it can do is ask for a
    huge number (``9^9^9``, ``100000!``) or a huge expansion (``(a+b+c+d+f+g+h)^{99}``) that no timeout
    interrupts off the main thread."""
    if len(text) > MATH_VERIFY_MAX_CHARS or not text.isascii() or not text.isprintable():
        return False
    if re.search(r"[0-9]{101}", text) or re.search(r"(?<!\\)!", text):
        return False
    if any(c not in _LATEX_OK for c in _LATEX_CMD.findall(text)):
        return False
    n = len(_POWER.findall(text))
    if not (n == 0 or (n == 1 and _SMALL_POWER.search(text) is not None)):
        return False
    for m in _GROUP_POWER.finditer(text):
        e = m.group(1).replace(" ", "").lstrip("+-")
        if not e.isdigit() or int(e) > MATH_VERIFY_MAX_GROUP_POWER:
            return False
    bare = _LATEX_CMD.sub(" ", _TEXT_BODY.sub(" ", text))   # commands and text bodies are no symbols
    if len(set(re.findall(r"[A-Za-z]", bare))) > MATH_VERIFY_MAX_SYMBOLS:
        return False
    return text.count("\\sqrt") + text.count("sqrt(") <= MATH_VERIFY_MAX_ROOTS


def _math_verify_timeout() -> int | None:
    # math-verify times out with signal.alarm, which only the main thread may set; elsewhere the bounds of
    # math_verify_safe are the guard
    return 1 if threading.current_thread() is threading.main_thread() else None


def _mv_parse(text: str) -> list:
    """``math_verify.parse`` of ``text``, or [] where it is not :func:`math_verify_safe` or does not parse."""
    from math_verify import parse  # optional: math-verify (the train extra)

    if not text or not math_verify_safe(text):
        return []
    try:
        return parse(text, parsing_timeout=_math_verify_timeout())
    except Exception:  # math-verify and SymPy raise many error types on odd text: it does not parse
        return []


def parse_gold(answer) -> tuple:
    """``(math_verify parse, Fraction or None)`` of a gold answer; ValueError when neither parses."""
    text = str(answer).strip()
    mv = _mv_parse(text)
    exact = rational_or_none(text)
    if not mv and exact is None:
        raise ValueError(f"gold answer {str(answer)[:80]!r} does not parse (math-verify nor the answer grammar)")
    return mv, exact


def is_correct(gold: tuple, pred: str | None) -> bool:
    """``gold`` from :func:`parse_gold`; ``pred`` the predicted answer text (None: no answer). Never raises on
    text: what parses neither as a rational nor (bounded) by math-verify is not correct."""
    from math_verify import verify  # optional: math-verify (the train extra)

    if pred is None or not str(pred).strip():
        return False
    text = str(pred).strip()
    mv_gold, exact_gold = gold
    exact = rational_or_none(text)
    if exact_gold is not None and exact is not None:
        return exact == exact_gold
    mv_pred = _mv_parse(text) if mv_gold else []
    if not mv_pred:
        return False
    try:
        return bool(verify(mv_gold, mv_pred, timeout_seconds=_math_verify_timeout()))
    except Exception:  # a comparison SymPy cannot make is no match
        return False


# ----------------------------------------------------------------------------- generation

def prompts_for(tokenizer, records: list[dict], fmt: str) -> list[str]:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "tags":
        return [chat_prompt(tokenizer, r["question"]) for r in records]
    return [schema.math_prompt(r["question"]) for r in records]


def unwrap(model):
    """The Hugging Face model inside a PEFT wrapper (LoRA layers stay injected)."""
    inner = getattr(model, "base_model", None)
    if inner is not None and hasattr(inner, "model") and type(model).__name__.startswith("Peft"):
        return inner.model
    return model


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, *, batch_size: int = 64,
             progress: bool = True, use_graph: bool | None = None) -> list[str]:
    """Greedy completions (text up to the turn end) of ``prompts`` through StaticEngine."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    model = unwrap(model)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    engine = StaticEngine(model, max_len=max(map(len, ids)) + max_new_tokens, use_graph=use_graph, compile=False)
    out: list[str | None] = [None] * len(prompts)
    bar = None
    if progress:
        bar = tqdm(total=len(prompts), desc="generate", leave=False)
    was_training = model.training
    # Prompts sorted by length (a ragged batch pads each row to its longest prompt) and batches padded
    # (by repeating a row) to a power of two, so the engine rebuilds its cache and CUDA graph once per
    # batch size, not once per batch.
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = []
    for k in range(0, len(order), batch_size):
        chunk = order[k:k + batch_size]
        batches.append((min(batch_size, 1 << (len(chunk) - 1).bit_length()), chunk))
    batches.sort(key=lambda b: b[0])
    try:
        for bucket, chunk in batches:
            rows = [ids[i] for i in chunk] + [ids[chunk[0]]] * (bucket - len(chunk))
            res = engine.generate_with_stats(rows, max_new_tokens)
            texts = tokenizer.batch_decode(res.new_tokens[:len(chunk)], skip_special_tokens=False)
            for i, t in zip(chunk, texts):
                out[i] = strip_turn_end(t)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    return out


# ----------------------------------------------------------------------------- scoring

def score(records: list[dict], outputs: list[str], fmt: str) -> list[dict]:
    """One row per record: schema_valid, correct, grounded (and the parse error)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if len(records) != len(outputs):
        raise ValueError(f"records ({len(records)}) and outputs ({len(outputs)}) differ in length")
    rows = []
    for r, o in zip(records, outputs):
        gold = parse_gold(r["answer"])
        if fmt == "tags":
            p = parse_completion(o)
            pred = p.sections["answer"] if p.sections else None
            valid, err = p.valid, p.error
        else:
            pred, valid, err = schema.extract_answer(o), False, None
            pred = None if pred == "abstain" else pred
        ok = is_correct(gold, pred)
        rows.append(dict(id=r["id"], structure=r["structure"], n_steps=r["n_steps"], schema_valid=valid,
                         correct=ok, grounded=valid and ok, output=o, error=err))
    return rows


FAILURE_KINDS = ("schema", "misread", "arithmetic", "plan", "unchecked")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def failure_kind(question: str, output: str) -> str:
    """Why a wrong tag-format answer is wrong, first cause in this order: ``schema`` (not schema-valid),
    ``misread`` (a number in ``<understand>``'s Given part that the question does not contain), ``arithmetic``
    (a ``<compute>`` line that is false in exact arithmetic), ``plan`` (the numbers read and every step computed right:
    the operations are the wrong ones), ``unchecked`` (a compute line that is not ``<arithmetic> = <number>``).
    A diagnostic for reading failures by structure, not a score."""
    p = parse_completion(output)
    if not p.valid:
        return "schema"
    given = p.sections["understand"].split("Find:")[0]
    if not set(_NUMBER.findall(given)) <= set(_NUMBER.findall(question)):
        return "misread"
    for line in (ln.strip() for ln in p.sections["compute"].splitlines()):
        if not line:
            continue
        try:
            schema.check_identity(line, "compute")
        except schema.FalseStepError:
            return "arithmetic"
        except ValueError:
            return "unchecked"
    return "plan"


def failure_counts(records: list[dict], rows: list[dict]) -> dict:
    """``{structure: {kind: count}}`` of :func:`failure_kind` over the rows that are not a grounded pass (not
    schema-valid, or wrong; rows as :func:`score` or
    ``evaluate_sets(keep_rows=True)`` give them; records: the evaluated problems, matched by ``id``)."""
    question = {r["id"]: r["question"] for r in records}
    missing = [r["id"] for r in rows if r["id"] not in question]
    if missing:
        raise ValueError(f"rows name problems that records lack: {missing[:3]}")
    out = defaultdict(lambda: dict.fromkeys(FAILURE_KINDS, 0))
    for r in rows:
        if not (r["schema_valid"] and r["correct"]):
            out[r["structure"]][failure_kind(question[r["id"]], r["output"])] += 1
    return dict(sorted(out.items()))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a rate k/n (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def _rates(rows: list[dict]) -> dict:
    n = len(rows)
    out = {"n": n}
    for key in ("schema_valid", "correct", "grounded"):
        k = sum(bool(r[key]) for r in rows)
        lo, hi = wilson(k, n)
        out[key] = dict(k=k, rate=k / n if n else float("nan"), ci95=[round(lo, 4), round(hi, 4)])
    return out


def summarize(rows: list[dict]) -> dict:
    """Overall, per structure, per number of steps, and the two-step subset."""
    by_s, by_n = defaultdict(list), defaultdict(list)
    for r in rows:
        by_s[r["structure"]].append(r)
        by_n[r["n_steps"]].append(r)
    return dict(overall=_rates(rows), by_structure={k: _rates(v) for k, v in sorted(by_s.items())},
                by_steps={int(k): _rates(v) for k, v in sorted(by_n.items())},
                two_step=_rates([r for r in rows if r["n_steps"] == 2]))


def evaluate_model(model, tokenizer, records: list[dict], fmt: str = "tags", *, max_new_tokens: int = 160,
                   batch_size: int = 64, progress: bool = True) -> tuple[dict, list[dict]]:
    """Generate, score and summarize: ``(summary, rows)``."""
    if not records:
        raise ValueError("records is empty")
    outs = generate(model, tokenizer, prompts_for(tokenizer, records, fmt), max_new_tokens,
                    batch_size=batch_size, progress=progress)
    rows = score(records, outs, fmt)
    return summarize(rows), rows


def table(summaries: dict[str, dict], key: str = "grounded") -> list[dict]:
    """Rows ``{structure, <name>: rate, ...}`` across several summaries (for a before/after table)."""
    structs = sorted({s for summ in summaries.values() for s in summ["by_structure"]})
    rows = []
    for s in structs + ["overall"]:
        row = {"structure": s}
        for name, summ in summaries.items():
            cell = summ["overall"] if s == "overall" else summ["by_structure"].get(s)
            row[name] = None if cell is None else round(cell[key]["rate"], 3)
        rows.append(row)
    return rows
