"""The dress rehearsal: every notebook's ``t4`` profile (and ``kaggle-2xt4`` where a notebook has it) run end
to end by papermill on the GPU at hand, under a T4's limits.

    python -m t4lib rehearse                  # all notebooks, t4 and kaggle-2xt4
    python -m t4lib rehearse 05 06 --timeout 900 --profiles t4
    python -m t4lib rehearse 08 03 05:kaggle-2xt4 --concurrent 3   # three at a time, longest first
    python -m t4lib rehearse --dry-run        # the plan: runs, hub stand-ins, generation lengths, environment

What holds each run to a T4:

* **memory**: the kernel process's CUDA allocator may reserve at most 15 GiB (a T4's usable memory) through
  ``torch.cuda.set_per_process_memory_fraction``, applied by an IPython startup file
  (:mod:`t4lib.evidence.rehearsal_startup`) in an ``IPYTHONDIR`` made for the rehearsal, and so may every
  Python process the kernel starts that uses CUDA (notebook 08's contract workers, any worker pool),
  through a ``sitecustomize`` put first on the run's ``PYTHONPATH``
  (:mod:`t4lib.evidence.rehearsal_sitecustomize`); the notebooks and the library are not touched;
* **models**: every hub id a notebook names is served from a Hugging Face hub cache of random-weight
  stand-ins of the same configuration and vocabulary size (:mod:`t4lib.evidence.hub_standins`;
  ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE=1``), through the library's unchanged loading path;
* **generation lengths**: see :data:`GENERATION`: every generation in the t4 profiles either decodes a
  fixed number of tokens or runs a trained project model, so none is capped and random weights cost what
  the real model costs.

Per run it records (``results/<device>/rehearsal.json``, through :func:`t4lib.core.results.write`): the wall
seconds on this GPU, torch's peak reserved memory, the largest of the kernel's and each CUDA subprocess's
(NVML's device peak beside it, all processes together), a T4 time projection (ESTIMATED,
:func:`t4_projection_s`) and the cell that failed, if one did. The executed copy goes to
``results/<device>/rehearsal/<notebook>.ipynb`` (``<notebook>.failed.ipynb`` for a run that failed: the last
good copy stays). A failed notebook does not stop the others; the command exits 1 if any failed. No learning
figure is read from a rehearsal: its models are random.

``--concurrent N`` runs up to N notebooks at once on the one GPU. Each kernel's memory cap and peak are its
own, so memory and failures are read as in a solo run; wall time and busy time grow with the sharing, so the
seconds and the T4 projection become upper bounds of a solo run, and are recorded as such.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from t4lib.core import hw, notebook, results
from t4lib.evidence import hub_standins

NOTEBOOKS = results.REPO_ROOT / "notebooks"
PROFILES = ("t4", "kaggle-2xt4")
T4_MEMORY_GIB = 15.0          # what a T4 leaves a process: 16 GB of GDDR6, ECC and the driver's share taken out
T4_MINUTES_TARGET = 20       # a t4 profile projected longer says so up front and how to run it shorter
DEFAULT_TIMEOUT_S = 1800      # per run: Colab's free tier disconnects an idle session after about 30 minutes
DEFAULT_HUB_CACHE = Path(tempfile.gettempdir()) / "t4lib_rehearsal_hub"
STARTUP_FILE = Path(__file__).with_name("rehearsal_startup.py")
SITECUSTOMIZE_FILE = Path(__file__).with_name("rehearsal_sitecustomize.py")
SOURCE = "t4lib/evidence/rehearse.py"

# Each notebook's generation lengths in its t4 profile, and why the rehearsal leaves them as they are. A cap
# is needed only where a random-weight stand-in generates and generation stops at an end-of-text token the
# model chooses to write; in the t4 profiles the stand-in (06's Qwen2.5-Math-1.5B) decodes fixed lengths.
GENERATION = {
    "00": "none",
    "01": "none",
    "02": "none",
    "03": "NEW_TOKENS=32 (parameter) on tiny-cpu, trained weights; the benchmarks decode fixed lengths: unchanged",
    "04": "MAX_NEW=64, MAX_NEW_LONG=256 (parameters) on small-gpu, trained weights that stop at end-of-text; "
          "the benchmark's Qwen2.5 shapes decode fixed lengths: unchanged",
    "05": "CFG max_completion_length=48 on tiny-gpu, trained weights: unchanged",
    "06": "sft.evaluate_sets: 176 new tokens (tags) and 48 (plain) for every row, no end-of-text stop, so the "
          "random-weight stand-in decodes what the real model would: unchanged",
    "07": "fixed lengths (Qwen35Engine max_len=40, the benchmark's decode steps): unchanged",
    "08": "none (forward passes of fixed shapes)",
}


def figure_key(stem: str, profile: str) -> str:
    """The figures' prefix of a run: ``rehearsal/<notebook>`` (t4) or ``rehearsal/<notebook>/<profile>``."""
    return f"rehearsal/{stem}" + ("" if profile == "t4" else f"/{profile}")


