#!/usr/bin/env bash
# Which SFT data for small-gpu: four arms x three seeds side by side on one GPU, each full fine-tuning at
# lr 3e-4, batch 32, evaluated on the open validation and test sets (sft_data_gather.py chooses on validation):
#   files3         open_traces.jsonl (4000 certified traces), 3 epochs: the recipe so far
#   fresh1         procedural:12000 (the same 4000 and 8000 more, never repeated), 1 epoch
#   files3_replay  files3 with 2000 plain-format problems of the procedural generator mixed in
#   fresh1_replay  fresh1 with 6000 plain-format problems mixed in
# Writes $1/sftdata/<arm>_seed<k>.{json,log} and $1/sftdata/env.json (default $1: /tmp/job).
set -uo pipefail
source "$(dirname "$0")/sft_arms_run.sh"
declare -A ARMS=(
  [files3]="--traces open_traces.jsonl --epochs 3"
  [fresh1]="--traces procedural:12000 --epochs 1"
  [files3_replay]="--traces open_traces.jsonl --epochs 3 --replay 2000 --replay-from procedural"
  [fresh1_replay]="--traces procedural:12000 --epochs 1 --replay 6000 --replay-from procedural"
)
run_arms "${1:-/tmp/job}/sftdata" "--method full --lr 3e-4 --batch-size 32" ARMS
