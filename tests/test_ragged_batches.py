"""StaticEngine on ragged batches (CPU, fp32, greedy): every row of a batch of prompts of different lengths,
given as token lists or as a padded tensor with an attention mask, decodes exactly the tokens it decodes
alone; equal-length batches keep their unmasked path; evaluation and GRPO rollouts go through it."""
import pytest
import torch
from random_lm import V, wandering_qwen2

from t4lib.serving import StaticEngine, hf_generate


@pytest.fixture(scope="module")
def model():
    return wandering_qwen2(pad_token_id=0)


def prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, V, (n,), generator=g).tolist() for n in lengths]


LENGTHS = [1, 3, 7, 12, 16, 17, 30, 5]


@pytest.mark.parametrize("bucket", [1, 16])
def test_every_row_equals_its_batch_1_run(model, bucket):
    rows = prompts(LENGTHS)
    eng = StaticEngine(model, max_len=64, prefill_bucket=bucket)
    got = eng.generate_with_stats(rows, 20, output_logits=True)
    alone = StaticEngine(model, max_len=64, prefill_bucket=bucket)
    for b, r in enumerate(rows):
        want = alone.generate_with_stats([r], 20, output_logits=True)
        assert len(set(want.new_tokens[0].tolist())) > 3   # the comparison means something only if tokens vary
        assert torch.equal(got.new_tokens[b], want.new_tokens[0]), f"row {b} (length {len(r)})"
        assert (got.logits[b] - want.logits[0]).abs().max() <= 1e-4 * want.logits.abs().max()
    assert got.prompt_lengths == LENGTHS
    # left-padded with the config's pad id, then the new tokens
    T = max(LENGTHS)
    for b, r in enumerate(rows):
        assert got.sequences[b, :T - len(r)].eq(0).all() and got.sequences[b, T - len(r):T].tolist() == r


def test_batch_1_equals_hf_generate(model):
    """The reference runs of the test above are Hugging Face's own greedy tokens."""
    eng = StaticEngine(model, max_len=64)
    for r in prompts([2, 9, 17], seed=3):
        ids = torch.tensor([r])
        assert torch.equal(eng.generate_with_stats([r], 12).sequences, hf_generate(model, ids, 12, static_cache=False))


@pytest.mark.parametrize("side", ["right", "left"])
def test_attention_mask_decodes_each_row_alone(model, side):
    rows = prompts([4, 11, 2, 11], seed=1)
    T = max(map(len, rows))
    ids = torch.full((len(rows), T), 7, dtype=torch.long)   # pads: a valid id the mask hides
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(T - len(r), T)
        ids[b, sl] = torch.tensor(r)
        mask[b, sl] = 1
    got = StaticEngine(model, max_len=48).generate_with_stats(ids, 15, attention_mask=mask)
    want = StaticEngine(model, max_len=48).generate_with_stats(rows, 15)
    assert torch.equal(got.new_tokens, want.new_tokens)
    assert torch.equal(got.sequences, want.sequences)


def test_equal_lengths_keep_the_unmasked_path(model):
    rows = prompts([9, 9, 9], seed=2)
    eng = StaticEngine(model, max_len=48)
    res = eng.generate_with_stats(rows, 10)
    assert eng._pad is None   # no mask, positions as before
    assert torch.equal(res.sequences, hf_generate(model, torch.tensor(rows), 10, static_cache=False))
    full = torch.ones(3, 9, dtype=torch.long)   # an all-ones mask changes nothing
    assert torch.equal(eng.generate_with_stats(torch.tensor(rows), 10, attention_mask=full).sequences, res.sequences)