@dataclass
class Run:
    """One papermill execution: a notebook under one profile."""
    notebook: Path
    profile: str
    parameters: dict
    hub_ids: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return figure_key(self.notebook.stem, self.profile)

    @property
    def copy_name(self) -> str:
        return self.notebook.stem + ("" if self.profile == "t4" else f".{self.profile}")


# ------------------------------------------------------------------------------------------ the plan

def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def notebook_run(value: str) -> str:
    """argparse type: ``NN`` (a notebook under every profile of ``--profiles`` it offers) or ``NN:PROFILE``
    (under that one profile only)."""
    num, _, prof = value.partition(":")
    num = notebook_number(num)
    if not prof:
        return num
    if prof not in PROFILES:
        raise argparse.ArgumentTypeError(f"profile of {value!r} must be one of {PROFILES}")
    return f"{num}:{prof}"


def notebook_number(value: str) -> str:
    """argparse type: a notebook's two-digit number (``6`` reads as ``06``)."""
    known = [p.name[:2] for p in notebooks()]
    num = value.zfill(2) if value.isdigit() else value
    if num not in known:
        raise argparse.ArgumentTypeError(f"no notebook numbered {value!r}; known: {' '.join(known)}")
    return num


def _positive(value: str, what: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number{what}, got {value!r}")
    return n


def positive_seconds(value: str) -> int:
    """argparse type: a whole number of seconds above zero."""
    return _positive(value, " of seconds")


def positive_count(value: str) -> int:
    """argparse type: a whole number above zero."""
    return _positive(value, "")


def parameter(value: str) -> tuple[str, str, object]:
    """argparse type: ``NN:NAME=VALUE`` (VALUE read as JSON, else as a string), a parameter for one notebook."""
    m = re.fullmatch(r"(\d\d):([A-Za-z_]\w*)=(.*)", value)
    if not m:
        raise argparse.ArgumentTypeError(f"must read NN:NAME=VALUE (e.g. 05:STEPS=10), got {value!r}")
    num, name, raw = m.groups()
    notebook_number(num)
    try:
        return num, name, json.loads(raw)
    except ValueError:
        return num, name, raw


def profiles_of(path: Path) -> list[str]:
    """The rehearsal profiles a notebook offers: t4 always; kaggle-2xt4 where its parameters cell names it."""
    nb = json.loads(path.read_text())
    params = next(("".join(c["source"]) for c in nb["cells"]
                   if "parameters" in c.get("metadata", {}).get("tags", [])), "")
    return ["t4"] + (["kaggle-2xt4"] if "kaggle-2xt4" in params else [])


def plan(numbers=None, profiles=PROFILES, params=()) -> list[Run]:
    """The runs, in the order ``numbers`` names them (all, in notebook order, without it): each chosen
    notebook (``NN``) under each of ``profiles`` it offers, or (``NN:PROFILE``) under that one, with the
    ``(NN, NAME, value)`` parameters of ``params`` beside ``PROFILE`` (a scaled-down run says so in its record)."""
    by_number = {nb.name[:2]: nb for nb in notebooks()}
    runs = {}
    for item in (dict.fromkeys(numbers) if numbers else by_number):
        num, _, only = item.partition(":")
        nb = by_number[num]
        extra = {name: v for n, name, v in params if n == num}
        for prof in profiles_of(nb):
            if (prof == only) if only else (prof in profiles):
                runs.setdefault((num, prof), Run(nb, prof, {"PROFILE": prof, **extra}, hub_standins.hub_ids(nb)))
    return list(runs.values())


def environment(hub_cache: Path, ipython_dir: Path, peak_file: Path | None, profile: str,
                site_dir: Path | None = None) -> dict[str, str]:
    """The variables a run's papermill (and so its kernel and the kernel's subprocesses) gets, beside the
    rehearsal's own environment. ``site_dir`` (holding the rehearsal's ``sitecustomize.py``) goes first on
    ``PYTHONPATH``."""
    env = {"IPYTHONDIR": str(ipython_dir), "T4LIB_REHEARSE_MEM_GIB": f"{T4_MEMORY_GIB:g}",
           "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if peak_file is not None:
        env["T4LIB_REHEARSE_PEAK_FILE"] = str(peak_file)
    if profile == "kaggle-2xt4":
        env["T4LIB_REHEARSE_KAGGLE_ON_ONE_GPU"] = "1"
    if site_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def install_startup(ipython_dir: Path) -> Path:
    """Copy the startup file into ``<ipython_dir>/profile_default/startup/``; returns its path there."""
    dest = ipython_dir / "profile_default" / "startup" / "00-t4lib-rehearsal.py"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STARTUP_FILE, dest)
    return dest


def install_sitecustomize(site_dir: Path) -> Path:
    """Copy the subprocesses' hook into ``<site_dir>/sitecustomize.py``; returns its path there."""
    dest = site_dir / "sitecustomize.py"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SITECUSTOMIZE_FILE, dest)
    return dest


