#!/usr/bin/env bash
# bash run_all.sh          install what is missing, run every notebook with papermill into results/<device>/
# bash run_all.sh test     install what is missing, run the whole test suite (unit, compile checks, nbval, ledger),
#                          then the engines' and trainers' tests against the transformers versions of TRANSFORMERS_MATRIX,
#                          then every notebook's install cell and imports in a fresh Colab-like environment
# bash run_all.sh run 00 03   only the notebooks whose names start with these numbers
# PROFILE=auto|cpu|gpu|t4|kaggle-2xt4 is passed to every notebook (default auto).
# T4LIB_NO_INSTALL=1 skips pip (an offline machine whose packages are already provisioned), and with it the
# transformers matrix, the Colab-like environment, the wheel's README example and the Kaggle loop.
# torch is never installed behind your back: without one, the script stops and says how to get the build for
# your machine, or installs T4LIB_TORCH (a pip requirement, e.g. T4LIB_TORCH=torch==2.13.0) from your pip index.
# Notebooks run on a project-local Jupyter kernel, "t4lib" (build/jupyter), not on your default python3 kernel.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
MODE=${1:-run}
shift || true
ONLY=("$@")
PROFILE=${PROFILE:-auto}

# The project's own Jupyter kernel (this python), found through JUPYTER_PATH; the user's kernels stay as they are.
KERNEL=t4lib
KERNEL_DIR=$PWD/build/jupyter
export JUPYTER_PATH="$KERNEL_DIR/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"

