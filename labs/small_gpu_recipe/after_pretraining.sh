#!/usr/bin/env bash
# After collect.py installed the chosen arm as data/models/small-gpu: benchmark speculative decoding on it
# (open test split, alone on the GPU); then, side by side, cold-start SFT at two learning rates x three
# seeds (evaluated on the open validation and test sets; gather.py chooses the rate on validation) and the
# gpu profiles of notebooks 06 and 04 (04 shows the benchmark's record rather than timing beside the SFT
# runs). Writes into $1 (default /tmp/job); each stage writes <stage>.rc.
set -uo pipefail
job=${1:-/tmp/job}
mkdir -p "$job/sft" "$job/nb"
python3 -m t4lib.benchmarks.speculative --out "$job/spec" --target small-gpu --draft none --prompt-set open \
  --name small-gpu --max-new 512 --prompts 40 --hf-prompts 4 > "$job/spec.log" 2>&1
echo $? > "$job/spec.rc"
pids=()
for lr in 3e-4 1e-4; do
  for seed in 0 1 2; do
    before=(); [ "$lr" = 3e-4 ] && [ "$seed" = 0 ] && before=(--before)
    python3 -m t4lib.train.sft --model small-gpu --base fp32 --method full --lr $lr --epochs 3 --batch-size 32 \
      --seed $seed --traces open_traces.jsonl --eval-sets open_validation_1_2,open_test_1_2,open_test_3_4 \
      "${before[@]}" --out "$job/sft/lr${lr}_seed${seed}.json" > "$job/sft/lr${lr}_seed${seed}.log" 2>&1 &
    pids+=($!)
  done
done
for nb in 06_cold_start_sft 04_speculative_decoding; do
  extra=(); [ $nb = 04_speculative_decoding ] && extra=(-p BENCH_JSON "$job/spec/speculative_small-gpu.json")
  (python3 -m papermill --log-level WARNING --cwd notebooks -k python3 -p PROFILE gpu "${extra[@]}" \
     notebooks/$nb.ipynb "$job/nb/$nb.ipynb" > "$job/nb/$nb.log" 2>&1; echo $? > "$job/nb/$nb.rc") &
  pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done; echo $rc > "$job/sft.rc"
cp results/*/sft_small-gpu.json "$job/nb/" 2>/dev/null
