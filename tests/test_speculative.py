"""Speculative decoding: exact greedy tokens against StaticEngine plain greedy (tiny-cpu, fp32, CPU),
the drafters, the speculative-sampling rule against its closed form, bad input; GPU: graphs + compile."""
import json

import numpy as np
import pytest
import torch

from t4lib import models
from t4lib.models import schema
from t4lib.serving import StaticEngine
from t4lib.speculative import (DraftModelDrafter, Drafter, PromptLookupDrafter, SpeculativeEngine,
                               speculative_accept)

MAX_NEW = 24
EOS = 0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: a tiny model's forward is ~10 ms alone, but 50x slower when two threads
    spin against other processes on a busy 2-core CI machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_cpu():
    model, tok = models.load("tiny-cpu", dtype=torch.float32)
    assert tok.eos_token_id == EOS
    recs = [json.loads(line) for line in open(models.tiny.corpus.data_dir() / "copy_heldout.jsonl")][:6]
    prompts = [tok(schema.copy_prompt(r["instruction"], r["input"]))["input_ids"] for r in recs]
    eng = StaticEngine(model, max_len=160)
    refs = []
    for p in prompts:  # plain greedy, one prompt at a time: the reference every test compares with
        r = eng.generate(torch.tensor([p]), MAX_NEW, eos_token_id=EOS)
        refs.append(r.new_tokens[0, :r.lengths[0]].tolist())
    return model, tok, prompts, refs


class Oracle(Drafter):
    """Proposes a given continuation (the reference, optionally wrong from some draft position on)
    and, past it, junk tokens; records what it was asked."""

    def __init__(self, conts, prompts, junk=7, cut_eos=False):
        self.conts, self.lens, self.junk, self.cut_eos, self.calls = conts, [len(p) for p in prompts], junk, cut_eos, []

    def propose(self, contexts, k):
        out = []
        for c in contexts:
            b = next(i for i, L in enumerate(self.lens) if L <= len(c) and self._mine(i, c))
            done = len(c) - self.lens[b]
            d = (self.conts[b][done:] + [self.junk] * k)[:k]
            out.append(self._cut_at_eos(d, EOS) if self.cut_eos else d)
        self.calls.append(out)
        return out

    def _mine(self, i, c):
        gen = c[self.lens[i]:]
        return gen == self.conts[i][:len(gen)]


def spec(model, drafter=None, **kw):
    kw.setdefault("max_len", 160)
    return SpeculativeEngine(model, drafter or PromptLookupDrafter(eos_token_id=EOS), **kw)


def test_references_vary(tiny_cpu):
    _, _, _, refs = tiny_cpu
    assert len({len(r) for r in refs}) > 2 and any(r[-1] == EOS for r in refs) and any(len(r) == MAX_NEW for r in refs)


@pytest.mark.parametrize("k", range(1, 9))
def test_pld_batch1_equals_greedy_every_k(tiny_cpu, k):
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, ks=(k,), adaptive=False, max_batch_size=1)
    for p, ref in list(zip(prompts, refs))[:2]:
        r = eng.generate([p], MAX_NEW, eos_token_id=EOS)
        assert r.new_tokens[0] == ref
        assert r.stats.decode_tokens == len(ref) - 1
    assert r.stats.target_forwards >= 1 and sum(r.stats.accept_hist) + r.stats.no_draft >= 1


@pytest.mark.parametrize("adaptive", [False, True])
def test_pld_batch4_ragged_equals_greedy(tiny_cpu, adaptive):
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, max_batch_size=4, adaptive=adaptive, ks=(1, 2, 4, 8))
    r = eng.generate(prompts[:4], MAX_NEW, k=4, eos_token_id=EOS)
    assert len({len(p) for p in prompts[:4]}) > 1      # ragged prompts
    assert r.new_tokens == refs[:4]
    assert r.lengths == [len(x) for x in refs[:4]]


