"""Device rounds of the speculative engine (drafting, acceptance and bookkeeping as tensor operations, one CUDA
graph per k on a GPU), on CPU with tiny-cpu in fp32: the tensor prompt lookup against the host one, the tokens
against plain greedy at batch 1 and 4 for every k (batch 4 also on the host loop), queued chunks, EOS inside accepted drafts, budgets, rows
finishing apart, the emulated graph path, the counters, bad input."""
import random

import pytest
import torch

from t4lib.serving import StaticEngine
from t4lib.speculative import Drafter, PromptLookupDrafter, SpeculativeEngine

from test_speculative import EOS, MAX_NEW, _ReplayEager, one_thread, tiny_cpu  # noqa: F401 (fixtures)


def spec(model, drafter=None, **kw):
    kw.setdefault("max_len", 160)
    kw.setdefault("device_rounds", True)
    return SpeculativeEngine(model, drafter or PromptLookupDrafter(eos_token_id=EOS), **kw)


class DeviceOracle(Drafter):
    """Proposes each row's reference continuation (then junk) from device tensors: every draft holds."""

    def __init__(self, prompts, refs, junk=7, width=64):
        self.plen = torch.tensor([len(p) for p in prompts])
        self.cont = torch.tensor([(r + [junk] * width)[:width] for r in refs])

    def propose(self, contexts, k):
        raise AssertionError("the device path must not call the host drafter")

    def propose_device(self, tokens, n, k):
        done = n - self.plen                                  # tokens generated so far
        idx = (done[:, None] + torch.arange(k)).clamp(max=self.cont.shape[1] - 1)
        return self.cont.gather(1, idx), torch.full_like(n, k)


@pytest.mark.parametrize("seed", range(3))
def test_propose_device_equals_lookup(seed):
    rng = random.Random(seed)
    for _ in range(400):
        mx = rng.randint(1, 4)
        d = PromptLookupDrafter(max_ngram=mx, min_ngram=rng.randint(1, mx), eos_token_id=rng.choice([None, 0, 2]))
        B, S, k = rng.randint(1, 4), rng.randint(2, 40), rng.randint(1, 8)
        toks = torch.randint(0, rng.choice([2, 3, 6]), (B, S))
        n = torch.tensor([rng.randint(1, S) for _ in range(B)])
        draft, dlen = d.propose_device(toks, n, k)
        assert draft.shape == (B, k) and dlen.shape == (B,)
        for b in range(B):
            assert draft[b, :dlen[b]].tolist() == d.lookup(toks[b, :n[b]].tolist(), k)


@pytest.mark.parametrize("k", range(1, 9))
def test_rounds_batch1_equals_greedy_every_k(tiny_cpu, k):
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, ks=(k,), adaptive=False, max_batch_size=1)
    for p, ref in list(zip(prompts, refs))[:2]:
        r = eng.generate_with_stats([p], MAX_NEW, eos_token_id=EOS)
        assert r.new_tokens[0] == ref and r.stats.device_rounds
        assert r.stats.decode_tokens == len(ref) - 1
        s = r.stats
        assert s.row_forwards <= s.target_forwards and sum(s.accept_hist) + s.no_draft == s.row_forwards
        assert s.accepted == sum(i * c for i, c in enumerate(s.accept_hist)) <= s.drafted


@pytest.mark.parametrize("adaptive,rounds,queued", [(False, 1, 1), (False, 3, 2), (True, 1, 2), (True, 2, 3)])
def test_rounds_batch4_ragged_equals_greedy(tiny_cpu, adaptive, rounds, queued):
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, max_batch_size=4, adaptive=adaptive, ks=(1, 2, 4, 8), rounds_per_sync=rounds,
               in_flight=queued)
    r = eng.generate_with_stats(prompts[:4], MAX_NEW, k=4, eos_token_id=EOS)
    assert len({len(p) for p in prompts[:4]}) > 1
    assert r.new_tokens == refs[:4] and r.lengths == [len(x) for x in refs[:4]]
    assert sum(eng.plain_chunk if k == 0 else rounds for k in r.stats.k_trace) == r.stats.target_forwards


@pytest.mark.parametrize("device_rounds", [True, False])
@pytest.mark.parametrize("k", range(1, 9))
def test_batch4_equals_greedy_every_k(tiny_cpu, k, device_rounds):
    """Batch 4, ragged prompts, a fixed k from 1 to 8, on device rounds and on the host loop: rows accept
    different numbers of drafts per verify, and every row's tokens are its plain greedy tokens."""
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, ks=(k,), adaptive=False, max_batch_size=4, device_rounds=device_rounds)
    r = eng.generate_with_stats(prompts[:4], MAX_NEW, eos_token_id=EOS)
    assert r.new_tokens == refs[:4] and r.lengths == [len(x) for x in refs[:4]]
    assert r.stats.drafted > 0 and r.stats.accepted > 0


