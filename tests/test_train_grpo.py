"""GRPO with engine rollouts: rewards, importance weights, the CP-Hybrid policy, rollouts, a few GRPO steps."""
import math

import pytest
import torch

from t4lib.models import schema
from t4lib.train import rewards as R
from t4lib.train.cp_hybrid import (
    CPHybridPolicy, build_cp_hybrid, fp16_policy, layer_sensitivity, rtn_policy,
)
from t4lib.train.importance import importance_weights, mismatch_metrics

cuda = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py); part of the GPU verification ledger


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: tiny-model forwards are faster alone than on two threads contending with other
    processes on a busy 2-core CI machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny():
    from t4lib import models
    return models.load("tiny-cpu", dtype=torch.float32)


# ----------------------------------------------------------------------------- rewards

@pytest.mark.parametrize("text,target,outcome", [
    (" 3 + 4 = 7. The answer is 7.", "7", "correct"),
    (" 3 + 4 = 8. The answer is 8.", "7", "wrong"),
    (" <abstain>", "<abstain>", "abstain_correct"),
    (" The answer is 5.", "<abstain>", "answered_trap"),
    (" <abstain>", "7", "false_abstain"),
    (" I do not know", "7", "unparsed"),
    (" 1 / 2 = 1/2. The answer is 2/4.", "1/2", "correct"),
])
def test_reward_outcomes(text, target, outcome):
    assert R.outcome(text, target) == outcome
    assert R.honesty_reward([text], [target]) == [R.REWARDS[outcome]]


def test_always_abstain_pays_less_than_answering():
    # half traps, half answerable: always abstaining earns 0.5*1 - 0.5*0.5 = 0.25 < answering all correctly (0)
    # plus abstaining on the traps (1): the penalty keeps the degenerate policy below the honest one
    targets = ["<abstain>", "7"]
    always = sum(R.honesty_reward([" <abstain>"] * 2, targets)) / 2
    honest = sum(R.honesty_reward([" <abstain>", " The answer is 7."], targets)) / 2
    assert always == pytest.approx(0.25) and honest == 1.0


def test_format_reward_plain_and_tags():
    assert R.format_reward([" 2 * 3 = 6. The answer is 6.", " <abstain>", "6", " The answer is 6"]) == \
        [R.FORMAT_BONUS, R.FORMAT_BONUS, 0.0, 0.0]
    trace = schema.render_trace("Given 2 and 3.", ["Multiply."], ["2 * 3 = 6"], ["6 / 3 = 2"], "6")
    assert R.format_reward([trace, " The answer is 6."], fmt="tags") == [R.FORMAT_BONUS, 0.0]
    assert R.outcome(trace, "6", fmt="tags") == "correct"
    assert R.outcome("<abstain>", "<abstain>", fmt="tags") == "abstain_correct"


def test_chat_completions_are_read():
    assert R.honesty_reward([[{"role": "assistant", "content": " <abstain>"}]], ["<abstain>"]) == [1.0]


