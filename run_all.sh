#!/usr/bin/env bash
# bash run_all.sh          install what is missing, run every notebook with papermill into results/<device>/
# bash run_all.sh test     install what is missing, run the whole test suite (unit, compile checks, nbval, ledger)
# bash run_all.sh run 00 03   only the notebooks whose names start with these numbers
# PROFILE=auto|cpu|gpu|t4|kaggle-2xt4 is passed to every notebook (default auto).
# T4LIB_NO_INSTALL=1 skips pip (an offline machine whose packages are already provisioned).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
MODE=${1:-run}
shift || true
ONLY=("$@")
PROFILE=${PROFILE:-auto}

install() {
  if [ "${T4LIB_NO_INSTALL:-0}" = 1 ]; then
    "$PY" -m ipykernel install --user --name python3 >/dev/null
    return
  fi
  # Keep an existing torch (Colab's, Kaggle's); otherwise take the pinned CPU build.
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q torch==2.13.0
  "$PY" -m pip install -q -e ".[notebooks,train,gguf,corpus,dev]"
  "$PY" -m ipykernel install --user --name python3 >/dev/null
}

run_tests() {
  local rc=0
  "$PY" -m pytest -q -p no:cacheprovider tests || rc=$?
  "$PY" -m pytest -q -p no:cacheprovider --nbval notebooks/[0-9][0-9]_*.ipynb \
      --nbval-sanitize-with notebooks/sanitize.cfg || rc=$((rc ? rc : $?))
  return $rc
}

run_notebooks() {
  local slug out dest
  slug=$("$PY" -c "from t4lib import hw; print(hw.device_slug())")
  out=results/$slug
  mkdir -p "$out"
  local failed=()
  for nb in notebooks/[0-9][0-9]_*.ipynb; do
    if [ ${#ONLY[@]} -gt 0 ] && ! printf '%s\n' "${ONLY[@]}" | grep -qx "$(basename "$nb" | cut -c1-2)"; then
      continue
    fi
    echo "== $nb (PROFILE=$PROFILE)"
    # Executed beside the previous copy and moved over it only on success: a failed run keeps the last
    # good notebook (its own output stays in .partial to read why).
    dest="$out/$(basename "$nb")"
    if papermill --log-level WARNING --cwd notebooks -k python3 -p PROFILE "$PROFILE" \
         "$nb" "$dest.partial"; then
      mv -f "$dest.partial" "$dest"
    else
      failed+=("$nb (its failed run: $dest.partial)")
    fi
  done
  "$PY" -m t4lib report --out results/README.md >/dev/null
  echo
  echo "Executed notebooks and metrics: $out/   (figure table: results/README.md)"
  "$PY" -m t4lib report | grep -F "| $slug/" | head -50 || true
  if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED notebooks: ${failed[*]}" >&2
    return 1
  fi
}

case "$MODE" in
  test) install; run_tests ;;
  run) install; run_notebooks ;;
  *) echo "usage: bash run_all.sh [test]" >&2; exit 2 ;;
esac