install() {
  if [ "${T4LIB_NO_INSTALL:-0}" != 1 ]; then
    # Keep an existing torch (Colab's, Kaggle's, yours); never fetch one unasked: a plain `pip install torch`
    # takes a multi-GB CUDA build on most machines.
    if ! "$PY" -c "import torch" 2>/dev/null; then
      if [ -z "${T4LIB_TORCH:-}" ]; then
        echo "run_all.sh: torch is not installed for $PY. Install the build for your machine first" >&2
        echo "  (https://pytorch.org/get-started/locally/; CPU only: pip install torch --index-url" >&2
        echo "  https://download.pytorch.org/whl/cpu), or set T4LIB_TORCH to a pip requirement to install" >&2
        echo "  from your configured index (T4LIB_TORCH=torch==2.13.0 bash run_all.sh ...)." >&2
        exit 1
      fi
      echo "run_all.sh: installing $T4LIB_TORCH (T4LIB_TORCH) from your pip index"
      "$PY" -m pip install -q "$T4LIB_TORCH"
    fi
    "$PY" -m pip install -q -e ".[notebooks,train,gguf,corpus,dev]"
  fi
  "$PY" -m ipykernel install --prefix "$KERNEL_DIR" --name "$KERNEL" --display-name "t4lib ($PY)" >/dev/null
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

# The train extra's lower bounds as exact pins, from the installed t4lib's metadata (pyproject.toml, reinstalled by
# install()): trl>=A -> trl==A, and so on for every package it bounds from below, transformers aside (the matrix
# entry sets it). The floor entry of the matrix installs them, so CI proves the floors pyproject.toml declares.
train_floor_pins() {
  "$PY" -c '
from importlib.metadata import requires
from packaging.requirements import Requirement
for q in map(Requirement, requires("t4lib")):
    low = [s.version for s in q.specifier if s.operator == ">="]
    if q.marker and q.marker.evaluate({"extra": "train"}) and low and q.name != "transformers":
        print(f"{q.name}=={low[0]}")'
}

run_version_matrix() {
  local rc=0 v venv
  for v in $TRANSFORMERS_MATRIX; do
    local deselect=() floors=()
    # the floor entry: transformers' floor with the train extra's floors; later entries keep the newest of the rest
    [ "$v" = 5.0.0 ] && deselect=("${COUNTERLESS_CACHE_DESELECT[@]}") && floors=($(train_floor_pins))
    venv=$(mktemp -d)/venv
    echo "== engines and trainers against transformers $v${floors[*]:+ with ${floors[*]}}"
    "$PY" -m venv "$venv" && see_outer_packages "$venv/bin/python" \
      && "$venv/bin/python" -m pip install -q "transformers==$v" "${floors[@]}" && matching_kernels "$venv/bin/python" \
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

# The README's pip line and example as a new user meets them: the built wheel (not editable) with the extra the
# README names, in a fresh virtual environment holding torch, and the example verbatim from an empty folder:
# it must print an EOS-terminated answer and stop within 60 s (tests/readme_example_check.py).
wheel_example_check() {
  local rc=0 tmp extra
  tmp=$(mktemp -d)
  echo "== the README's example from the built wheel in a fresh virtual environment"
  extra=$(sed -n 's/.*pip install "t4lib\(\[[a-z,]*\]\)\{0,1\} @ .*/\1/p' README.md | head -1)
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/wheels" . \
    && "$PY" -m venv "$tmp/venv" \
    && "$tmp/venv/bin/python" -m pip install -q torch==2.13.0 \
    && "$tmp/venv/bin/python" -m pip install -q "$(ls "$tmp"/wheels/t4lib-*.whl)$extra" \
    && "$PY" tests/readme_example_check.py "$tmp/venv/bin/python" \
    || rc=1
  rm -rf "$tmp"
  return $rc
}

# The README's Kaggle loop: notebooks 00, 03 and 05 run by papermill one after another in one working folder, each
# first cell installing what it imports from a copy of this checkout (T4LIB_GIT; KAGGLE_KERNEL_RUN_TYPE tells the
# cell it is on Kaggle), in a fresh environment holding what the Kaggle image has that the cells rely on (torch,
# transformers, papermill, ipykernel, numpy, matplotlib, pandas), with the cpu profile.
kaggle_loop_check() {
  local rc=0 tmp nb
  tmp=$(mktemp -d)
  echo "== the README's Kaggle loop (00, 03, 05 in one folder, PROFILE=cpu) in a fresh environment"
  git ls-files -z -co --exclude-standard | (mkdir -p "$tmp/src" && xargs -0 cp -P --parents -t "$tmp/src") \
    && "$PY" -m venv "$tmp/venv" \
    && "$tmp/venv/bin/python" -m pip install -q torch==2.13.0 transformers==5.12.0 papermill ipykernel numpy \
         matplotlib pandas tqdm \
    && "$tmp/venv/bin/python" -m ipykernel install --prefix "$tmp/venv" --name kaggle >/dev/null \
    && mkdir -p "$tmp/working" || rc=1
  for nb in 00_environment 03_w4a16_serving 05_grpo_cp_hybrid; do
    [ $rc = 0 ] || break
    (cd "$tmp/working" && env -u T4LIB_WHEELS -u PYTHONPATH JUPYTER_PATH= KAGGLE_KERNEL_RUN_TYPE=Batch \
       T4LIB_GIT="$tmp/src" "$tmp/venv/bin/papermill" --log-level WARNING -k kaggle -p PROFILE cpu \
       "$tmp/src/notebooks/$nb.ipynb" "$tmp/working/$nb.ipynb") && echo "ok   $nb" || { echo "FAIL $nb"; rc=1; }
  done
  rm -rf "$tmp"
  return $rc
}

run_tests() {
  local rc=0
  "$PY" -m pytest -q -p no:cacheprovider tests || rc=$?
  "$PY" -m pytest -q -p no:cacheprovider --nbval notebooks/[0-9][0-9]_*.ipynb --nbval-kernel-name "$KERNEL" \
      --nbval-sanitize-with notebooks/sanitize.cfg || rc=$((rc ? rc : $?))
  if [ "${T4LIB_NO_INSTALL:-0}" != 1 ]; then   # all of these install packages: not offline
    run_version_matrix || rc=$((rc ? rc : 1))
    colab_env_check || rc=$((rc ? rc : 1))
    wheel_example_check || rc=$((rc ? rc : 1))
    kaggle_loop_check || rc=$((rc ? rc : 1))
  fi
  return $rc
}

# Every number asked for names a notebook: `run 99` stops before anything runs.
check_only() {
  local n
  for n in "${ONLY[@]}"; do
    if ! compgen -G "notebooks/${n}_*.ipynb" >/dev/null; then
      echo "run_all.sh: no notebook numbered '$n' (notebooks: $(cd notebooks && ls [0-9][0-9]_*.ipynb | cut -c1-2 | tr '\n' ' '))" >&2
      exit 2
    fi
  done
}

run_notebooks() {
  local slug out dest marker
  # a profile no notebook can run is refused here, once, before any notebook starts
  PROFILE="$PROFILE" "$PY" -c "import os; from t4lib.core.notebook import resolve_profile; resolve_profile(os.environ.get('PROFILE', 'auto'))" \
    || { echo "PROFILE=$PROFILE: no notebook was run" >&2; return 2; }
  slug=$("$PY" -c "from t4lib.core import hw; print(hw.device_slug())")
  out=results/$slug
  mkdir -p "$out"
  marker=$(mktemp)   # what this run writes is newer than this file
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
    if papermill --log-level WARNING --cwd notebooks -k "$KERNEL" -p PROFILE "$PROFILE" \
         "$nb" "$partial" \
       && "$PY" -m t4lib.core.notebook stamp "$partial" "$prov"; then
      mv -f "$partial" "$dest"
    else
      failed+=("$nb (its failed run: $partial)")
    fi
  done
  "$PY" -m t4lib report --out results/README.md >/dev/null
  echo
  echo "This run wrote (figure table of every record: results/README.md):"
  "$PY" - "$marker" results <<'PYEOF' || true
import sys
from pathlib import Path
from t4lib.core import results
marker, root = Path(sys.argv[1]), Path(sys.argv[2])
new = sorted(p for p in root.rglob("*") if p.is_file() and p.stat().st_mtime > marker.stat().st_mtime
             and "verification" not in p.parts and p.name != "README.md")
for p in (p for p in new if p.suffix == ".ipynb"):
    print(f"  executed notebook  {p}")
for p in (p for p in new if p.suffix not in (".ipynb", ".json")):
    print(f"  file               {p}")
for p in (p for p in new if p.suffix == ".json"):
    try:
        figs = results.figures_by_name(p)
    except (ValueError, KeyError) as e:
        print(f"  {p}: not a results file ({e})")
        continue
    print(f"  {p}: {len(figs)} figures")
    for name, f in figs.items():
        v = f.get("value")
        v = f"{v:.4g}" if isinstance(v, float) else v
        print(f"    {name} = {v} {f.get('unit', '')} ({f.get('tag', '')})")
if not new:
    print("  nothing")
PYEOF
  rm -f "$marker"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED notebooks: ${failed[*]}" >&2
    return 1
  fi
}

case "$MODE" in
  test) install; run_tests ;;
  run) check_only; install; run_notebooks ;;
  *) echo "usage: bash run_all.sh [run [NN ...] | test]" >&2; exit 2 ;;
esac
