#!/usr/bin/env bash
# racecheck on the bare barrier protocols of ws_barrier_probe.cu (variant 1: the bar.arrive ring the kernels used
# first; 2: the same accesses ordered by __syncthreads alone; 3: t4::ws of kernels/common.cuh, the kernels'
# protocol now), then on GPU tests of both warp-specialized kernels and of the plain fused kernel; logs under
# $OUT/racecheck_probe. A few minutes on an H200.
#   bash tools/racecheck_probe/run.sh
OUT=${OUT:-/tmp/out}
d="$OUT/racecheck_probe"; mkdir -p "$d"
here=$(dirname "$0")
nvcc -arch=sm_75 -I "$here/../../kernels" -o "$d/probe" "$here/ws_barrier_probe.cu"
for v in 1 2 3; do
  "$d/probe" $v
  compute-sanitizer --tool racecheck --racecheck-report all "$d/probe" $v > "$d/probe_racecheck_v$v.log" 2>&1
  tail -1 "$d/probe_racecheck_v$v.log"
done
rc() {  # name, pytest args...
  local name=$1; shift
  compute-sanitizer --tool racecheck --racecheck-report all --print-limit 200 python3 -m pytest -q -p no:cacheprovider \
    "$@" > "$d/$name.log" 2>&1
  echo "$name: $(grep -E 'passed|failed' "$d/$name.log" | tail -1) | $(tail -1 "$d/$name.log")"
}
rc fused_ws_racecheck tests/test_fused_adamw.py -k "warp_specialized_bit_identical or warp_specialized_any_grid"
rc w4a16_ws_racecheck tests/test_w4a16_ws.py -k "bit_identical_for_any_grid_cap or captures_in_cuda_graph"
rc fused_plain_racecheck tests/test_fused_adamw.py -k "fused_bit_identical_to_unfused"
