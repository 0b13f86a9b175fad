"""The procedural corpus: determinism, a compositional grammar whose held-out productions never occur in
training, held-out pools, quarantine, certified answers, trap twins, bad input, and its packed training stream."""

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


# what a placeholder may stand for when rendered (a digit or number word, a vague phrase, a pool entry...)
_COUNT = r"(?:\d+|" + "|".join(P._NUMBER_WORDS) + "|several|a number|lots|a handful|plenty|" + \
    "|".join(re.escape(v) for v in grammar.VAGUE) + ")"
_SLOT_RX = {
    **{k: _COUNT for k in P._COUNTS},
    "money": r"(?:\d+ dollars|\$\d+|a certain amount|some amount)", "pct": r"(?:\d+%|\d+ percent|a certain percent|some percent)",
    "f": r"(?:\d+/\d+|part|some part)", "A": r"[A-Z][A-Za-z]*", "B": r"[A-Z][A-Za-z]*", "C": r"[A-Z][A-Za-z]*",
    "items": r"[a-z]+", "item": r"[a-z]+", "items2": r"[a-z]+", "adj": r"[a-z]+", "city": r".+?",
    "cont": "(?:" + "|".join(c[1] for c in pools.CONTAINERS) + ")", "conts": "(?:" + "|".join(c[0] for c in pools.CONTAINERS) + ")",
    "people1": "(?:" + "|".join(p[0] for p in pools.PEOPLE) + ")", "people2": "(?:" + "|".join(p[1] for p in pools.PEOPLE) + ")",
    "whole": "(?:" + "|".join(pools.WHOLES) + ")", "thing": "(?:" + "|".join(a[1] for a in pools.ACTS) + ")",
    "unit": "(?:" + "|".join(u[1] for u in pools.UNITS) + ")", "units": "(?:" + "|".join(u[0] for u in pools.UNITS) + ")",
    "act": "(?:" + "|".join(re.escape(a[0]).replace(r"\{n\}", _COUNT) for a in pools.ACTS) + ")",
    "old": r"\S+", "new": r"\S+", "field": "(?:name|city|code|count|item|year)",
    "fields": "(?:name|city|code|count|item|year)(?:, (?:name|city|code|count|item|year))*",
}
#: the fewest training productions a sentence slot / a copy instruction kind has (the wording of a copy
#: instruction has to state its transform exactly, which leaves fewer ways to say it)
MIN_TRAIN_PRODUCTIONS = {"sentence": 100, "copy": 40}


def _frame_regex(frame: str) -> re.Pattern:
    """What a production looks like once rendered: placeholders free, "a" possibly "an", any case."""
    out, pos = [], 0
    for m in re.finditer(r"\{(\w+)\}|\b[Aa]\b(?= )", frame):
        out.append(re.escape(frame[pos:m.start()]))
        out.append(_SLOT_RX[m.group(1)] if m.group(1) else "an?")
        pos = m.end()
    out.append(re.escape(frame[pos:]))
    return re.compile("".join(out) + r"\Z", re.IGNORECASE)


def _literal_words(text: str) -> frozenset:
    return frozenset(w.lower() for w in re.findall(r"[A-Za-z']+", re.sub(r"\{\w+\}", " ", text)))


_TRAIN_INDEX: dict = {}


def _train_index(slot):
    """The training productions of ``slot`` as (literal words, regex): a sentence can only match a frame whose
    literal words it contains, which keeps the check fast over thousands of frames."""
    if slot not in _TRAIN_INDEX:
        _TRAIN_INDEX[slot] = [(_literal_words(f), f) for f in grammar.variants(slot, "train")]
    return _TRAIN_INDEX[slot]


def _matches_a_training_production(slot, text):
    words = _literal_words(text)
    return [f for lits, f in _train_index(slot) if lits <= words and _frame_regex(f).match(text)]


def _sentences(text):
    return [s for s in re.split(r"(?<=[.?])\s+(?=[A-Z0-9$])", text) if s]


def _match_back(doc):
    """Each sentence of a rendered problem paired with the production (slot, frame) it was rendered from; a
    production may span up to three sentences ("... is 53. What is the number?")."""
    sents, i, out = _sentences(doc.question), 0, []
    while i < len(sents):
        for span in (1, 2, 3):
            text = " ".join(sents[i:i + span])
            hit = next(((slot, f) for slot, f in doc.frames if _frame_regex(f).match(text)), None)
            if hit:
                out.append((text, *hit))
                break
        else:
            raise AssertionError(f"no production of this document matches {sents[i]!r} in {doc.question!r}")
        i += span
    return out


