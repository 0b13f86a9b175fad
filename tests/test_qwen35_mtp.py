"""qwen35 MTP drafts (CPU): the NextN block against its transformers-layer oracle, the multi-row verify
forward against transformers, greedy tokens identical with and without drafts (also when drafts are
mostly right, so rejected rows really are rolled back), and bad input."""
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("installed transformers has no Qwen3_5ForCausalLM", allow_module_level=True)

from t4lib.models.qwen35 import Qwen35Engine, Qwen35Model  # noqa: E402
from t4lib.models.qwen35.convert import gguf_to_hf_state_dict, hf_to_gguf  # noqa: E402
from t4lib.models.qwen35.oracle import PROMPT, check_mtp, random_hf, random_mtp, tiny_config  # noqa: E402
from t4lib.quant.gguf import GGUFError, write_tiny_qwen35  # noqa: E402

NEW = 40
TOL_F32 = 1e-5   # fp32 engine against transformers fp32 (measured ~1e-6)


@pytest.fixture(autouse=True, scope="module")
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    cfg = tiny_config()
    m, mtp = random_hf(cfg), random_mtp(cfg)
    sd = dict(m.state_dict())
    sd.update(mtp.state_dict_with_prefix())
    path = hf_to_gguf(sd, cfg, tmp_path_factory.mktemp("mtp") / "f32.gguf")
    return cfg, m, mtp, sd, path


def test_converter_writes_and_reads_back_the_mtp_block(case):
    cfg, _, _, sd, path = case
    back = gguf_to_hf_state_dict(path, cfg, mtp=True)
    assert set(sd) <= set(back)
    for k, v in sd.items():   # exact but for the norms' +1 and -1 in fp32
        torch.testing.assert_close(back[k], v.float(), rtol=0, atol=1e-7, msg=k)
    assert not any(k.startswith("mtp.") for k in gguf_to_hf_state_dict(path, cfg))


def test_rows_forward_and_nextn_block_match_transformers():
    """The prompt as one multi-row forward (the verify path) against transformers' prefill, the NextN block over
    those rows against Qwen35MTP, and greedy tokens with drafts against plain greedy (oracle.check_mtp)."""
    r = check_mtp(new=24)
    assert r["rows_rel_err"] < TOL_F32 and r["nextn_rel_err"] < TOL_F32, r
    assert all(r["identical"].values()), r


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_mtp_greedy_tokens_identical_on_the_synthetic_file(tmp_path, dtype):
    path = write_tiny_qwen35(tmp_path / "t.gguf")   # every GGUF format, NextN block included
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=64, dtype=dtype)
    prompt = [t % 64 for t in PROMPT]   # the synthetic file's vocabulary is 64
    plain = eng.generate(prompt, NEW).tokens
    for gamma in (1, 3):
        r = eng.generate(prompt, NEW, mtp=gamma)
        assert r.tokens == plain, gamma
        assert len(r.tokens) == NEW and sum(r.mtp["accepted_histogram"]) == r.mtp["rounds"]


def force_drafts(monkeypatch, plain):
    """Make MTPDrafter propose the plain greedy continuation, with the middle draft of every third round wrong;
    returns a function that restarts the round count (so two engines see the same drafts)."""
    from t4lib.models.qwen35.mtp import MTPDrafter

    calls = [0]

    def propose(self, contexts, k):
        done = len(contexts[0]) - len(PROMPT)   # tokens generated so far
        d = (plain[done:done + k] + [0] * k)[:k]
        calls[0] += 1
        if calls[0] % 3 == 0:
            d[k // 2] = (d[k // 2] + 1) % 96
        return [d]

    monkeypatch.setattr(MTPDrafter, "propose", propose)
    return lambda: calls.__setitem__(0, 0)


def test_rejections_roll_back_the_recurrent_state(case, monkeypatch):
    """Drafts taken from the plain greedy output with every third round's draft corrupted: rows after a
    rejection must be undone (DeltaNet snapshots, attention positions overwritten), or the tokens drift."""
    _, _, _, _, path = case
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=96, dtype=torch.float32)
    plain = eng.generate(PROMPT, NEW).tokens
    force_drafts(monkeypatch, plain)
    for gamma in (1, 2, 4):
        r = eng.generate(PROMPT, NEW, mtp=gamma)
        assert r.tokens == plain, gamma
        hist = r.mtp["accepted_histogram"]
        assert r.mtp["tokens_per_step"] > 1.3 and hist[gamma] > 0 and sum(hist[:gamma]) > 0, r.mtp


