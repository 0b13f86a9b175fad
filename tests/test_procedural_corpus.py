"""The procedural corpus: determinism, held-out productions and pools, quarantine, certified answers,
bad input, and its packed training stream."""

import itertools
import json
import random
import re
import sys
from fractions import Fraction
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

sympy = pytest.importorskip("sympy")

from data._common import read_jsonl, sha256_file  # noqa: E402
from t4lib.models import grammar, pools, procedural as P, schema  # noqa: E402

SPLIT_FILES = ["open_math_validation.jsonl", "open_math_test.jsonl", "open_traps_validation.jsonl",
               "open_traps_test.jsonl"]


# what a placeholder may stand for: one word, except amounts with units and multi-word phrases
_SLOT_RX = {"money": r"\S+(?: dollars)?", "money2": r"\S+(?: dollars)?", "pct": r"\S+(?: percent)?",
            "act": r".+?", "city": r".+?", "whole": r"the \S+"}


def _frame_regex(template: str) -> re.Pattern:
    """A frame with every placeholder (and every synonym-able word) free: what the frame looks like."""
    words = []
    for w in (template[:1].lower() + template[1:]).split(" "):
        if w == "a":                                # "a" becomes "an" before a vowel
            words.append("an?")
        elif w in grammar.SYNONYMS:
            words.append("(?:" + "|".join(re.escape(x) for x in grammar.SYNONYMS[w]) + ")")
        else:
            words.append(re.sub(r"\\\{([A-Za-z0-9]+)\\\}", lambda m: _SLOT_RX.get(m.group(1), r"\S+"), re.escape(w)))
    return re.compile(r"\ ".join(words) + r"\Z")


def _normal(sentence: str) -> str:
    """The sentence without an opener, first letter lower-cased (frames are matched on this)."""
    for o in grammar.OPENERS:
        if sentence.startswith(o + " "):
            sentence = sentence[len(o) + 1:]
            break
    return sentence[:1].lower() + sentence[1:]


def _frames(split, min_literal_words=0):
    """Frame regexes per slot; ``min_literal_words`` leaves out frames so open that unrelated text fits them
    ("{A} {act} every {unit}." fits any sentence with "every" in it)."""
    def literal(t):
        return sum(1 for w in t.split(" ") if "{" not in w)
    return {slot: [_frame_regex(t) for t in grammar.variants(slot, split) if literal(t) >= min_literal_words]
            for slot in grammar.SLOTS}


def _sentences(text):
    return [s for s in re.split(r"(?<=[.?])\s+(?=[A-Z0-9$])", text) if s]


def test_stream_is_deterministic_and_seed_dependent():
    a = list(itertools.islice(P.stream(3), 50))
    b = list(itertools.islice(P.stream(3), 50))
    c = list(itertools.islice(P.stream(4), 50))
    assert a == b
    assert a != c


def test_stream_never_repeats_a_document_in_practice():
    docs = [p + c for _, p, c in itertools.islice(P.stream(0), 3000) if "=" not in p[:12]]
    assert len(set(docs)) >= 0.99 * len(docs)


def test_train_and_heldout_frames_and_pools_are_disjoint():
    for slot, (train, held) in {**grammar.SLOTS, **grammar.COPY_INSTRUCTIONS}.items():
        assert train and held, slot
        assert not set(train) & set(held), slot
    tr, he = pools.pools()["train"], pools.pools()["heldout"]
    for field in ("names", "items", "words", "adjectives", "cities"):
        a, b = set(getattr(tr, field)), set(getattr(he, field))
        assert a and b and not a & b, field
        assert len(b) >= 100, field            # open pools, not a handful


def test_test_split_uses_only_heldout_names_and_frames():
    r = random.Random(7)
    train_pool = set(pools.pools()["train"].names)
    cities = sorted(pools.pools()["heldout"].cities, key=len, reverse=True)
    held_frames, train_frames = _frames("test"), _frames("train", min_literal_words=2)
    all_held = [rx for v in held_frames.values() for rx in v]
    for _ in range(300):
        d = P.render_problem(r, "test")
        text = d.question
        for city in cities:                         # a city may contain a first name ("East Martha")
            text = text.replace(city, "")
        names = {w.split("'")[0].rstrip(".,?") for w in text.split() if w[:1].isupper()}
        assert not names & train_pool - set(pools.pools()["heldout"].names)
        sents, i = _sentences(d.question), 0
        while i < len(sents):       # a frame may span two sentences ("... is 53. What is the number?")
            for span in (1, 2):
                s = _normal(" ".join(sents[i:i + span]))
                if any(rx.match(s) for rx in all_held):
                    break
            else:
                raise AssertionError(f"no held-out frame matches {sents[i]!r}")
            assert not any(rx.match(s) for v in train_frames.values() for rx in v), s
            i += span


