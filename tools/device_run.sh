#!/usr/bin/env bash
# Runs on the GPU machine: steps given as arguments, logs and results collected under $OUT.
#   bash tools/device_run.sh verify bench:int4 sanitize ...
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 T4LIB_CACHE=/tmp/t4cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for w in .whl/peers .whl/nb .whl/final; do
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
    notebook:*) python3 -m ipykernel install --user --name python3 >/dev/null 2>&1
                papermill --log-level WARNING --cwd notebooks -k python3 -p PROFILE gpu "notebooks/${step#notebook:}" \
                  "results/nvidia-h200/${step#notebook:}" >>"$log" 2>&1 ;;
  esac
  echo "----- rc=$? $(date +%T)" | tee -a "$log"
done
tar czf "$OUT/results.tgz" results data/models 2>/dev/null
tail -c 200000 "$log" > "$OUT/log_tail.txt"
