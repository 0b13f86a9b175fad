# Sourced by the SFT arm scripts: run_arms OUT COMMON ARMS trains every arm (an associative array's name: arm ->
# its options) at seeds 0-2 side by side on one GPU, each `python -m t4lib.train.sft --model small-gpu --base fp32
# COMMON <arm's options> --seed k`, evaluated on the open validation and test sets. Writes OUT/<arm>_seed<k>.{json,log},
# OUT/env.json (device and provenance) and OUT/rc.
run_arms() {
  local out=$1 common=$2; local -n arms=$3
  mkdir -p "$out"
  python3 -c "import json; from t4lib.core import results; print(json.dumps({**results.environment(), 'provenance': results.provenance()}))" > "$out/env.json"
  local pids=() arm seed
  for arm in "${!arms[@]}"; do
    for seed in 0 1 2; do
      # shellcheck disable=SC2086  # the options are words
      OMP_NUM_THREADS=1 python3 -m t4lib.train.sft --model small-gpu --base fp32 $common ${arms[$arm]} --seed $seed \
        --eval-sets open_validation_1_2,open_test_1_2,open_test_3_4 \
        --out "$out/${arm}_seed$seed.json" > "$out/${arm}_seed$seed.log" 2>&1 &
      pids+=($!)
    done
  done
  local rc=0 p; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  echo $rc > "$out/rc"
  return $rc
}