def test_trainer_rewards_keep_the_abstain_tag(tiny):
    from t4lib.train.grpo import FormatReward, HonestyReward
    _, tok = tiny
    ids = [tok(" <abstain>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
           tok(" 2 + 5 = 7. The answer is 7.", add_special_tokens=False)["input_ids"]]
    texts = tok.batch_decode(ids, skip_special_tokens=True)  # what TRL passes: the tag is gone
    assert schema.ABSTAIN_TAG not in texts[0]
    assert HonestyReward(tok)(texts, ["<abstain>", "7"], completion_ids=ids) == [1.0, 1.0]
    assert FormatReward(tok)(texts, completion_ids=ids) == [R.FORMAT_BONUS] * 2


def test_reward_bad_input():
    with pytest.raises(ValueError, match="target"):
        R.outcome(" 7", "")
    with pytest.raises(ValueError, match="differ in length"):
        R.honesty_reward([" 7"], ["7", "8"])
    with pytest.raises(ValueError, match="fmt"):
        R.predicted(" 7", fmt="xml")
    with pytest.raises(TypeError, match="completion"):
        R.outcome(7, "7")


# ----------------------------------------------------------------------------- importance weights

def _hand():
    old = torch.tensor([[-0.1, -0.2, -0.3], [-1.0, -0.5, 0.0]])
    samp = torch.tensor([[-0.2, -0.2, -0.1], [-0.2, -0.1, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return old, samp, mask


def test_importance_weights_hand_computed():
    old, samp, mask = _hand()
    # row 0: d = 0.1, 0, -0.2 -> sum -0.1; row 1: d = -0.8, -0.4, (masked) -> sum -1.2
    s0, s1 = math.exp(-0.1), math.exp(-1.2)
    w = importance_weights(old, samp, mask, "sequence_truncate", clip_min=0.5, clip_max=2.0)
    assert w.shape == (2, 1)
    assert w[:, 0].tolist() == pytest.approx([s0, 0.5])
    w = importance_weights(old, samp, mask, "sequence_mask", clip_min=0.5, clip_max=2.0)
    assert w[:, 0].tolist() == pytest.approx([s0, 0.0])
    w = importance_weights(old, samp, mask, "sequence_mask", clip_min=None, clip_max=3.0)
    assert w[:, 0].tolist() == pytest.approx([s0, s1])
    w = importance_weights(old, samp, mask, "token_truncate", clip_min=None, clip_max=1.05)
    assert w[0].tolist() == pytest.approx([1.05, 1.0, math.exp(-0.2)])
    assert w[1].tolist() == pytest.approx([math.exp(-0.8), math.exp(-0.4), 1.0])  # masked token: ratio 1
    w = importance_weights(old, samp, mask, "token_mask", clip_min=0.6, clip_max=1.05)
    assert w[0].tolist() == pytest.approx([0.0, 1.0, math.exp(-0.2)])
    assert w[1].tolist() == pytest.approx([0.0, math.exp(-0.4), 1.0])


def test_importance_nan_and_metrics():
    old, samp, mask = _hand()
    samp = samp.clone()
    samp[0, 0] = float("nan")
    w = importance_weights(old, samp, mask, "sequence_truncate", clip_max=10.0)
    assert w[0, 0].item() == pytest.approx(math.exp(-0.2))  # the NaN token counts as no mismatch
    m = mismatch_metrics(*_hand(), weights=torch.tensor([[0.5], [2.0]]))
    assert m["sampling/sampling_logp_difference/max"] == pytest.approx(0.8)
    assert m["sampling/sampling_logp_difference/mean"] == pytest.approx((0.1 + 0 + 0.2 + 0.8 + 0.4) / 5)
    assert (m["sampling/importance_sampling_ratio/min"], m["sampling/importance_sampling_ratio/max"]) == (0.5, 2.0)


def test_importance_bad_input():
    old, samp, mask = _hand()
    with pytest.raises(ValueError, match="mode"):
        importance_weights(old, samp, mask, "sequence_clip")
    with pytest.raises(ValueError, match="clip_min"):
        importance_weights(old, samp, mask, clip_min=3.0, clip_max=2.0)
    with pytest.raises(ValueError, match="one shape"):
        importance_weights(old, samp[:, :2], mask)
    with pytest.raises(ValueError, match="old_logps"):
        importance_weights(old[0], samp, mask)


# ----------------------------------------------------------------------------- CP-Hybrid policy

def test_policy_budget_picks_most_sensitive(tiny):
    model, _ = tiny
    rtn = rtn_policy(model)
    q = rtn.quantized_modules
    sens = {n: float(i) for i, n in enumerate(q)}  # the last modules are the most sensitive
    lin = dict(model.named_modules())[q[-1]]
    extra = 2 * lin.in_features * lin.out_features - (lin.in_features * lin.out_features // 2
                                                       + 2 * lin.in_features * lin.out_features // 128)
    floor = rtn.weight_bytes(model)
    pol = build_cp_hybrid(model, None, floor + extra, sensitivity=sens)
    assert pol.fp16_modules == [q[-1], "lm_head"] or set(pol.fp16_modules) == {q[-1], "lm_head"}
    assert pol.weight_bytes(model) == floor + extra
    assert "calibration KL" in pol.reasons[q[-1]]
    assert build_cp_hybrid(model, None, floor, sensitivity=sens).fp16_modules == ["lm_head"]


def test_policy_bad_input(tiny):
    model, _ = tiny
    with pytest.raises(ValueError, match="below"):
        build_cp_hybrid(model, None, rtn_policy(model).weight_bytes(model) - 1, sensitivity={})
    with pytest.raises(ValueError, match="not an nn.Linear"):
        CPHybridPolicy({"model.layers.0.self_attn.nope": {"format": "fp16"}}).check(model)
    with pytest.raises(ValueError, match="phases"):
        CPHybridPolicy({}, phases={"prefill": "int3", "decode": "w4a16"})
    with pytest.raises(ValueError, match="not an nn.Linear"):
        layer_sensitivity(model, torch.zeros(1, 4, dtype=torch.long), modules=["model.embed_tokens"])
    with pytest.raises(ValueError, match="budget_bytes"):
        build_cp_hybrid(model, None, 0, sensitivity={})


def test_layer_sensitivity_measures_kl(tiny):
    model, tok = tiny
    ids = torch.tensor([tok(schema.math_prompt("Sam had 47 cups and found 29 more. How many cups now?")
                            + " 47 + 29 = 76. The answer is 76.")["input_ids"]])
    names = ["model.layers.0.mlp.down_proj", "model.layers.1.self_attn.q_proj"]
    sens = layer_sensitivity(model, ids, modules=names)
    assert set(sens) == set(names) and all(v > 0 for v in sens.values())
    w = dict(model.named_modules())[names[0]].weight
    assert torch.isfinite(w).all() and sens == layer_sensitivity(model, ids, modules=names)  # weights restored


def test_policy_memory_ordering(tiny):
    model, _ = tiny
    b16, b4 = fp16_policy(model).weight_bytes(model), rtn_policy(model).weight_bytes(model)
    assert b4 < b16
    both = CPHybridPolicy(rtn_policy(model).precision, phases={"prefill": "fp16", "decode": "w4a16"})
    assert both.weight_bytes(model) > b16 - 2 * model.lm_head.weight.numel()  # keeps both copies


# ----------------------------------------------------------------------------- rollouts

def test_rtn_dequantized_matches_quantizer():
    from t4lib.quant.w4a16 import quantize_rtn
    from t4lib.train.rollout import rtn_dequantized
    w = torch.randn(96, 256, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rtn_dequantized(w, 128), quantize_rtn(w, 128).dequantize())


def test_rollout_logps_and_refresh(tiny):
    from t4lib.serving import StaticEngine
    from t4lib.train.rollout import RolloutModel, check_groups, sample_groups
    model, tok = tiny
    model = __import__("copy").deepcopy(model)
    ids = tok(schema.math_prompt("Nina splits 55 stickers equally into 5 boxes. How many in each box?"))["input_ids"]
    rm = RolloutModel(model, rtn_policy(model), dtype=torch.float32)
    eng = StaticEngine(rm, max_len=96)
    torch.manual_seed(0)
    comp, lps, st = sample_groups(eng, [ids] * 2, 2, 6, 1.0, tok.eos_token_id)
    assert st["tokens"] == sum(map(len, comp)) and all(len(c) == len(l) for c, l in zip(comp, lps))
    full = torch.tensor([ids + comp[0]])
    with torch.no_grad():
        ref = rm(input_ids=full).logits[0, len(ids) - 1:-1].log_softmax(-1)
        pol = model(input_ids=full).logits[0, len(ids) - 1:-1].log_softmax(-1)
    got = torch.tensor(lps[0])
    assert torch.allclose(ref.gather(-1, torch.tensor(comp[0])[:, None])[:, 0], got, atol=1e-4)
    assert (ref - pol).abs().max() > 1e-3  # the INT4 copy is not the policy
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2)
    rm.refresh(model)
    from t4lib.train.rollout import rtn_dequantized
    assert torch.equal(rm.model.model.layers[0].mlp.down_proj.weight,
                       rtn_dequantized(model.model.layers[0].mlp.down_proj.weight, 128).float())
    with pytest.raises(ValueError, match="does not divide"):
        check_groups([ids] * 3, 2)
    with pytest.raises(ValueError, match="not one group"):
        check_groups([ids, ids[:-1]], 2)
    with pytest.raises(TypeError, match="CPHybridPolicy"):
        RolloutModel(model, {"lm_head": {"format": "fp16"}})


# ----------------------------------------------------------------------------- data and GRPO steps

def test_dataset_columns():
    from datasets import Dataset

    from t4lib.train.grpo import check_columns, grpo_dataset
    ds = grpo_dataset(n_math=10)
    assert len(ds) == 410 and {"prompt", "target", "trap"} <= set(ds.column_names)
    assert sum(ds["trap"]) == 200 and all(t == "<abstain>" for t, k in zip(ds["target"], ds["trap"]) if k)
    assert sum(grpo_dataset(n_math=0, honesty="honesty_train.jsonl")["trap"]) == 150
    with pytest.raises(ValueError, match="honesty"):
        grpo_dataset(0, honesty="honesty_eval.jsonl")   # the quarantined set is never trained on
    with pytest.raises(ValueError, match="target"):
        check_columns(Dataset.from_list([{"prompt": "Question: x\nAnswer:"}]))
    with pytest.raises(ValueError, match="n_math"):
        grpo_dataset(-1)


def test_wilson():
    from t4lib.train.grpo import wilson
    lo, hi = wilson(0, 75)
    assert lo == 0.0 and hi == pytest.approx(0.0487, abs=1e-3)
    lo, hi = wilson(40, 75)
    assert lo < 40 / 75 < hi


def test_grpo_steps_deterministic():
    from t4lib.train.grpo import run_grpo
    kw = dict(num_generations=2, prompts_per_step=2, max_completion_length=8, evaluate=False, learning_rate=1e-4)
    a = run_grpo("tiny-cpu", "int4_corrected", 0, 2, **kw)
    b = run_grpo("tiny-cpu", "int4_corrected", 0, 2, **kw)
    assert len(a["curves"]) == 2
    for ha, hb in zip(a["curves"], b["curves"]):
        for k in ("reward", "loss", "sampling/sampling_logp_difference/max", "sampling/importance_sampling_ratio/mean"):
            assert ha[k] == pytest.approx(hb[k], rel=1e-5, abs=1e-7), k
    h = a["curves"][0]
    assert h["sampling/sampling_logp_difference/max"] > 0  # INT4 rollouts differ from the policy
    assert 0 <= h["sampling/importance_sampling_ratio/min"] <= h["sampling/importance_sampling_ratio/max"] <= 3.0
    assert all(k in h for k in ("timing/rollout", "timing/logprobs", "timing/update", "timing/refresh"))


def test_weighted_advantages_equal_trl_vllm_path(tiny):
    """The importance weights reach TRL's loss through the advantages (A * w): for TRL's losses and both
    weight levels, the loss and its gradient equal TRL's own vLLM path, which multiplies the per-token loss by
    the ratio (TRL's `_compute_loss`, run here with `use_vllm` raised on a bare trainer); zero weights (masked
    rows) included."""
    import copy

    from trl import GRPOConfig, GRPOTrainer

    from t4lib.train.grpo import (
        HonestyReward, checkpointing, grpo_dataset, make_trainer_class, weighted_advantages,
    )
    model, tok = tiny
    model = copy.deepcopy(model)
    cfg = GRPOConfig(output_dir="/tmp/t4lib_test_grpo_loss", per_device_train_batch_size=4, num_generations=2,
                     max_completion_length=6, use_cpu=True, report_to=[], vllm_importance_sampling_correction=True,
                     **checkpointing(GRPOConfig, False))
    tr = make_trainer_class()(model=model, reward_funcs=[HonestyReward(tok)], args=cfg, train_dataset=grpo_dataset(0),
                              processing_class=tok, rollout_precision=fp16_policy(model))
    tr.model.eval()   # TRL's eval normalisation: no gradient-accumulation state needed
    g = torch.Generator().manual_seed(0)
    B, P, T = 4, 5, 6
    cmask = torch.ones(B, T, dtype=torch.long)
    cmask[1, 4:] = 0
    base = dict(prompt_ids=torch.randint(2, 500, (B, P), generator=g), prompt_mask=torch.ones(B, P, dtype=torch.long),
                completion_ids=torch.randint(2, 500, (B, T), generator=g), completion_mask=cmask,
                num_items_in_batch=cmask.sum())
    with torch.no_grad():
        logps, _, _ = tr._get_per_token_logps_and_entropies(
            tr.model, torch.cat([base["prompt_ids"], base["completion_ids"]], 1),
            torch.cat([base["prompt_mask"], cmask], 1), T)
    base["old_per_token_logps"] = logps + 0.3 * torch.randn(B, T, generator=g)   # ratios in and out of the clip
    adv = torch.tensor([1.5, -0.7, 0.4, -2.0])
    for loss_type in ("dapo", "grpo", "cispo"):
        tr.loss_type = loss_type
        for level in ("token", "sequence"):
            w = torch.rand(B, T if level == "token" else 1, generator=g) * 2
            w[2] = 0.0
            losses, grads = [], []
            for vllm in (True, False):
                model.zero_grad()
                inputs = dict(base, advantages=adv, importance_sampling_ratio=w) if vllm else \
                    dict(base, advantages=weighted_advantages(adv, w))
                tr.use_vllm = vllm
                loss = GRPOTrainer._compute_loss(tr, tr.model, inputs)
                loss.backward()
                losses.append(loss.item())
                grads.append(model.model.layers[0].mlp.down_proj.weight.grad.clone())
            tr.use_vllm = False
            assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-7) and losses[0] != 0, (loss_type, level)
            assert torch.allclose(grads[1], grads[0], rtol=1e-4, atol=1e-8) and grads[0].abs().max() > 0
    # the control: the weights do change the loss
    tr.loss_type = "dapo"
    plain = GRPOTrainer._compute_loss(tr, tr.model, dict(base, advantages=adv)).item()
    assert abs(plain - losses[0]) > 1e-4
    with pytest.raises(ValueError, match="advantages must be"):
        weighted_advantages(adv[:, None], w)
    # completions reach TRL through its rollout_func hook, which the trainer owns
    from t4lib.train.grpo import engine_rollout
    assert tr.rollout_func is engine_rollout
    with pytest.raises(ValueError, match="rollout_func"):
        make_trainer_class()(model=model, reward_funcs=[HonestyReward(tok)], args=cfg, train_dataset=grpo_dataset(0),
                             processing_class=tok, rollout_precision=fp16_policy(model), rollout_func=lambda p, t: {})


def test_greedy_answers_engine_equals_hf(tiny):
    """evaluate_honesty's generation: the project's engine (the default on a GPU) and Hugging Face generate
    (the default on a CPU) give the same greedy answers."""
    from t4lib.models import corpus
    from t4lib.train.grpo import greedy_answers
    model, tok = tiny
    recs = corpus.load_jsonl("honesty_eval.jsonl")[:8] + corpus.load_jsonl("math_heldout.jsonl")[:8]
    prompts = [schema.math_prompt(r["question"]) for r in recs]
    hf = greedy_answers(model, tok, prompts, 40, batch_size=16, engine=False)
    eng = greedy_answers(model, tok, prompts, 40, batch_size=16, engine=True)
    assert eng == hf and len({len(tok(p)["input_ids"]) for p in prompts}) > 1
    assert sum("The answer is" in o for o in hf) > len(hf) // 2
    with pytest.raises(TypeError, match="engine"):
        greedy_answers(model, tok, prompts[:1], 4, engine="yes")


def test_grpo_bad_input():
    from t4lib.train.grpo import rollout_precision, run_grpo
    with pytest.raises(ValueError, match="arm"):
        run_grpo("tiny-cpu", "int8")
    with pytest.raises(ValueError, match="steps"):
        run_grpo("tiny-cpu", "fp16", steps=0)
    with pytest.raises(ValueError, match="divisible|num_generations"):
        _trl_group_check()
    with pytest.raises(ValueError, match="arm"):
        rollout_precision("bf16", None, None)


def _trl_group_check():
    from trl import GRPOConfig
    GRPOConfig(output_dir="/tmp/x", per_device_train_batch_size=6, num_generations=4, use_cpu=True, report_to=[])


# ----------------------------------------------------------------------------- GPU

@cuda
def test_gpu_quantlinear_rollout_matches_simulated(tiny):
    from t4lib.serving import StaticEngine
    from t4lib.train.rollout import RolloutModel, sample_groups
    model, tok = tiny
    m = __import__("copy").deepcopy(model).cuda()
    real = RolloutModel(m, rtn_policy(m), dtype=torch.float16)
    sim = RolloutModel(m, rtn_policy(m), dtype=torch.float16, simulate_int4=True)
    assert not real.simulate_int4
    ids = torch.tensor([tok(schema.math_prompt("A bus drives at 34 km per hour for 6 hours. How far?"))["input_ids"]],
                       device="cuda")
    with torch.no_grad():
        a, b = real(input_ids=ids).logits.float(), sim(input_ids=ids).logits.float()
    assert (a - b).abs().max() < 5e-2
    eng = StaticEngine(real, max_len=96, compile=False)
    torch.manual_seed(0)
    comp, lps, _ = sample_groups(eng, [ids[0].tolist()] * 4, 4, 12, 1.0, None)
    full = torch.tensor([ids[0].tolist() + comp[1]], device="cuda")
    with torch.no_grad():
        ref = real(input_ids=full).logits[0, ids.shape[1] - 1:-1].float().log_softmax(-1)
    got = ref.gather(-1, torch.tensor(comp[1], device="cuda")[:, None])[:, 0].cpu()
    assert torch.allclose(got, torch.tensor(lps[1]), atol=5e-2)


@cuda
def test_gpu_evaluation_generates_with_the_engine(tiny, monkeypatch):
    """On a GPU evaluate_honesty's generation goes through the project's engine by default, and its answers equal
    Hugging Face generate's except where fp32 sums taken in another order (a left-padded batch against unpadded
    length groups) flip a near-tie: at most one answer of 16 may differ."""
    import copy

    import t4lib.train.evaluate as ev
    from t4lib.models import corpus
    from t4lib.train.grpo import greedy_answers
    model, tok = tiny
    m = copy.deepcopy(model).cuda()
    recs = corpus.load_jsonl("honesty_eval.jsonl")[:8] + corpus.load_jsonl("math_heldout.jsonl")[:8]
    prompts = [schema.math_prompt(r["question"]) for r in recs]
    calls = []
    real = ev.generate
    monkeypatch.setattr(ev, "generate", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    eng = greedy_answers(m, tok, prompts, 40, batch_size=16)
    assert calls, "the default on a GPU is the engine"
    hf = greedy_answers(m, tok, prompts, 40, batch_size=16, engine=False)
    assert sum(a == b for a, b in zip(eng, hf)) >= len(hf) - 1
    assert sum("The answer is" in o for o in eng) > len(eng) // 2
