#!/usr/bin/env bash
# Pretrain small-gpu twice side by side on one GPU (learning rate 2e-3 and 1e-3, the same procedural
# stream), each evaluated on the validation and test splits; the preset keeps the arm with the higher
# validation score (t4lib.models.open_eval.score). Writes into $1 (default /tmp/small_gpu_arms).
set -euo pipefail
out=${1:-/tmp/small_gpu_arms}
mkdir -p "$out"
python3 -m t4lib.models.tiny train --preset small-gpu --set lr=2e-3 --out "$out/lr2e-3" > "$out/lr2e-3.log" 2>&1 &
a=$!
python3 -m t4lib.models.tiny train --preset small-gpu --set lr=1e-3 --out "$out/lr1e-3" > "$out/lr1e-3.log" 2>&1 &
b=$!
rc=0
wait $a || rc=1
wait $b || rc=1
echo "$rc" > "$out/train.rc"
