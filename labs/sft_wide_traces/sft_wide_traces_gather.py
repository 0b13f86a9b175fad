"""Gather the records of labs/sft_wide_traces/sft_wide_traces_lab.sh into one lab record.

    python labs/sft_wide_traces/sft_wide_traces_gather.py DIR OUT.json [long|longer|sweep]

A run's recipe is its file name before ``_s<seed>``; ``recipes`` summarises each over its seeds and, where the runs
kept their outputs (``--keep-outputs``), counts why the answers that are not a grounded pass fail, by structure
(``t4lib.train.evaluate.failure_kind``).
"""
import json
import statistics
import sys
from pathlib import Path

from t4lib.core import hw, results
from t4lib.train import evaluate as ev


WHAT = {
    "": "full fine-tuning of tiny-gpu, lr 5e-4, batch 32, 200 optimizer steps, on traces.jsonl (800 traces, the 3 "
        "train templates per structure, 8 epochs) and on traces_wide.jsonl (1600 traces, 8 phrasings per structure, "
        "4 epochs)",
    "long": "full fine-tuning of tiny-gpu, lr 5e-4, batch 32, on traces_wide.jsonl (1600 traces, 8 phrasings per "
            "structure) for 8 epochs (400 optimizer steps), twice the steps of sft_wide_traces_lab",
    "longer": "full fine-tuning of tiny-gpu, lr 5e-4, batch 32, on traces_wide.jsonl (1600 traces, 8 phrasings per "
              "structure) for 12 epochs (600 optimizer steps), three times the steps of sft_wide_traces_lab",
    "sweep": "full fine-tuning of tiny-gpu, batch 32, on traces_wide.jsonl (1600 traces, 8 phrasings per structure): "
             "12 epochs at lr 5e-4 (seeds 0-3), the same with NEFTune noise alpha 5 (seeds 0-2) or weight decay 0.1 "
             "(seeds 0-1), 16 epochs at lr 5e-4 (seeds 0-1) or 3e-4 (seeds 0-3), side by side on one GPU",
}
KEYS = ("schema_valid", "grounded_pass", "grounded_pass_two_step")


def spread(runs: list[dict]) -> dict:
    return {k: dict(mean=statistics.fmean(r[k] for r in runs), min=min(r[k] for r in runs),
                    max=max(r[k] for r in runs)) for k in KEYS}


def main(src: str, out: str, mode: str = "") -> None:
    runs, kept_rows = [], {}
    heldout = ev.load_eval_records("math_heldout", max_steps=2)
    for p in sorted(Path(src).glob("*_s[0-9].json")):
        r = json.loads(p.read_text())
        h = r["after"]["heldout_1_2"]
        st = r["settings"]
        runs.append(dict(run=p.stem, recipe=p.stem.rsplit("_s", 1)[0],
                         traces=r["data"].get("traces", "traces.jsonl"), seed=st["seed"],
                         epochs=st["epochs"], lr=st["lr"], weight_decay=st["weight_decay"],
                         neftune=st.get("extra", {}).get("neftune_noise_alpha"), n_traces=r["data"]["n_kept"],
                         final_loss=r["losses"][-1][1], train_seconds=r["train_seconds"],
                         schema_valid=h["overall"]["schema_valid"]["rate"],
                         grounded_pass=h["overall"]["grounded"]["rate"], grounded_ci95=h["overall"]["grounded"]["ci95"],
                         grounded_pass_two_step=h["two_step"]["grounded"]["rate"], n_heldout_1_2=h["overall"]["n"],
                         by_structure={s: round(v["grounded"]["rate"], 4) for s, v in h["by_structure"].items()}))
        if "rows" in h:   # kept outputs: counted over every seed of the recipe
            kept_rows.setdefault(runs[-1]["recipe"], []).extend(h["rows"])
    wide = [r for r in runs if r["traces"] == "traces_wide.jsonl"]
    summary = spread(wide)
    by_recipe = {}
    for r in runs:
        by_recipe.setdefault(r["recipe"], []).append(r)
    recipes = {name: dict(seeds=len(rs), **spread(rs)) for name, rs in sorted(by_recipe.items())}
    for name, rows in kept_rows.items():
        recipes[name]["failures"] = ev.failure_counts(heldout, rows)
    rec = results.lab_record(f"bash labs/sft_wide_traces/sft_wide_traces_lab.sh {mode}".strip())
    rec.update(device=f"{hw.device_info()['name']} (one thread per run)",
               what=WHAT[mode] + "; greedy tag-format answers to the 696 1-2 step held-out problems (held-out "
                                 "templates) through StaticEngine",
               runs=runs, wide_summary=summary, recipes=recipes)
    Path(out).write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps({k: {m: v[m] for m in KEYS} for k, v in recipes.items()}, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:4])