def test_rounds_tokens_equal_host_loop(tiny_cpu):
    model, _, prompts, refs = tiny_cpu
    host = spec(model, max_batch_size=4, device_rounds=False).generate_with_stats(prompts[:4], MAX_NEW, eos_token_id=EOS)
    dev = spec(model, max_batch_size=4).generate_with_stats(prompts[:4], MAX_NEW, eos_token_id=EOS)
    assert dev.new_tokens == host.new_tokens == refs[:4]
    assert dev.stats.device_rounds and not host.stats.device_rounds


def test_rounds_oracle_accepts_all_and_rows_finish_apart(tiny_cpu):
    """Perfect drafts with junk past each row's end: all kept while they hold, the output stops at EOS or
    the budget, rows end at different rounds while the others continue, junk is never emitted."""
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, DeviceOracle(prompts[:4], refs[:4]), max_batch_size=4, ks=(4,), adaptive=False)
    r = eng.generate_with_stats(prompts[:4], MAX_NEW, eos_token_id=EOS)
    assert r.new_tokens == refs[:4] and len(set(r.lengths)) > 1
    assert r.stats.tokens_per_forward > 3.0 and r.stats.accept_hist[4] >= 3
    assert any(x[-1] == EOS for x in refs[:4])


def test_rounds_eos_inside_accepted_drafts(tiny_cpu):
    """A row whose reference ends in EOS, drafted perfectly with k = 3..5: EOS falls inside a kept draft for
    one of them; the output stops right after it."""
    model, _, prompts, refs = tiny_cpu
    b = next(i for i, x in enumerate(refs) if x[-1] == EOS and len(x) >= 6)
    for k in (3, 4, 5):
        eng = spec(model, DeviceOracle([prompts[b]], [refs[b]]), max_batch_size=1, ks=(k,), adaptive=False)
        r = eng.generate_with_stats([prompts[b]], MAX_NEW, eos_token_id=EOS)
        assert r.new_tokens[0] == refs[b]


def test_rounds_budget_cutoff(tiny_cpu):
    model, _, prompts, refs = tiny_cpu
    b = max(range(len(refs)), key=lambda i: len(refs[i]))
    for new in (1, 2, 5):
        eng = spec(model, DeviceOracle([prompts[b]], [refs[b]]), max_batch_size=1, ks=(8,), adaptive=False)
        r = eng.generate_with_stats([prompts[b]], new, eos_token_id=EOS)
        assert r.new_tokens[0] == refs[b][:new] and r.lengths == [new]
    eng = spec(model, max_len=len(prompts[b]) + 5, max_batch_size=1)   # prompt + budget exactly fills max_len
    assert eng.generate_with_stats([prompts[b]], 5).new_tokens[0] == refs[b][:5]


def test_rounds_no_ngram_match(tiny_cpu):
    model = tiny_cpu[0]
    prompt = list(range(40, 60))
    want = StaticEngine(model, max_len=160).generate_with_stats(torch.tensor([prompt]), MAX_NEW).new_tokens[0].tolist()
    r = spec(model, PromptLookupDrafter(), max_batch_size=1, ks=(4,), adaptive=False).generate_with_stats([prompt], MAX_NEW)
    assert r.new_tokens[0] == want and r.stats.no_draft >= 1


def test_rounds_adaptive_falls_back_to_plain_rounds(tiny_cpu):
    """Drafts that never hold drive the acceptance estimate down until the engine runs plain rounds."""
    model, _, prompts, refs = tiny_cpu
    wrong = [[(t + 1) % 1000 + 2 for t in r] for r in refs[:1]]
    r = spec(model, DeviceOracle(prompts[:1], wrong), max_batch_size=1,
             verify_cost={q: 1.0 + 0.05 * (q - 1) for q in range(1, 10)}).generate_with_stats(prompts[:1], MAX_NEW,
                                                                                   eos_token_id=EOS)
    assert r.new_tokens[0] == refs[0]
    assert 0 in r.stats.k_trace and r.stats.plain_steps > 0