def test_quarantined_entities_are_in_no_pool_and_no_generated_text():
    q_names = set(pools.QUARANTINE_NAMES)
    q_items = {w for pair in pools.QUARANTINE_ITEMS for w in pair}
    for pool in pools.pools().values():
        assert not q_names & set(pool.names)
        assert not q_items & {w for pair in pool.items for w in pair}
        assert not q_items & set(pool.words)
    text = " ".join(p + c for _, p, c in itertools.islice(P.stream(1), 2000))
    words = set(re.findall(r"[A-Za-z]+", text))
    assert not (q_names | q_items) & words
    for name in ["open_traces.jsonl"] + SPLIT_FILES:
        blob = (DATA / name).read_text()
        assert not {w for w in q_names | q_items if re.search(rf"\b{w}\b", blob)}, name


@pytest.mark.parametrize("name", ["open_math_validation.jsonl", "open_math_test.jsonl"])
def test_every_committed_answer_is_certified_with_sympy(name):
    for rec in read_jsonl(DATA / name):
        if not rec["steps"]:                           # a reading question: the answer is a stated count
            word = P._NUMBER_WORDS[int(rec["answer"])] if int(rec["answer"]) <= 20 else rec["answer"]
            assert re.search(rf"\b({rec['answer']}|{word})\b", rec["question"]), rec
            continue
        for step in rec["steps"]:
            lhs, rhs = step.split("=")
            assert sympy.sympify(lhs, rational=True) == sympy.Rational(rhs.strip()), step
        assert sympy.Rational(rec["steps"][-1].split("=")[1].strip()) == sympy.Rational(rec["answer"])


def test_generated_problems_certify_and_match_the_closed_form():
    r = random.Random(11)
    for _ in range(40):
        for s in P.STRUCTURES:
            d = P.render_problem(r, "train", s)
            sec = schema.certify_trace(P.trace_of(d), expected_answer=d.answer)
            assert Fraction(sec["values"][-1]) == Fraction(d.answer)


def test_traces_file_is_certified():
    recs = read_jsonl(DATA / "open_traces.jsonl")
    assert len(recs) >= 2000
    for rec in recs[::7]:
        schema.certify_trace(rec["trace"], expected_answer=rec["answer"])


def test_validation_and_test_share_no_question():
    for kind in ("math", "traps", "copy"):
        key = "input" if kind == "copy" else "question"
        v = {r[key] for r in read_jsonl(DATA / f"open_{kind}_validation.jsonl")}
        t = {r[key] for r in read_jsonl(DATA / f"open_{kind}_test.jsonl")}
        assert v and t and not v & t, kind


def test_traps_need_a_number_they_do_not_give():
    r = random.Random(3)
    for trap in ("vague", "missing", "contradiction"):
        for _ in range(30):
            d = P.render_problem(r, "train", trap=trap)
            assert d.answer is None and d.trap in ("vague", "missing", "contradiction")
            assert schema.math_completion(d.steps, d.answer).strip() == schema.ABSTAIN_TAG


def test_copy_tasks_outputs_follow_from_inputs():
    r = random.Random(5)
    for kind in P.COPY_KINDS:
        for _ in range(20):
            c = P.render_copy(r, "train", kind)
            if kind == "copy":
                assert c.output == c.input
            elif kind == "bullets":
                assert c.output == "\n".join("- " + ln for ln in c.input.split("\n"))
            elif kind == "fix":
                diff = [(a, b) for a, b in zip(c.input.split("\n"), c.output.split("\n")) if a != b]
                assert len(diff) == 1


def test_committed_eval_files_match_the_manifest():
    man = json.loads((DATA / "manifest.json").read_text())
    for name in SPLIT_FILES + ["open_copy_validation.jsonl", "open_copy_test.jsonl", "open_traces.jsonl"]:
        assert sha256_file(DATA / name) == man["files"][name]["sha256"], name
    assert sha256_file(DATA / "tokenizer_open" / "tokenizer.json") == man["tokenizer_open"]["sha256"]


@pytest.mark.parametrize("bad,err", [(1.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_seed_must_be_an_int(bad, err):
    with pytest.raises(err, match="seed must be an int"):
        next(P.stream(bad))


@pytest.mark.parametrize("call", [lambda: next(P.stream(0, "dev")), lambda: P.render_copy(random.Random(0), "eval"),
                                  lambda: pools.pool_for("heldout")])
def test_unknown_split_is_a_clear_error(call):
    with pytest.raises(ValueError, match="split must be one of"):
        call()


def test_unknown_structure_and_preset_are_clear_errors():
    from t4lib.models import tiny
    with pytest.raises(ValueError, match="structure must be one of"):
        P.render_problem(random.Random(0), "train", "cube_root")
    with pytest.raises(ValueError, match="preset must be one of"):
        tiny.get_preset("medium-gpu")


def test_packed_stream_batches_are_deterministic_and_weighted():
    torch = pytest.importorskip("torch")
    from t4lib.models import packing
    s = packing.PackedStream(str(DATA / "tokenizer_open"), seed=0, seq_len=64, batch_size=2, prompt_weight=0.25)
    a, b = next(iter(s)), next(iter(s))
    assert torch.equal(a[0], b[0]) and a[0].shape == (2, 65) and a[1].shape == (2, 64)
    assert set(a[1].unique().tolist()) <= {0.25, 1.0}
    with pytest.raises(ValueError, match="seq_len"):
        packing.PackedStream(str(DATA / "tokenizer_open"), seed=0, seq_len=0, batch_size=2)
