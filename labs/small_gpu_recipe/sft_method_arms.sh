#!/usr/bin/env bash
# Which SFT method for small-gpu, on the chosen data (open_traces.jsonl, 3 epochs, batch 32): four arms x three
# seeds side by side on one GPU, evaluated on the open validation and test sets (sft_method_gather.py chooses on
# validation):
#   full          full fine-tuning at lr 3e-4: the recipe so far, re-run in the same call
#   full_neftune  the same with NEFTune noise (alpha 5) on the input embeddings
#   lora1e-3      a rank-16 LoRA adapter at lr 1e-3 (does a constrained update keep the base model's reading?)
#   lora3e-3      the same at lr 3e-3
# Writes $1/sftmethod/<arm>_seed<k>.{json,log} and $1/sftmethod/env.json (default $1: /tmp/job).
set -uo pipefail
out=${1:-/tmp/job}/sftmethod
mkdir -p "$out"
python3 -c "import json; from t4lib.core import results; print(json.dumps({**results.environment(), 'provenance': results.provenance()}))" > "$out/env.json"
declare -A ARMS=(
  [full]="--method full --lr 3e-4"
  [full_neftune]="--method full --lr 3e-4 --neftune 5"
  [lora1e-3]="--method lora --r 16 --lr 1e-3"
  [lora3e-3]="--method lora --r 16 --lr 3e-3"
)
pids=()
for arm in "${!ARMS[@]}"; do
  for seed in 0 1 2; do
    # shellcheck disable=SC2086  # the arm's options are words
    OMP_NUM_THREADS=1 python3 -m t4lib.train.sft --model small-gpu --base fp32 ${ARMS[$arm]} --batch-size 32 \
      --seed $seed --traces open_traces.jsonl --epochs 3 --eval-sets open_validation_1_2,open_test_1_2,open_test_3_4 \
      --out "$out/${arm}_seed$seed.json" > "$out/${arm}_seed$seed.log" 2>&1 &
    pids+=($!)
  done
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo $rc > "$out/rc"
exit $rc