def test_oracle_drafts_accepted_and_sequences_finish_apart(tiny_cpu):
    """A perfect drafter: every verify accepts all drafts (until a row's end); rows end at different
    steps (EOS or budget) while the others continue; junk after a row's end is never emitted."""
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, Oracle(refs[:4], prompts[:4]), max_batch_size=4, ks=(4,), adaptive=False)
    r = eng.generate(prompts[:4], MAX_NEW, eos_token_id=EOS)
    assert r.new_tokens == refs[:4]
    assert len(set(r.lengths)) > 1
    assert r.stats.tokens_per_forward > 3.0   # 5 per verify while all drafts hold
    assert r.stats.accept_hist[4] >= 3


def test_eos_inside_draft(tiny_cpu):
    """Drafts run past EOS (junk after it): the output stops at EOS exactly like plain greedy."""
    model, _, prompts, refs = tiny_cpu
    b = next(i for i, x in enumerate(refs) if x[-1] == EOS and len(x) >= 6)
    inside = 0
    for k in (3, 4, 5):   # where EOS falls in a draft depends on k; one of these puts it inside
        eng = spec(model, Oracle([refs[b]], [prompts[b]]), max_batch_size=1, ks=(k,), adaptive=False)
        r = eng.generate([prompts[b]], MAX_NEW, eos_token_id=EOS)
        assert r.new_tokens[0] == refs[b]
        inside += any(EOS in d[:-1] for call in eng.drafter.calls for d in call)
    assert inside


def test_max_length_cutoff(tiny_cpu):
    model, _, prompts, refs = tiny_cpu
    b = max(range(len(refs)), key=lambda i: len(refs[i]))
    for new in (1, 2, 5):
        eng = spec(model, Oracle([refs[b]], [prompts[b]]), max_batch_size=1, ks=(8,), adaptive=False)
        r = eng.generate([prompts[b]], new, eos_token_id=EOS)
        assert r.new_tokens[0] == refs[b][:new] and r.lengths == [new]
    eng = spec(model, max_len=len(prompts[b]) + 5, max_batch_size=1)   # prompt + budget exactly fills max_len
    assert eng.generate([prompts[b]], 5).new_tokens[0] == refs[b][:5]


def test_no_ngram_match(tiny_cpu):
    """A prompt of distinct tokens: the drafter has nothing at first, the engine decodes plain steps."""
    model, _, _, _ = tiny_cpu
    prompt = list(range(40, 60))
    want = StaticEngine(model, max_len=160).generate(torch.tensor([prompt]), MAX_NEW).new_tokens[0].tolist()
    pld = PromptLookupDrafter()
    assert pld.propose([prompt], 4) == [[]]
    r = spec(model, pld, max_batch_size=1).generate([prompt], MAX_NEW)
    assert r.new_tokens[0] == want and r.stats.plain_steps >= 1


def test_draft_model_drafter(tiny_cpu):
    """tiny-cpu drafting for itself: the drafts are the target's own greedy tokens, nearly all accepted."""
    model, _, prompts, refs = tiny_cpu
    eng = spec(model, DraftModelDrafter(model, max_len=160, eos_token_id=EOS), max_batch_size=2, ks=(4,),
               adaptive=False)
    r = eng.generate(prompts[:2], MAX_NEW, eos_token_id=EOS)
    assert r.new_tokens == refs[:2]
    assert r.stats.acceptance_rate > 0.9 and r.stats.tokens_per_forward > 3.0


def test_adaptive_k_rule(tiny_cpu):
    """The expected-tokens-per-cost rule: flat verify cost and good acceptance -> the largest k; poor
    acceptance -> plain steps; cost growing with q -> a shorter draft."""
    model = tiny_cpu[0]
    flat = spec(model, ks=(1, 2, 4, 8), verify_cost={q: 1.0 + 0.02 * (q - 1) for q in range(1, 10)})
    assert flat._choose_k(0.9) == 8 and flat._choose_k(0.05) == 0
    steep = spec(model, ks=(1, 2, 4, 8), verify_cost={q: float(q) ** 0.5 for q in range(1, 10)})
    assert 0 < steep._choose_k(0.7) < 8
    a = flat._update_alpha(0.5, [[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 9]])   # 3/3 and 1 of 2 trials
    assert abs(a - (0.7 * 0.5 + 0.3 * 4 / 5)) < 1e-12
    assert flat._update_alpha(0.5, [[]], [[]]) == 0.5


