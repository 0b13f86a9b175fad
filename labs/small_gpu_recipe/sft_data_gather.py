"""Choose small-gpu's SFT data on validation from a GPU run of sft_data_arms.sh (its directory, copied back),
write every arm and seed to ``sft_data_arms.json`` here and the chosen arm's test figures (seed means) into
``results/<device>/small_gpu.json`` (its pretraining figures are carried over with their own provenance).
The figures keep the provenance the arms ran under (the device's commit and sources hash).

Usage: python labs/small_gpu_recipe/sft_data_gather.py JOB_DIR/sftdata DEVICE_SLUG
"""
import json
import statistics
import sys
from pathlib import Path

from t4lib.core import results

runs_dir, slug = Path(sys.argv[1]), sys.argv[2]
HERE = Path(__file__).resolve().parent
CMD = "bash labs/small_gpu_recipe/sft_data_arms.sh"
env = json.loads((runs_dir / "env.json").read_text())
measured_at = env.pop("provenance")
arms: dict[str, list[dict]] = {}
for f in sorted(runs_dir.glob("*_seed*.json")):
    arms.setdefault(f.stem.rsplit("_seed", 1)[0], []).append(json.loads(f.read_text()))


def seed_rates(runs, split, part="overall", key="grounded"):
    return [r["after"][split][part][key]["rate"] for r in runs]


val = {arm: statistics.mean(seed_rates(rs, "open_validation_1_2")) for arm, rs in arms.items()}
chosen = max(val, key=val.get)
by_structure = {arm: {s: statistics.mean(r["after"]["open_test_1_2"]["by_structure"][s]["grounded"]["rate"]
                                         for r in rs)
                      for s in sorted(rs[0]["after"]["open_test_1_2"]["by_structure"])}
                for arm, rs in arms.items()}
record = {**results.lab_record(CMD), **{k: measured_at[k] for k in ("commit", "sources_sha256")},
          "device": env["device"],
          "question": "which SFT data for small-gpu: the 4000 committed traces three times, 12000 generated traces "
                      "once, and either with plain-format replay?",
          "chosen_on_validation": chosen, "validation_grounded_seed_mean": val,
          "arms": {arm: {"data": rs[0]["data"], "train_seconds": [r["train_seconds"] for r in rs],
                         **{split: {"grounded": seed_rates(rs, split), "schema_valid": seed_rates(rs, split, key="schema_valid")}
                            for split in ("open_validation_1_2", "open_test_1_2", "open_test_3_4")},
                         "test_two_step_grounded": seed_rates(rs, "open_test_1_2", "two_step"),
                         "test_grounded_by_structure_seed_mean": by_structure[arm]}
                   for arm, rs in sorted(arms.items())}}
results.write_json(HERE / "sft_data_arms.json", record)

figs = []
rs = arms[chosen]
data = rs[0]["data"]
how = (f"full fine-tuning at lr 3e-4, {rs[0]['settings']['epochs']:g} epoch(s) on {data['traces']}"
       + (f" with {data['replay']} plain-format problems replayed" if data.get("replay") else "")
       + f" (the SFT data chosen on validation among {len(arms)} arms); mean of seeds")
for name, split, part, key in (("schema_valid", "open_test_1_2", "overall", "schema_valid"),
                               ("grounded_pass", "open_test_1_2", "overall", "grounded"),
                               ("grounded_pass_two_step", "open_test_1_2", "two_step", "grounded"),
                               ("grounded_pass_3_4_steps", "open_test_3_4", "overall", "grounded")):
    if not all(r["after"][split].get(part, {}).get("n") for r in rs):
        continue                                   # a set with no such problem (a short trial run)
    cells = [r["after"][split][part][key] for r in rs]
    vals = [c["rate"] for c in cells]
    figs.append(results.figure(f"sft/small-gpu/seed_mean/{name}", statistics.mean(vals), "fraction", "ARITHMETIC",
                               f"{CMD}; labs/small_gpu_recipe/sft_data_gather.py", note=how, seeds=len(vals),
                               min=min(vals), max=max(vals), per_seed=vals, k=[c["k"] for c in cells],
                               n=[r["after"][split][part]["n"] for r in rs]))
low = {s: v for s, v in by_structure[chosen].items() if v < 0.6}
path = results.results_dir() / slug / "small_gpu.json"
old = json.loads(path.read_text())
# the pretraining figures and the base model's plain-format score stay, with the provenance they were measured
# under; the SFT seed means are replaced (once named as notebook 06's single run names its figures)
replaced = {f"sft/small-gpu/{name}" for name in ("schema_valid", "grounded_pass", "grounded_pass_two_step",
                                                  "grounded_pass_3_4_steps")} | {f["name"] for f in figs}
results.write(path, figs + results.carried_over(old, replaced), provenance=measured_at, training=old["training"],
              sft=dict(chosen_data=f"{data['traces']}, {rs[0]['settings']['epochs']:g} epoch(s)"
                       + (f", {data['replay']} replayed" if data.get("replay") else ""), chosen_arm=chosen, validation_grounded_by_data=val, chosen_lr="lr3e-4",
                       lr_choice=old["sft"].get("lr_choice", old["sft"]), grounded_by_structure_seed_mean=by_structure[chosen],
                       structures_below_60=low))
print(f"chosen {chosen}: validation {val[chosen]:.3f} ({', '.join(f'{a} {v:.3f}' for a, v in sorted(val.items()))});"
      f" test grounded {figs[1]['value']:.3f} ({figs[1]['min']:.3f}-{figs[1]['max']:.3f}),"
      f" structures below 60%: {sorted(low) or 'none'}")
