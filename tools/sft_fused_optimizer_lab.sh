#!/usr/bin/env bash
# Full fine-tuning of tiny-gpu on the wide traces (fp32 master weights, fp16 autocast, lr 3e-4, batch 32), one
# run after the other on one GPU: with the Trainer's own AdamW (TRL's default: loss scaling, clipping at 1.0),
# then with optimizer=fused_linear (the decoder projections take their AdamW step inside backward; no loss
# scaling, no clipping). Writes both run records and a lab record of the training time per step.
#   OUT=dir bash tools/sft_fused_optimizer_lab.sh [epochs] [held-out problems scored]
set -eu
out=${OUT:-/tmp/sft_fused_optimizer_lab}
epochs=${1:-4}
eval_n=${2:-200}
mkdir -p "$out"
python3 -c "from t4lib import _build; _build.build('fused_adamw')" > /dev/null   # not inside the timed training
for opt in adamw fused_linear; do
  python3 -m t4lib.train.sft --model tiny-gpu --base fp32 --method full --traces traces_wide.jsonl \
    --epochs "$epochs" --lr 3e-4 --eval-sets heldout_1_2 --eval-n "$eval_n" --optimizer "$opt" --out "$out/$opt.json"
done
python3 - "$out" "$epochs" "$eval_n" <<'PY'
import json, sys
from pathlib import Path
from t4lib import results

out, epochs, eval_n = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = {}
for opt in ("adamw", "fused_linear"):
    r = json.loads((out / f"{opt}.json").read_text())
    steps = r["losses"][-1][0]
    ev = r["after"]["heldout_1_2"]["overall"]
    runs[opt] = {"train_seconds": r["train_seconds"], "steps": steps, "s_per_step": r["train_seconds"] / steps,
                 "final_loss": r["losses"][-1][1], "schema_valid": ev["schema_valid"]["rate"],
                 "grounded": ev["grounded"]["rate"], "n_eval": ev["n"], "device": r.get("device_name")}
rec = results.lab_record(f"bash tools/sft_fused_optimizer_lab.sh {epochs} {eval_n}")
rec.update(note=("train_seconds is the Trainer's train() (first step included); both runs train the same data in "
                 "the same order from the same seed; the fused run neither scales the loss nor clips"),
           runs=runs, fused_over_adamw_time=runs["fused_linear"]["train_seconds"] / runs["adamw"]["train_seconds"])
(out / "sft_fused_optimizer_lab.json").write_text(json.dumps(rec, indent=1) + "\n")
print(json.dumps(rec, indent=1))
PY
