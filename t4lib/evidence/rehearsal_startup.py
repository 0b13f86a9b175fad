"""IPython startup file of the dress rehearsal: :mod:`t4lib.evidence.rehearse` copies this file into
``$IPYTHONDIR/profile_default/startup/`` and starts papermill with ``IPYTHONDIR`` pointing there, so it runs
in the notebook's kernel process before the first cell, and only there (other Python processes, the
rehearsal's own included, never read it). It does nothing unless the rehearsal's variables are set:

* ``T4LIB_REHEARSE_MEM_GIB``: the kernel's CUDA caching allocator may reserve at most this much on each
  device (``torch.cuda.set_per_process_memory_fraction``), a T4's usable 15 GiB: a cell that needs more
  raises ``torch.OutOfMemoryError`` as it would on the T4.
* ``T4LIB_REHEARSE_PEAK_FILE``: after every cell, torch's peak allocated and reserved bytes are written
  there (the parent process cannot read another process's allocator; a file written per cell survives a
  kernel killed at the time limit).
* ``T4LIB_REHEARSE_KAGGLE_ON_ONE_GPU=1``: ``t4lib.core.notebook.resolve_profile`` accepts ``kaggle-2xt4``
  with one GPU, so that profile runs on the GPU at hand (every notebook places its work on ``cuda:0``).
  Only that check is relaxed: ``torch.cuda.device_count()`` stays true, so a Trainer does not wrap the
  model in DataParallel as it would over Kaggle's two T4s; that path is not rehearsed.

It runs before the notebook's own imports; its names are deleted from the kernel's namespace at the end.
"""
import os as _os

if _os.environ.get("T4LIB_REHEARSE_KAGGLE_ON_ONE_GPU") == "1":
    from t4lib.core import notebook as _notebook
else:
    _notebook = None


def _t4lib_rehearsal():
    import json  # bound here: this file runs at kernel start
    import os  # bound here: the hook below outlives the module-level names deleted at the end
    import torch  # bound here: this file runs at kernel start

    if not torch.cuda.is_available():
        return
    budget = float(os.environ["T4LIB_REHEARSE_MEM_GIB"]) * 2**30
    for d in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(d).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), d)

    if _notebook is not None and torch.cuda.device_count() < 2:
        checked = _notebook.resolve_profile
        # patched before the notebook imports it: `from t4lib.core.notebook import resolve_profile` gets this one
        _notebook.resolve_profile = lambda profile: "kaggle-2xt4" if profile == "kaggle-2xt4" else checked(profile)

    peak_file = os.environ.get("T4LIB_REHEARSE_PEAK_FILE")
    if not peak_file:
        return

    def write_peak(*_):
        devices = range(torch.cuda.device_count())
        peak = {"max_allocated": max(torch.cuda.max_memory_allocated(d) for d in devices),
                "max_reserved": max(torch.cuda.max_memory_reserved(d) for d in devices),
                "budget": budget}
        tmp = f"{peak_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(peak, f)
        os.replace(tmp, peak_file)  # the parent never reads half a file

    get_ipython().events.register("post_run_cell", write_peak)  # noqa: F821 (IPython's builtin)


if _os.environ.get("T4LIB_REHEARSE_MEM_GIB"):
    _t4lib_rehearsal()
del _t4lib_rehearsal, _os, _notebook
