"""The honesty sweep's recipe machinery on CPU: the SFT start's few abstentions (their data, their split), the
bounded launcher, the validation score, the selection record a sweep reads, and arguments refused before any
model loads."""
import json
import re
import sys
import time

import pytest

from t4lib.models import procedural, schema
from t4lib.train import grpo, honesty


# ----------------------------------------------------------------------------- the start's abstentions

def test_sft_abstentions_are_training_traps_with_the_lone_tag():
    recs = honesty.sft_abstain_records(30)
    assert recs == honesty.sft_abstain_records(30)
    assert all(r["trace"] == r["answer"] == schema.ABSTAIN_TAG and r["trap"] for r in recs)
    assert {r["trap_kind"] for r in recs} <= set(procedural.TRAPS) and len({r["trap_kind"] for r in recs}) > 1
    # its own stream: no RL prompt and no test question repeats one
    rl = {r["question"] for r in honesty.rl_records(400)}
    test = {r["question"] for r in honesty.eval_records("test")} | {r["question"] for r in honesty.eval_records("validation")}
    qs = {r["question"] for r in recs}
    assert not qs & rl and not qs & test
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n must"):
            honesty.sft_abstain_records(bad)


def test_traces_dataset_takes_abstentions_and_refuses_half_of_one():
    from transformers import AutoTokenizer
    from t4lib.train.data import traces_dataset

    tok = AutoTokenizer.from_pretrained("data/models/small-gpu")
    good = honesty.sft_abstain_records(2)
    ds, rep = traces_dataset(tok, good)
    assert rep.n_kept == 2 and ds[0]["completion"] == schema.ABSTAIN_TAG + schema.IM_END
    half = [dict(good[0], answer="7")]
    _, rep = traces_dataset(tok, half + good)
    assert rep.n_kept == 2 and "abstain_mismatch" in rep.rejected
    with pytest.raises(ValueError, match="abstain_mismatch"):
        traces_dataset(tok, half, on_error="raise")


@pytest.mark.parametrize("share", [-0.1, 0.5, 1, "0.1", True])
def test_abstain_share_is_checked(share):
    with pytest.raises(ValueError, match="abstain_share"):
        grpo.check_abstain_share(share)


# ----------------------------------------------------------------------------- launcher

def _job(tmp_path, i, body):
    f = tmp_path / f"job{i}.json"
    code = f"import json, time, sys; t0 = time.time(); {body}; json.dump(dict(i={i}, t0=t0, t1=time.time()), open({str(f)!r}, 'w'))"
    return f, [sys.executable, "-c", code], None


def test_run_bounded_keeps_at_most_n_running_and_names_failures(tmp_path):
    jobs = [_job(tmp_path, i, "time.sleep(0.4)") for i in range(5)]
    jobs.insert(2, _job(tmp_path, 9, "sys.exit(3)"))
    recs, errors = grpo.run_bounded(jobs, 2, poll_s=0.05)
    assert [r["i"] for r in recs] == [0, 1, 2, 3, 4]
    assert len(errors) == 1 and "job9: exit 3" in errors[0] and "job9.log" in errors[0]
    spans = [(r["t0"], r["t1"]) for r in recs]
    most = max(sum(a <= t0 < b for a, b in spans) for t0, _ in spans)   # running at each start
    assert most <= 2
    with pytest.raises(ValueError, match="max_parallel"):
        grpo.run_bounded(jobs, 0)


def test_arm_job_caps_each_process_at_its_share():
    f, cmd, env = grpo.arm_job(grpo.Path("/tmp/x.json"), "/tmp/start", "cp_hybrid", 1, grpo.Path("/tmp/s"), 1e9,
                               {"false_abstain": -1.0}, None, None, 8, {"beta": 0.04, "split": "validation"})
    assert cmd[cmd.index("--memory-fraction") + 1] == "0.1150"
    assert "false_abstain=-1.0" in cmd and cmd[cmd.index("--beta") + 1] == "0.04"
    assert env["OMP_NUM_THREADS"] == "1"
    _, cmd, _ = grpo.arm_job(grpo.Path("/tmp/x.json"), "/tmp/start", "fp16", 0, grpo.Path("/tmp/s"), 1e9, None, None,
                             None, None, {})
    assert "--memory-fraction" not in cmd


# ----------------------------------------------------------------------------- score and selection record

def _after(abst, false, acc, n=100):
    a = {"abstention": grpo._rate(abst, n), "false_abstention": grpo._rate(false, n),
         "answerable_accuracy": grpo._rate(acc, n)}
    a["degenerate"] = grpo.degenerate(a)
    return a


def test_recipe_score_rewards_abstention_and_charges_false_abstention_and_lost_accuracy():
    start = _after(5, 1, 70)
    assert grpo.recipe_score(_after(60, 2, 70), start) == pytest.approx(0.60 - 0.04)
    assert grpo.recipe_score(_after(60, 2, 60), start) == pytest.approx(0.60 - 0.04 - 0.20)
    assert grpo.recipe_score(_after(60, 2, 75), start) == pytest.approx(0.56)    # a gain is not a bonus
    assert grpo.recipe_score(_after(100, 100, 0), start) is None                 # always abstains
    assert grpo.recipe_score(_after(0, 0, 70), start) is None                    # never abstains
    assert len({grpo.recipe_name(r) for r in grpo.RECIPE_GRID}) == len(grpo.RECIPE_GRID)


