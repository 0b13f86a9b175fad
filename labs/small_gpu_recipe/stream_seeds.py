"""The committed pretraining stream against the widened one (commit 0953e61), seed by seed, every arm judged the
same way: its saved fp16 checkpoint computed in fp32 on the CPU, greedy, on the whole validation and test splits
(`python -m t4lib.models.tiny eval --model DIR --preset small-gpu --device cpu --write-record`).

Usage: python labs/small_gpu_recipe/stream_seeds.py NAME=TRAINING_RECORD ...
A record holds the run's provenance and, under "eval", the CPU judgement. The committed model's seed 0 is read
from cpu_eval.json beside this file (the same judgement, recorded by cpu_eval.py). Writes stream_seeds.json."""
import json
import sys
from pathlib import Path

from t4lib.core import results
from t4lib.models import open_eval

HERE = Path(__file__).parent
KEYS = ("math_1step_exact", "math_2step_exact", "math_3_4step_exact", "copy_exact_match", "trap_abstention")
RUN_KEYS = ("n_params", "tokens_seen", "train_seconds", "trainer_tokens_per_s", "generator_tokens_per_s",
            "data_wait_seconds", "final_loss", "device", "provenance")


def _counts(k: int, n: int) -> dict:
    return {"rate": k / n, "k": k, "n": n}


def committed_seed0() -> dict:
    doc = json.loads((HERE / "cpu_eval.json").read_text())
    arm = {split: {key: _counts(*doc["counts"][f"{split}/{key}"]["cpu"]) for key in KEYS}
           for split in ("validation", "test")}
    for split in arm:
        arm[split]["copy_by_kind"] = doc["copy_by_kind"][split]
    arm.update(seed=0, record="cpu_eval.json", device=doc["gpu_device"], provenance=doc["gpu_provenance"])
    return arm


def from_record(path: Path) -> dict:
    rec = json.loads(path.read_text())
    if "eval" not in rec:
        raise SystemExit(f"{path}: no 'eval' (judge it first with tiny eval ... --write-record)")
    arm = {split: {key: rec["eval"][split][key] for key in KEYS} for split in ("validation", "test")}
    for split in arm:
        arm[split]["copy_by_kind"] = rec["eval"][split]["copy_by_kind"]
    arm.update({k: rec[k] for k in RUN_KEYS}, seed=rec["preset_config"]["seed"], record=str(path))
    return arm


arms = {"committed_seed0": committed_seed0()}
for arg in sys.argv[1:]:
    name, _, path = arg.partition("=")
    if not path:
        raise SystemExit(f"argument {arg!r}: expected NAME=TRAINING_RECORD")
    arms[name] = from_record(Path(path))
for name, arm in arms.items():
    arm["validation_score"] = open_eval.score(arm["validation"])
    print(f"{name:22s} val score {arm['validation_score']:.4f}",
          {k: (arm["validation"][k]["k"], arm["test"][k]["k"]) for k in KEYS})
out = HERE / "stream_seeds.json"
results.write_json(out, dict(results.provenance(), command="python labs/small_gpu_recipe/stream_seeds.py " +
                             " ".join(sys.argv[1:]), date=results.now(), arms=arms), indent=1)
print("wrote", out)
