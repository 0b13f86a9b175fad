"""SFT glue: QuantLinear input gradient, PEFT LoRA on QuantLinear, the schema parser,
completion-only masking, data errors and the evaluation on known answers (CPU; one GPU test)."""
import json

import pytest
import torch
from torch import nn

from t4lib.models import corpus, schema
from t4lib.quant import QuantLinear, quantize_model
from t4lib.train import data, evaluate as ev, sft

cuda = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py); part of the GPU verification ledger


def micro_qwen2(seed=0, vocab=1472):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=1, eos_token_id=0, bos_token_id=0)
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(corpus.data_dir() / "models" / "tiny-cpu"))


@pytest.fixture(scope="module")
def traces():
    return corpus.load_jsonl("traces.jsonl")


# ----------------------------------------------------------------------------- QuantLinear backward

@pytest.mark.parametrize("bias", [False, True])
def test_quantlinear_input_grad_matches_autograd_through_dequantized_weight(bias):
    torch.manual_seed(0)
    q = QuantLinear.from_linear(nn.Linear(256, 72, bias=bias), 64).train()
    x = torch.randn(3, 5, 256, requires_grad=True)
    gy = torch.randn(3, 5, 72)
    q(x).backward(gy)
    xr = x.detach().clone().requires_grad_(True)
    w = q.dequantize().float()
    yr = xr @ w.t() + (q.bias.float() if bias else 0)
    yr.backward(gy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q(x), yr, rtol=1e-5, atol=1e-5)
    assert list(q.parameters()) == []          # frozen: nothing for an optimizer to update


def test_quantlinear_without_grad_keeps_the_inference_path():
    q = QuantLinear.from_linear(nn.Linear(128, 16), 128).train()
    x = torch.randn(4, 128)                     # no requires_grad: the plain forward, no graph
    assert q(x).grad_fn is None


