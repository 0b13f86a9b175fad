"""Notebook 06's ``t4`` profile (LoRA on a W4A16 base of Qwen/Qwen2.5-Math-1.5B, for Colab) on this machine: its
loading, quantization and LoRA training calls on a random-weight model whose seven projections have that model's
shapes, loaded from a local directory through ``t4lib.models.load`` (no hub). Two of its 28 layers and the local
tokenizer's vocabulary keep it to a CPU test; the evaluation it runs after training is the ``cpu`` profile's."""
import math

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("trl")


def test_t4_profile_trains_lora_on_a_w4a16_base_of_the_qwen25_math_15b_shape(tmp_path):
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from t4lib.models import corpus
    from t4lib.quant import QuantLinear
    from t4lib.benchmarks import lora as lora_bench
    from t4lib.train import sft

    tok = AutoTokenizer.from_pretrained(str(corpus.data_dir() / "models" / "tiny-cpu"))  # its chat template
    cfg = Qwen2Config(**dict(lora_bench.QWEN25_15B, num_hidden_layers=2, vocab_size=len(tok)),
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).to(torch.float16).save_pretrained(tmp_path / "qwen25-math-1.5b-shape")
    tok.save_pretrained(tmp_path / "qwen25-math-1.5b-shape")

    model, _ = sft.load_base(str(tmp_path / "qwen25-math-1.5b-shape"), "w4a16", device="cpu")
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == 2 * 7   # seven projections per layer
    del model

    s = sft.SFTSettings(method="lora", max_steps=2, batch_size=2, lr=2e-3, logging_steps=1)
    rec = sft.run(str(tmp_path / "qwen25-math-1.5b-shape"), base="w4a16", settings=s, device="cpu",
                  output_dir=str(tmp_path / "out"), eval_sets=(),
                  train_records=corpus.load_jsonl("traces.jsonl")[:4], progress=False)
    # r=16 adapters on q, k, v, o, gate, up, down of each layer: 16 x (in + out) each
    per_layer = 16 * sum(i + o for i, o in [(1536, 1536), (1536, 256), (1536, 256), (1536, 1536),
                                            (1536, 8960), (1536, 8960), (8960, 1536)])
    assert rec["trainable_params"] == 2 * per_layer
    assert [s_ for s_, _ in rec["losses"]] == [1, 2] and all(math.isfinite(v) for _, v in rec["losses"])
    assert rec["data"]["n_kept"] == 4
