"""Pretraining streams against seeds, every arm judged the same way: its saved fp16 checkpoint computed in fp32,
greedy, on the whole validation and test splits. The judgement is either the CPU's
(`python -m t4lib.models.tiny eval --model DIR --preset small-gpu --device cpu --write-record`) or the training run's
own, which is the same code on the GPU (`cpu_eval.json`: the two give the same counts for the committed model).

Usage: python labs/small_gpu_recipe/stream_seeds.py [--out NAME.json] NAME=SOURCE ...
A SOURCE is a training record (its provenance and, under "eval", the judgement) or an arm already gathered into a
lab record beside this file, as FILE.json#ARM. The committed model's seed 0 is read from cpu_eval.json beside this
file (the same judgement, recorded by cpu_eval.py). Writes stream_seeds.json unless --out names another file
beside this one. Arms named NAME_seedN are averaged over their seeds under "seed_means"."""
import argparse
import json
import re
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
    arm.update({k: rec[k] for k in RUN_KEYS}, seed=rec["preset_config"]["seed"], record=str(path),
               stream_arm=rec.get("stream_arm", ["committed"]),
               judged="CPU, tiny eval --write-record" if "eval_command" in rec else f"the training run, {rec['device']}")
    return arm


def from_lab_record(source: str) -> dict:
    file, _, name = source.partition("#")
    doc = json.loads((HERE / file).read_text())
    if name not in doc.get("arms", {}):
        raise SystemExit(f"{source}: {file} has no arm {name!r} (it has {sorted(doc.get('arms', {}))})")
    return {**doc["arms"][name], "gathered_in": file}


def seed_means(arms: dict) -> dict:
    """Per stream (arms named NAME_seedN): the mean validation score and mean counts, over its seeds."""
    groups: dict[str, list[dict]] = {}
    for name, arm in arms.items():
        m = re.fullmatch(r"(.+)_seed\d+", name)
        if m:
            groups.setdefault(m.group(1), []).append(arm)
    return {g: {"seeds": sorted(a["seed"] for a in group),
                "validation_score": sum(a["validation_score"] for a in group) / len(group),
                **{f"{split}/{k}": sum(a[split][k]["k"] for a in group) / len(group)
                   for split in ("validation", "test") for k in KEYS}}
            for g, group in groups.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="stream_seeds.json", help="the record to write, beside this file")
    ap.add_argument("arms", nargs="*", metavar="NAME=SOURCE")
    a = ap.parse_args(argv)
    if Path(a.out).name != a.out or not a.out.endswith(".json"):
        ap.error(f"--out: expected a file name ending in .json, written beside this script, got {a.out!r}")
    arms = {"committed_seed0": committed_seed0()}
    for arg in a.arms:
        name, _, source = arg.partition("=")
        if not source:
            ap.error(f"argument {arg!r}: expected NAME=SOURCE")
        arms[name] = from_lab_record(source) if "#" in source else from_record(Path(source))
    for name, arm in arms.items():
        arm["validation_score"] = open_eval.score(arm["validation"])
        print(f"{name:32s} val score {arm['validation_score']:.4f}",
              {k: (arm["validation"][k]["k"], arm["test"][k]["k"]) for k in KEYS})
    means = seed_means(arms)
    for g, m in means.items():
        print(f"{g:32s} seeds {m['seeds']} mean val score {m['validation_score']:.4f}")
    out = HERE / a.out
    command = "python labs/small_gpu_recipe/stream_seeds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results.write_json(out, dict(results.provenance(), command=command, date=results.now(), arms=arms,
                                 seed_means=means), indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
