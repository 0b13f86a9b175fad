#!/usr/bin/env bash
# Which SFT data for small-gpu: four arms x three seeds side by side on one GPU, each full fine-tuning at
# lr 3e-4, batch 32, evaluated on the open validation and test sets (sft_data_gather.py chooses on validation):
#   files3         open_traces.jsonl (4000 certified traces), 3 epochs: the recipe so far
#   fresh1         procedural:12000 (the same 4000 and 8000 more, never repeated), 1 epoch
#   files3_replay  files3 with 2000 plain-format problems of the procedural generator mixed in
#   fresh1_replay  fresh1 with 6000 plain-format problems mixed in
# Writes $1/sftdata/<arm>_seed<k>.{json,log} and $1/sftdata/env.json (default $1: /tmp/job).
set -uo pipefail
out=${1:-/tmp/job}/sftdata
mkdir -p "$out"
python3 -c "import json; from t4lib.core import results; print(json.dumps({**results.environment(), 'provenance': results.provenance()}))" > "$out/env.json"
declare -A ARMS=(
  [files3]="--traces open_traces.jsonl --epochs 3"
  [fresh1]="--traces procedural:12000 --epochs 1"
  [files3_replay]="--traces open_traces.jsonl --epochs 3 --replay 2000 --replay-from procedural"
  [fresh1_replay]="--traces procedural:12000 --epochs 1 --replay 6000 --replay-from procedural"
)
pids=()
for arm in "${!ARMS[@]}"; do
  for seed in 0 1 2; do
    # shellcheck disable=SC2086  # the arm's options are words
    OMP_NUM_THREADS=1 python3 -m t4lib.train.sft --model small-gpu --base fp32 --method full --lr 3e-4 \
      --batch-size 32 --seed $seed ${ARMS[$arm]} --eval-sets open_validation_1_2,open_test_1_2,open_test_3_4 \
      --out "$out/${arm}_seed$seed.json" > "$out/${arm}_seed$seed.log" 2>&1 &
    pids+=($!)
  done
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo $rc > "$out/rc"
exit $rc
