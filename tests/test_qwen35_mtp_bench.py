"""The MTP benchmark's CPU parts: the copy model with drafts against plain greedy and transformers on a subset of
the prompts, the byte model of a round, and a failing 27B measurement that must leave an error, not a figure."""
import math

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("installed transformers has no Qwen3_5ForCausalLM", allow_module_level=True)

from t4lib.benchmarks import qwen35_mtp as mtp_bench  # noqa: E402


def test_copy_model_with_drafts_and_the_peer_on_a_subset():
    prompts = mtp_bench.copy_prompts(3)
    c = mtp_bench.measure_copy_model(prompts, 12, "cpu", gammas=(1, 2), hf_prompts=1)
    assert c["prompts"] == 3 and c["hf_prompts"] == 1
    assert c["hf_identical_fraction"] == 1.0   # fp32 engine and transformers agree on the copy model
    # speeds are measured, so only their kind is checked here (a loaded machine may make any ratio)
    assert all(isinstance(c[k], float) and math.isfinite(c[k]) for k in ("plain_speedup_vs_hf", "hf_tokens_per_s"))
    for g in (1, 2):
        row = c[f"mtp{g}"]
        assert row["identical_fraction"] == 1.0 and row["first_mismatch"] == []
        assert 1.0 <= row["tokens_per_step"] <= g + 1
        assert sum(row["accepted_histogram"]) > 0 and len(row["accepted_histogram"]) == g + 1
        assert math.isfinite(row["speedup_vs_hf"])


class _SlowStartModel:
    """A stand-in for a transformers model: ``generate`` streams the prompt, then one token per step; the first
    token of each run costs 5 s of the fake clock and each later one 0.25 s (a run of one token would take
    longer than the difference of two runs can say)."""

    def __init__(self, clock):
        self.clock, self.calls = clock, []

    def generate(self, ids, max_new_tokens, min_new_tokens, do_sample, streamer, **kw):
        import torch
        self.calls.append(max_new_tokens)
        streamer.put(ids)
        for i in range(max_new_tokens):
            self.clock[0] += 5.0 if i == 0 else 0.25
            streamer.put(torch.tensor([7]))
        return torch.cat([ids, torch.full((1, max_new_tokens), 7)], dim=1)


def test_the_peer_decode_time_is_measured_within_one_run(monkeypatch):
    import torch

    from t4lib.benchmarks import qwen35 as q35
    clock = [100.0]
    monkeypatch.setattr(q35.timing.time, "perf_counter", lambda: clock[0])
    m = _SlowStartModel(clock)
    tokens, decode_s = q35.hf_greedy_times(m, torch.tensor([[1, 2, 3]]), 9)
    assert tokens == [7] * 9 and m.calls == [9] * 4   # a warm-up and three timed runs, never a one-token run
    assert decode_s == pytest.approx(8 * 0.25)        # first token to last, in one run
    with pytest.raises(ValueError, match="new must be an int >= 2"):
        q35.hf_greedy_times(m, torch.tensor([[1]]), 1)
    with pytest.raises(ValueError, match="hf_prompts"):
        mtp_bench.measure_copy_model([[1, 2]], 4, "cpu", hf_prompts=0)


def test_round_bytes_grow_with_the_drafts():
    b = [mtp_bench.round_bytes_27b(g) for g in (1, 2, 3)]
    assert b[0]["plain"] == b[1]["plain"] == b[2]["plain"]
    assert b[0]["plain"] < b[0]["round"] < b[1]["round"] < b[2]["round"]
    # a round reads the weights once; each draft adds the NextN block and the head
    assert b[1]["round"] - b[0]["round"] > b[0]["nextn"] + b[0]["head"]


def test_a_failing_27b_measurement_is_recorded_as_an_error(monkeypatch):
    def boom(**kw):
        raise RuntimeError(f"no GPU for {kw['activations']}")
    monkeypatch.setattr(mtp_bench, "measure_27b_rounds", boom)
    monkeypatch.setattr(mtp_bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mtp_bench.torch.cuda, "mem_get_info", lambda: (200 << 30, 200 << 30))
    checks = {}
    assert mtp_bench.rounds_figures({}, checks, "CPU") == []
    assert checks["errors"] == {"27b_fp16": "RuntimeError: no GPU for fp16", "27b_int8": "RuntimeError: no GPU for int8"}


def test_a_gpu_too_small_for_the_27b_shape_is_skipped_and_said(monkeypatch):
    def never(**kw):
        raise AssertionError("measured without the memory for it")
    monkeypatch.setattr(mtp_bench, "measure_27b_rounds", never)
    monkeypatch.setattr(mtp_bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mtp_bench.torch.cuda, "mem_get_info", lambda: (12 << 30, 16 << 30))   # a 16 GB card, 12 GiB free
    checks = {}
    assert mtp_bench.rounds_figures({}, checks, "Tesla T4") == []
    assert set(checks["skipped"]) == {"27b_fp16", "27b_int8"} and "errors" not in checks
    assert "GiB of GPU memory, 12.0 GiB free" in checks["skipped"]["27b_fp16"]


def test_first_difference_gives_the_position_and_the_reference_top2_gap():
    import torch

    from t4lib.benchmarks.qwen35 import first_difference
    logits = torch.tensor([[0.0, 4.0, 1.0], [2.0, 2.0, -4.0], [1.0, 0.0, 0.0]])
    assert first_difference([1, 0, 0], [1, 0, 0], logits) is None
    assert first_difference([1, 1, 0], [1, 0, 0], logits) == {"position": 1, "top2_gap": 0.0}   # an exact tie
    assert first_difference([2, 0, 0], [1, 0, 0], logits) == {"position": 0, "top2_gap": 0.75}
