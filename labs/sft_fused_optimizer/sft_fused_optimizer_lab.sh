#!/usr/bin/env bash
# Why SFT with optimizer=fused_linear trained worse, in one GPU call. Full fine-tuning of tiny-gpu on the wide
# traces (fp32 master weights, fp16 autocast, lr 3e-4, batch 32, the same data order from the same seed), seven arms:
#   adamw                  the Trainer's AdamW with its dynamic loss scaling (GradScaler) and clipping at 1.0
#   adamw_noclip           the same without clipping (--max-grad-norm 0)
#   adamw_unscaled         the Trainer's AdamW under fp16 autocast, no loss scaling, no clipping (--loss-scale 1:
#                          the fused path's conditions without the fused layers)
#   fused_linear_unscaled  the decoder projections as FusedAdamWLinear, no loss scaling (--loss-scale 1: what the
#                          first record of this lab measured as fused_linear)
#   fused_linear           the same under the default static loss scale (t4lib.train.sft.FUSED_LOSS_SCALE)
#   adamw_noclip_b2, fused_linear_b2
#                          adamw_noclip and fused_linear with AdamW's beta2 0.95 in both optimizers (--adam-beta2):
#                          without clipping the large gradients of the first steps stay in v for ~1/(1-beta2) steps
# adamw against adamw_noclip isolates clipping, adamw_noclip against adamw_unscaled the loss scale, adamw_unscaled against
# fused_linear_unscaled the fused layers, fused_linear against fused_linear_unscaled the fix.
# The arms run side by side on one GPU (background processes, a log each), so their per-step times are not those
# of a run alone: afterwards adamw and fused_linear train again, one after the other and without evaluation, for
# solo times (their solo_s_per_step; fused_over_adamw_time). "sequential" runs the arms one after the other
# instead (every s_per_step is then a run alone; no extra runs; longer). Writes each arm's run record and log, and
# the lab record $OUT/sft_fused_optimizer_lab.json; an arm that fails (an fp16 overflow is an error) is recorded
# with its error and the script exits 1.
#   OUT=dir bash labs/sft_fused_optimizer/sft_fused_optimizer_lab.sh [epochs] [held-out problems scored] [parallel|sequential] [arm...]
# Naming arms runs only those (default all seven); the solo timing runs need adamw and fused_linear among them.
set -eu
out=${OUT:-/tmp/sft_fused_optimizer_lab}
epochs=${1:-4}
eval_n=${2:-200}
mode=${3:-parallel}
case "$mode" in
  parallel|sequential) ;;
  *) echo "mode must be parallel or sequential, got $mode" >&2; exit 2 ;;
