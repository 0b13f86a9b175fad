"""Turn a GPU run of train_arms.sh + collect.py + after_pretraining.sh (their directories, copied back from
the GPU machine) into ``results/<device>/small_gpu.json`` (the figures, on the test split),
``pretraining_arms.json`` and ``records.json`` here (every arm and seed, validation and test, and the
recipes chosen on validation). The figures keep the provenance they were measured under (the training
record's commit and sources hash), not the checkout's that gathers them.

Usage: python labs/small_gpu_recipe/gather.py ARMS_DIR JOB_DIR DEVICE_SLUG
"""
import json
import statistics
import sys
from pathlib import Path

from t4lib.core import results
from t4lib.models import open_eval

arms_dir, job, slug = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
HERE = Path(__file__).resolve().parent
SRC = "python -m t4lib.models.tiny train --preset small-gpu; labs/small_gpu_recipe/collect.py, after_pretraining.sh"
arms = {d.name: json.loads((d / "training_record.json").read_text())
        for d in sorted(arms_dir.iterdir()) if (d / "training_record.json").is_file()}
chosen_arm = (arms_dir / "chosen.txt").read_text().strip()
train = arms[chosen_arm]
# the figures keep the provenance they were measured under, not this checkout's
MEASURED_AT = {k: train["provenance"][k] for k in ("commit", "sources_sha256")}
device = train["device"].split("(", 1)[1].rstrip(")")
env = dict(device=device, driver=train.get("driver", "580.159.04"), torch=train["versions"]["torch"], clocks={},
           throttle=[])
runs = {}
for f in sorted((job / "sft").glob("*.json")):
    runs[f.stem] = json.loads(f.read_text())


def rate(cell):
    return cell["rate"]


# the SFT recipe: the learning rate whose seed-mean grounded pass on validation is higher
recipes = {}
for name, r in runs.items():
    lr = name.split("_")[0]
    recipes.setdefault(lr, []).append(r)
val = {lr: statistics.mean(rate(r["after"]["open_validation_1_2"]["overall"]["grounded"]) for r in rs)
       for lr, rs in recipes.items()}
chosen = max(val, key=val.get)

figs = []


def measured(name, cell, unit="fraction", n=None, **kw):
    """``cell``: a number, or a rate ``{"rate", "k"[, "n"]}`` (its count ``n`` given when the cell lacks it)."""
    if isinstance(cell, dict):
        kw.update(k=cell["k"], n=cell.get("n", n))
        cell = cell["rate"]
    figs.append(results.figure(name, cell, unit, "MEASURED", SRC, env=env, **kw))


def seed_mean(name, groups, key, note):
    """``groups``: one summary per seed (``{"n": ..., key: {"k", "rate"}}``)."""
    vals = [g[key]["rate"] for g in groups]
    figs.append(results.figure(name, statistics.mean(vals), "fraction", "ARITHMETIC", SRC, note=note,
                               seeds=len(vals), min=min(vals), max=max(vals), per_seed=vals,
                               k=[g[key]["k"] for g in groups], n=[g["n"] for g in groups]))


test = train["eval"]["test"]
for key in ("math_1step_exact", "math_2step_exact", "math_3_4step_exact", "math_lookup_exact", "copy_exact_match",
            "trap_abstention", "math_abstained"):
    measured(f"model/small-gpu/{key}", test[key], note=f"base model, plain format, greedy, test split "
             "(held-out productions and pools)" + (f", outputs of {test['copy_min_output_tokens']}+ tokens"
                                                   if key.startswith("copy") else ""))
measured("model/small-gpu/train_seconds", train["train_seconds"], "s",
         note=f"{train['tokens_seen']} tokens, {train['steps']} steps, torch.compile {train['compiled']}")
measured("model/small-gpu/trainer_tokens_per_s", train["trainer_tokens_per_s"], "tokens/s")
measured("model/small-gpu/generator_tokens_per_s", train["generator_tokens_per_s"], "tokens/s",
         note=f"the corpus generator alone, {train['generator_workers']} worker processes")