def test_two_stages_verify_and_roll_back_like_one(case, monkeypatch):
    """Layers over two stages (both on the CPU here): drafts verified across the boundary, rejections rolled back
    in both stages' DeltaNet layers; the same tokens and accepted counts as one stage."""
    _, _, _, _, path = case
    one = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=96, dtype=torch.float32)
    two = Qwen35Engine.from_gguf(path, devices=["cpu", "cpu"], capacities=[None, None], max_len=96,
                                 dtype=torch.float32)
    assert len(two.stages) == 2 and two.model.mtp is not None
    assert one.model.mtp_embed is one.model.embed   # one device: the block shares the table, no copy
    assert two.model.mtp_embed is two.model.embed   # two stages on one device share it too
    assert sum(two.plan.stage_bytes) == sum(one.plan.stage_bytes)   # so the plan counts no copy of it
    plain = one.generate(PROMPT, NEW).tokens
    assert two.generate(PROMPT, NEW, mtp=2).tokens == plain
    restart = force_drafts(monkeypatch, plain)
    r1 = one.generate(PROMPT, NEW, mtp=3)
    restart()
    r2 = two.generate(PROMPT, NEW, mtp=3)
    assert r1.tokens == r2.tokens == plain
    assert r1.mtp["accepted_histogram"] == r2.mtp["accepted_histogram"]


def test_graphed_mtp_verify_captures_its_graphs_and_replays_them(case, monkeypatch):
    """With CUDA graphs on, the NextN step, the rows forward and each rejection's rollback are captured through
    core.graphs.capture; here a stand-in that replays the call eagerly takes CUDA's place, so a capture path
    that breaks (and would fall back to eager, slowly, on a GPU) fails on the CPU: no fallback, greedy tokens."""
    from t4lib.models.qwen35 import engine as qwen35_engine

    captured = []

    class Replayed:
        def __init__(self, fn):
            self.fn = fn

        def replay(self):
            self.fn()

    def capture(fn, *, device=None, **kw):
        captured.append(device)
        return Replayed(fn), None

    _, _, _, _, path = case
    plain = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=96, dtype=torch.float32).generate(PROMPT, NEW).tokens
    monkeypatch.setattr(qwen35_engine.graphs, "capture", capture)
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=96, dtype=torch.float32)
    eng.use_graphs = True   # what a CUDA device sets; the stand-in captures on the CPU
    force_drafts(monkeypatch, plain)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a capture that fails warns and runs eagerly: an error here
        r = eng.generate(PROMPT, NEW, mtp=3)
    assert eng.graph_error is None
    assert r.tokens == plain and sum(r.mtp["accepted_histogram"][:3]) > 0, r.mtp   # rejections: rollbacks ran
    rb = eng.rows[4]
    assert eng.mtp_step_graph is not None and rb["graphs"] is not None and rb["restore"] is not None
    assert len(captured) == len(eng.stages) + 1 + len(eng.stages) + 3   # steps, NextN step, rows, 3 rollbacks


def test_mtp_bad_input(case, tmp_path):
    cfg, m, mtp, sd, path = case
    eng = Qwen35Engine.from_gguf(path, devices=["cpu"], max_len=32, dtype=torch.float32)
    for bad in (0, 8, True, 1.5):
        with pytest.raises(ValueError, match="mtp must be an int"):
            eng.generate(PROMPT, 4, mtp=bad)
    with pytest.raises(ValueError, match="do_sample"):
        eng.generate(PROMPT, 4, mtp=1, do_sample=True)
    no_mtp = Qwen35Engine(Qwen35Model.from_gguf(path, mtp=False), max_len=32, dtype=torch.float32)
    with pytest.raises(ValueError, match="no NextN/MTP block"):
        no_mtp.generate(PROMPT, 4, mtp=1)
    partial = {k: v for k, v in sd.items() if k != "mtp.pre_fc_norm_hidden.weight"}
    p2 = hf_to_gguf(partial, cfg, tmp_path / "partial.gguf")
    with pytest.raises(GGUFError, match="nextn.hnorm"):
        Qwen35Model.from_gguf(p2)
    assert Qwen35Model.from_gguf(p2, mtp=False).mtp is None


def test_the_oracle_runs_without_fla_where_fla_is_installed(monkeypatch):
    """With fla installed, transformers sends CPU tensors to fla's Triton kernels: the oracle then runs in a child
    process that cannot import fla, and gives what it gives in process."""
    from t4lib.models.qwen35 import oracle

    in_process = check_mtp(new=6, gammas=(1, 2))
    monkeypatch.setattr(oracle, "fla_importable", lambda: True)
    child = oracle.check_mtp(new=6, gammas=(1, 2))
    assert child["identical"] == in_process["identical"] == {1: True, 2: True} and child["tokens"] == 6
    for k in ("rows_rel_err", "nextn_rel_err"):   # the child's thread count may differ: not bit for bit
        assert child[k] == pytest.approx(in_process[k], rel=0.5, abs=1e-7) and child[k] < TOL_F32
    with pytest.raises(ValueError, match="name must be"):
        oracle.without_fla("hf_run")