def test_one_engine_switches_between_ragged_and_equal_batches(model):
    """The cache, graphs and padding buffer follow each call; earlier results are not rewritten by later ones."""
    eng = StaticEngine(model, max_len=64, prefill_bucket=8)
    calls = [prompts([3, 10]), prompts([6, 6], seed=4), prompts([12, 1], seed=5), prompts([3, 10])]
    results = [eng.generate_with_stats(rows, 8) for rows in calls]
    for rows, res in zip(calls, results):
        for b, r in enumerate(rows):
            assert torch.equal(res.new_tokens[b], StaticEngine(model, max_len=64).generate_with_stats([r], 8).new_tokens[0])
    assert torch.equal(results[0].new_tokens, results[3].new_tokens)


def test_ragged_sampling_is_seeded_and_finite(model):
    rows = prompts([2, 13, 5])
    eng = StaticEngine(model, max_len=48)
    a = eng.generate_with_stats(rows, 12, do_sample=True, top_k=20, seed=3, output_logprobs=True)
    b = eng.generate_with_stats(rows, 12, do_sample=True, top_k=20, seed=3, output_logprobs=True)
    assert torch.equal(a.new_tokens, b.new_tokens) and torch.equal(a.logprobs, b.logprobs)
    assert torch.isfinite(a.logprobs).all() and (a.logprobs <= 0).all()


@pytest.mark.parametrize("mask,err,match", [
    (torch.ones(2, 5), TypeError, "attention_mask must be an integer"),
    (torch.ones(2, 4, dtype=torch.long), ValueError, "shape"),
    (torch.tensor([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]]), ValueError, "contiguous"),
    (torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]), ValueError, "no ones"),
    (torch.tensor([[2, 1, 1, 1, 1], [1, 1, 1, 1, 1]]), ValueError, "only 0 and 1"),
])
def test_bad_attention_mask(model, mask, err, match):
    with pytest.raises(err, match=match):
        StaticEngine(model, max_len=32).generate_with_stats(torch.ones(2, 5, dtype=torch.long), 3, attention_mask=mask)


def test_attention_mask_needs_a_tensor(model):
    with pytest.raises(TypeError, match="attention_mask goes with a"):
        StaticEngine(model, max_len=32).generate_with_stats([[1, 2], [3]], 3, attention_mask=torch.ones(2, 2, dtype=torch.long))


class CharTokenizer:
    """One token per character (ids 1..255), enough for :func:`t4lib.train.evaluate.generate`."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1 + ord(c) % (V - 1) for c in text]}

    def batch_decode(self, rows, skip_special_tokens=False):
        return [",".join(str(int(t)) for t in r) for r in rows]


def test_evaluate_generate_batches_mixed_lengths_exactly(model):
    from t4lib.train.evaluate import generate

    texts = ["ab", "a much longer prompt", "mid size", "x", "another long-ish one", "b"]
    batched = generate(model, CharTokenizer(), texts, 10, batch_size=4, progress=False)
    one = [generate(model, CharTokenizer(), [t], 10, batch_size=1, progress=False)[0] for t in texts]
    assert batched == one


def test_sample_groups_merges_ragged_groups(model):
    from t4lib.train.rollout import sample_groups

    groups = prompts([3, 9, 5], seed=7)
    n = 4
    ids = [p for p in groups for _ in range(n)]
    eng = StaticEngine(model, max_len=48)
    calls = []
    generate = eng.generate_with_stats
    eng.generate_with_stats = lambda rows, *a, **k: calls.append([len(r) for r in rows]) or generate(rows, *a, **k)
    torch.manual_seed(0)
    comp, lps, st = sample_groups(eng, ids, n, 10, 1.0, eos_token_id=[5, 6], merge_groups=True)
    assert calls == [[3] * n + [9] * n + [5] * n]   # one ragged batch
    assert len(comp) == len(ids) and st["tokens"] == sum(map(len, comp))
    for c, lp in zip(comp, lps):
        assert 1 <= len(c) <= 10 and len(lp) == len(c)
        assert all(t not in (5, 6) for t in c[:-1])   # cut after the first eos of either id
        assert all(v <= 0 and v == v for v in lp)
