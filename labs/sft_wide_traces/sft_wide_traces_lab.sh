#!/usr/bin/env bash
# Full fine-tuning of tiny-gpu with the kept recipe (lr 5e-4, batch 32, 200 optimizer steps) on the 800 traces of
# the train templates (8 epochs) and on the 1600 traces of traces_wide.jsonl, eight phrasings per structure
# (4 epochs, the same number of steps), evaluated on the 696 1-2 step held-out problems; wide seeds 0, 1, 2.
# Two runs at a time, one thread each; about 20 minutes per pair on 2 CPU cores, or 2 minutes on a GPU.
# With "long": traces_wide.jsonl for 8 epochs (400 steps), seeds 0 and 1, about 45 minutes on 2 CPU cores;
# "longer": 12 epochs (600 steps), the same seeds, about 70 minutes on 2 CPU cores.
# "sweep" (a GPU): fifteen runs side by side, each keeping every output: 12 epochs over seeds 0-3, 12 epochs with
# NEFTune noise (alpha 5) over seeds 0-2, 16 epochs over seeds 0-1, 12 epochs with weight decay 0.1 over seeds 0-1,
# and 16 epochs at lr 3e-4 over seeds 0-3; about 5 minutes on an H200.
# "soup" (a GPU): the sweep's 16-epoch lr 3e-4 recipe over seeds 0-3, each saved, then their weight average scored
# beside them (labs/sft_soup/sft_soup_lab.py) into $OUT/wide_soup/sft_soup_lab.json; about 4 minutes on an H200.
#   bash labs/sft_wide_traces/sft_wide_traces_lab.sh [long|longer|sweep|soup]
# then gathers the records into $OUT/wide[_MODE]/sft_wide_traces[_MODE]_lab.json (this folder holds the recorded CPU and H200 runs).
OUT=${OUT:-/tmp/out}
mode=${1:-}
dir="$OUT/wide${mode:+_$mode}"
mkdir -p "$dir"
run() {  # name, traces, epochs, seed, [more sft options]
  local name=$1 traces=$2 epochs=$3 seed=$4
  shift 4
  OMP_NUM_THREADS=1 python3 -m t4lib.train.sft --model tiny-gpu --method full --base fp32 --lr 5e-4 --epochs "$epochs" \
    --seed "$seed" --traces "$traces" --eval-sets heldout_1_2 "$@" --out "$dir/$name.json" > "$dir/$name.log" 2>&1
}
if [ "$mode" = soup ]; then
  for s in 0 1 2 3; do run wide16lr3_s$s traces_wide.jsonl 16 $s --lr 3e-4 --save "$dir/ckpt_s$s" & done
  wait
  python3 labs/sft_soup/sft_soup_lab.py --out "$dir/sft_soup_lab.json" "$dir"/ckpt_s[0-9]
  exit
elif [ "$mode" = sweep ]; then
  for s in 0 1 2 3; do run wide12_s$s traces_wide.jsonl 12 $s --keep-outputs & done
  for s in 0 1 2; do run wide12neft5_s$s traces_wide.jsonl 12 $s --neftune 5 --keep-outputs & done
  for s in 0 1; do
    run wide16_s$s traces_wide.jsonl 16 $s --keep-outputs &
    run wide12wd_s$s traces_wide.jsonl 12 $s --weight-decay 0.1 --keep-outputs &
  done
  for s in 0 1 2 3; do run wide16lr3_s$s traces_wide.jsonl 16 $s --lr 3e-4 --keep-outputs & done
  wait
elif [ "$mode" = long ]; then
  run wide8_s0 traces_wide.jsonl 8 0 & run wide8_s1 traces_wide.jsonl 8 1 & wait
elif [ "$mode" = longer ]; then
  run wide12_s0 traces_wide.jsonl 12 0 & run wide12_s1 traces_wide.jsonl 12 1 & wait
else
  run traces_s0 traces.jsonl 8 0 & run wide_s0 traces_wide.jsonl 4 0 & wait
  run wide_s1 traces_wide.jsonl 4 1 & run wide_s2 traces_wide.jsonl 4 2 & wait
fi
python3 labs/sft_wide_traces/sft_wide_traces_gather.py "$dir" "$dir/sft_wide_traces${mode:+_$mode}_lab.json" $mode