@pytest.fixture(scope="module")
def eval_docs():
    from data import build_open
    return build_open.eval_docs()


def test_stream_is_deterministic_and_seed_dependent():
    a = list(itertools.islice(P.stream(3), 50))
    b = list(itertools.islice(P.stream(3), 50))
    c = list(itertools.islice(P.stream(4), 50))
    assert a == b
    assert a != c


def test_stream_never_repeats_a_document_in_practice():
    docs = [p + c for _, p, c in itertools.islice(P.stream(0), 3000) if "=" not in p[:12]]
    assert len(set(docs)) >= 0.99 * len(docs)


def test_every_slot_has_many_training_productions_and_some_held_out():
    counts = {}
    for slot in grammar.all_slots():
        prods = grammar.productions(slot)
        floor = MIN_TRAIN_PRODUCTIONS["copy" if slot.startswith("copy:") else "sentence"]
        assert len(prods.train) >= floor, (slot, len(prods.train))
        assert len(prods.heldout) >= 5, slot
        assert len(set(prods.train)) == len(prods.train) and len(set(prods.heldout)) == len(prods.heldout)
        counts[slot] = (len(prods.train), len(prods.heldout))
    # roughly one production in five is held out by hash, more with the wholly held-out parts
    train, held = sum(t for t, _ in counts.values()), sum(h for _, h in counts.values())
    assert 0.18 < held / (train + held) < 0.45


def test_heldout_productions_are_never_training_productions():
    train_all = {f for slot in grammar.all_slots() for f in grammar.variants(slot, "train")}
    for slot in grammar.all_slots():
        prods = grammar.productions(slot)
        assert not set(prods.heldout) & train_all, slot
        assert grammar.variants(slot, "validation") == grammar.variants(slot, "test") == prods.heldout
        # the split is a stable function of the frame text: a hash bucket, or a part marked held out
        assert not any(grammar.heldout_by_hash(f) for f in prods.train), slot
    assert grammar.heldout_by_hash("{A} has {n} {items} in the kitchen.")         # sha1, not Python's salted hash
    assert grammar.variants("have", "train") == grammar.productions("have").train


def test_marked_patterns_and_phrases_are_held_out_whole():
    held = set(grammar.variants("gain", "test"))
    assert "{B} adds {n} {items} to what {A} has." in held                        # a whole pattern
    assert any("purchases" in f for f in held)                                     # a verb phrase
    assert not any("purchases" in f for f in grammar.variants("gain", "train"))
    assert not any(f.startswith("With how many") for f in grammar.variants("q_now", "train"))


def test_heldout_productions_use_only_training_vocabulary():
    train_words = set().union(*(_literal_words(f) for s in grammar.all_slots() for f in grammar.variants(s, "train")))
    for slot in grammar.all_slots():
        for f in grammar.variants(slot, "test"):
            assert _literal_words(f) <= train_words, (slot, f, _literal_words(f) - train_words)


def test_pools_are_disjoint_and_open():
    tr, he = pools.pools()["train"], pools.pools()["heldout"]
    for field in ("names", "items", "words", "adjectives", "cities"):
        a, b = set(getattr(tr, field)), set(getattr(he, field))
        assert a and b and not a & b, field
        assert len(b) >= 100, field            # open pools, not a handful


def test_committed_eval_sets_are_the_rendered_documents(eval_docs):
    for split, docs in eval_docs.items():
        for kind in ("math", "traps"):
            recs = read_jsonl(DATA / f"open_{kind}_{split}.jsonl")
            assert [r["question"] for r in recs] == [d.question for d in docs[kind]], (split, kind)
        recs = read_jsonl(DATA / f"open_copy_{split}.jsonl")
        assert [r["instruction"] for r in recs] == [d.instruction for d in docs["copy"]], split


