"""The speculative-decoding benchmark on CPU (fp32 tiny-cpu): its prompt sets, a whole run's code paths and
results file, and the memory check that decides which shapes it builds. Kept apart from the GPU tests of the
engine, so that a change to the benchmark reaches its records and notebook, not the GPU ledger."""
import json

import pytest
import torch

from t4lib import models
from t4lib.benchmarks import speculative as bench


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: a tiny model's forward is slow when two threads spin on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_cpu():
    model, tok = models.load("tiny-cpu", dtype=torch.float32)
    return model, tok, None, None


def test_load_prompts_copy_long(tiny_cpu):
    _, tok, _, _ = tiny_cpu
    long_p = bench.load_prompts(tok, "copy_long", 3)
    assert len(long_p) == 3 and all(len(p) > 100 for p in long_p)
    assert tok.decode(long_p[0]).startswith("Task: ")
    assert bench.load_prompts(tok, n=2) == bench.load_prompts(tok, "copy", 2)   # default unchanged
    with pytest.raises(ValueError, match="kind"):
        bench.load_prompts(tok, "long")
    with pytest.raises(ValueError, match="n must"):
        bench.load_prompts(tok, "copy_long", 0)


def test_bench_runs_on_cpu(tmp_path):
    """The benchmark's code paths (references, both engines, Hugging Face, batch > 1, the draft model, the
    results file) on CPU with fp32 tiny-cpu: every output identical to plain greedy, each engine's time split
    recorded, and the figures the issue names present (CPU times mean nothing and are not kept)."""
    from t4lib.core import results
    out = bench.run(tmp_path, n_prompts=3, max_new=12, batch=2, device="cpu", quick=True, target="tiny-cpu",
                    draft="tiny-cpu", hf_prompts=2, log=lambda *a: None)
    doc = json.loads((tmp_path / "speculative.json").read_text())
    results.validate(doc)
    assert not out["errors"]
    figs = {f["name"]: f["value"] for f in doc["figures"]}
    assert figs["speculative/exact/identical_fraction"] == 1.0
    for name in ("pld/b1/speedup_vs_engine_greedy", "pld/b1/decode_speedup_vs_engine_greedy", "pld/b1/prefill_s",
                 "engine_greedy/copy/b1/first_token_s", "pld/b1/speedup_vs_hf_pld", "pld/b2/speedup_vs_engine_greedy",
                 "open_ended/b1/speedup_vs_engine_greedy", "draft_model/b1/tokens_per_forward"):
        assert figs["speculative/" + name] > 0, name
    split = doc["details"]["engine_greedy_b1_split"]["copy"]
    assert 0 < split["ttft_s"] + split["decode_s"] <= split["total_s"]
    assert doc["details"]["pld_b1"]["copy"]["stats"]["prefill_graph"] is False   # no graphs on CPU
    with pytest.raises(ValueError, match="hf_prompts"):
        bench.run(tmp_path, hf_prompts=0, device="cpu")


def test_shape_fits_reads_the_process_memory_cap(monkeypatch):
    """Under a T4's 15 GiB cap the 7B shape's fp16 weights (about 15 GiB) do not fit and are reported with
    why, not built; the 0.5B shape fits; what the device has free binds as well as the cap."""
    from types import SimpleNamespace
    from t4lib.models.shapes import QWEN25_05B, QWEN25_7B
    gib = 2 ** 30
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(total_memory=140 * gib))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda *a: 15 / 140)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 1 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 1 * gib)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (100 * gib, 140 * gib))
    fits, why = bench.shape_fits(QWEN25_7B)
    assert not fits and "GiB" in why
    assert bench.shape_fits(QWEN25_05B) == (True, "")
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda *a: 1.0)
    assert bench.shape_fits(QWEN25_7B)[0]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (gib // 2, 140 * gib))
    assert not bench.shape_fits(QWEN25_05B)[0]
