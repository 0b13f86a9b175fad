"""Generated data sets: manifest, SymPy re-checks, trace schema, train/eval
disjointness and bit-for-bit rebuild."""

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

sympy = pytest.importorskip("sympy")

from data import build_all, build_honesty, build_math  # noqa: E402
from data._common import (ITEMS, NAMES, QUARANTINE_ITEMS, QUARANTINE_NAMES,  # noqa: E402
                          read_jsonl, sha256_file)
from t4lib.models import schema  # noqa: E402

TRAIN_SIDE = ["math_train.jsonl", "honesty_train.jsonl", "copy_train.jsonl", "traces.jsonl", "honesty_rl.jsonl",
              "honesty_rl_wide.jsonl"]


def load(name):
    return read_jsonl(DATA / name)


@pytest.fixture(scope="module")
def manifest():
    return json.loads((DATA / "manifest.json").read_text())


def test_manifest_matches_files(manifest):
    for name, entry in manifest["files"].items():
        path = DATA / name
        assert path.is_file(), name
        assert sha256_file(path) == entry["sha256"], f"{name} differs from manifest"
        assert len(load(name)) == entry["count"], name
        assert isinstance(entry["seed"], int)
    assert sha256_file(DATA / "tokenizer" / "tokenizer.json") == manifest["tokenizer"]["sha256"]
    assert sha256_file(DATA / "tokenizer_open" / "tokenizer.json") == manifest["tokenizer_open"]["sha256"]


def test_required_sizes(manifest):
    f = manifest["files"]
    assert f["traces.jsonl"]["count"] >= 600
    assert f["honesty_train.jsonl"]["count"] == 300
    assert f["honesty_eval.jsonl"]["count"] == 150
    assert sum(r["trap"] for r in load("honesty_train.jsonl")) == 150
    assert sum(r["trap"] for r in load("honesty_eval.jsonl")) == 75
    assert f["honesty_rl.jsonl"]["count"] == 400
    assert sum(r["trap"] for r in load("honesty_rl.jsonl")) == 200
    assert f["honesty_rl_wide.jsonl"]["count"] == 560
    wide = load("honesty_rl_wide.jsonl")
    assert sum(r["trap"] for r in wide) == 280
    assert len({r["template"] for r in wide}) == len(build_honesty.RL_WIDE_PAIRS) == 28


def _recheck_steps(rec):
    """Each step an exact SymPy identity, chained, ending in the answer."""
    prev = None
    for line in rec["steps"]:
        lhs, rhs = line.split("=")
        lv, rv = sympy.sympify(lhs, rational=True), sympy.sympify(rhs, rational=True)
        assert lv == rv, (rec["id"], line)
        prev = rv
    assert str(sympy.Rational(prev)) == rec["answer"], rec["id"]


@pytest.mark.parametrize("name", ["math_train.jsonl", "math_heldout.jsonl"])
def test_math_answers_recheck_with_sympy(name):
    recs = load(name)
    for rec in recs:
        _recheck_steps(rec)
        # independent closed form / sympy.solve of the structure
        assert str(sympy.Rational(build_math.STRUCTURES[rec["structure"]]["check"](rec["values"]))) == rec["answer"]
        assert 1 <= rec["n_steps"] <= 4 and rec["n_steps"] == len(rec["steps"])
    assert {r["n_steps"] for r in recs} == {1, 2, 3, 4}
    assert any("/" in r["answer"] for r in recs), "fractions expected among the answers"


def test_honesty_answers_recheck_and_targets():
    for name in ("honesty_train.jsonl", "honesty_eval.jsonl", "honesty_rl.jsonl", "honesty_rl_wide.jsonl"):
        for rec in load(name):
            if rec["trap"]:
                assert rec["answer"] is None and rec["target"] == schema.ABSTAIN_TAG
                assert rec["trap_kind"] in ("missing", "contradictory")
            else:
                assert rec["target"] == rec["answer"]
                _recheck_steps(rec)


