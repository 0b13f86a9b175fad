#!/usr/bin/env bash
# Runs on the GPU machine: steps given as arguments, logs and results collected under $OUT.
#   WHEELS=".whl/v1" bash tools/device_run.sh verify-sanitize:300 runall:00,01 ...
# results/ is packed into $OUT after every step, so a step cut off by the time limit
# loses only itself.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 T4LIB_CACHE=/tmp/t4cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for w in ${WHEELS:-.whl/peers .whl/nb .whl/final}; do
  if ls $w/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w/*.whl
  fi
done
[ -d /tmp/site ] && export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=/tmp/site/bin:$PATH
log=$OUT/log.txt
{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; python3 -m t4lib info; } >>"$log" 2>&1
for step in "$@"; do
  echo "===== $step $(date +%T)" | tee -a "$log"
  case $step in
    verify) python3 -m t4lib verify >>"$log" 2>&1 ;;
    verify-sanitize) python3 -m t4lib verify --sanitize >>"$log" 2>&1 ;;
    verify-sanitize:*) python3 -m t4lib verify --sanitize --sanitize-timeout ${step#verify-sanitize:} >>"$log" 2>&1 ;;
    bench:*) python3 -m t4lib bench ${step#bench:} >>"$log" 2>&1 ;;
    gputests) python3 -m pytest -q -m gpu tests -p no:cacheprovider >>"$log" 2>&1 ;;
    cmd:*) bash -c "${step#cmd:}" >>"$log" 2>&1 ;;
    runall:*) nbs=${step#runall:}; T4LIB_NO_INSTALL=1 PROFILE=gpu bash run_all.sh run ${nbs//,/ } >>"$log" 2>&1 ;;
    notebook:*) python3 -m ipykernel install --user --name python3 >/dev/null 2>&1
                papermill --log-level WARNING --cwd notebooks -k python3 -p PROFILE gpu "notebooks/${step#notebook:}" \
                  "results/nvidia-h200/${step#notebook:}" >>"$log" 2>&1 ;;
  esac
  echo "----- rc=$? $(date +%T)" | tee -a "$log"
  tar czf "$OUT/results.tgz" results 2>/dev/null
done
[ -n "${PACK_MODELS:-}" ] && tar czf "$OUT/models.tgz" data/models 2>/dev/null
tail -c 200000 "$log" > "$OUT/log_tail.txt"
