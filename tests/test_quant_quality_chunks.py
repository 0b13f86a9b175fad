"""Quality measures in chunks: perplexity and KL computed over row and vocabulary chunks equal the whole-logits
computation on the project's tiny model; a wrong model id is an error (the synthetic model only when chosen);
the group size follows the model's width."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from t4lib import models  # noqa: E402
from t4lib.benchmarks import quant_quality as quality  # noqa: E402
from t4lib.core import results  # noqa: E402
from t4lib.quant.model import default_policy, group_size_for, quantize_model  # noqa: E402


@torch.no_grad()
def _whole_ppl(model, ids):
    logits = model(input_ids=ids).logits.float()
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    return float(torch.exp(nll))


@torch.no_grad()
def _whole_kl(ref, model, ids):
    lp = torch.log_softmax(ref(input_ids=ids).logits.float()[:, :-1], -1)
    lq = torch.log_softmax(model(input_ids=ids).logits.float()[:, :-1], -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


@pytest.fixture(scope="module")
def tiny():
    try:
        model, tok = models.load("tiny-cpu", dtype=torch.float32)
    except FileNotFoundError:
        pytest.skip("tiny-cpu checkpoint absent")
    ids = quality.heldout_ids(tok, 64, 6)
    rtn = quantize_model(model, default_policy(model, 32, "rtn"), inplace=False)
    return model, rtn, ids


@pytest.mark.parametrize("batch_size,vocab_chunk", [(8, 8192), (4, 1000), (5, 7), (1, 64)],
                         ids=["defaults", "chunks-1000", "odd-7", "row-by-row"])
def test_chunked_equals_whole_logits(tiny, batch_size, vocab_chunk):
    model, rtn, ids = tiny
    assert model.config.vocab_size > vocab_chunk or vocab_chunk == 8192
    ppl = quality.perplexity(model, ids, batch_size, vocab_chunk=vocab_chunk)
    assert ppl == pytest.approx(_whole_ppl(model, ids), rel=1e-5)
    kl = quality.mean_kl(model, rtn, ids, batch_size, vocab_chunk=vocab_chunk)
    want = _whole_kl(model, rtn, ids)
    assert kl > 0 and kl == pytest.approx(want, abs=1e-5)
    assert quality.mean_kl(model, model, ids, batch_size, vocab_chunk=vocab_chunk) == pytest.approx(0.0, abs=1e-6)


def test_chunk_arguments_are_checked(tiny):
    model, _, ids = tiny
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="vocab_chunk"):
            quality.perplexity(model, ids, vocab_chunk=bad)
        with pytest.raises(ValueError, match="batch_size"):
            quality.mean_kl(model, model, ids, batch_size=bad)


def test_group_size_follows_the_width(tiny):
    assert group_size_for(tiny[0]) == 32  # tiny-cpu: hidden 128
    assert [group_size_for(h) for h in (256, 512, 896, 1536, 2048)] == [64, 128, 128, 128, 128]
    for bad in (0, 100, "x", None):
        with pytest.raises(ValueError, match="hidden"):
            group_size_for(bad)


def test_wrong_model_id_is_a_clear_error_offline(tmp_path):
    code = ("from t4lib.benchmarks import quant_quality as q\n"
            "try:\n    q.load_or_fallback('Qwen/Qwen2.5-0.5B-Instrcut', calib_seqs=8, eval_seqs=2)\n"
            "except Exception as e:\n    print(type(e).__name__, '|', e)\nelse:\n    print('LOADED')\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=results.REPO_ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ModelNotAvailableError |"), r.stdout
    assert "Qwen/Qwen2.5-0.5B-Instrcut" in r.stdout and "FALLBACK" not in r.stdout
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        quality.run(None, str(tmp_path / "no-such-model"), group_sizes=(32,), primary=32, write=False)


def test_synthetic_model_only_when_chosen(tmp_path):
    d = quality.load_or_fallback(quality.MARKOV, calib_seqs=8, eval_seqs=2, fallback_steps=1)
    assert d["fallback"] is True and d["source"].startswith("FALLBACK") and "chosen" in d["source"]
    d = quality.load_or_fallback(str(tmp_path / "absent"), calib_seqs=8, eval_seqs=2, fallback_steps=1,
                                 fallback=True)
    assert d["fallback"] is True and "not available" in d["source"]
