"""SFT's ``optimizer="fused_linear"``: full fine-tuning where the decoder projections take their AdamW step inside
backward (``t4lib.train.FusedAdamWLinear``) and the Trainer's optimizer keeps the rest; settings that cannot
work with it are errors; ``restore_linears`` gives plain ``nn.Linear`` layers back (CPU, tiny-cpu, reference
kernels)."""
import pytest
import torch
from torch import nn

pytest.importorskip("datasets")
pytest.importorskip("trl")


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="sgd"), "optimizer must be one of"),
    (dict(method="lora", optimizer="fused_linear"), "needs method='full'"),
    (dict(method="full", optimizer="fused_linear", extra={"gradient_accumulation_steps": 2}),
     "gradient_accumulation_steps must be 1"),
    (dict(method="full", optimizer="fused_linear", extra={"max_grad_norm": 1.0}), "cannot clip"),
])
def test_settings_that_cannot_fuse_are_errors(kw, match):
    from t4lib.train.sft import SFTSettings

    with pytest.raises(ValueError, match=match):
        SFTSettings(**kw)


def test_trainer_config_has_no_loss_scaling_or_clipping_when_fused():
    from t4lib.train.sft import SFTSettings, sft_config

    fused = sft_config(SFTSettings(method="full", optimizer="fused_linear"), "/tmp/x", "cuda")
    plain = sft_config(SFTSettings(method="full"), "/tmp/x", "cuda")
    assert not fused.fp16 and fused.max_grad_norm == 0.0
    assert plain.fp16 and plain.max_grad_norm > 0


def test_restore_linears_is_the_inverse_of_replace():
    from t4lib.train.fused_adamw import FusedAdamWLinear, replace_linears, restore_linears

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4, bias=False))
    want = [p.detach().clone() for p in model.parameters()]
    assert replace_linears(model) == ["0", "2"]
    assert isinstance(model[0], FusedAdamWLinear)
    assert restore_linears(model) == ["0", "2"]
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear] and model[2].bias is None
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), want))


def test_restore_refuses_a_layer_waiting_for_its_backward():
    from t4lib.train.fused_adamw import FusedAdamWLinear, restore_linears

    model = nn.Sequential(FusedAdamWLinear(8, 4))
    model(torch.randn(2, 8, dtype=torch.float16, requires_grad=True))
    with pytest.raises(RuntimeError, match="waiting for its backward"):
        restore_linears(model)


def test_full_sft_with_fused_projections(tmp_path, monkeypatch):
    """Two steps of full fine-tuning on tiny-cpu: every projection and every other weight moves, the fused layers
    follow the Trainer's learning-rate schedule, and the trained model is plain nn.Linear again (it generates)."""
    from t4lib.models import corpus
    from t4lib.train import sft
    from t4lib.train.data import traces_dataset
    from t4lib.train.fused_adamw import FusedAdamWLinear

    torch.manual_seed(0)
    model, tok = sft.load_base("tiny-cpu", "fp32", device="cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ds, _ = traces_dataset(tok, corpus.load_jsonl("traces.jsonl")[:8], max_length=256)
    s = sft.SFTSettings(method="full", optimizer="fused_linear", max_steps=2, batch_size=4, lr=1e-3,
                        warmup_ratio=0.0, logging_steps=1)
    seen = []
    orig = FusedAdamWLinear._backward_update

    def spy(self, dy, x):
        seen.append(self.lr)
        return orig(self, dy, x)

    monkeypatch.setattr(FusedAdamWLinear, "_backward_update", spy)
    res = sft.train(model, tok, ds, s, str(tmp_path))
    m = res.model
    assert not any(isinstance(x, FusedAdamWLinear) for x in m.modules())
    n_proj = sum(1 for n, x in m.named_modules() if isinstance(x, nn.Linear) and n.endswith(sft.PROJECTIONS))
    assert len(seen) == 2 * n_proj                      # one fused update per projection per step
    lrs = res.trainer.state.log_history
    assert [round(x, 12) for x in sorted(set(seen), reverse=True)] == \
        sorted({round(h["learning_rate"], 12) for h in lrs if "learning_rate" in h}, reverse=True)
    after = dict(m.named_parameters())
    assert set(after) == set(before)
    moved = [n for n in before if not torch.equal(before[n], after[n].detach())]
    assert any("q_proj" in n for n in moved) and any("embed_tokens" in n for n in moved)
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in res.losses)
    with torch.no_grad():
        out = m(input_ids=torch.tensor([tok("What is 2 + 3?")["input_ids"]]))
    assert torch.isfinite(out.logits).all()
