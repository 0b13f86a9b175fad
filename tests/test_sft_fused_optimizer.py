"""SFT's ``optimizer="fused_linear"``: full fine-tuning where the decoder projections take their AdamW step inside
backward (``t4lib.train.FusedAdamWLinear``) and the Trainer's optimizer keeps the rest; settings that cannot
work with it are errors; ``restore_linears`` gives plain ``nn.Linear`` layers back; the static loss scale leaves
every AdamW step as it is without it and stops on an overflow (CPU, tiny-cpu and a micro Qwen2, reference
kernels)."""
import pytest
import torch
from torch import nn

pytest.importorskip("datasets")
pytest.importorskip("trl")

from test_train_sft import micro_qwen2  # noqa: E402 (needs transformers, checked above)


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


def test_trainer_config_has_no_grad_scaler_or_clipping_under_a_static_loss_scale():
    from t4lib.train.sft import FUSED_LOSS_SCALE, SFTSettings, sft_config

    fused = sft_config(SFTSettings(method="full", optimizer="fused_linear"), "/tmp/x", "cuda")
    plain = sft_config(SFTSettings(method="full"), "/tmp/x", "cuda")
    unscaled = sft_config(SFTSettings(method="full", loss_scale=1), "/tmp/x", "cuda")   # the lab's adamw arm
    assert not fused.fp16 and fused.max_grad_norm == 0.0 and fused.adam_epsilon == plain.adam_epsilon * FUSED_LOSS_SCALE
    assert plain.fp16 and plain.max_grad_norm > 0
    assert not unscaled.fp16 and unscaled.max_grad_norm == 0.0 and unscaled.adam_epsilon == plain.adam_epsilon


def test_loss_scale_defaults():
    from t4lib.train.sft import FUSED_LOSS_SCALE, SFTSettings, adam_eps

    assert SFTSettings(method="full", optimizer="fused_linear").loss_scale == FUSED_LOSS_SCALE
    assert SFTSettings(method="full", optimizer="fused_linear", loss_scale=1).loss_scale == 1.0
    assert SFTSettings(method="full").loss_scale is None          # the Trainer's own GradScaler
    s = SFTSettings(method="full", optimizer="fused_linear", loss_scale=2 ** 12, extra={"adam_epsilon": 1e-6})
    assert adam_eps(s) == 1e-6 * 2 ** 12


@pytest.mark.parametrize("kw, match", [
    (dict(loss_scale=0), "loss_scale must be a power of two > 0"),
    (dict(loss_scale=-1024), "loss_scale must be a power of two > 0"),
    (dict(loss_scale=1000), "loss_scale must be a power of two > 0"),
    (dict(loss_scale=float("inf")), "loss_scale must be a power of two > 0"),
    (dict(loss_scale=float("nan")), "loss_scale must be a power of two > 0"),
    (dict(loss_scale=True), "loss_scale must be a power of two > 0"),
    (dict(loss_scale="1024"), "loss_scale must be a power of two > 0"),
    (dict(optimizer="adamw", method="lora", loss_scale=1024), "static loss_scale .* needs method='full'"),
    (dict(optimizer="adamw", loss_scale=1, extra={"max_grad_norm": 1.0}), "static loss_scale runs without clipping"),
])
def test_bad_loss_scale_is_an_error_naming_it(kw, match):
    from t4lib.train.sft import SFTSettings

    with pytest.raises(ValueError, match=match):
        SFTSettings(**{"method": "full", "optimizer": "fused_linear", **kw})


@pytest.mark.parametrize("value", ["1000", "0", "-2", "inf"])
def test_cli_loss_scale_must_be_a_power_of_two(value, tmp_path, capsys):
    from t4lib.train import sft

    with pytest.raises(SystemExit):
        sft.main(["--method", "full", "--base", "fp32", "--optimizer", "fused_linear", "--loss-scale", value,
                  "--out", str(tmp_path / "r.json")])
    assert "--loss-scale must be a power of two > 0" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_cli_max_grad_norm_must_not_be_negative(value, tmp_path, capsys):
    from t4lib.train import sft

    with pytest.raises(SystemExit):
        sft.main(["--method", "full", "--base", "fp32", "--max-grad-norm", value, "--out", str(tmp_path / "r.json")])
    assert "--max-grad-norm must be >= 0" in capsys.readouterr().err


def test_fused_layers_take_the_trainers_betas():
    from t4lib.train.sft import SFTSettings, adam_betas, sft_config

    s = SFTSettings(method="full", optimizer="fused_linear", extra={"adam_beta2": 0.95})
    assert adam_betas(s) == (0.9, 0.95) and sft_config(s, "/tmp/x", "cuda").adam_beta2 == 0.95
    assert adam_betas(SFTSettings(method="full")) == (0.9, 0.999)


@pytest.mark.parametrize("value", ["1", "-0.1", "nan"])
def test_cli_adam_beta2_must_be_in_range(value, tmp_path, capsys):
    from t4lib.train import sft

    with pytest.raises(SystemExit):
        sft.main(["--method", "full", "--base", "fp32", "--adam-beta2", value, "--out", str(tmp_path / "r.json")])
    assert "--adam-beta2 must be in [0, 1)" in capsys.readouterr().err


