"""The engines' ``generate`` is ``model.generate``'s call: a GenerationConfig (default the model's own), keyword
overrides, a stop at every EOS of its list with padding after it, a streamer, ids in and sequences out. Greedy
tokens equal Hugging Face's, on the project's tiny-cpu model (CPU)."""
import io
import json
import logging
from contextlib import redirect_stdout

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GenerationConfig, TextStreamer  # noqa: E402

from t4lib.decoding.sampling import penalize_repeats, scaled_logits  # noqa: E402
from t4lib.models import corpus, load  # noqa: E402
from t4lib.serving import GenerateResult, StaticEngine  # noqa: E402
from t4lib.speculative import PromptLookupDrafter, SpeculativeEngine  # noqa: E402

N_PROMPTS = 40


@pytest.fixture(scope="module")
def tiny():
    model, tok = load("tiny-cpu")
    recs = [json.loads(line) for line in (corpus.data_dir() / "math_heldout.jsonl").read_text().splitlines()]
    prompts = [tok(f"Question: {r['question']}\nAnswer:", return_tensors="pt").input_ids for r in recs[:N_PROMPTS]]
    return model, tok, prompts


def _config(model, **kw):
    return GenerationConfig(eos_token_id=[model.config.eos_token_id, 7], pad_token_id=1, do_sample=False,
                            max_new_tokens=48, **kw)


def test_greedy_with_eos_stops_equals_hf_on_40_prompts(tiny):
    model, tok, prompts = tiny
    gc = _config(model)
    eng = StaticEngine(model, max_len=128)
    stopped = 0
    for ids in prompts:
        want = model.generate(ids, generation_config=gc)
        got = eng.generate(ids, generation_config=gc)
        assert got.dtype == torch.long and torch.equal(got, want), tok.decode(ids[0])
        stopped += int(got.shape[1] < ids.shape[1] + gc.max_new_tokens)
    assert stopped >= N_PROMPTS // 2   # the EOS stop is exercised, not just the length limit


def test_default_is_the_models_generation_config(tiny):
    model, tok, prompts = tiny
    eng = StaticEngine(model, max_len=128)
    for ids in prompts[:5]:
        want = model.generate(ids, max_new_tokens=40)
        got = eng.generate(ids, max_new_tokens=40)
        assert torch.equal(got, want)
        assert got[0, -1].item() == model.generation_config.eos_token_id or got.shape[1] == ids.shape[1] + 40


def test_repetition_penalty_greedy_equals_hf(tiny):
    model, _, prompts = tiny
    gc = _config(model, repetition_penalty=1.3)
    eng = StaticEngine(model, max_len=128)
    for ids in prompts[:8]:
        assert torch.equal(eng.generate(ids, generation_config=gc), model.generate(ids, generation_config=gc))


