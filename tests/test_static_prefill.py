"""StaticEngine's padded prefill (CPU): prompts right-padded to a multiple of ``prefill_bucket`` decode exactly
what an unpadded prefill decodes, including the logits of the first choice, for prompt lengths on and off a
bucket edge and up to the cache's end; bad buckets are refused. (On CUDA the same padded forward is the one a
prefill graph captures.)"""
import pytest
import torch
from random_lm import wandering_qwen2

from t4lib.serving import StaticEngine, hf_generate


@pytest.mark.parametrize("T", [1, 7, 8, 9, 30])
def test_padded_prefill_equals_unpadded(T):
    m = wandering_qwen2()
    ids = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(T))
    new = 40 - T if T == 30 else 12   # T = 30: the padded prompt would run past max_len = 40, so it is cut there
    want = StaticEngine(m, max_len=40, prefill_bucket=1).generate_with_stats(ids, new, output_logits=True)
    assert len(set(want.new_tokens[0].tolist())) > 3   # the comparison means something only if tokens vary
    for bucket in (8, 16):
        got = StaticEngine(m, max_len=40, prefill_bucket=bucket).generate_with_stats(ids, new, output_logits=True)
        assert torch.equal(got.sequences, want.sequences)
        # fp32 sums over a padded block of rows round differently (measured: up to 2.4e-6 of the logits' range)
        assert (got.logits - want.logits).abs().max() <= 1e-5 * want.logits.abs().max()
        assert not got.prefill_graph   # no graphs on the CPU


def test_padded_prefill_matches_hf_and_repeats():
    """Calls with different prompt lengths on one engine: the cache's write position follows each prompt."""
    m = wandering_qwen2()
    eng = StaticEngine(m, max_len=64, prefill_bucket=16)
    for T in (5, 16, 3, 21):
        ids = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(100 + T))
        assert torch.equal(eng.generate_with_stats(ids, 10).sequences, hf_generate(m, ids, 10, static_cache=False))


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, None])
def test_bad_prefill_bucket(bad):
    with pytest.raises(ValueError, match="prefill_bucket must be an int >= 1"):
        StaticEngine(wandering_qwen2(), prefill_bucket=bad)


def test_bad_prefill_graph():
    with pytest.raises(TypeError, match="prefill_graph must be a bool or None"):
        StaticEngine(wandering_qwen2(), prefill_graph="yes")
    with pytest.raises(ValueError, match="prefill_graph=True needs use_graph"):
        StaticEngine(wandering_qwen2(), prefill_graph=True)   # a CPU model