def test_every_heldout_sentence_is_a_heldout_production_and_matches_no_training_one(eval_docs):
    train_all = {f for slot in grammar.all_slots() for f in grammar.variants(slot, "train")}
    checked = 0
    for docs in eval_docs.values():
        for d in docs["math"] + docs["traps"]:
            for text, slot, frame in _match_back(d):
                assert frame in grammar.productions(slot).heldout and frame not in train_all, (slot, frame)
                assert not _matches_a_training_production(slot, text), (text, _matches_a_training_production(slot, text))
                checked += 1
        for c in docs["copy"]:
            slot = f"copy:{c.kind}"
            assert c.frame in grammar.productions(slot).heldout, c.frame
            assert _frame_regex(c.frame).match(c.instruction), (c.frame, c.instruction)
            assert not _matches_a_training_production(slot, c.instruction), c.instruction
    assert checked > 5000


def test_training_sentences_match_back_to_training_productions():
    r = random.Random(7)
    for _ in range(300):
        d = P.render_problem(r, "train", trap=r.choice([None, *P.TRAPS]))
        for _, slot, frame in _match_back(d):
            assert frame in grammar.productions(slot).train


def test_test_split_uses_only_heldout_names(eval_docs):
    train_names = set(pools.pools()["train"].names) - set(pools.pools()["heldout"].names)
    cities = sorted(pools.pools()["heldout"].cities, key=len, reverse=True)
    for d in eval_docs["test"]["math"]:
        text = d.question
        for city in cities:                         # a city may contain a first name ("East Martha")
            text = text.replace(city, "")
        names = {w.split("'")[0].rstrip(".,?") for w in text.split() if w[:1].isupper()}
        assert not names & train_names, d.question


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


def test_trap_twins_are_answerable_in_the_same_surface_forms():
    r = random.Random(13)
    vague_words = re.compile(r"\b(" + "|".join(grammar.VAGUE) + r"|a certain|some amount|some percent|some part)\b",
                             re.IGNORECASE)
    for _ in range(150):
        d = P.render_problem(r, "train", decoy="vague")
        assert d.answer is not None and d.decoy == "vague" and vague_words.search(d.question), d.question
        schema.certify_trace(P.trace_of(d), expected_answer=d.answer)
        d = P.render_problem(r, "train", "add", decoy="contradiction")
        (restated,) = [f for slot, f in d.frames if slot == "restate"]
        first = d.problem.sentences[0].values["n"]
        assert d.answer == str(d.problem.answer) and re.search(rf"\b{first}\b", d.question)
        t = P.render_problem(r, "train", "add", trap="contradiction")
        assert t.answer is None and any(slot == "restate" for slot, _ in t.frames)


def test_stream_mixes_traps_and_twins_in_equal_measure():
    docs = list(itertools.islice(P.stream(2), 20000))
    kinds = [k for k, _, _ in docs]
    abstain = sum(c.strip().startswith(schema.ABSTAIN_TAG) for _, _, c in docs)
    assert 0.05 <= abstain / len(docs) <= 0.08
    assert abs(kinds.count("trap") - kinds.count("twin")) < 0.2 * kinds.count("trap")


def test_missing_traps_only_drop_a_sentence_the_question_needs():
    r = random.Random(17)
    for _ in range(400):
        d = P.render_problem(r, "train", trap="missing")
        if d.trap != "missing":
            continue
        said = [slot for slot, _ in d.frames]
        dropped = [s for s in d.problem.sentences if s.slot not in said or said.count(s.slot) <
                   sum(x.slot == s.slot for x in d.problem.sentences)]
        assert dropped and all(s.droppable for s in dropped), (d.structure, d.question)


def test_each_question_asks_what_its_steps_compute():
    r = random.Random(19)
    asks = {"add": "q_now", "sub": "q_now", "add_sub": "q_now", "add_add": "q_now", "mul_sub": "q_now",
            "mul": "q_total", "add_mul": "q_handed_total", "div": "q_each", "sub_div": "q_each"}
    for s, q in asks.items():
        assert P.STRUCTURES[s](r).question.slot == q, s
    for f in grammar.variants("q_handed_total", "train") + grammar.variants("q_handed_total", "test"):
        assert " have " not in f                       # a product of groups and shares is handed out, not held