def test_no_clipping_keeps_the_grad_scaler():
    """The lab's adamw_noclip arm: the Trainer's dynamic loss scaling without clipping."""
    from t4lib.train.sft import SFTSettings, sft_config

    c = sft_config(SFTSettings(method="full", extra={"max_grad_norm": 0.0}), "/tmp/x", "cuda")
    assert c.fp16 and c.max_grad_norm == 0.0


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


@pytest.fixture(scope="module")
def micro_data():
    from transformers import AutoTokenizer

    from t4lib.models import corpus
    from t4lib.train.data import traces_dataset

    tok = AutoTokenizer.from_pretrained(str(corpus.data_dir() / "models" / "tiny-cpu"))
    return tok, traces_dataset(tok, corpus.load_jsonl("traces.jsonl")[:4])[0]


def _one_step(micro_data, tmp_path, **kw):
    from t4lib.train import sft

    tok, ds = micro_data
    s = sft.SFTSettings(**{"method": "full", "optimizer": "fused_linear", "max_steps": 1, "batch_size": 2,
                           "lr": 1e-3, "warmup_ratio": 0.0, "weight_decay": 0.1, "logging_steps": 1, **kw})
    return sft.train(micro_qwen2(), tok, ds, s, str(tmp_path))


def test_loss_scale_leaves_every_adamw_step_unchanged(micro_data, tmp_path, monkeypatch):
    """One step under loss_scale S = 2^10: each fused layer and each parameter of the Trainer's AdamW saw the
    gradient S g and took exactly the step that AdamW with the unscaled eps takes from g (replayed from the recorded
    gradients); the logged loss and grad_norm are the unscaled ones of the same step with loss_scale 1. (On a
    CPU the two runs cannot be compared weight by weight: the fused layers' gradients are fp16 either way, and a
    scale moves which of them underflow.)"""
    from t4lib.ops.fused_adamw import reference
    from t4lib.train.fused_adamw import FusedAdamWLinear

    S = 2.0 ** 10
    fused, trainer_params = [], []
    orig_update, orig_step = FusedAdamWLinear._backward_update, torch.optim.AdamW.step

    def spy_update(self, dy, x):
        fused.append((self, dy.clone(), x.clone(), self.master.detach().clone(), self.exp_avg.clone(),
                      self.exp_avg_sq.clone(), self._hp(self.step_count + 1)))
        return orig_update(self, dy, x)

    def spy_step(self, *a, **k):
        trainer_params.extend((p, p.detach().clone(), p.grad.clone(), {k: v for k, v in g.items() if k != "params"})
                              for g in self.param_groups for p in g["params"] if p.grad is not None)
        return orig_step(self, *a, **k)

    monkeypatch.setattr(FusedAdamWLinear, "_backward_update", spy_update)
    monkeypatch.setattr(torch.optim.AdamW, "step", spy_step)
    scaled = _one_step(micro_data, tmp_path, loss_scale=S)
    assert len(fused) == 2 * 7 and trainer_params

    eps = 1e-8   # the Trainer's adam_epsilon, unscaled
    for layer, dy, x, master, m, v, hp in fused:
        assert hp["eps"] == eps * S
        reference.adamw_(reference.weight_grad(dy, x) / S, master, m, v, torch.empty_like(master, dtype=torch.half),
                         **{**hp, "eps": eps})
        torch.testing.assert_close(layer.master.detach(), master, rtol=1e-6, atol=1e-9)
    for p, before, grad, hp in trainer_params:
        assert hp["eps"] == eps * S
        q = before.clone().requires_grad_(True)
        q.grad = grad / S
        orig_step(torch.optim.AdamW([q], **{k: hp[k] for k in ("lr", "betas", "weight_decay", "fused")}, eps=eps))
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-9)

    monkeypatch.undo()
    unscaled = _one_step(micro_data, tmp_path, loss_scale=1)
    assert scaled.losses == unscaled.losses          # the same forward; the scale never reaches the logged loss
    norms = [[h["grad_norm"] for h in r.trainer.state.log_history if "grad_norm" in h] for r in (scaled, unscaled)]
    assert norms[0] == pytest.approx(norms[1], rel=1e-3)
    assert scaled.settings["loss_scale"] == S


@pytest.mark.parametrize("max_steps", [1, 2])
def test_an_overflow_under_a_static_loss_scale_is_an_error(micro_data, tmp_path, max_steps):
    """A scale far past fp16's range turns the first backward's gradients into inf: the weights take NaN, which the
    second step's loss shows (or, after a single step, the check that follows training)."""
    with pytest.raises(FloatingPointError, match=r"loss_scale=1\.26765e\+30: the update of step 1 wrote inf/NaN"):
        _one_step(micro_data, tmp_path, loss_scale=2.0 ** 100, max_steps=max_steps)


def test_overflow_error_names_the_step_and_the_cause():
    from t4lib.train import sft

    model = micro_qwen2()
    assert sft._overflow_error(model, 1024.0, 3) is None
    err = sft._overflow_error(model, 1024.0, 3, loss_step=True)
    assert "loss of step 4 is not finite while every weight is" in str(err)    # the forward, not the scale
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("inf")
    err = sft._overflow_error(model, 1024.0, 3, loss_step=True)
    assert "loss_scale=1024: the update of step 3 wrote inf/NaN into 1 weight tensors" in str(err)
    assert "layers.1.mlp.up_proj.weight" in str(err) and "lower loss_scale" in str(err)
