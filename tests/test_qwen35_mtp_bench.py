"""The MTP benchmark's CPU parts: the copy model with drafts against plain greedy and transformers on a subset of
the prompts, the byte model of a round, and a failing 27B measurement that must leave an error, not a figure."""
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("installed transformers has no Qwen3_5ForCausalLM", allow_module_level=True)

from t4lib.models.qwen35 import mtp_bench  # noqa: E402


def test_copy_model_with_drafts_and_the_peer_on_a_subset():
    prompts = mtp_bench.copy_prompts(3)
    c = mtp_bench.measure_copy_model(prompts, 12, "cpu", gammas=(1, 2), hf_prompts=1)
    assert c["prompts"] == 3 and c["hf_prompts"] == 1
    assert c["hf_identical_fraction"] == 1.0   # fp32 engine and transformers agree on the copy model
    assert c["plain_speedup_vs_hf"] > 0
    for g in (1, 2):
        row = c[f"mtp{g}"]
        assert row["identical_fraction"] == 1.0 and row["first_mismatch"] == []
        assert 1.0 <= row["tokens_per_step"] <= g + 1
        assert sum(row["accepted_histogram"]) > 0 and len(row["accepted_histogram"]) == g + 1
        assert row["speedup_vs_hf"] > 0


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

    from t4lib.models.qwen35.bench import first_difference
    logits = torch.tensor([[0.0, 4.0, 1.0], [2.0, 2.0, -4.0], [1.0, 0.0, 0.0]])
    assert first_difference([1, 0, 0], [1, 0, 0], logits) is None
    assert first_difference([1, 1, 0], [1, 0, 0], logits) == {"position": 1, "top2_gap": 0.0}   # an exact tie
    assert first_difference([2, 0, 0], [1, 0, 0], logits) == {"position": 0, "top2_gap": 0.75}