def test_copy_tasks_outputs_follow_from_inputs():
    r = random.Random(5)
    for kind in P.COPY_KINDS:
        for _ in range(20):
            c = P.render_copy(r, "train", kind)
            if kind == "copy":
                assert c.output == c.input
            elif kind == "bullets":
                assert c.output == "\n".join("- " + ln for ln in c.input.split("\n"))
            elif kind == "number":
                assert c.output == "\n".join(f"{i + 1}. {ln}" for i, ln in enumerate(c.input.split("\n")))
            elif kind == "rename":                       # the instruction names the old name and the new one
                named = set(re.findall(r"\b[a-z][a-z0-9]{2,6}\b", c.instruction))
                assert any(re.search(rf"\b{w}\b", c.input) and not re.search(rf"\b{w}\b", c.output) for w in named)
                assert any(re.search(rf"\b{w}\b", c.output) and not re.search(rf"\b{w}\b", c.input) for w in named)
            elif kind == "fix":
                diff = [(a, b) for a, b in zip(c.input.split("\n"), c.output.split("\n")) if a != b]
                assert len(diff) == 1


def test_pseudo_words_are_made_up_never_held_out_and_deterministic():
    words = pools.pools()["train"].words
    train, heldout = set(words), set(pools.pools()["heldout"].words)
    made = [P.pseudo_word(random.Random(i), words) for i in range(2000)]
    assert made == [P.pseudo_word(random.Random(i), words) for i in range(2000)]
    assert not set(made) & heldout
    assert sum(w not in train for w in made) >= 0.8 * len(made)      # mostly new strings, not pool words
    assert all(w.isalpha() and w.islower() and len(w) >= 3 for w in made)


def test_pseudo_words_change_only_the_free_words_of_training_copy_tasks():
    plain = list(itertools.islice(P.stream(3), 300))
    assert plain == list(itertools.islice(P.stream(3, "train", 0.0), 300))
    mixed = list(itertools.islice(P.stream(3, "train", 0.5), 300))
    assert mixed == list(itertools.islice(P.stream(3, "train", 0.5), 300))
    train = set(pools.pools()["train"].words)
    words = [w for k, p, c in mixed if k == "copy" for w in re.findall(r"[a-z]+", p.split("Input:")[-1])]
    new = [w for w in words if w not in train and len(w) > 7]
    assert len(new) >= 0.1 * len(words), (len(new), len(words))
    r = random.Random(5)
    for kind in ("copy", "bullets", "number"):      # the edit itself is unchanged
        c = P.render_copy(r, "train", kind, pseudo_words=1.0)
        assert c.output.replace("- ", "").split()[-1] == c.input.split()[-1]


@pytest.mark.parametrize("bad", [1.5, -0.1, "0.3", True, None])
def test_pseudo_words_must_be_a_share(bad):
    with pytest.raises(ValueError, match="pseudo_words must be a number in"):
        next(P.stream(0, "train", bad))


@pytest.mark.parametrize("split", ["validation", "test"])
def test_pseudo_words_are_refused_for_evaluation_splits(split):
    with pytest.raises(ValueError, match="train split only"):
        P.render_copy(random.Random(0), split, "copy", pseudo_words=0.3)
    with pytest.raises(ValueError, match="train split only"):
        next(P.stream(0, split, 0.3))


def test_line_wise_copy_tasks_come_in_a_range_of_lengths():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(DATA / "tokenizer_open"))
    r = random.Random(23)
    for kind in ("copy", "rename", "bullets", "number", "csv"):
        lens = [len(tok(P.render_copy(r, "train", kind).output, add_special_tokens=False)["input_ids"])
                for _ in range(150)]
        assert min(lens) < 100 and sum(100 <= n <= 400 for n in lens) >= 0.5 * len(lens), (kind, sorted(lens))
        assert max(lens) <= 600, kind


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
    with pytest.raises(ValueError, match="trap must be"):
        P.render_problem(random.Random(0), "train", trap="absent")
    with pytest.raises(ValueError, match="decoy must be"):
        P.render_problem(random.Random(0), "train", decoy="missing")
    with pytest.raises(ValueError, match="trap or a decoy"):
        P.render_problem(random.Random(0), "train", trap="vague", decoy="vague")
    with pytest.raises(ValueError, match="kind must be one of"):
        P.render_copy(random.Random(0), "train", "shout")
    with pytest.raises(ValueError, match="slot must be one of"):
        grammar.variants("nonsense", "train")
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


@pytest.mark.parametrize("split", ["Train", "bogus", "", None, ["train"]])
def test_grammar_refuses_an_unknown_split_naming_it(split):
    slot = grammar.all_slots()[0]
    with pytest.raises(ValueError, match="split must be one of"):
        grammar.sample(random.Random(0), slot, split)
    with pytest.raises(ValueError, match="split must be one of"):
        grammar.variants(slot, split)
