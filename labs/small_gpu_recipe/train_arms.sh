#!/usr/bin/env bash
# Pretrain two small-gpu arms side by side on one GPU (the same procedural stream, learning rate 1e-3):
# "small" is the preset (hidden 384, 20.5M parameters), "wide" the same depth at hidden 512 and 8 heads
# (28M). Each is evaluated on the validation and test splits; collect.py keeps the arm with the higher
# validation score (t4lib.models.open_eval.score). Seven data workers each (a 16-core host).
# Writes into $1 (default /tmp/small_gpu_arms).
set -euo pipefail
out=${1:-/tmp/small_gpu_arms}
mkdir -p "$out"
python3 -m t4lib.models.tiny train --preset small-gpu --set workers=7 --out "$out/small" > "$out/small.log" 2>&1 &
a=$!
python3 -m t4lib.models.tiny train --preset small-gpu --set workers=7 --set hidden_size=512 \
  --set num_attention_heads=8 --out "$out/wide" > "$out/wide.log" 2>&1 &
b=$!
rc=0
wait $a || rc=1
wait $b || rc=1
echo "$rc" > "$out/train.rc"
