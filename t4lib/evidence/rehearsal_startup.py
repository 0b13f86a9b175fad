"""IPython startup file of the dress rehearsal: :mod:`t4lib.evidence.rehearse` copies this file into
``$IPYTHONDIR/profile_default/startup/`` and starts papermill with ``IPYTHONDIR`` pointing there, so it runs
in the notebook's kernel process before the first cell, and only there (other Python processes, the
rehearsal's own included, never read it). It does nothing unless the rehearsal's variables are set:

* ``T4LIB_REHEARSE_MEM_GIB``: the kernel's cap on each device (:mod:`t4lib.evidence.rehearsal_memory`).
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
if _os.environ.get("T4LIB_REHEARSE_MEM_GIB"):
    from t4lib.evidence import rehearsal_memory as _memory


def _t4lib_rehearsal():
    import os  # bound here: the hook below outlives the module-level names deleted at the end
    import torch  # bound here: this file runs at kernel start
    memory = _memory  # bound here: the hook below outlives the module-level names deleted at the end

    if not torch.cuda.is_available():
        return
    budget = memory.apply_cap()

    if _notebook is not None and torch.cuda.device_count() < 2:
        checked = _notebook.resolve_profile
        # patched before the notebook imports it: `from t4lib.core.notebook import resolve_profile` gets this one
        _notebook.resolve_profile = lambda profile: "kaggle-2xt4" if profile == "kaggle-2xt4" else checked(profile)

    peak_file = os.environ.get("T4LIB_REHEARSE_PEAK_FILE")
    if not peak_file:
        return

    def write_peak(*_):
        memory.write_peak(peak_file, budget)

    get_ipython().events.register("post_run_cell", write_peak)  # noqa: F821 (IPython's builtin)


if _os.environ.get("T4LIB_REHEARSE_MEM_GIB"):
    _t4lib_rehearsal()
    del _memory
del _t4lib_rehearsal, _os, _notebook
