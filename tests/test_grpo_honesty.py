"""The honesty sweep on CPU: rewards on Instruct-style and malformed completions, prompts through the chat
template, the RL prompts' split from the held-out sets, arguments refused before a model loads, and the record."""
import json
import re

import pytest

from t4lib.models import procedural, schema
from t4lib.train import honesty
from t4lib.train import rewards as R

TRACE = schema.render_trace("Given: 3 boxes of 2. Find: how many?", ["Multiply."], ["3 * 2 = 6"], ["6 / 2 = 3"], "6")


# ----------------------------------------------------------------------------- rewards

@pytest.mark.parametrize("text, target, want", [
    ("3 + 4 = 7, so the answer is \\boxed{7}.<|im_end|>", "7", "correct"),
    ("So it is $7$.<|im_end|>", "7", "correct"),
    ("Total: **7**<|endoftext|>", "7", "correct"),
    ("\\boxed{\\frac{3}{4}}", "3/4", "correct"),
    ("\\boxed{-\\dfrac{6}{8}}", "-3/4", "correct"),
    ("**\\boxed{12}**", "12", "correct"),
    ("\\boxed{\\sqrt{49}}", "7", "correct"),            # no rational: math-verify behind its gate
    ("\\boxed{8}<|im_end|>\\boxed{7}", "7", "wrong"),    # what follows the turn's end is not read
    ("<abstain><|im_end|>", schema.ABSTAIN_TAG, "abstain_correct"),
    ("<abstain><|im_end|>", "7", "false_abstain"),
    ("\\boxed{7}", schema.ABSTAIN_TAG, "answered_trap"),
    ("I cannot answer: the number of apples is not given.", schema.ABSTAIN_TAG, "unparsed"),
    ("I cannot answer: the number of apples is not given.", "7", "unparsed"),
    ("\\boxed{(a+b+c+d+f+g+h)^{99}}", "7", "wrong"),
    ("$(\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7})^{99}$", "7", "wrong"),
])
def test_instruct_completions_are_read(text, target, want):
    assert R.outcome(text, target) == want


def test_chat_messages_with_none_or_list_content():
    none = [{"role": "assistant", "content": None}]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{7}"}, {"type": "image"}]}]
    assert R.outcome(none, "7") == "unparsed" and R.honesty_reward([none], ["7"]) == [R.REWARDS["unparsed"]]
    assert R.outcome(parts, "7") == "correct" and R.is_formatted(parts)
    assert R.format_reward([none, parts]) == [0.0, R.FORMAT_BONUS]
    assert R.outcome([], "7") == "unparsed"
    with pytest.raises(TypeError, match="content"):
        R.outcome([{"role": "assistant", "content": 7}], "7")
    with pytest.raises(TypeError, match="message dicts"):
        R.outcome(["\\boxed{7}"], "7")


