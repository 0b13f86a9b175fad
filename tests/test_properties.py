"""Property-based checks (hypothesis) of the quantizers, the sampling rule and an engine's argument checks:
for any input drawn, either a clear error naming what is wrong, or a result within the documented bound."""
import math

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from t4lib.decoding.sampling import Sampler, scaled_logits, speculative_accept  # noqa: E402
from t4lib.quant import quantize_gptq, quantize_rtn  # noqa: E402
from t4lib.quant.quantize import MAX_ABS_WEIGHT, MIN_ABS_ROW  # noqa: E402
from random_lm import ForwardReached, NoForward, wandering_qwen2  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)


# ----------------------------------------------------------------------------- quantizers

@st.composite
def weights(draw):
    """[N, K] weights whose rows have magnitudes from 1e-12 to 1e5 (some rows zero), in any float dtype."""
    n = draw(st.integers(1, 6))
    k = draw(st.sampled_from([32, 64, 128, 256]))
    seed = draw(st.integers(0, 2 ** 16))
    mags = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-12, 1e5)), min_size=n, max_size=n))
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * torch.tensor(mags)[:, None]
    return w.to(dtype), draw(st.sampled_from([32, 64, 128]))


def _rtn_outcome(w, group):
    """None when the quantizers must accept ``w`` (all-zero rows allowed), else the words of the error."""
    if w.shape[1] % group:
        return "multiple of group_size"
    amax = w.float().abs().amax(1)
    if not torch.isfinite(w.float()).all():
        return "NaN or Inf"
    if float(amax.max()) > MAX_ABS_WEIGHT:
        return "must stay <="
    if bool(((amax > 0) & (amax < MIN_ABS_ROW)).any()):
        return "largest |w|"
    return None


@SETTINGS
@given(weights())
def test_rtn_accepts_exactly_what_it_can_hold_and_keeps_every_weight_within_its_bound(wg):
    w, group = wg
    expect = _rtn_outcome(w, group)
    if expect is not None:
        with pytest.raises(ValueError, match=expect.replace("|", r"\|")):
            quantize_rtn(w, group)
        return
    d = quantize_rtn(w, group).dequantize(torch.float32)
    w32 = w.float()
    assert torch.isfinite(d).all()
    bound = 2 * w32.abs().amax(1, keepdim=True) / 15          # the module's documented bound
    assert ((d - w32).abs() <= bound).all()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(weights(), st.floats(0.0, 1.0))
def test_gptq_accepts_what_rtn_accepts_and_returns_finite_scales(wg, damp):
    w, group = wg
    k = w.shape[1]
    x = torch.randn(4 * k, k, generator=torch.Generator().manual_seed(k))
    expect = _rtn_outcome(w, group)
    if expect is not None:
        with pytest.raises(ValueError):
            quantize_gptq(w, x.t() @ x, group, damp=damp)
        return
    try:
        qw = quantize_gptq(w, x.t() @ x, group, damp=damp)
    except ValueError as e:   # GPTQ's error updates may push a scale past fp16: refused, never inf
        assert "overflows fp16" in str(e)
        return
    assert torch.isfinite(qw.scales.float()).all() and torch.isfinite(qw.dequantize(torch.float32)).all()


# ----------------------------------------------------------------------------- sampling

ANY_NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10 ** 6), st.booleans(),
                       st.none(), st.text(max_size=3))


def _valid_sampler(t, k, p):
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    return (num(t) and 0 < t < math.inf and isinstance(k, int) and not isinstance(k, bool) and k >= 0
            and num(p) and 0 < p <= 1)


@SETTINGS
@given(ANY_NUMBER | st.floats(1e-45, 1e3), ANY_NUMBER | st.integers(0, 40), ANY_NUMBER | st.floats(1e-3, 1.0),
       st.integers(0, 2 ** 16), st.floats(0.0, 1e4))
def test_sampler_refuses_or_gives_a_distribution(t, k, p, seed, spread):
    if not _valid_sampler(t, k, p):
        with pytest.raises(ValueError, match="temperature|top_k|top_p"):
            Sampler(t, k, p)
        return
    logits = torch.randn(3, 32, generator=torch.Generator().manual_seed(seed)) * spread
    probs = Sampler(t, k, p).probs(logits)
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(3), atol=1e-5)
    # the most likely token keeps its place, and keeps positive probability
    top = logits.argmax(-1)
    assert (probs.gather(-1, top[:, None]) > 0).all()
    assert not scaled_logits(logits, t, k, p).isnan().any()


@SETTINGS
@given(st.integers(1, 4), st.integers(2, 9), st.lists(st.integers(-3, 12), min_size=0, max_size=5))
def test_speculative_accept_refuses_draft_ids_outside_the_vocabulary(k, V, draft):
    p = torch.softmax(torch.randn(k + 1, V, generator=torch.Generator().manual_seed(k * V)), -1)
    d = torch.tensor(draft, dtype=torch.long)
    if len(draft) != k:
        with pytest.raises(ValueError, match="draft"):
            speculative_accept(p, None, d)
    elif not all(0 <= x < V for x in draft):
        with pytest.raises(ValueError, match=r"draft token ids must be in \[0, "):
            speculative_accept(p, None, d)
    else:
        out, acc = speculative_accept(p, None, d, generator=torch.Generator().manual_seed(0))
        assert len(out) == acc + 1 and all(0 <= x < V for x in out) and out[:acc] == draft[:acc]


# ----------------------------------------------------------------------------- an engine's argument checks

@pytest.fixture(scope="module")
def small_model():
    return wandering_qwen2()


def _engine_arg_problems(n, do_sample, temperature, top_k, seed, max_len, prompt_len):
    """The arguments the engine's documented rules refuse."""
    real = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    bad = set()
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1 and prompt_len + n <= max_len):
        bad.add("max_new_tokens")
    if not isinstance(do_sample, bool):
        bad.add("do_sample")
    if not (real(temperature) and math.isfinite(temperature) and temperature >= 0
            and (not do_sample or temperature > 0)):
        bad.add("temperature")
    if not (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 0):
        bad.add("top_k")
    if not (seed is None or (isinstance(seed, int) and not isinstance(seed, bool))):
        bad.add("seed")
    return bad


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(ANY_NUMBER | st.integers(1, 40), st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
       ANY_NUMBER | st.floats(1e-40, 5.0), ANY_NUMBER | st.integers(0, 300), ANY_NUMBER | st.integers(0, 99))
def test_static_engine_checks_every_argument_before_any_forward(small_model, n, do_sample, temperature, top_k,
                                                                 seed):
    from t4lib.serving import StaticEngine

    eng = StaticEngine(NoForward(small_model), max_len=32)
    bad = _engine_arg_problems(n, do_sample, temperature, top_k, seed, 32, 2)
    try:
        eng.generate_with_stats([[1, 2]], n, do_sample=do_sample, temperature=temperature, top_k=top_k, seed=seed)
    except ForwardReached:
        assert not bad, f"reached a forward with bad {sorted(bad)}"
    except (TypeError, ValueError) as e:
        assert bad, f"refused good arguments: {e}"
        assert any(name in str(e) or (name == "max_new_tokens" and "max_len" in str(e)) for name in bad), str(e)
    else:
        pytest.fail("generate returned without a forward")