@cuda
def test_quantlinear_input_grad_cuda_matches_reference():
    torch.manual_seed(0)
    q = QuantLinear.from_linear(nn.Linear(512, 384), 128).cuda().train()
    x = torch.randn(70, 512, device="cuda", dtype=torch.float16, requires_grad=True)
    gy = torch.randn(70, 384, device="cuda", dtype=torch.float16)
    y = q(x)
    y.backward(gy)
    w = q.weight_q.dequantize(torch.float32)                     # reference dequantization on the device
    from t4lib.quant.linear import dequantize_into
    assert torch.equal(dequantize_into(q).float(), w)           # the dequant kernel: bit-exact
    want_y = x.detach().float() @ w.t() + q.bias.float()
    want_gx = gy.float() @ w
    torch.testing.assert_close(y.float(), want_y, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(x.grad.float(), want_gx, rtol=2e-2, atol=2e-2)
    with torch.no_grad():  # the training forward equals the kernel forward
        torch.testing.assert_close(y, q.eval()(x.detach()), rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------- PEFT LoRA on QuantLinear

def test_peft_lora_wraps_quantlinear_and_trains_only_the_adapter():
    from peft import get_peft_model

    model = quantize_model(micro_qwen2())
    ids = torch.randint(2, 1000, (2, 12))
    with torch.no_grad():
        base_logits = model(ids).logits
    pm = get_peft_model(model, sft.lora_config(model, r=4, alpha=8))
    lora_layers = [m for n, m in pm.named_modules() if hasattr(m, "lora_A") and isinstance(m.base_layer, QuantLinear)]
    assert len(lora_layers) == 2 * 7           # two decoder layers x seven projections
    with torch.no_grad():                      # B = 0 at init: the wrapped model is the base model
        torch.testing.assert_close(pm(ids).logits, base_logits)
    pm.train()
    pm(input_ids=ids, labels=ids).loss.backward()
    grads = {n: p.grad for n, p in pm.named_parameters() if p.requires_grad}
    assert grads and all("lora_" in n for n in grads)
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)


def test_lora_target_naming_no_module_is_an_error():
    model = micro_qwen2()
    with pytest.raises(ValueError, match="wq_proj"):
        sft.lora_config(model, targets=("q_proj", "wq_proj"))
    with pytest.raises(ValueError, match="r must be"):
        sft.lora_config(model, r=0)
    with pytest.raises(ValueError, match="method must be"):
        sft.SFTSettings(method="qlora")


# ----------------------------------------------------------------------------- schema parser

def test_parser_accepts_every_certified_trace(traces):
    for r in traces[:50]:
        p = data.parse_completion(r["trace"] + schema.IM_END + "junk after the turn")
        assert p.valid, p.error
        assert p.answer == r["answer"] and set(p.sections) == set(schema.TRACE_TAGS)


@pytest.mark.parametrize("edit, msg", [
    (lambda t: t.replace("<verify>", "").replace("</verify>", ""), "<verify> appears 0 times"),
    (lambda t: t + "<answer>1</answer>", "appears 2 times"),
    (lambda t: t.replace("<answer>47</answer>", "").replace("<understand>", "<answer>47</answer><understand>"),
     "out of order"),
    (lambda t: t.replace("<plan>\n1. Add the amount added to the starting amount.\n</plan>", "<plan> </plan>"),
     "<plan> is empty"),
    (lambda t: t.replace("<answer>47</answer>", "<answer>forty-seven</answer>"), "does not parse"),
    (lambda t: "Sure! " + t, "outside the five tags"),
])
def test_parser_rejects_broken_completions(traces, edit, msg):
    t = traces[0]["trace"]
    assert "<answer>47</answer>" in t
    p = data.parse_completion(edit(t))
    assert not p.valid and msg in p.error


def test_parser_bad_type():
    with pytest.raises(TypeError, match="text must be a str"):
        data.parse_completion(None)


# ----------------------------------------------------------------------------- data set and masking

def test_dataset_rows_use_the_chat_template(tok, traces):
    ds, rep = data.traces_dataset(tok, traces[:6])
    assert rep.n_kept == 6 and not rep.rejected
    row = ds[0]
    assert row["prompt"] == corpus.chat_doc(traces[0]["question"], "", schema.MATH_SYSTEM).rsplit(
        schema.IM_END, 1)[0].rsplit(schema.IM_START, 1)[0] + schema.IM_START + "assistant\n"
    assert row["completion"] == traces[0]["trace"] + schema.IM_END


def test_bad_records_are_counted_or_raised(tok, traces):
    bad_gold = dict(traces[1], answer="seventy", id="bad-gold")
    wrong = dict(traces[2], answer="1", id="wrong-answer")
    recs = [traces[0], bad_gold, wrong, traces[3]]
    ds, rep = data.traces_dataset(tok, recs)
    assert rep.n_in == 4 and rep.n_kept == 2 and len(ds) == 2
    assert rep.rejected == {"unparseable_gold": 1, "not_certified": 1}
    long4 = next(r for r in traces if r["n_steps"] == 4)
    ds, _ = data.traces_dataset(tok, [traces[0], long4])
    short, long_ = ds["n_tokens"]
    assert short < long_
    ds, rep = data.traces_dataset(tok, [traces[0], long4], max_length=long_ - 1)
    assert rep.rejected == {"too_long": 1} and ds["id"] == [traces[0]["id"]]
    with pytest.raises(ValueError, match="too_long"):
        data.traces_dataset(tok, [traces[0], long4], max_length=long_ - 1, on_error="raise")
    with pytest.raises(ValueError, match="on_error"):
        data.traces_dataset(tok, traces[:3], on_error="drop")


def test_dataset_without_prompt_completion_columns_is_an_error():
    from datasets import Dataset
    with pytest.raises(ValueError, match="completion"):
        data.check_prompt_completion(Dataset.from_list([{"prompt": "a", "text": "b"}]))
    with pytest.raises(TypeError, match="datasets.Dataset"):
        data.check_prompt_completion([{"prompt": "a"}])


def test_completion_only_loss_masks_exactly_the_prompt(tok, traces, tmp_path):
    ds, _ = data.traces_dataset(tok, traces[:4])
    s = sft.SFTSettings(method="full", max_steps=1, batch_size=2)
    model = sft.prepare(micro_qwen2(), s)
    trainer = sft.make_trainer(model, tok, ds, s, str(tmp_path))
    ex = sft.label_mask_example(trainer, 0)
    n_prompt = len(tok(ds[0]["prompt"], add_special_tokens=False)["input_ids"])
    assert ex["completion_start"] == n_prompt
    assert all(ex["masked"][:n_prompt]) and not any(ex["masked"][n_prompt:])
    completion = "".join(ex["tokens"][n_prompt:])
    assert completion == ds[0]["completion"] + tok.eos_token   # TRL appends EOS; it is learned


def test_lora_sft_on_a_w4a16_base_runs_and_keeps_the_base_frozen(tok, traces, tmp_path):
    ds, _ = data.traces_dataset(tok, traces[:8])
    model = quantize_model(micro_qwen2())
    before = [m.qweight.clone() for m in model.modules() if isinstance(m, QuantLinear)]
    res = sft.train(model, tok, ds, sft.SFTSettings(method="lora", max_steps=2, batch_size=4, r=4, alpha=8,
                                                   logging_steps=1), str(tmp_path))
    assert res.losses and all(l == l and l > 0 for _, l in res.losses)
    after = [m.qweight for m in res.model.modules() if isinstance(m, QuantLinear)]
    assert len(after) == len(before) == 14 and all(torch.equal(a, b) for a, b in zip(after, before))
    assert res.trainable_params == sum(p.numel() for n, p in res.model.named_parameters() if "lora_" in n)
    with pytest.raises(ValueError, match="W4A16 base has no trainable"):
        sft.prepare(quantize_model(micro_qwen2()), sft.SFTSettings(method="full"))


# ----------------------------------------------------------------------------- evaluation

def test_scoring_on_known_answers(traces):
    recs = [dict(id=i, question="q", answer=a, structure=s, n_steps=n)
            for i, (a, s, n) in enumerate([("47", "add", 1), ("3/4", "frac_add", 2), ("84", "add_mul", 2),
                                           ("12", "lin", 1)])]
    good = traces[0]["trace"]
    outs = [good,                                                           # valid and right
            good.replace("<answer>47</answer>", "<answer>6/8</answer>"),  # valid, right (6/8 == 3/4)
            good,                                                           # valid, wrong (47 != 84)
            "The answer is 12."]                                            # right value, no schema
    rows = ev.score(recs, outs, "tags")
    assert [r["schema_valid"] for r in rows] == [True, True, True, False]
    assert [r["correct"] for r in rows] == [True, True, False, False]
    assert [r["grounded"] for r in rows] == [True, True, False, False]
    summ = ev.summarize(rows)
    assert summ["overall"]["grounded"]["k"] == 2 and summ["overall"]["n"] == 4
    assert summ["two_step"]["n"] == 2 and summ["two_step"]["grounded"]["k"] == 1
    assert summ["by_structure"]["frac_add"]["correct"]["rate"] == 1.0
    plain = ev.score(recs, [" 17 + 30 = 47. The answer is 47.", " The answer is 3/4.", " <abstain>", "nothing"],
                     "plain")
    assert [r["correct"] for r in plain] == [True, True, False, False]
    assert not any(r["grounded"] for r in plain)
    lo, hi = ev.wilson(2, 4)
    assert 0.0 < lo < 0.5 < hi < 1.0


def test_unparseable_gold_and_bad_arguments():
    with pytest.raises(ValueError, match="does not parse"):
        ev.parse_gold("")
    with pytest.raises(ValueError, match="fmt must be"):
        ev.score([], [], "json")
    with pytest.raises(ValueError, match="differ in length"):
        ev.score([dict(id=0, question="q", answer="1", structure="s", n_steps=1)], [], "tags")


def test_external_records_gsm8k_columns(tmp_path):
    p = tmp_path / "gsm8k_like.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
        {"question": "Half of 1,000?", "answer": "#### 500"}]) + "\n")
    recs = ev.load_eval_records(str(p))
    assert [r["answer"] for r in recs] == ["7", "500"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "solution": "1"}) + "\n")
    with pytest.raises(ValueError, match="question"):
        ev.load_eval_records(str(bad))
    recs = ev.load_eval_records("math_heldout", min_steps=3)
    assert recs and all(r["n_steps"] >= 3 for r in recs)
    assert all(r["n_steps"] >= 1 for r in ev.load_eval_records("honesty_answerable"))


def test_generation_through_static_engine_matches_hf_greedy(tok):
    model = micro_qwen2(seed=3)
    prompts = ["Question: 1 + 2?\nAnswer:", "Question: 3 + 4?\nAnswer:"]
    assert len({len(tok(p)["input_ids"]) for p in prompts}) == 1
    outs = ev.generate(model, tok, prompts, 6, progress=False)
    for p, o in zip(prompts, outs):
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        g = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=1, eos_token_id=None)
        want = data.strip_turn_end(tok.decode(g[0, ids.shape[1]:], skip_special_tokens=False))
        assert o == want
