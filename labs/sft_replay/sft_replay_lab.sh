#!/usr/bin/env bash
# Full fine-tuning of tiny-gpu on the certified traces with and without plain-format replay
# (t4lib.train.data.replay_dataset), side by side, one thread each; records under $OUT/replay. Runs on a CPU
# (about 50 minutes on 2 cores) or a GPU.
#   bash labs/sft_replay/sft_replay_lab.sh
# labs/sft_replay/sft_replay_lab.json gathers what it wrote.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/replay"
for n in 0 800; do
  OMP_NUM_THREADS=1 python3 -m t4lib.train.sft --model tiny-gpu --method full --base fp32 --lr 5e-4 --epochs 8 \
      --seed 0 --replay "$n" --eval-sets heldout_1_2 --out "$OUT/replay/sft_replay$n.json" > "$OUT/replay/sft_replay$n.log" 2>&1 &
done
wait
ls "$OUT/replay"/*.json