@pytest.mark.parametrize("name", ["traces.jsonl", "traces_wide.jsonl"])
def test_every_trace_is_certified(name):
    traces = load(name)
    assert len(traces) >= 600
    for t in traces:
        sec = schema.certify_trace(t["trace"], expected_answer=t["answer"])
        assert sec["answer"] == t["answer"]
        assert t["trace"].index("<understand>") < t["trace"].index("<plan>") < t["trace"].index("<answer>")


def test_certify_rejects_bad_traces():
    good = load("traces.jsonl")[0]["trace"]
    schema.certify_trace(good)
    line = re.search(r"<compute>\n(.*?)\n", good).group(1)
    lhs, rhs = line.split("=")
    wrong = good.replace(line, f"{lhs}= {int(sympy.Rational(rhs.strip())) + 1}", 1)
    with pytest.raises(ValueError, match="compute"):
        schema.certify_trace(wrong)
    with pytest.raises(ValueError, match="<verify>"):
        schema.certify_trace(re.sub(r"<verify>.*?</verify>", "", good, flags=re.S))
    with pytest.raises(ValueError, match="out of order"):
        schema.certify_trace(good.replace("<understand>", "<tmp>").replace("</understand>", "</tmp>")
                             .replace("<tmp>", "", 1).replace("</tmp>", "", 1) .replace(
                                 "<answer>", "<understand>x</understand><answer>"))
    ans = re.search(r"<answer>(.*?)</answer>", good).group(1)
    with pytest.raises(ValueError, match="expected answer"):
        schema.certify_trace(good, expected_answer=str(sympy.Rational(ans) + 1))


def test_math_train_heldout_disjoint():
    train, held = load("math_train.jsonl"), load("math_heldout.jsonl")
    assert not {r["template"] for r in train} & {r["template"] for r in held}
    assert not {r["question"] for r in train} & {r["question"] for r in held}
    train_texts = {t for ts in build_math.TRAIN_TEMPLATES.values() for t in ts}
    held_texts = {t for ts in build_math.HELDOUT_TEMPLATES.values() for t in ts}
    assert not train_texts & held_texts
    # held-out templates cover the same structures (operations), so accuracy measures transfer
    assert {r["structure"] for r in held} == {r["structure"] for r in train}
    traces = load("traces.jsonl")
    assert {t["template"] for t in traces} <= {r["template"] for r in train}


