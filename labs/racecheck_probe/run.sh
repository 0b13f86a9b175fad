#!/usr/bin/env bash
# racecheck and synccheck on the bare barrier protocols of ws_barrier_probe.cu (1: the bar.arrive ring the kernels
# used first; 2: the same accesses ordered by __syncthreads alone; 3: t4::ws of kernels/common.cuh, the kernels'
# protocol now; 4: variant 1 with unaligned barriers); with FULL=1 also on GPU tests of both warp-specialized
# kernels and of the plain fused kernel. Logs under $OUT/racecheck_probe; prints one summary line per run.
#   bash labs/racecheck_probe/run.sh            # the probe alone: seconds
#   FULL=1 bash labs/racecheck_probe/run.sh     # and the tests: a few minutes on an H200
OUT=${OUT:-/tmp/out}
d="$OUT/racecheck_probe"; mkdir -p "$d"
here=$(dirname "$0")
sanitize() {  # tool, log, command...: the command under compute-sanitizer, all racecheck hazards reported
  local tool=$1 log=$2; shift 2
  local extra=(); [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 200 "$@" > "$log" 2>&1
}
nvcc -arch=sm_75 -I "$here/../../kernels" -o "$d/probe" "$here/ws_barrier_probe.cu"
for v in 1 2 3 4; do
  "$d/probe" $v
  for tool in racecheck synccheck; do
    sanitize $tool "$d/probe_${tool}_v$v.log" "$d/probe" $v
    echo "  v$v $tool: $(grep -E 'SUMMARY' "$d/probe_${tool}_v$v.log" | tail -1)"
  done
done
[ "${FULL:-0}" = 1 ] || exit 0
run() {  # name, tool, pytest args...
  local name=$1 tool=$2; shift 2
  sanitize $tool "$d/$name.log" python3 -m pytest -q -p no:cacheprovider "$@"
  echo "$name: $(grep -E 'passed|failed' "$d/$name.log" | tail -1) | $(grep SUMMARY "$d/$name.log" | tail -1)"
}
for tool in racecheck synccheck; do
  run fused_ws_$tool $tool tests/test_fused_adamw.py -k "warp_specialized_bit_identical or warp_specialized_any_grid"
  run w4a16_ws_$tool $tool tests/test_w4a16_ws.py -k "bit_identical_for_any_grid_cap or captures_in_cuda_graph"
  run fused_plain_$tool $tool tests/test_fused_adamw.py -k "fused_bit_identical_to_unfused"
done
