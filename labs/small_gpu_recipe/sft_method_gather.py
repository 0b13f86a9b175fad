"""Choose small-gpu's SFT method on validation from a GPU run of sft_method_arms.sh (its directory, copied back)
and write every arm and seed to ``sft_method_arms.json`` here, with the provenance the arms ran under (the
device's commit and sources hash). The recipe's figures in ``results/<device>/small_gpu.json`` are not touched:
a method that wins on validation is adopted by changing the recipe and re-running notebook 06.

Usage: python labs/small_gpu_recipe/sft_method_gather.py JOB_DIR/sftmethod
"""
import json
import statistics
import sys
from pathlib import Path

from t4lib.core import results

runs_dir = Path(sys.argv[1])
HERE = Path(__file__).resolve().parent
env = json.loads((runs_dir / "env.json").read_text())
measured_at = env.pop("provenance")
arms: dict[str, list[dict]] = {}
for f in sorted(runs_dir.glob("*_seed*.json")):
    arms.setdefault(f.stem.rsplit("_seed", 1)[0], []).append(json.loads(f.read_text()))
missing = sorted(f.stem for f in runs_dir.glob("*_seed*.log") if not f.with_suffix(".json").exists())


def rates(runs, split, part="overall", key="grounded"):
    return [r["after"][split][part][key]["rate"] for r in runs]


def structures(runs, split="open_test_1_2"):
    by = runs[0]["after"][split]["by_structure"]
    return {s: statistics.mean(r["after"][split]["by_structure"][s]["grounded"]["rate"] for r in runs) for s in sorted(by)}


val = {arm: statistics.mean(rates(rs, "open_validation_1_2")) for arm, rs in arms.items()}
chosen = max(val, key=val.get)
record = {**results.lab_record("bash labs/small_gpu_recipe/sft_method_arms.sh; "
                               "labs/small_gpu_recipe/sft_method_gather.py"),
          **{k: measured_at[k] for k in ("commit", "sources_sha256")}, "device": env["device"],
          "question": "which SFT method for small-gpu on the chosen data (open_traces.jsonl, 3 epochs): full "
                      "fine-tuning, full with NEFTune noise, or a LoRA adapter at two learning rates?",
          "chosen_on_validation": chosen, "validation_grounded_seed_mean": val, "runs_without_result": missing,
          "arms": {arm: {"settings": {k: rs[0]["settings"][k] for k in ("method", "lr", "r", "epochs", "batch_size")}
                         | {"neftune_noise_alpha": rs[0]["settings"]["extra"].get("neftune_noise_alpha")},
                         "seeds": len(rs), "train_seconds": [r["train_seconds"] for r in rs],
                         **{split: {"grounded": rates(rs, split), "schema_valid": rates(rs, split, key="schema_valid")}
                            for split in ("open_validation_1_2", "open_test_1_2", "open_test_3_4")},
                         "test_two_step_grounded": rates(rs, "open_test_1_2", "two_step"),
                         "test_grounded_by_structure_seed_mean": structures(rs)}
                   for arm, rs in sorted(arms.items())}}
results.write_json(HERE / "sft_method_arms.json", record)
for arm, a in record["arms"].items():
    low = sorted(s for s, v in a["test_grounded_by_structure_seed_mean"].items() if v < 0.6)
    print(f"{arm:13s} validation {val[arm]:.3f}  test grounded {statistics.mean(a['open_test_1_2']['grounded']):.3f} "
          f"({min(a['open_test_1_2']['grounded']):.3f}-{max(a['open_test_1_2']['grounded']):.3f})  two-step "
          f"{statistics.mean(a['test_two_step_grounded']):.3f}  schema {statistics.mean(a['open_test_1_2']['schema_valid']):.3f}"
          f"  below 60%: {low}")
print(f"chosen on validation: {chosen}; runs without a result: {missing or 'none'}")