def _word_runs(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = re.findall(r"\{\w+\}|[\w%/]+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def test_wide_traces_keep_heldout_wording_out():
    """The SFT-only phrasings are new (not a train or held-out template), share no run of six words with a
    held-out template, use only their structure's quantities, and the wide traces cover every structure in
    its train templates plus five wide ones; no wide question is a held-out question."""
    from data import build_traces

    held = [t for ts in build_math.HELDOUT_TEMPLATES.values() for t in ts]
    train = [t for ts in build_math.TRAIN_TEMPLATES.values() for t in ts]
    held_runs = set().union(*map(_word_runs, held))
    for structure, texts in build_traces.WIDE_TEMPLATES.items():
        assert len(texts) == 5 and structure in build_math.STRUCTURES
        names = set(build_math.STRUCTURES[structure]["sample"](__import__("random").Random(0)))
        for t in texts:
            assert t not in held and t not in train
            assert not _word_runs(t) & held_runs, t
            assert set(re.findall(r"\{(\w+)\}", t)) - {"n1", "n2", "items", "item"} <= names, t
    wide = load("traces_wide.jsonl")
    per = {}
    for r in wide:
        per.setdefault(r["structure"], set()).add(r["template"])
    assert all(len(v) == 8 for v in per.values()) and set(per) == set(build_math.STRUCTURES)
    assert not {r["question"] for r in wide} & {r["question"] for r in load("math_heldout.jsonl")}


def _word_re(words):
    return re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b")


@pytest.mark.parametrize("name,split,pairs", [("honesty_rl.jsonl", "rl", "RL_PAIRS"),
                                              ("honesty_rl_wide.jsonl", "rl_wide", "RL_WIDE_PAIRS")])
def test_honesty_rl_wording_is_new_to_pretraining_and_evaluation(name, split, pairs):
    """An RL split shares no template text or question with the pretraining set (honesty_train), the
    quarantined evaluation or the other RL split, and the tiny models' pretraining corpus does not read it."""
    from t4lib.models import corpus

    rl = load(name)
    others = [load(n) for n in ("honesty_train.jsonl", "honesty_eval.jsonl", "honesty_rl.jsonl",
                                "honesty_rl_wide.jsonl") if n != name]
    pair_texts = lambda pairs: {t for v in pairs.values() for t in v[1:3]}
    all_pairs = ("TRAIN_PAIRS", "EVAL_PAIRS", "RL_PAIRS", "RL_WIDE_PAIRS")
    rl_texts = pair_texts(getattr(build_honesty, pairs))
    for other in all_pairs:
        if other != pairs:
            assert not rl_texts & pair_texts(getattr(build_honesty, other)), other
    assert not {r["question"] for r in rl} & {r["question"] for o in others for r in o}
    assert {r["template"].split("/")[0] for r in rl} == {f"honesty-{split}"}
    assert name not in corpus.TRAIN_FILES


def test_honesty_eval_is_quarantined():
    train, ev = load("honesty_train.jsonl"), load("honesty_eval.jsonl")
    assert not {r["template"] for r in train} & {r["template"] for r in ev}
    assert not {r["question"] for r in train} & {r["question"] for r in ev}
    pair_texts = lambda pairs: {t for v in pairs.values() for t in v[1:3]}
    assert not pair_texts(build_honesty.TRAIN_PAIRS) & pair_texts(build_honesty.EVAL_PAIRS)
    q_words = QUARANTINE_NAMES + [w for pair in QUARANTINE_ITEMS for w in pair]
    assert not set(q_words) & (set(NAMES) | {w for pair in ITEMS for w in pair})
    for r in ev:   # eval uses quarantined entities only
        assert set(r["entities"]) <= set(q_words), r["id"]
    bad = _word_re(q_words)
    for name in TRAIN_SIDE:   # no training-side text names a quarantined entity
        text = (DATA / name).read_text()
        m = bad.search(text)
        assert m is None, f"{name} mentions quarantined entity {m and m.group(0)!r}"
    # and no eval question appears verbatim in any training-side file
    train_text = "\n".join((DATA / n).read_text() for n in TRAIN_SIDE)
    for r in ev:
        assert json.dumps(r["question"])[1:-1] not in train_text


def test_copy_heldout_disjoint_and_grounded():
    train, held = load("copy_train.jsonl"), load("copy_heldout.jsonl")
    key = lambda r: r["instruction"] + "\n" + r["input"]
    assert not {key(r) for r in train} & {key(r) for r in held}
    assert {r["kind"] for r in held} == {"edit_record", "reformat_list", "fix_code", "extract_fields"}
    # answers mostly copy the prompt: most output words occur in the input or instruction
    for r in held:
        words = re.findall(r"[A-Za-z_]{2,}", r["output"])
        inside = sum(w in r["input"] + " " + r["instruction"] for w in words)
        assert inside >= 0.6 * len(words), r["id"]


def test_answer_extraction():
    assert schema.extract_answer(" 3 + 4 = 7. The answer is 7.") == "7"
    assert schema.extract_answer(" 1/8 + 2/8 = 3/8. The answer is 3/8.") == "3/8"
    assert schema.extract_answer(" The answer is 6/8.") == "3/4"
    assert schema.extract_answer(" <abstain>") == "abstain"
    assert schema.extract_answer(" blah") is None
    # generated text: leading zeros are a number, a zero denominator is none (neither raises)
    assert schema.extract_answer(" The answer is 02.") == "2"
    assert schema.extract_answer(" The answer is 3/0.") is None
    with pytest.raises(ValueError, match="exact rational"):
        schema.normalize_answer("x+")
    with pytest.raises(ValueError, match="question"):
        schema.math_prompt("")


def test_rebuild_is_bit_for_bit(tmp_path, manifest):
    rebuilt = build_all.build(tmp_path)
    assert rebuilt == manifest
    for name in manifest["files"]:
        assert sha256_file(tmp_path / name) == sha256_file(DATA / name), name
    assert (tmp_path / "tokenizer" / "tokenizer.json").read_bytes() == \
        (DATA / "tokenizer" / "tokenizer.json").read_bytes()