def test_every_eos_marker_is_cut_before_the_format_is_judged():
    done = " The answer is 7.<|im_end|>\n<|endoftext|>"
    assert R.is_formatted(done) and R.outcome(done, "7") == "correct"
    assert R.is_formatted("<abstain><|im_end|>") and R.is_formatted(TRACE + "<|im_end|>", "tags")

    class Tok:  # a hub tokenizer whose generation config lists an EOS the project's markers do not know
        eos_token = "<|eot_id|>"

        def convert_ids_to_tokens(self, i):
            return {7: "<|end_of_turn|>", 9: "<|eot_id|>"}[i]

    class GC:
        eos_token_id = [7, 9]

    marks = R.end_markers(Tok(), GC())
    assert {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_turn|>"} <= set(marks)
    text = "\\boxed{7}<|end_of_turn|> and then \\boxed{8}"
    assert R.outcome(text, "7", markers=marks) == "correct" and R.is_formatted(text, markers=marks)


def test_reward_table_override_is_checked():
    from t4lib.train.grpo import HonestyReward, check_reward_table

    assert check_reward_table({"false_abstain": -1.0})["false_abstain"] == -1.0
    for bad in ({"nope": 1.0}, {"correct": float("nan")}, {"correct": True}):
        with pytest.raises(ValueError, match="reward table"):
            check_reward_table(bad)
    r = HonestyReward(None, "tags", {"false_abstain": -2.0})
    assert r(["<abstain>", TRACE], ["6", "6"]) == [-2.0, 1.0]


# ----------------------------------------------------------------------------- prompts

@pytest.fixture(scope="module")
def open_tok():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained("data/models/small-gpu")


def test_prompts_go_through_the_chat_template_with_a_system_prompt(open_tok):
    p = honesty.prompt_for(open_tok, "Ann has 3 pens. How many pens does Ann have?", "tags")
    assert p.startswith("<|im_start|>system\n") and schema.ABSTAIN_TAG in p and p.endswith("<|im_start|>assistant\n")
    assert honesty.system_prompt("tags") in p
    # the project's plain-format models keep their pretraining text
    assert honesty.prompt_for(open_tok, "Q?", "plain") == "Question: Q?\nAnswer:"
    assert schema.ABSTAIN_TAG in honesty.system_prompt("plain") and "\\boxed" in honesty.system_prompt("plain")

    class Hub:  # a chat tokenizer without the project's <abstain> token reads chat in either format
        chat_template = "x"

        def get_vocab(self):
            return {"a": 0}

    assert honesty.uses_chat(Hub(), "plain") and honesty.uses_chat(Hub(), "tags")
    with pytest.raises(ValueError, match="fmt"):
        honesty.prompt_for(open_tok, "Q?", "xml")


def test_stop_ids_take_the_generation_config_list(open_tok):
    from t4lib.train.grpo import stop_ids

    class M:
        class generation_config:
            eos_token_id = [151645, 0]

    ids = stop_ids(M(), open_tok)
    assert ids[:2] == [151645, 0] and open_tok.convert_tokens_to_ids(schema.IM_END) in ids


# ----------------------------------------------------------------------------- data and split

def test_rl_prompts_pair_traps_with_twins_and_are_deterministic():
    a = honesty.rl_records(40, seed=3)
    assert a == honesty.rl_records(40, seed=3)
    assert sum(r["trap"] for r in a) == 20
    for trap, twin in zip(a[0::2], a[1::2]):
        assert trap["trap"] and not twin["trap"] and twin["twin_of"] == trap["trap_kind"]
        assert trap["structure"] == twin["structure"] and trap["target"] == schema.ABSTAIN_TAG
        assert schema.normalize_answer(twin["target"]) == twin["target"]
    few = honesty.rl_records(40, seed=3, trap_fraction=0.25)
    assert sum(r["trap"] for r in few) == 10
    for bad in (0, 1.0, -0.1, True):
        with pytest.raises(ValueError, match="trap_fraction"):
            honesty.rl_records(10, trap_fraction=bad)


def test_no_rl_prompt_shares_a_frame_or_a_name_with_a_test_question(monkeypatch):
    """Every sentence frame and every entity (people, things, city) an RL prompt is rendered with, against
    those of the validation and test sets (regenerated by their build script with the entities recorded)."""
    from data.build_open import eval_docs

    seen = []
    init = procedural.Context.__init__

    def recording(self, r, split):
        init(self, r, split)
        seen.append(self)

    monkeypatch.setattr(procedural.Context, "__init__", recording)

    def entities():
        # things by their singular, the word the pools split by (a plural may spell another word)
        out = {w for c in seen for w in (c.A, c.B, c.C, c.city, *(sg for _, sg in c.items))}
        seen.clear()
        return out

    docs = eval_docs()
    held = [d for split in ("validation", "test") for d in docs[split]["math"] + docs[split]["traps"]]
    held_names = entities()
    rl = honesty.rl_records(400)
    rl_names = entities()
    held_frames = {tuple(f) for d in held for f in d.frames}
    rl_frames = {tuple(f) for r in rl for f in r["frames"]}
    assert held_frames and rl_frames and not (rl_frames & held_frames)
    assert held_names and rl_names and not (rl_names & held_names), sorted(rl_names & held_names)[:5]
    test_questions = {r["question"] for r in honesty.eval_records("test")}
    assert {d.question for d in docs["test"]["math"] + docs["test"]["traps"]} >= test_questions
    assert not {r["question"] for r in rl} & test_questions


def test_eval_records_are_the_named_split():
    t = honesty.eval_records("test")
    assert sum(r["trap"] for r in t) == 228 and all(r["target"] == schema.ABSTAIN_TAG for r in t if r["trap"])
    assert all(r["n_steps"] >= 1 for r in t if not r["trap"])
    assert len(honesty.eval_records("validation", 3, 4)) == 7
    for bad in ("train", "heldout", None):
        with pytest.raises(ValueError, match="split"):
            honesty.eval_records(bad)


# ----------------------------------------------------------------------------- arguments and record

@pytest.mark.parametrize("argv, match", [
    (["--arms", "fp17"], "arm"),
    (["--max_steps", "-3"], "max_steps"),
    (["--max_steps", "0"], "max_steps"),
    (["--max_steps", "301"], "at most 300"),
    (["--split", "train"], "invalid choice"),
    (["--trap-fraction", "1.5"], "trap.fraction"),
    (["--seeds", "0", "0"], "repeats"),
    (["--reward", "correct=abc"], "OUTCOME=NUMBER"),
    (["--reward", "nope=1"], "unknown outcome"),
    (["--start", "/nonexistent/ckpt"], "start"),
    (["--learning_rate", "-1"], "--lr|learning.rate"),
])
def test_bad_arguments_refused_before_a_model_loads(argv, match, tmp_path, monkeypatch, capsys):
    from t4lib import models
    from t4lib.train import grpo, sft

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load", boom)
    monkeypatch.setattr(sft, "load", boom)
    with pytest.raises(SystemExit) as e:
        grpo.main(["honesty-sweep", "--out", str(tmp_path / "r.json"), *argv])
    assert e.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_honesty_arm_needs_a_start(tmp_path, capsys):
    from t4lib.train import grpo

    with pytest.raises(SystemExit):
        grpo.main(["honesty-arm", "--out", str(tmp_path / "a.json")])
    assert "--start" in capsys.readouterr().err


def _run(arm, seed, abst, false, acc, n=10):
    from t4lib.train.grpo import _rate, degenerate

    after = {"abstention": _rate(abst, n), "false_abstention": _rate(false, n), "answerable_accuracy": _rate(acc, n)}
    after["degenerate"] = degenerate(after)
    return {"arm": arm, "seed": seed, "steps": 5, "after": after, "curves": [{"reward": 0.5}, {"reward": 1.0}]}


def test_summary_figures_and_degenerate_policies(tmp_path):
    from t4lib.core import results
    from t4lib.train import grpo

    start = {k: grpo._rate(v, 10) for k, v in (("abstention", 1), ("false_abstention", 0), ("answerable_accuracy", 6))}
    runs = [_run("fp16", 0, 6, 0, 6), _run("fp16", 1, 8, 1, 5), _run("int4", 0, 10, 10, 0), _run("int4", 1, 0, 0, 6)]
    s = grpo.honesty_summary(start, runs)
    assert s["fp16"]["abstention"]["mean"] == pytest.approx(0.7)
    assert (s["fp16"]["abstention"]["min"], s["fp16"]["abstention"]["max"]) == (0.6, 0.8)
    assert s["fp16"]["answerable_accuracy_delta"]["per_seed"] == pytest.approx([0.0, -0.1])
    assert s["fp16"]["degenerate"] == [None, None]
    assert s["int4"]["degenerate"] == ["abstains_always", "abstains_never"]
    env = {"device": "cpu", "driver": "n/a", "torch": "n/a", "clocks": {}, "throttle": []}
    figs = grpo.honesty_figures("small-gpu", start, s, "test", env)
    names = {f["name"] for f in figs}
    for arm in ("fp16", "int4"):
        for k in ("abstention", "false_abstention", "answerable_accuracy_delta"):
            assert f"grpo/small-gpu/{arm}/{k}" in names
    assert "grpo/small-gpu/sft_start/abstention" in names
    f = next(f for f in figs if f["name"] == "grpo/small-gpu/fp16/abstention")
    assert f["tag"] == "ARITHMETIC" and f["counts"] == [[6, 10], [8, 10]] and len(f["ci95_per_seed"]) == 2
    assert "degenerate" in next(f for f in figs if f["name"] == "grpo/small-gpu/int4/abstention")["note"]
    out = results.write(tmp_path / "r.json", figs, producer=grpo.__file__, summary=s)
    json.loads(out.read_text())


def test_degenerate():
    from t4lib.train.grpo import _rate, degenerate

    assert degenerate({"abstention": _rate(100, 100), "false_abstention": _rate(99, 100)}) == "abstains_always"
    assert degenerate({"abstention": _rate(0, 100), "false_abstention": _rate(1, 100)}) == "abstains_never"
    assert degenerate({"abstention": _rate(50, 100), "false_abstention": _rate(1, 100)}) is None
    assert procedural.TRAPS == ("vague", "missing", "contradiction")