def _process_peak_files(peak_file: Path) -> list[Path]:
    """``<peak_file>.proc-<pid>.json``: what each CUDA subprocess of the run wrote at exit."""
    return sorted(peak_file.parent.glob(f"{peak_file.name}.proc-*.json"))


def process_peaks(peak_file: Path) -> list[dict]:
    """The peaks the run's CUDA subprocesses wrote at exit, by pid (an unreadable file is left out)."""
    found = (_read_json(p) for p in _process_peak_files(peak_file))
    return sorted((p for p in found if p), key=lambda p: p["pid"])


def describe(runs: list[Run], hub_cache: Path, out: Path, timeout: int) -> str:
    """The plan as text (``--dry-run``)."""
    specs = hub_standins.configs()
    lines = [f"dress rehearsal: {len(runs)} runs, at most {timeout} s each, records -> {out / 'rehearsal.json'}",
             f"memory: the kernel's CUDA allocator, and that of every process it starts that uses CUDA, reserves at "
             f"most {T4_MEMORY_GIB:g} GiB (set_per_process_memory_fraction; IPython startup file "
             f"{STARTUP_FILE.name}, and {SITECUSTOMIZE_FILE.name} as the run's sitecustomize)", "", "runs:"]
    for r in runs:
        lines.append(f"  {r.notebook.name:34s} {r.profile:12s} parameters {json.dumps(r.parameters)}"
                     + (f"  hub ids: {', '.join(r.hub_ids)}" if r.hub_ids else ""))
    lines += ["", f"hub stand-ins (random weights, HF_HUB_CACHE={hub_cache}, HF_HUB_OFFLINE=1):"]
    for i in sorted({i for r in runs for i in r.hub_ids}):
        c = specs.get(i, {}).get("config")
        lines.append(f"  {i} -> " + (f"{hub_standins.snapshot_dir(hub_cache, i, specs[i])}  (hidden {c['hidden_size']}, "
                                     f"layers {c['num_hidden_layers']}, heads {c['num_attention_heads']}/"
                                     f"{c['num_key_value_heads']}, vocab {c['vocab_size']}, tokenizer "
                                     f"{specs[i]['tokenizer_size']})" if c else "NO COMMITTED CONFIGURATION"))
    lines += ["", "generation lengths:"]
    lines += [f"  {r.notebook.name[:2]}: {GENERATION.get(r.notebook.name[:2], 'not reviewed')}"
              for r in runs if r.profile == "t4"]
    env = environment(hub_cache, Path("<rehearsal>/ipython"), Path("<rehearsal>/<run>.peak.json"), "t4",
                      Path("<rehearsal>/site"))
    lines += ["", "environment of each run:"] + [f"  {k}={v}" for k, v in env.items()]
    lines.append("  T4LIB_REHEARSE_KAGGLE_ON_ONE_GPU=1 (kaggle-2xt4 runs: the profile's two-GPU check passes on one "
                 "GPU; the work was on cuda:0 anyway)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ one run

class GpuSampler:
    """Device memory in use and the GPU's busy fraction, sampled through NVML every ``interval`` s in a
    thread. Device-wide (any process's memory counts), so it sees what torch in the kernel cannot: the CUDA
    context and subprocesses. Without NVML it records nothing (``peak_bytes`` and ``busy`` stay None)."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak_bytes, self.busy = interval, None, None
        self._stop, self._thread, self._util = threading.Event(), None, []

    def __enter__(self):
        try:
            import pynvml  # optional dependency: nvidia-ml-py
            pynvml.nvmlInit()
            self._nvml, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
            self._base = self._nvml.nvmlDeviceGetMemoryInfo(self._h).used  # what was in use before the run
        except Exception:
            return self
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            try:
                self.peak_bytes = max(self.peak_bytes, self._nvml.nvmlDeviceGetMemoryInfo(self._h).used - self._base)
                self._util.append(self._nvml.nvmlDeviceGetUtilizationRates(self._h).gpu / 100)
            except Exception:
                pass

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join()
            self.busy = sum(self._util) / len(self._util) if self._util else None


def papermill(run: Run, dest: Path, env: dict[str, str], timeout: int, log: Path) -> dict:
    """Execute ``run`` with papermill's command line into ``dest``; ``{"rc", "timed_out"}``. A run past
    ``timeout`` is stopped with its kernel (papermill starts the kernel in a session of its own)."""
    cmd = [sys.executable, "-m", "papermill", "--log-level", "WARNING", "--cwd", str(NOTEBOOKS), "-k", "python3",
           "-y", json.dumps(run.parameters), str(run.notebook), str(dest)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return {"rc": proc.wait(timeout=timeout), "timed_out": False}
        except subprocess.TimeoutExpired:
            _stop_tree(proc)
            return {"rc": proc.wait(), "timed_out": True}


def _stop_tree(proc: subprocess.Popen) -> None:
    """SIGKILL papermill, its process group and its kernel (found through psutil where it is installed;
    otherwise the kernel sees its parent gone and exits by itself, ipykernel's parent poller)."""
    kids = []
    try:
        import psutil  # optional: finds the kernel, which runs in its own session
        kids = psutil.Process(proc.pid).children(recursive=True)
    except Exception:
        pass
    for k in kids:
        try:
            k.kill()
        except Exception:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def failed_cell(executed: Path) -> dict | None:
    """The cell papermill marked failed (or left running when the run was stopped) in an executed copy:
    its index among the source notebook's cells, execution count, first source line and error; None if
    every cell completed. Papermill's injected-parameters cell and error banner are not counted."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, ValueError):
        return None
    index = 0
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags or "papermill-error-cell-tag" in tags:
            continue
        pm = cell.get("metadata", {}).get("papermill", {})
        if pm.get("exception") or pm.get("status") in ("failed", "running"):
            err = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
            return {"cell": index, "execution_count": cell.get("execution_count"),
                    "source": "".join(cell.get("source", "")).strip().splitlines()[:1],
                    "error": f"{err['ename']}: {err['evalue']}"[:500] if err else
                             ("stopped at the time limit" if pm.get("status") == "running" else "failed")}
        index += 1
    return None


def _files(root: Path, skip: tuple[Path, ...]) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not any(p == s or s in p.parents for s in skip)}


@contextlib.contextmanager
def records_kept(root: Path, moved_to: Path, skip: tuple[Path, ...]):
    """Run the block, then put every file under ``root`` (but ``skip``) back as it was before it, moving what
    the block wrote or changed to ``moved_to``. A notebook's t4 profile measures and writes results files of
    the device it runs on: on a GPU that is not a T4 those are the committed records a later cell (or
    notebook) reads, which a rehearsal must not replace."""
    before = _files(root, skip)
    try:
        yield
    finally:
        for p, data in _files(root, skip).items():
            if before.get(p) != data:
                dest = moved_to / p.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(p, dest)
        for p, data in before.items():
            if not p.exists():
                results.atomic_write_bytes(p, data)


def execute(run: Run, out: Path, env: dict[str, str], timeout: int, peak_file: Path, runner=papermill,
            keep_records: bool = True) -> dict:
    """Run one notebook, put its executed copy in place and return its record (``status``, ``seconds``,
    ``peak``, ``busy``, ``failed_cell``, ...). ``runner`` is :func:`papermill` (tests pass another).
    ``keep_records`` False: the caller puts the results files back (runs sharing the GPU share one guard)."""
    copies, partial = out / "rehearsal", out / "rehearsal" / f"{run.copy_name}.partial.ipynb"   # as run_all.sh names it
    copies.mkdir(parents=True, exist_ok=True)
    for stale in (peak_file, *_process_peak_files(peak_file)):
        stale.unlink(missing_ok=True)
    log = out / "logs" / f"rehearsal_{run.copy_name}.log"
    written = copies / f"{run.copy_name}.results"  # the results files the run wrote, kept apart
    before = notebook.run_provenance(run.profile, run.notebook)  # the executed copy is stamped with it, as run_all.sh does
    t0 = time.perf_counter()
    guard = records_kept(results.results_dir(), written, _own_files(out)) if keep_records else contextlib.nullcontext()
    with guard, GpuSampler() as gpu:
        res = runner(run, partial, env, timeout, log)
    seconds = time.perf_counter() - t0
    bad = failed_cell(partial)
    ok = res["rc"] == 0 and not res["timed_out"] and bad is None
    dest = copies / f"{run.copy_name}{'' if ok else '.failed'}.ipynb"
    if partial.exists():
        os.replace(partial, dest)
        if ok:
            notebook.stamp(dest, before)
    rec = {"notebook": run.notebook.name, "profile": run.profile, "parameters": run.parameters,
           "hub_ids": run.hub_ids, "status": "completed" if ok else ("timed out" if res["timed_out"] else "failed"),
           "seconds": round(seconds, 1), "timeout_s": timeout, "rc": res["rc"], "failed_cell": bad,
           "executed_copy": str(dest.relative_to(out)) if dest.exists() else None,
           "log": str(log.relative_to(out)), "gpu_busy_fraction": gpu.busy,
           "results_written": str(written.relative_to(out)) if written.exists() else None,
           "device_peak_bytes": gpu.peak_bytes, "torch_peak": _read_json(peak_file),
           "process_peaks": process_peaks(peak_file)}
    if not ok and bad is None:
        rec["log_tail"] = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    return rec


def _own_files(out: Path) -> tuple[Path, ...]:
    """What the rehearsal itself writes under the results folder (never put back)."""
    return out / "rehearsal", out / "logs", out / "rehearsal.json"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------ the records

def t4_projection_s(seconds: float, busy: float | None, copy_bw: float) -> float:
    """ESTIMATED T4 seconds for a run of ``seconds`` on a GPU with copy bandwidth ``copy_bw`` (bytes/s): the
    GPU-busy share scaled by ``copy_bw`` / the T4's sustained 260 GB/s (memory-bound scaling), the rest (CPU,
    Python, kernel builds, loading) unscaled. ``busy`` None (no NVML reading) counts the whole run as busy."""
    busy = 1.0 if busy is None else busy
    return seconds * (1 - busy) + seconds * busy * copy_bw / hw.T4.sustained_bw


def peak_figure(key: str, where: str, kernel: dict | None, procs: list[dict] | None, device_peak: int | None,
                extra: dict) -> dict:
    """``<key>/peak_gib``: torch's peak reserved memory, the largest of the kernel's and that of each CUDA
    subprocess the kernel started (``procs``; None for a record made before subprocesses were followed)."""
    gib = 2**30
    worst = max([kernel or {"max_reserved": 0, "max_allocated": 0}, *(procs or [])], key=lambda p: p["max_reserved"])
    note = (f"torch's peak reserved memory in {where}, the largest of the kernel process's "
            f"({(kernel or {}).get('max_reserved', 0) / gib:.2f} GiB)")
    if procs is None:
        note += " alone (subprocesses were not followed when this was recorded)"
    else:
        note += f" and each of the {len(procs)} CUDA subprocesses it started that reported at exit"
        if procs:
            big = max(procs, key=lambda p: p["max_reserved"])
            note += f" (largest {big['max_reserved'] / gib:.2f} GiB: {' '.join(map(str, big['argv'][1:3]))})"
    note += (f"; each held to a {T4_MEMORY_GIB:g} GiB cap (set_per_process_memory_fraction); peak allocated "
             f"{worst['max_allocated'] / gib:.2f} GiB")
    if device_peak:
        note += f"; NVML device peak {device_peak / gib:.2f} GiB (all its processes and CUDA contexts together)"
    if worst["max_reserved"] == 0:
        note += "; nothing allocated on the GPU was seen: work done in a process not followed is not counted"
    return results.figure(f"{key}/peak_gib", worst["max_reserved"] / gib, "GiB", "MEASURED", SOURCE, note=note,
                          **extra)


def figures(rec: dict, key: str, copy_bw: float | None) -> list[dict]:
    """The run's figures: ``<key>/gpu_seconds`` and, where known, ``<key>/peak_gib`` and
    ``<key>/t4_projected_minutes``."""
    where = f"{rec['notebook']} ({rec['profile']}), {rec['status']}"
    extra = {"status": rec["status"], "parameters": rec["parameters"]}
    shared = rec.get("concurrent", 1) > 1
    caveat = (f"; up to {rec['concurrent']} notebooks ran at once on this GPU, so this is an upper bound of a solo "
              "run" if shared else "")
    if rec["status"] != "completed":   # stopped early: the time is where it stopped, not how long the run takes
        caveat += f"; the run {rec['status']} before its end, so this is not its full length"
    figs = [results.figure(f"{key}/gpu_seconds", rec["seconds"], "s", "MEASURED", SOURCE,
                           note=f"papermill wall time of {where}, kernel start and kernel builds included{caveat}",
                           **extra)]
    peak, procs = rec["torch_peak"], rec.get("process_peaks")
    if peak or procs:
        figs.append(peak_figure(key, where, peak, procs, None if shared else rec["device_peak_bytes"], extra))
    if copy_bw:
        busy = rec["gpu_busy_fraction"]
        figs.append(results.figure(
            f"{key}/t4_projected_minutes", t4_projection_s(rec["seconds"], busy, copy_bw) / 60, "min",
            "ESTIMATED", SOURCE,
            note=("GPU-busy time (" + (f"NVML utilization, {busy:.0%} of the wall time" if busy is not None
                                       else "no NVML reading: all of the wall time") +
                  f") scaled by this device's copy bandwidth ({copy_bw / 1e9:.0f} GB/s, measured) over the T4's "
                  f"sustained {hw.T4.sustained_bw / 1e9:.0f} GB/s (memory-bound scaling); CPU time unscaled, "
                  "on this host's CPU (Colab's is slower). Not measured on a T4" + caveat + "."), **extra))
    return figs


def write_records(path: Path, runs_done: dict[str, dict], figs: list[dict], copy_bw: float | None) -> Path:
    """``rehearsal.json``: this invocation's runs and figures merged over the file's earlier ones (a
    rehearsal of some notebooks keeps the others' records, their figures marked ``carried_over``)."""
    old = results.read_results(path) or {}
    runs_all = {**old.get("runs", {}), **runs_done}
    errors = [f"{k}: {r['status']}" + (f" at cell {r['failed_cell']['cell']}: {r['failed_cell']['error']}"
                                        if r["failed_cell"] else "")
              for k, r in runs_done.items() if r["status"] != "completed"]
    return results.write(path, figs, merge=True, runs=runs_all, errors=errors,
                         memory_cap_gib=T4_MEMORY_GIB, copy_bandwidth=copy_bw,
                         note="dress rehearsal: t4 profiles under a T4's memory with random-weight stand-ins of "
                              "hub models; no learning figure is read from it")


def copy_bandwidth() -> float | None:
    """This GPU's copy bandwidth (bytes/s), measured once before the runs; None without CUDA."""
    import torch  # only for a real run: planning (--dry-run) and the records import without torch

    if not torch.cuda.is_available():
        return None
    bw = hw.copy_bandwidth()
    torch.cuda.empty_cache()
    return bw


# ------------------------------------------------------------------------------------------ reading them back

RECORD_DEVICE = "nvidia-h200"  # the folder of results/ whose rehearsal.json the notebooks' time cells read


def estimate(name: str, profile: str = "t4", device: str = RECORD_DEVICE) -> dict:
    """What the rehearsal recorded for notebook ``name`` (``"02_thermal_pacing"``) in ``profile``: ``found``,
    ``status``, ``seconds`` (wall time on ``device``), ``t4_minutes`` (ESTIMATED; None where not projected),
    ``over_target`` (past :data:`T4_MINUTES_TARGET`), ``upper_bound`` and ``concurrent`` (the run shared the
    GPU, so both are upper bounds of a solo run), ``commit`` (the projection's provenance), ``longest_cell``
    (``seconds`` and the heading it is ``under`` in the executed copy, or None without one) and ``text``, a few
    lines saying all that, or one saying that nothing is recorded."""
    stem = Path(name).stem
    path = results.results_dir() / device / "rehearsal.json"
    try:
        shown = path.resolve().relative_to(results.REPO_ROOT).as_posix()
    except ValueError:
        shown = str(path)
    out = {"found": False, "status": None, "seconds": None, "t4_minutes": None, "over_target": False,
           "upper_bound": False, "concurrent": 1, "commit": None, "longest_cell": None, "path": shown}
    doc = results.read_results(path)
    rec = ((doc or {}).get("runs") or {}).get(f"{stem}/{profile}")
    if not isinstance(rec, dict):
        why = f"{shown} is missing or not a valid results file" if doc is None else f"no run of it in {shown}"
        return {**out, "text": f"no dress rehearsal recorded for {stem} (profile {profile}): {why}"}
    key = figure_key(stem, profile)
    figs = {f["name"]: f for f in doc["figures"]}
    proj, wall = figs.get(f"{key}/t4_projected_minutes"), figs.get(f"{key}/gpu_seconds")
    prov = ((proj or {}).get("carried_over") or {}).get("provenance") or doc.get("provenance") or {}
    concurrent = rec.get("concurrent") or 1
    out.update(found=True, status=rec.get("status"), seconds=rec.get("seconds"), concurrent=concurrent,
               upper_bound=concurrent > 1, commit=prov.get("commit"), t4_minutes=proj["value"] if proj else None)
    out["over_target"] = (out["t4_minutes"] or 0) > T4_MINUTES_TARGET
    out["longest_cell"] = _longest_cell(path.parent / rec["executed_copy"], stem) if rec.get("executed_copy") else None
    commit = out["commit"] if out["commit"] in (None, results.UNRECORDED) else out["commit"][:7]
    lines = [f"dress rehearsal of {stem} (profile {profile}, commit {commit or results.UNRECORDED}) on {device}: "
             f"{out['status']} in {out['seconds']} s" + (f" ({wall['tag']})" if wall else "")]
    if out["longest_cell"]:
        lines.append(f"  longest cell: under \"{out['longest_cell']['under']}\", {out['longest_cell']['seconds']:.0f} s")
    lines.append(f"  projected for a T4: about {out['t4_minutes']:.0f} min ({proj['tag']})" if proj
                 else "  projected for a T4: not recorded")
    if out["upper_bound"]:
        lines.append(f"  upper bounds of a solo run: {concurrent} notebooks shared the GPU")
    return {**out, "text": "\n".join(lines)}


def _longest_cell(executed: Path, stem: str) -> dict | None:
    """The longest code cell of an executed copy (papermill's durations), named by the heading above it; None
    when the copy is not there."""
    try:
        cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError):
        return None
    heading, longest = stem, None
    for c in cells:
        src = "".join(c.get("source", ""))
        if c["cell_type"] == "markdown" and src.startswith("#"):
            heading = src.splitlines()[0].lstrip("# ").strip()
        secs = c.get("metadata", {}).get("papermill", {}).get("duration")
        if c["cell_type"] == "code" and isinstance(secs, (int, float)) and (longest is None or secs > longest["seconds"]):
            longest = {"seconds": secs, "under": heading}
    return longest


# ------------------------------------------------------------------------------------------ command line

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebooks", nargs="*", type=notebook_run, metavar="NN[:PROFILE]",
                   help="notebooks, in the order to run them (default: all); NN:PROFILE for that profile only")
    p.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES))
    p.add_argument("--param", action="append", type=parameter, default=[], metavar="NN:NAME=VALUE",
                   help="a papermill parameter for one notebook (e.g. 05:STEPS=10: a scaled-down run, recorded as such)")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, help="seconds per run")
    p.add_argument("--concurrent", type=positive_count, default=1, metavar="N",
                   help="notebooks run at once on the GPU (memory stays per run; times become upper bounds)")
    p.add_argument("--out", help="results folder (default: results/<device-slug>)")
    p.add_argument("--hub-cache", default=str(DEFAULT_HUB_CACHE), help="where the hub stand-ins are written")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")


