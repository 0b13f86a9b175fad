#!/usr/bin/env bash
# Full fine-tuning of tiny-gpu on the certified traces at several learning rates and epoch counts, the runs side by
# side on one GPU; each writes its record (losses, evaluations on the held-out sets) under $OUT/sweep. Run from the
# repo root on the device after the environment set-up of the device notes (PYTHONPATH with the carried wheels,
# T4LIB_CACHE). About 2 minutes on an H200 for the nine runs side by side.
#   bash labs/sft_recipe_sweep/sft_recipe_sweep.sh
# labs/sft_recipe_sweep/sft_recipe_sweep.json gathers what it wrote (with the seed-0 run of the kept recipe,
# results/nvidia-h200/sft.json).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/sweep"
for cfg in "5e-4 2 0" "5e-4 4 0" "2e-4 4 0" "2e-4 8 0" "1e-4 8 0" "1e-3 4 0" "5e-4 8 1" "5e-4 16 0" "5e-4 24 0"; do
  set -- $cfg
  name="sft_lr$1_ep$2_s$3"
  timeout 300 python3 -m t4lib.train.sft --model tiny-gpu --method full --base fp32 --lr "$1" --epochs "$2" --seed "$3" \
     --eval-sets heldout_1_2,heldout_3_4,honesty_answerable --out "$OUT/sweep/$name.json" > "$OUT/sweep/$name.log" 2>&1 &
done
wait
ls "$OUT/sweep"/*.json