chosen_runs = recipes[chosen]
after = [r["after"] for r in chosen_runs]
note = f"full fine-tuning at lr {chosen} (chosen on validation), 3 epochs on open_traces.jsonl; mean of seeds"
seed_mean("sft/small-gpu/schema_valid", [a["open_test_1_2"]["overall"] for a in after], "schema_valid", note)
seed_mean("sft/small-gpu/grounded_pass", [a["open_test_1_2"]["overall"] for a in after], "grounded", note)
seed_mean("sft/small-gpu/grounded_pass_two_step", [a["open_test_1_2"]["two_step"] for a in after], "grounded", note)
seed_mean("sft/small-gpu/grounded_pass_3_4_steps", [a["open_test_3_4"]["overall"] for a in after], "grounded", note)
worst = {}
for a in after:
    for s, v in a["open_test_1_2"]["by_structure"].items():
        worst.setdefault(s, []).append(v["grounded"]["rate"])
before = next(r["before"] for r in runs.values() if "before" in r)
measured("sft/small-gpu/base/plain_exact_match", before["plain"]["open_test_1_2"]["overall"]["correct"],
         n=before["plain"]["open_test_1_2"]["overall"]["n"],
         note="the base model in its own plain format, 1-2 step test problems")
results.write(results.results_dir() / slug / "small_gpu.json", figs, provenance=train["provenance"],
              training=dict((k, train[k]) for k in ("n_params", "tokens_seen", "steps", "final_loss", "command",
                                                    "data_wait_seconds", "compiled", "versions")),
              sft=dict(chosen_lr=chosen, validation_grounded_by_lr=val,
                       grounded_by_structure_seed_mean={s: statistics.mean(v) for s, v in sorted(worst.items())}))
arms_record = {**results.lab_record("; ".join(r["command"] for r in arms.values())
                                     + "; python labs/small_gpu_recipe/collect.py"),
               "device": device, "date": train["date"], **MEASURED_AT,
               "note": f"{len(arms)} pretraining arm(s) on one {device} ({train['steps']} steps, "
                       f"{train['tokens_seen']} tokens each); the arm with the higher validation score (mean of "
                       "1-step, 2-step and copy exact match) becomes the preset",
               "chosen": chosen_arm,
               "arms": {name: {"validation_score": open_eval.score(r["eval"]["validation"]),
                               "command": r["command"], "n_params": r["n_params"],
                               "hidden_size": r["preset_config"]["hidden_size"],
                               "train_seconds": r["train_seconds"], "trainer_tokens_per_s": r["trainer_tokens_per_s"],
                               **{split: {k: r["eval"][split][k] for k in ("math_1step_exact", "math_2step_exact",
                                          "math_3_4step_exact", "copy_exact_match", "trap_abstention",
                                          "math_abstained")} for split in ("validation", "test")}}
                        for name, r in arms.items()}}
results.write_json(HERE / "pretraining_arms.json", arms_record)
record = {**results.lab_record("bash labs/small_gpu_recipe/after_pretraining.sh"), **MEASURED_AT,
          "device": device, "question": "which learning rates for small-gpu's pretraining and cold-start SFT?",
          "sft": {name: {split: {k: r["after"][split]["overall"][k] for k in ("schema_valid", "grounded")}
                         | {"two_step_grounded": r["after"][split].get("two_step", {}).get("grounded")}
                         for split in r["after"]} for name, r in runs.items()},
          "sft_validation_grounded_by_lr": val, "sft_chosen_lr": chosen}
arms = HERE / "pretraining_arms.json"
if arms.is_file():
    record["pretraining_arms"] = json.loads(arms.read_text())
results.write_json(HERE / "records.json", record)
print(json.dumps({f["name"]: round(f["value"], 4) for f in figs}, indent=1))
print("chosen SFT lr:", chosen, val)
