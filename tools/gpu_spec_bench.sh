#!/usr/bin/env bash
# Re-measures issue 20's figures on a GPU: speculative decoding with prompt lookup against StaticEngine plain
# greedy and Hugging Face generate (tiny-gpu, 40 held-out copy and 40 open-ended prompts, up to 64 new tokens,
# batch 1 and 8), the draft model (tiny-cpu drafting) and the verify-cost curves; each log line carries the
# seconds since the start. Run from the repo root on the device, after the environment set-up of the device
# notes (PYTHONPATH with the carried wheels, T4LIB_CACHE):
#   bash tools/gpu_spec_bench.sh                    # results and log under $OUT/spec
#   GPU_TESTS=1 bash tools/gpu_spec_bench.sh        # then also the GPU tests of tests/test_speculative.py
# Afterwards copy $OUT/spec/speculative.json to results/nvidia-h200/ and the logs to results/nvidia-h200/logs/.
# Expected: 100-160 s for the benchmark (an estimate: written without device time), most of it torch.compile
# in a fresh process (StaticEngine's decode step at batch 1 and 8, the speculative forward at batch 1 and 8,
# the draft model's decoder); the runs themselves take about 30 s, the verify-cost curves about 12 s, Hugging
# Face generate on the first HF_PROMPTS copy prompts about 8 s (its rates are per token). PROMPTS=24
# HF_PROMPTS=8 saves about 10 s. BENCH_TIMEOUT stops it (the results file is written at the end only). The GPU
# tests (GPU_TESTS=1) add about 60-90 s, most of it compiling the verify forward once more.
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/spec"
log=$OUT/spec/speculative_bench.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$log"
SECONDS=0
timeout "${BENCH_TIMEOUT:-240}" python3 -m t4lib.speculative.bench --out "$OUT/spec" --prompts "${PROMPTS:-40}" \
    --hf-prompts "${HF_PROMPTS:-12}" 2>&1 | grep -v "Loading weights" | tee -a "$log"
rc=$?
echo "benchmark exit $rc after ${SECONDS} s" | tee -a "$log"
if [ "${GPU_TESTS:-0}" = 1 ]; then
    SECONDS=0
    timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_speculative.py 2>&1 \
        | tail -40 | tee "$OUT/spec/speculative_gpu_tests.log"
    echo "GPU tests exit $? after ${SECONDS} s" | tee -a "$OUT/spec/speculative_gpu_tests.log"
fi
exit $rc