def test_recipe_from_reads_the_choice_and_refuses_what_is_not_one(tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    rec = tmp_path / "sel.json"
    rec.write_text(json.dumps({"chosen": {"recipe": {"sft_abstain_share": 0.05, "beta": 0.04}, "start": str(start)}}))
    assert grpo.recipe_from(rec)["recipe"]["beta"] == 0.04
    (tmp_path / "none.json").write_text(json.dumps({"figures": []}))
    with pytest.raises(ValueError, match="no chosen recipe"):
        grpo.recipe_from(tmp_path / "none.json")
    start.rmdir()
    with pytest.raises(ValueError, match="not a saved checkpoint"):
        grpo.recipe_from(rec)


# ----------------------------------------------------------------------------- arguments

@pytest.fixture
def no_model(monkeypatch):
    from t4lib import models
    from t4lib.train import sft

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load", boom)
    monkeypatch.setattr(sft, "load", boom)
    monkeypatch.setattr(grpo, "make_sft_start", boom)


@pytest.mark.parametrize("cmd, argv, match", [
    ("honesty-select", ["--split", "test"], "validation only"),
    ("honesty-select", ["--beta", "0.1"], "grid"),
    ("honesty-select", ["--reward", "correct=2"], "grid"),
    ("honesty-select", ["--max-parallel", "0"], "--max-parallel"),
    ("honesty-select", ["--arm", "fp17"], "arm"),
    ("honesty-sweep", ["--max-parallel", "-2"], "--max-parallel"),
    ("honesty-sweep", ["--sft-abstain-share", "0.6"], "abstain-share"),
    ("honesty-sweep", ["--recipe-from", "/nonexistent/sel.json"], "--recipe-from"),
    ("sft-start", ["--abstain-share", "-0.1", "--save-to", "/tmp/t4lib_never"], "abstain-share"),
    ("sft-start", ["--epochs", "0", "--save-to", "/tmp/t4lib_never"], "--epochs"),
])
def test_bad_arguments_refused_before_a_model_loads(cmd, argv, match, tmp_path, no_model, capsys):
    with pytest.raises(SystemExit) as e:
        grpo.main([cmd, "--out", str(tmp_path / "r.json"), *argv])
    assert e.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_recipe_from_excludes_the_options_it_sets(tmp_path, no_model, capsys):
    start = tmp_path / "start"
    start.mkdir()
    sel = tmp_path / "sel.json"
    sel.write_text(json.dumps({"chosen": {"recipe": {}, "start": str(start)}}))
    with pytest.raises(SystemExit):
        grpo.main(["honesty-sweep", "--out", str(tmp_path / "r.json"), "--recipe-from", str(sel),
                   "--reward", "correct=2"])
    assert "drop --start" in capsys.readouterr().err


def test_selection_ranks_the_runs_and_records_the_choice(tmp_path, monkeypatch):
    """honesty_select with its processes stubbed: two starts, four recipes (one degenerate, one failed run); the
    choice is the best non-degenerate score, the record holds every row, and a sweep can read it back."""
    grid = [dict(sft_abstain_share=sh, beta=b, rewards={"false_abstain": -1.0}) for sh in (0.0, 0.05) for b in (0.0, 0.04)]
    outcomes = {"share0_beta0_fa-1": (0, 0, 70), "share0_beta0.04_fa-1": (40, 10, 60),
                "share0.05_beta0_fa-1": (55, 2, 69)}          # share0.05_beta0.04 fails

    def fake_bounded(jobs, max_parallel, poll_s=0.5):
        recs = []
        for f, cmd, _ in jobs:
            if "sft-start" in cmd:
                save = grpo.Path(cmd[cmd.index("--save-to") + 1])
                save.mkdir(parents=True)
                recs.append({"abstain_share": float(cmd[cmd.index("--abstain-share") + 1]), "saved_to": str(save)})
                continue
            assert cmd[cmd.index("--split") + 1] == "validation" and "--memory-fraction" in cmd
            name = grpo.Path(cmd[cmd.index("--save-to") + 1]).name.removeprefix("select_")
            if name in outcomes:
                recs.append({"saved_to": cmd[cmd.index("--save-to") + 1], "steps": 3, "after": _after(*outcomes[name])})
        return recs, ["select_share0.05_beta0.04_fa-1: exit 1"] if len(jobs) == 4 else []

    monkeypatch.setattr(grpo, "run_bounded", fake_bounded)
    monkeypatch.setattr(grpo.models, "load", lambda *a, **k: (object(), None))
    monkeypatch.setattr(grpo, "evaluate_split", lambda *a, **k: _after(3, 1, 70))
    out = tmp_path / "sel.json"
    ch = grpo.honesty_select(str(out), grid=grid, save_dir=str(tmp_path / "m"), logs=str(tmp_path / "l"),
                             max_parallel=4, max_steps=3)
    assert ch["name"] == "share0.05_beta0_fa-1" and ch["score"] == pytest.approx(0.55 - 0.04 - 0.02)
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["share0_beta0_fa-1"]["score"] is None and rows["share0_beta0_fa-1"]["degenerate"] == "abstains_never"
    assert not rows["share0.05_beta0.04_fa-1"]["ran"] and doc["errors"]
    assert {f["name"].split("/")[-2] for f in doc["figures"]} == {"share0_beta0.04_fa-1", "share0.05_beta0_fa-1"}
    assert grpo.recipe_from(out)["start"].endswith("sft_start_share0.05")
