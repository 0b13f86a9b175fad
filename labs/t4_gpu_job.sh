#!/usr/bin/env bash
# The issue-74 GPU job: (A) the serving-regression lab, then (B) the T4 model's counters under Nsight Compute.
#   bash labs/t4_gpu_job.sh OUTDIR
# Expects T4LIB_COMMIT and T4LIB_DIRTY exported by the caller (provenance on a tree without .git), nvcc for the
# kernels' first-use build, and ncu on PATH (or $NCU). Each part has its own timeout and log; B runs even if A fails.
set -u
OUT=${1:?usage: bash labs/t4_gpu_job.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."          # the repository root: both parts import t4lib from here

# Build every kernel family once, up front, so neither timed part pays nvcc (a failure shows in build.log).
timeout 120 python3 -m t4lib build >"$OUT/build.log" 2>&1 || echo "build: exit $? (see build.log)"

# (A) before/after decode of StaticEngine and HF static cache, one process; the lab stops itself at 170 s.
timeout 200 python3 labs/serving_regression/serving_regression_lab.py --out "$OUT/serving_regression.json" \
    >"$OUT/serving_regression.log" 2>&1
echo "A serving_regression: exit $? (124 = timed out)"

# (B) counters: analytical, ncu per kernel family and per decode step, kernels per step; check and projections.
# ncu gets 200 s of the 300 so the profiler count and the writing still fit.
T4MODEL_NCU_TIMEOUT_S=200 timeout 300 python3 -m t4lib bench t4model --out "$OUT" >"$OUT/t4model.log" 2>&1
echo "B t4model: exit $? (124 = timed out)"
ls -l "$OUT"
