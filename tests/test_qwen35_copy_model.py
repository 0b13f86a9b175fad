"""The qwen35 copy model's training path at toy size: three steps, a GGUF with its NextN block, the record."""
import json
import math

from t4lib.models.qwen35 import copy_model
from t4lib.quant.gguf import GGUFFile

# K of every matrix a multiple of 32 (Q8_0 blocks); both layer kinds, GQA and 2 value over 1 key head kept
SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
             linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=32, linear_value_head_dim=32)


def test_copy_model_trains_and_writes_gguf(tmp_path):
    rec = copy_model.train(tmp_path, steps=3, seq_len=64, batch_size=2, progress=False, dims=SMALL, eval_n=8)
    f = GGUFFile(tmp_path / "model.gguf")
    assert f.architecture == "qwen35"
    assert int(f.key("nextn_predict_layers")) == 1 and "blk.4.nextn.eh_proj.weight" in f.tensors
    assert f.tensors["blk.0.ffn_down.weight"].type_name == "Q8_0"
    assert math.isfinite(rec["final_main_loss"]) and math.isfinite(rec["final_mtp_loss"])
    saved = json.loads((tmp_path / "training_record.json").read_text())
    for key in ("copy_token_accuracy", "mtp_token_accuracy", "both_right_fraction"):
        assert 0.0 <= saved["eval"][key] <= 1.0
    assert saved["steps"] == 3 and saved["command"].endswith("train --steps 3")
    assert (tmp_path / "loss_curve.png").is_file()