def test_prompt_lookup_longest_ngram_first():
    d = PromptLookupDrafter(max_ngram=3, min_ngram=1)
    #          0  1  2  3  4  5  6  7  8  9
    ctx = [5, 1, 2, 3, 9, 9, 2, 3, 8, 1, 2, 3]
    # suffix 3-gram [1, 2, 3] occurred at 1 -> followed by 9, 9, 2
    assert d.lookup(ctx, 3) == [9, 9, 2]
    # only the 1-gram [8] ... no: suffix [2, 8] absent, [8] absent -> nothing
    assert d.lookup([4, 2, 8], 3) == []
    # 2-gram beats a more recent 1-gram
    assert d.lookup([1, 2, 7, 6, 2, 5, 1, 2], 2) == [7, 6]
    # the most recent occurrence of the longest n-gram
    assert d.lookup([1, 2, 7, 1, 2, 8, 1, 2], 1) == [8]
    # no draft across EOS
    assert PromptLookupDrafter(eos_token_id=0).lookup([4, 5, 0, 6, 7, 4, 5], 4) == [0]
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookupDrafter(min_ngram=0)
    with pytest.raises(ValueError, match="max_ngram"):
        PromptLookupDrafter(max_ngram=1, min_ngram=2)


def _chi2_p(counts, probs):
    from scipy.stats import chisquare
    probs = np.asarray(probs, dtype=np.float64)
    return chisquare(counts, probs / probs.sum() * counts.sum()).pvalue