def test_padded_batch_rows_stop_at_eos_and_pad_after_it(tiny):
    model, tok, prompts = tiny
    gc = _config(model)
    rows = [p[0].tolist() for p in prompts[:6]]
    T = max(map(len, rows))
    ids = torch.tensor([[1] * (T - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (T - len(r)) + [1] * len(r) for r in rows])
    got = StaticEngine(model, max_len=128).generate(ids, attention_mask=mask, generation_config=gc)
    assert torch.equal(got[:, :T], ids)
    new = got[:, T:]
    for b, r in enumerate(rows):
        alone = model.generate(torch.tensor([r]), generation_config=gc)[0, len(r):]
        assert torch.equal(new[b, :len(alone)], alone)
        assert (new[b, len(alone):] == gc.pad_token_id).all()
    lists = StaticEngine(model, max_len=128).generate(rows, generation_config=gc)
    assert torch.equal(lists[:, T:], new)


def test_return_dict_carries_sequences_and_statistics(tiny):
    model, _, prompts = tiny
    res = StaticEngine(model, max_len=128).generate(prompts[0], generation_config=_config(model),
                                                    return_dict_in_generate=True, output_logits=True)
    assert isinstance(res, GenerateResult)
    n = res.sequences.shape[1] - prompts[0].shape[1]
    assert res.new_tokens.shape == (1, n) and res.lengths == [n] and res.logits.shape[:2] == (1, n)
    assert res.ttft_s > 0 and res.decode_tokens_per_s > 0


def test_text_streamer_prints_the_answer(tiny):
    model, tok, prompts = tiny
    buf = io.StringIO()
    with redirect_stdout(buf):
        out = StaticEngine(model, max_len=128).generate(prompts[2], generation_config=_config(model),
                                                        streamer=TextStreamer(tok, skip_prompt=True))
    assert buf.getvalue().strip() == tok.decode(out[0, prompts[2].shape[1]:]).strip()


def test_what_the_engine_does_not_implement_is_refused(tiny):
    model, _, prompts = tiny
    eng = StaticEngine(model, max_len=128)
    with pytest.raises(ValueError, match="num_beams"):
        eng.generate(prompts[0], max_new_tokens=4, num_beams=2)
    with pytest.raises(TypeError, match="no_such_option"):
        eng.generate(prompts[0], max_new_tokens=4, no_such_option=1)
    with pytest.raises(TypeError, match="GenerationConfig"):
        eng.generate(prompts[0], {"max_new_tokens": 4})
    with pytest.raises(ValueError, match="max_len"):
        eng.generate(prompts[0], max_new_tokens=500)


def test_sampling_follows_top_p_and_seed(tiny):
    model, _, prompts = tiny
    eng = StaticEngine(model, max_len=128)
    kw = dict(do_sample=True, temperature=0.8, top_p=0.9, top_k=0, max_new_tokens=16)
    a, b = eng.generate(prompts[0], seed=3, **kw), eng.generate(prompts[0], seed=3, **kw)
    assert torch.equal(a, b)
    # top_p so small that only the most likely token survives: sampling is greedy
    greedy = eng.generate(prompts[0], max_new_tokens=16, do_sample=False)
    assert torch.equal(eng.generate(prompts[0], seed=1, do_sample=True, top_p=1e-6, top_k=0, max_new_tokens=16),
                       greedy)


def test_warpers_match_hf():
    from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    torch.manual_seed(0)
    x = torch.randn(4, 50) * 3
    for p in (0.3, 0.9):
        for k in (0, 10):
            ref = x / 0.7
            ref = TopKLogitsWarper(k)(None, ref) if k else ref
            want, got = TopPLogitsWarper(p)(None, ref), scaled_logits(x, 0.7, k, p)
            assert torch.equal(want.isinf(), got.isinf())   # the same tokens kept
            torch.testing.assert_close(want.softmax(-1), got.softmax(-1))
    ids = torch.randint(0, 50, (4, 7))
    seen = torch.zeros(4, 50, dtype=torch.bool).scatter_(1, ids, True)
    assert torch.equal(RepetitionPenaltyLogitsProcessor(1.3)(ids, x.clone()), penalize_repeats(x, seen, 1.3))


def test_speculative_generate_equals_hf_greedy(tiny):
    model, _, prompts = tiny
    gc = _config(model)
    eng = SpeculativeEngine(model, PromptLookupDrafter(), max_len=128, max_batch_size=4)
    for ids in prompts[:8]:
        assert torch.equal(eng.generate(ids, generation_config=gc), model.generate(ids, generation_config=gc))
    res = eng.generate(prompts[0], generation_config=gc, return_dict_in_generate=True)
    assert res.sequences.shape[0] == 1 and res.stats.target_forwards >= 1
    with pytest.raises(ValueError, match="repetition_penalty"):
        eng.generate(prompts[0], generation_config=gc, repetition_penalty=1.2)


def test_no_deprecated_cache_keyword(tiny, caplog):
    """Newest transformers names the forward's cache argument ``cache``; the engines pass that name."""
    model, _, prompts = tiny
    transformers.utils.logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            StaticEngine(model, max_len=128).generate(prompts[0], max_new_tokens=4)
            SpeculativeEngine(model, PromptLookupDrafter(), max_len=128).generate(prompts[0], max_new_tokens=4)
    finally:
        transformers.utils.logging.disable_propagation()
    assert not [r for r in caplog.records if "past_key_values" in r.getMessage()]
