#!/usr/bin/env bash
# bash run_all.sh          install what is missing, run every notebook with papermill into results/<device>/
# bash run_all.sh test     install what is missing, run the whole test suite (unit, compile checks, nbval, ledger),
#                          then the engines' and trainers' tests against the transformers versions of TRANSFORMERS_MATRIX,
#                          then every notebook's install cell and imports in a fresh Colab-like environment
# bash run_all.sh run 00 03   only the notebooks whose names start with these numbers
# PROFILE=auto|cpu|gpu|t4|kaggle-2xt4 is passed to every notebook (default auto).
# T4LIB_NO_INSTALL=1 skips pip (an offline machine whose packages are already provisioned), and with it the
# transformers matrix and the Colab-like environment.
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

# transformers versions the engines' and trainers' CPU tests also run against (beside the installed newest):
# the floor pyproject.toml declares, and the one Colab's runtime shipped in mid-2026.
TRANSFORMERS_MATRIX=${TRANSFORMERS_MATRIX-"5.0.0 5.12.0"}
VERSION_TESTS=(tests/test_serving.py tests/test_speculative.py tests/test_ragged_batches.py
               tests/test_untrusted_inputs.py tests/test_train_sft.py tests/test_train_grpo.py tests/test_sft_cli.py
               tests/test_models.py)
# transformers 5.0's StaticLayer writes K/V at the position passed in (no cumulative_length counter; later
# releases keep one), so this negative control (a warm-up that does not restore the counters shifts the
# logits) has nothing to detect there.
COUNTERLESS_CACHE_DESELECT=(--deselect "tests/test_serving.py::test_warm_up_leaves_the_cache_where_it_was[False]")

# A matrix environment sees every package of the environment running this script (its site directories, .pth
# files included, after its own, so the transformers it installs wins). --system-site-packages would not do:
# made from a virtual environment's python, it shows the base interpreter's packages, not the environment's.
see_outer_packages() {
  local dirs purelib
  dirs=$("$PY" -c 'import site; print("; ".join(f"site.addsitedir({p!r})" for p in site.getsitepackages()))')
  purelib=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; $dirs" > "$purelib/t4lib_outer_environment.pth"
}

# Newer transformers releases require the hub's `kernels` package; an older release imports whatever `kernels` is
# installed and breaks at import on one newer than it declares. In a matrix environment, where the newest
# transformers' `kernels` shows through, install the range the older release declares (its optional extra).
matching_kernels() {
  local req
  req=$("$1" -c '
from importlib.metadata import PackageNotFoundError, requires, version
try:
    version("kernels")
except PackageNotFoundError:
    raise SystemExit
print(next((r.split(";")[0].strip() for r in requires("transformers") or [] if r.split()[0].startswith("kernels")), ""))')
  [ -z "$req" ] || "$1" -m pip install -q "$req"
}

run_version_matrix() {
  local rc=0 v venv
  for v in $TRANSFORMERS_MATRIX; do
    local deselect=()
    [ "$v" = 5.0.0 ] && deselect=("${COUNTERLESS_CACHE_DESELECT[@]}")
    venv=$(mktemp -d)/venv
    echo "== engines and trainers against transformers $v"
    "$PY" -m venv "$venv" && see_outer_packages "$venv/bin/python" \
      && "$venv/bin/python" -m pip install -q "transformers==$v" && matching_kernels "$venv/bin/python" \
      && "$venv/bin/python" -m pytest -q -p no:cacheprovider "${VERSION_TESTS[@]}" "${deselect[@]}" \
      || rc=1
    rm -rf "$(dirname "$venv")"
  done
  return $rc
}

# A fresh Colab-like environment (no system site packages, nothing of the project) runs each notebook's install
# cell, from this checkout instead of the repository URL, and then the notebook's imports
# (tests/colab_env_check.py says how). It holds Colab's transformers 5.12.0 and torch 2.13.0, standing in for the
# runtime's torch 2.11 (here and in CI pip takes a CPU build from a local file), and, of the rest of what a Colab
# runtime already has, only what the notebooks rely on without asking their install cell: numpy, matplotlib,
# IPython (ipykernel) and tqdm.
colab_env_check() {
  local rc=0 venv
  venv=$(mktemp -d)/venv
  echo "== install cells and imports in a fresh Colab-like environment (transformers 5.12.0)"
  "$PY" -m venv "$venv" \
    && "$venv/bin/python" -m pip install -q torch==2.13.0 transformers==5.12.0 numpy matplotlib ipykernel tqdm \
    && "$PY" tests/colab_env_check.py "$venv/bin/python" \
    || rc=1
  rm -rf "$(dirname "$venv")"
  return $rc
}

run_tests() {
  local rc=0
  "$PY" -m pytest -q -p no:cacheprovider tests || rc=$?
  "$PY" -m pytest -q -p no:cacheprovider --nbval notebooks/[0-9][0-9]_*.ipynb \
      --nbval-sanitize-with notebooks/sanitize.cfg || rc=$((rc ? rc : $?))
  if [ "${T4LIB_NO_INSTALL:-0}" != 1 ]; then   # both install packages: not offline
    run_version_matrix || rc=$((rc ? rc : 1))
    colab_env_check || rc=$((rc ? rc : 1))
  fi
  return $rc
}

run_notebooks() {
  local slug out dest
  slug=$("$PY" -c "from t4lib.core import hw; print(hw.device_slug())")
  out=results/$slug
  mkdir -p "$out"
  local failed=()
  for nb in notebooks/[0-9][0-9]_*.ipynb; do
    if [ ${#ONLY[@]} -gt 0 ] && ! printf '%s\n' "${ONLY[@]}" | grep -qx "$(basename "$nb" | cut -c1-2)"; then
      continue
    fi
    echo "== $nb (PROFILE=$PROFILE)"
    # Executed beside the previous copy and moved over it only on success: a failed run keeps the last
    # good notebook (its own output stays in NN_*.partial.ipynb to read why). A good run is stamped first with
    # what it ran at (metadata "t4lib": commit, dirty, sources hash, profile, device), taken before it started.
    dest="$out/$(basename "$nb")"
    partial="${dest%.ipynb}.partial.ipynb"   # papermill wants the .ipynb suffix
    prov=$("$PY" -m t4lib.core.notebook provenance "$PROFILE" "$nb")
    if papermill --log-level WARNING --cwd notebooks -k python3 -p PROFILE "$PROFILE" \
         "$nb" "$partial" \
       && "$PY" -m t4lib.core.notebook stamp "$partial" "$prov"; then
      mv -f "$partial" "$dest"
    else
      failed+=("$nb (its failed run: $partial)")
    fi
  done
  "$PY" -m t4lib report --out results/README.md >/dev/null
  echo
  echo "Executed notebooks and metrics: $out/   (figure table: results/README.md)"
  # awk reads to the end (head would close the pipe on the report and break it mid-print)
  "$PY" -m t4lib report | grep -F "| $slug/" | awk 'NR <= 50' || true
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