esac
mkdir -p "$out"
python3 -c "from t4lib import _build; _build.build('fused_adamw')" > /dev/null   # once, not inside the training
all_arms=(adamw adamw_noclip adamw_unscaled fused_linear_unscaled fused_linear adamw_noclip_b2 fused_linear_b2)
arms=("${@:4}")
[ ${#arms[@]} -gt 0 ] || arms=("${all_arms[@]}")
for arm in "${arms[@]}"; do
  [[ " ${all_arms[*]} " == *" $arm "* ]] || { echo "unknown arm $arm (arms: ${all_arms[*]})" >&2; exit 2; }
done
declare -A args=(
  [adamw]="--optimizer adamw"
  [adamw_noclip]="--optimizer adamw --max-grad-norm 0"
  [adamw_unscaled]="--optimizer adamw --loss-scale 1"
  [fused_linear_unscaled]="--optimizer fused_linear --loss-scale 1"
  [fused_linear]="--optimizer fused_linear"
  [adamw_noclip_b2]="--optimizer adamw --max-grad-norm 0 --adam-beta2 0.95"
  [fused_linear_b2]="--optimizer fused_linear --adam-beta2 0.95"
)

sft() {  # name, then more arguments of t4lib.train.sft; its record $out/name.json, its log $out/name.log
  local name=$1
  shift
  python3 -m t4lib.train.sft --model tiny-gpu --base fp32 --method full --traces traces_wide.jsonl \
    --epochs "$epochs" --lr 3e-4 "$@" --out "$out/$name.json" > "$out/$name.log" 2>&1
}

rm -f "$out"/*.json
failed=0
if [ "$mode" = sequential ]; then
  for arm in "${arms[@]}"; do
    # shellcheck disable=SC2086
    sft "$arm" ${args[$arm]} --eval-sets heldout_1_2 --eval-n "$eval_n" || { echo "arm $arm failed"; failed=1; }
  done
else
  declare -A pids=()
  for arm in "${arms[@]}"; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} sft "$arm" ${args[$arm]} --eval-sets heldout_1_2 --eval-n "$eval_n" &
    pids[$arm]=$!
  done
  for arm in "${arms[@]}"; do
    wait "${pids[$arm]}" || { echo "arm $arm failed"; failed=1; }
  done
  for arm in adamw fused_linear; do   # solo, for the time per step
    [[ " ${arms[*]} " == *" $arm "* ]] || continue
    # shellcheck disable=SC2086
    sft "${arm}_solo" ${args[$arm]} --eval-sets "" || { echo "solo run of $arm failed"; failed=1; }
  done
fi

subset=$([ ${#arms[@]} -eq ${#all_arms[@]} ] && echo all || echo subset)
python3 - "$out" "$epochs" "$eval_n" "$mode" "$subset" "${arms[@]}" <<'PY'
import json, sys
from pathlib import Path


from t4lib.core import results
from t4lib.train.sft import trainer_setting

out, epochs, eval_n, mode, subset, arms = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
sequential = mode == "sequential"


def failure(name):
    log = out / f"{name}.log"
    lines = log.read_text().strip().splitlines() if log.is_file() else []
    return {"error": lines[-1] if lines else f"no record and no log for {name}"}


def timing(r):
    steps = r["losses"][-1][0]
    return {"train_seconds": r["train_seconds"], "steps": steps, "s_per_step": r["train_seconds"] / steps}


runs = {}
for arm in arms:
    p = out / f"{arm}.json"
    if not p.is_file():
        runs[arm] = failure(arm)
        continue
    r = json.loads(p.read_text())
    scale, extra = r["settings"]["loss_scale"], r["settings"].get("extra", {})
    ev = r["after"]["heldout_1_2"]["overall"]
    runs[arm] = {"optimizer": r["settings"]["optimizer"], "loss_scale": scale, "grad_scaler": scale is None,
                 # a static loss scale turns clipping off unless extra sets it (sft_config)
                 "max_grad_norm": (trainer_setting(extra, "max_grad_norm") if scale is None
                                   else extra.get("max_grad_norm", 0.0)),
                 "adam_beta2": trainer_setting(extra, "adam_beta2"), **timing(r),
                 "timed": "alone" if sequential else f"side by side with {len(arms) - 1} other arms",
                 "final_loss": r["losses"][-1][1], "losses": r["losses"], "schema_valid": ev["schema_valid"]["rate"],
                 "grounded": ev["grounded"]["rate"], "n_eval": ev["n"], "device": r.get("device_name")}
    solo = out / f"{arm}_solo.json"
    if not sequential and solo.is_file():
        t = timing(json.loads(solo.read_text()))
        runs[arm].update(solo_train_seconds=t["train_seconds"], solo_s_per_step=t["s_per_step"])

rec = results.lab_record(f"bash labs/sft_fused_optimizer/sft_fused_optimizer_lab.sh {epochs} {eval_n} {mode}"
                         + (" " + " ".join(arms) if subset == "subset" else ""))
key = "train_seconds" if sequential else "solo_train_seconds"
if all(key in runs.get(a, {}) for a in ("adamw", "fused_linear")):
    rec["fused_over_adamw_time"] = runs["fused_linear"][key] / runs["adamw"][key]
rec.update(
    note=("every arm trains the same data in the same order from the same seed; train_seconds is the Trainer's "
          "train() (first step included). adamw: the Trainer's dynamic loss scaling (GradScaler) and clipping; "
          "the others a static loss_scale (1: none) under fp16 autocast, no clipping, AdamW's eps times the scale. "
          + ("The arms ran one after the other: every time is a run alone."
             if sequential else
             "The arms ran side by side on one GPU: their s_per_step are not those of a run alone; solo_s_per_step "
             "(adamw, fused_linear) come from training each again alone, without evaluation, and give "
             "fused_over_adamw_time.")),
    runs=runs)
(out / "sft_fused_optimizer_lab.json").write_text(json.dumps(rec, indent=1) + "\n")
print(json.dumps({a: {k: v for k, v in r.items() if k != "losses"} for a, r in runs.items()}, indent=1))
PY
if [ "$failed" = 1 ]; then
  echo "some runs failed: see the logs in $out and the errors in the lab record" >&2
  exit 1
fi
