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
source "$(dirname "$0")/sft_arms_run.sh"
declare -A ARMS=(
  [full]="--method full --lr 3e-4"
  [full_neftune]="--method full --lr 3e-4 --neftune 5"
  [lora1e-3]="--method lora --r 16 --lr 1e-3"
  [lora3e-3]="--method lora --r 16 --lr 3e-3"
)
run_arms "${1:-/tmp/job}/sftmethod" "--batch-size 32 --traces open_traces.jsonl --epochs 3" ARMS