def test_sampling_rule_matches_target_distribution():
    """Draft x ~ q, accept with min(1, p/q), else resample from max(p - q, 0): the first emitted token
    is distributed as p (chi-square); emitting the draft unconditionally is distributed as q and fails."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.1, 0.1, 0.2, 0.3, 0.3]])
    q = torch.tensor([[0.1, 0.4, 0.1, 0.2, 0.2]])
    n = 20000
    first, second, acc = np.zeros(5), np.zeros(5), 0
    draws = torch.multinomial(q[0], n, replacement=True, generator=g)
    for x in draws:
        out, a = speculative_accept(p, q, x.view(1), generator=g)
        assert len(out) == a + 1
        first[out[0]] += 1
        acc += a
        if a == 1:
            second[out[1]] += 1
    assert _chi2_p(first, p[0].numpy()) > 1e-3
    assert _chi2_p(second, p[1].numpy()) > 1e-3          # the bonus token after an acceptance
    assert abs(acc / n - torch.minimum(p[0], q[0]).sum().item()) < 0.015   # acceptance = sum min(p, q)
    naive = np.bincount(draws.numpy(), minlength=5).astype(float)
    assert _chi2_p(naive, p[0].numpy()) < 1e-6          # the test can fail


def test_sampling_rule_one_hot_draft_and_bad_shapes():
    p = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.0, 1.0, 0.0]])                    # prompt lookup: q is one-hot
    assert speculative_accept(p, q, torch.tensor([1])) == ([1, 0], 1)
    p2 = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert speculative_accept(p2, q, torch.tensor([1])) == ([2], 0)   # p(x) = 0: always rejected
    with pytest.raises(ValueError, match="p must be"):
        speculative_accept(p[:1], q, torch.tensor([1]))
    with pytest.raises(ValueError, match="draft must be"):
        speculative_accept(p, q, torch.tensor([1, 2]))


def _other_vocab_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    return Qwen2ForCausalLM(cfg).eval()


def test_bad_input(tiny_cpu):
    model, _, prompts, _ = tiny_cpu
    eng = spec(model, max_len=64, max_batch_size=2, ks=(2, 4))
    with pytest.raises(ValueError, match="k must be"):
        eng.generate([prompts[0]], 4, k=0)
    with pytest.raises(ValueError, match="k=3"):
        eng.generate([prompts[0]], 4, k=3)
    with pytest.raises(ValueError, match="max_len"):
        eng.generate([prompts[0]], 64 - len(prompts[0]) + 1)
    with pytest.raises(ValueError, match="max_batch_size"):
        eng.generate(prompts[:3], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        eng.generate([prompts[0]], 0)
    with pytest.raises(TypeError, match="input_ids"):
        eng.generate("hello", 4)
    with pytest.raises(ValueError, match="drafter"):
        spec(model, DraftModelDrafter(_other_vocab_model()))
    with pytest.raises(ValueError, match="ks"):
        spec(model, ks=(0, 2))
    with pytest.raises(TypeError, match="drafter"):
        SpeculativeEngine(model, drafter="pld")


# ---------------------------------------------------------------------- GPU
def _gpu_setup(dtype=torch.float16, quant=False, n=8):
    model, tok = models.load("tiny-gpu", dtype=dtype, device="cuda")
    if quant:
        from t4lib.quant import quantize_model
        quantize_model(model)
    recs = [json.loads(line) for line in open(models.tiny.corpus.data_dir() / "copy_heldout.jsonl")][:n]
    prompts = [tok(schema.copy_prompt(r["instruction"], r["input"]))["input_ids"] for r in recs]
    se = StaticEngine(model, max_len=256, compile=False)   # graph-captured plain greedy; no compile time
    refs, gaps = [], []
    for p in prompts:
        r = se.generate(torch.tensor([p]), 48, eos_token_id=EOS, output_logits=True)
        refs.append(r.new_tokens[0, :r.lengths[0]].tolist())
        top2 = r.logits[0, :r.lengths[0]].topk(2, dim=-1).values
        gaps.append((top2[:, 0] - top2[:, 1]).tolist())
    return model, prompts, refs, gaps


def _agree(got, refs, gaps):
    """Identical rows; a differing row must differ at a near-tie of the target (top-2 gap < 0.1)."""
    same = 0
    for g, r, gap in zip(got, refs, gaps):
        if g == r:
            same += 1
            continue
        i = next((j for j, (a, b) in enumerate(zip(g, r)) if a != b), min(len(g), len(r)))
        assert i < len(gap) and gap[i] < 0.1, f"mismatch at {i} with top-2 gap {gap[i] if i < len(gap) else None}"
    return same


@pytest.mark.gpu
@pytest.mark.parametrize("quant", [False, True])
def test_gpu_graph_compiled_equals_greedy(quant):
    model, prompts, refs, gaps = _gpu_setup(quant=quant)
    # fp16: compiled verify graphs; W4A16 (QuantLinear): graphs of the uncompiled forward (compiling both
    # would take a minute of GPU time per process)
    eng = SpeculativeEngine(model, PromptLookupDrafter(eos_token_id=EOS), max_len=256, max_batch_size=8,
                            compile=not quant)
    r1 = [eng.generate([p], 48, eos_token_id=EOS) for p in prompts]
    assert r1[0].graph and r1[0].compiled == (not quant), r1[0].compile_error
    cost = eng._states[1].cost   # the verify-cost curve timed on the captured graphs
    assert cost[1] == 1.0 and all(c > 0 for c in cost.values()) and set(cost) == {1, 2, 3, 5, 9}
    assert _agree([r.new_tokens[0] for r in r1], refs, gaps) >= len(refs) - 1
    r8 = eng.generate(prompts, 48, eos_token_id=EOS)
    assert _agree(r8.new_tokens, refs, gaps) >= len(refs) - 1
    assert r8.stats.tokens_per_forward > 1.0


@pytest.mark.gpu
def test_gpu_graph_equals_eager():
    model, prompts, _, _ = _gpu_setup(dtype=torch.float32, n=4)
    pld = PromptLookupDrafter(eos_token_id=EOS)
    want = SpeculativeEngine(model, pld, max_len=256, max_batch_size=4, use_graph=False).generate(prompts, 48)
    got = SpeculativeEngine(model, pld, max_len=256, max_batch_size=4, compile=False).generate(prompts, 48)
    assert got.graph and got.new_tokens == want.new_tokens