def test_rounds_graph_path_emulated_on_cpu(tiny_cpu, monkeypatch):
    """The round 'graphs' replayed as eager calls of the very round they would capture, the verify and prefill
    graphs likewise: plain greedy's tokens at batch 1 and 4; swapping the drafter recaptures the rounds."""
    model, _, prompts, refs = tiny_cpu

    def capture_all(self, st):
        st.graphs = {0: _ReplayEager(lambda: self._plain_step(st))}
        st.graphs.update({k + 1: _ReplayEager((lambda q: lambda: self._verify_step(st, q))(k + 1)) for k in self.ks})

    def capture_rounds(self, st, ks):
        st.round_graphs.update({k: _ReplayEager((lambda k: lambda: self._round(st, k))(k)) for k in ks})
        self._reset_rounds(st)

    def capture_prefill(self, st, T):
        st.pf_ids[T] = torch.zeros(st.B, T, dtype=torch.long)
        if st.pf_last is None:
            st.pf_last = torch.zeros(st.B, dtype=torch.long)
        st.prefill_graphs[T] = _ReplayEager(lambda: self._prefill_step(st, T))

    monkeypatch.setattr(SpeculativeEngine, "_capture_all", capture_all)
    monkeypatch.setattr(SpeculativeEngine, "_capture_rounds", capture_rounds)
    monkeypatch.setattr(SpeculativeEngine, "_capture_prefill", capture_prefill)
    eng = spec(model, max_batch_size=4, compile=False, prefill_bucket=8)
    eng.use_graph = True   # the CUDA-only switch, set past the constructor's device check
    for p, ref in zip(prompts[:2], refs[:2]):
        r = eng.generate_with_stats([p], MAX_NEW, eos_token_id=EOS)
        assert r.new_tokens[0] == ref and r.graph and r.stats.device_rounds
    st = eng._states[1]
    first = dict(st.round_graphs)
    assert set(first) == {0, 8} and st.round_drafter is eng.drafter   # plain rounds and k = max(ks)
    eng.generate_with_stats([prompts[0]], MAX_NEW, k=2, eos_token_id=EOS)             # a k asked for gets its graph
    assert set(st.round_graphs) == {0, 2, 8}
    eng.drafter = PromptLookupDrafter(max_ngram=2, eos_token_id=EOS)
    assert eng.generate_with_stats([prompts[0]], MAX_NEW, eos_token_id=EOS).new_tokens[0] == refs[0]
    assert st.round_drafter is eng.drafter and st.round_graphs[8] is not first[8]
    assert eng.generate_with_stats(prompts[:4], MAX_NEW, eos_token_id=EOS).new_tokens == refs[:4]


def test_rounds_default_and_bad_input(tiny_cpu):
    model = tiny_cpu[0]
    assert not SpeculativeEngine(model, PromptLookupDrafter()).device_rounds   # CPU default: the host loop
    for name, bad in (("rounds_per_sync", 0), ("in_flight", 0), ("in_flight", True), ("rounds_per_sync", 1.5)):
        with pytest.raises(ValueError, match=name):
            spec(model, **{name: bad})
    with pytest.raises(TypeError, match="device_rounds"):
        spec(model, device_rounds="yes")


@pytest.mark.parametrize("B,q", [(1, 1), (1, 4), (3, 1), (3, 5)])
def test_row_cache_writes_each_row_at_its_own_positions(B, q):
    """RowStaticCache.update against a per-row loop: row b's q new keys and values land at pos[b] .. pos[b] + q - 1
    of every head, nothing else changes."""
    from types import SimpleNamespace

    from t4lib.speculative.cache import RowStaticCache

    cfg = SimpleNamespace(num_key_value_heads=2, num_attention_heads=4, head_dim=8, hidden_size=32,
                          num_hidden_layers=2)
    cache = RowStaticCache(cfg, B, 12, torch.device("cpu"), torch.float32)
    for t in cache.keys + cache.values:
        t.copy_(torch.randn_like(t))
    want_k = [t.clone() for t in cache.keys]
    want_v = [t.clone() for t in cache.values]
    cache.pos.copy_(torch.tensor([3, 0, 7][:B]))
    ks, vs = torch.randn(B, 2, q, 8), torch.randn(B, 2, q, 8)
    for b in range(B):
        p = int(cache.pos[b])
        want_k[1][b, :, p:p + q] = ks[b]
        want_v[1][b, :, p:p + q] = vs[b]
    k, v = cache.update(ks, vs, 1)
    assert k is cache.keys[1] and v is cache.values[1]
    for got, want in zip(cache.keys + cache.values, want_k + want_v):
        assert torch.equal(got, want)
