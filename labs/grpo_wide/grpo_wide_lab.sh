#!/usr/bin/env bash
# GRPO on tiny-gpu with the 28 more RL templates of honesty_rl_wide.jsonl beside honesty_rl.jsonl: the recipe of
# results/nvidia-h200/grpo.json (100 steps, lr 5e-5, 8 x 8 completions per step) otherwise unchanged, fp16 and
# CP-Hybrid rollouts, seeds 0 and 1, side by side on one GPU (about 6 minutes on an H200), then one lab record.
#   bash labs/grpo_wide/grpo_wide_lab.sh
OUT=${OUT:-/tmp/out}
dir="$OUT/grpo_wide"
mkdir -p "$dir"
python3 -m t4lib.train.grpo all --model tiny-gpu --steps 100 --lr 5e-5 --arms fp16 cp_hybrid --benches \
  --honesty honesty_rl.jsonl honesty_rl_wide.jsonl --logs "$dir" --out "$dir/grpo_wide.json" > "$dir/grpo.log" 2>&1
python3 labs/grpo_wide/grpo_wide_gather.py "$dir" "$dir/grpo_wide_lab.json"
