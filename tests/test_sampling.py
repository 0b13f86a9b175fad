"""The sampling rule at its limits: a temperature so small that ``logits / temperature`` overflows gives the
greedy token, never NaN or an arbitrary one."""
import pytest
import torch

from t4lib.decoding.sampling import Sampler, sample, scaled_logits


@pytest.mark.parametrize("temperature", [1e-39, 1e-45, 1e-300, 1e-30, 1e-6])
@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (5, 1.0), (0, 0.9)])
def test_tiny_temperature_samples_the_greedy_token(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 300, generator=g) * 4 + torch.linspace(0, 1, 300)
    p = Sampler(temperature, top_k, top_p).probs(logits)
    assert torch.isfinite(p).all()
    assert sample(p, torch.Generator().manual_seed(1)) == logits.argmax(-1).tolist()
    x = scaled_logits(logits.half(), temperature, top_k, top_p)
    assert not x.isnan().any() and torch.equal(x.argmax(-1), logits.half().float().argmax(-1))


def test_scaled_logits_keep_the_distribution():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(2)) * 3
    for t in (0.5, 1.0, 2.0):
        assert torch.allclose(torch.softmax(scaled_logits(logits, t, 0), -1), torch.softmax(logits / t, -1),
                              atol=1e-6)


def test_infinite_temperature_refused():
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        Sampler(float("inf"))


@pytest.mark.parametrize("draft, err, match", [
    (torch.tensor([1.5]), TypeError, "integer token ids"), (torch.tensor([9]), ValueError, r"in \[0, 5\)"),
    (torch.tensor([-1]), ValueError, r"in \[0, 5\)"), ([1], ValueError, "draft must be a \\[k\\] tensor")])
def test_speculative_accept_names_a_bad_draft(draft, err, match):
    from t4lib.decoding.sampling import speculative_accept
    p = torch.softmax(torch.randn(2, 5), -1)
    with pytest.raises(err, match=match):
        speculative_accept(p, None, draft)
