#!/usr/bin/env bash
# One device call for the W4A16 MMA GEMM (issue 23): build (cached), GPU tests, compute-sanitizer,
# then either the launch/ablation lab (lab) or the full benchmark (bench). Logs and JSON under $OUT.
#   bash tools/w4a16_mma_lab/device_run.sh lab|bench
set -o pipefail
what=${1:-lab}
start=$(date +%s)
left() { echo $(( ${BUDGET:-255} - ($(date +%s) - start) )); }
mkdir -p "$OUT"
{
  echo "== build (cached by source hash; the -Xptxas -v report is made where it is built)"
  timeout 150 python3 -c "from t4lib import _build; print(_build.build('w4a16'))" 2>&1 | tail -3
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  echo "== gpu tests ($(left) s left)"
  timeout 100 python3 -m pytest -q -p no:cacheprovider -x tests/test_w4a16_mma.py tests/test_w4a16.py 2>&1 | tail -15
  echo "== tests rc=$?"
  for tool in memcheck $([ "$what" = bench ] && echo racecheck); do
    echo "== compute-sanitizer $tool ($(left) s left)"
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
      "tests/test_w4a16_mma.py::test_mma_matches_reference[3]" "tests/test_w4a16_mma.py::test_mma_matches_reference[17]" \
      "tests/test_w4a16_mma.py::test_mma_matches_reference[64]" "tests/test_w4a16_mma.py::test_mma_in_cuda_graph_and_through_matmul" \
      tests/test_w4a16_mma.py::test_mma_every_launch_configuration 2>&1 | grep -vE "^\s*$" | tail -8
    echo "== sanitizer $tool rc=$?"
  done
} 2>&1 | tee "$OUT/log.txt"
if [ "$what" = lab ]; then
  echo "== serve smoke: 2-layer 0.5B shape, batch 8 ($(left) s left)" | tee -a "$OUT/log.txt"
  timeout 60 python3 -c "from t4lib.serving import bench as b
for f in b.serve_batch_compare('smoke', dict(b.QWEN05, num_hidden_layers=2), batches=(8,), new_tokens=16): print(f['name'], round(f['value'], 3))" 2>&1 | tail -8 | tee -a "$OUT/log.txt"
  echo "== lab ($(left) s left)" | tee -a "$OUT/log.txt"
  timeout $(( $(left) - 5 )) python3 -m t4lib.ops.w4a16.bench --lab "$OUT/w4a16_mma_lab.json" --lab-m 8 2 16 64 32 4 \
    --lab-results "$OUT/w4a16_mma_sweep.json" \
    2>&1 | tail -20 | tee -a "$OUT/log.txt"
else
  echo "== bench ($(left) s left)" | tee -a "$OUT/log.txt"
  { timeout $(( $(left) - 120 )) python3 -m t4lib.ops.w4a16.bench --out "$OUT" --sections gemm
    timeout $(( $(left) - 60 )) python3 -m t4lib.serving.bench --out "$OUT" --sections serve_batch; } \
    2>&1 | grep -E "serve|M8/5120x17408|M2/5120x17408|M16/5120x17408|Error|error" | tail -30 | tee -a "$OUT/log.txt"
  echo "== lab ($(left) s left)" | tee -a "$OUT/log.txt"
  timeout $(( $(left) - 3 )) python3 -m t4lib.ops.w4a16.bench --lab "$OUT/w4a16_mma_lab.json" --lab-m 8 2 16 64 32 4 \
    2>&1 | tail -5 | tee -a "$OUT/log.txt"
fi
echo "== done after $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