def main(args: argparse.Namespace) -> int:
    runs = plan(args.notebooks, args.profiles, args.param)
    out = Path(args.out) if args.out else results.results_dir() / hw.device_slug()
    hub_cache = Path(args.hub_cache)
    if args.dry_run:
        print(describe(runs, hub_cache, out, args.timeout))
        return 0
    import torch  # only past --dry-run, which plans without torch

    if not torch.cuda.is_available():
        print("rehearse needs a CUDA GPU (the t4 profiles do); --dry-run prints the plan without one", file=sys.stderr)
        return 2
    try:
        results.check_writable(out, "--out", directory=True)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    ids = sorted({i for r in runs for i in r.hub_ids})
    # in a child process: the 1.5B stand-in is built on the GPU, and its memory is freed before the runs
    if ids:
        subprocess.run([sys.executable, "-m", "t4lib.evidence.hub_standins", str(hub_cache), *ids], check=True)
    return rehearse(runs, out, hub_cache, args.timeout, copy_bandwidth(), concurrent=args.concurrent)


def rehearse(runs: list[Run], out: Path, hub_cache: Path, timeout: int, copy_bw: float | None,
             runner=papermill, concurrent: int = 1) -> int:
    """Execute ``runs``, up to ``concurrent`` at once, rewriting the records as each ends; 1 if any failed,
    else 0. Runs sharing the GPU share one guard of the results files (:func:`records_kept`): what they wrote
    is kept apart in ``rehearsal/concurrent.results``."""
    if not isinstance(concurrent, int) or concurrent < 1:
        raise ValueError(f"concurrent must be a whole number >= 1, got {concurrent!r}")
    work = Path(tempfile.mkdtemp(prefix="t4lib_rehearsal_"))
    done, figs = {}, []
    shared = concurrent > 1 and len(runs) > 1
    written = out / "rehearsal" / "concurrent.results"

    def one(r: Run) -> dict:
        ipython = work / "ipython" / r.copy_name  # a profile per kernel: concurrent kernels share no history file
        install_startup(ipython)
        site = work / "site" / r.copy_name
        install_sitecustomize(site)
        peak_file = work / f"{r.copy_name}.peak.json"
        env = environment(hub_cache, ipython, peak_file, r.profile, site)
        return execute(r, out, env, timeout, peak_file, runner, keep_records=not shared)

    guard = records_kept(results.results_dir(), written, _own_files(out)) if shared else contextlib.nullcontext()
    with guard, ThreadPoolExecutor(concurrent) as pool:
        futures = {}
        for r in runs:
            print(f"== {r.notebook.name} ({r.profile})", flush=True)
            futures[pool.submit(one, r)] = r
        for fut in as_completed(futures):
            r, rec = futures[fut], fut.result()
            if shared:
                rec["concurrent"] = concurrent
            done[f"{r.notebook.stem}/{r.profile}"] = rec
            figs += figures(rec, r.key, copy_bw)
            write_records(out / "rehearsal.json", done, figs, copy_bw)
            reserved = [p["max_reserved"] for p in [rec["torch_peak"], *rec["process_peaks"]] if p]
            print(f"   {r.notebook.name} ({r.profile}): {rec['status']} in {rec['seconds']:.0f} s"
                  + (f", peak reserved {max(reserved) / 2**30:.2f} GiB" if reserved else "")
                  + (f"; cell {rec['failed_cell']['cell']}: {rec['failed_cell']['error']}" if rec["failed_cell"] else ""),
                  flush=True)
    if shared and written.exists():
        for rec in done.values():
            rec["results_written"] = str(written.relative_to(out))
        write_records(out / "rehearsal.json", done, figs, copy_bw)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r["status"] != "completed" for r in done.values()) else 0
