#!/usr/bin/env bash
# racecheck on the bare barrier protocol of fused_adamw_ws_kernel (ws_barrier_probe.cu, variant 1: the named-barrier
# ring; variant 2: the same accesses ordered by __syncthreads alone), then on the warp-specialized and the plain
# fused kernel's GPU tests; logs under $OUT/racecheck_probe. About a minute on an H200.
#   bash tools/racecheck_probe/run.sh
OUT=${OUT:-/tmp/out}
d="$OUT/racecheck_probe"; mkdir -p "$d"
here=$(dirname "$0")
nvcc -arch=sm_75 -o "$d/probe" "$here/ws_barrier_probe.cu"
for v in 1 2; do
  "$d/probe" $v
  compute-sanitizer --tool racecheck --racecheck-report all "$d/probe" $v > "$d/probe_racecheck_v$v.log" 2>&1
  tail -1 "$d/probe_racecheck_v$v.log"
done
compute-sanitizer --tool racecheck --racecheck-report all --print-limit 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_fused_adamw.py -k "warp_specialized_bit_identical or warp_specialized_any_grid" > "$d/ws_racecheck.log" 2>&1
tail -1 "$d/ws_racecheck.log"
compute-sanitizer --tool racecheck --racecheck-report all --print-limit 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_fused_adamw.py -k "fused_bit_identical_to_unfused" > "$d/plain_racecheck.log" 2>&1
tail -1 "$d/plain_racecheck.log"
