#!/usr/bin/env bash
# tiny-gpu recipe sweep: configurations trained side by side on one GPU; the best comes back
# ($OUT/tiny_gpu_best.tgz, summary $OUT/train_sweep.json). The committed preset is run E;
# runs A-D were an earlier round with the same script (labs/tiny_gpu_sweep/tiny_gpu_sweep.json).
set -u
OUT=${OUT:-/tmp/out}
declare -A CFG=(
  [E]="--set math_repeat=3 --set chat_fraction=0 --set batch_size=32 --set steps=2000 --set drills=60000 --set weight_decay=0.3"
  [F]="--set math_repeat=3 --set chat_fraction=0 --set batch_size=32 --set steps=2000 --set drills=120000 --set weight_decay=0.3"
  [G]="--set math_repeat=3 --set chat_fraction=0 --set batch_size=32 --set steps=2000 --set drills=120000 --set weight_decay=0.1"
  [H]="--set math_repeat=3 --set chat_fraction=0 --set batch_size=32 --set steps=2500 --set drills=200000 --set weight_decay=0.3"
  [I]="--set math_repeat=5 --set chat_fraction=0 --set batch_size=32 --set steps=2000 --set drills=120000 --set weight_decay=0.3"
)
for k in "${!CFG[@]}"; do
  python3 -m t4lib.models.tiny train --preset tiny-gpu --out /tmp/tg_$k ${CFG[$k]} > /tmp/train_$k.log 2>&1 &
done
wait; tar czf $OUT/trainlogs.tgz -C /tmp $(cd /tmp && ls train_*.log)
python3 - <<'PY'
import json, os, subprocess
OUT = os.environ.get("OUT", "/tmp/out")
best, summary = None, {}
for k in "EFGHI":
    try:
        r = json.load(open(f"/tmp/tg_{k}/training_record.json"))
    except Exception as e:
        summary[k] = str(e); continue
    e = r["eval"]
    summary[k] = dict(cmd=r["command"], math=e["math_exact_match"], copy=e["copy_token_accuracy"],
                      loss=r["final_loss"], train_s=r["train_seconds"], epochs=r["epochs_seen"])
    if best is None or e["math_exact_match"] > summary[best]["math"]:
        best = k
print(json.dumps(summary, indent=1)); json.dump(summary, open(f"{OUT}/train_sweep.json", "w"), indent=1)
if best:
    subprocess.run(["tar", "czf", f"{OUT}/tiny_gpu_best.tgz", "-C", "/tmp", f"tg_{best}"], check=True)
PY
