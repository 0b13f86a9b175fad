"""``sitecustomize`` of the dress rehearsal, for the Python processes a notebook's kernel starts (notebook 08's
contract workers; any worker pool, such as notebook 05's GRPO runs when several run at once):
:mod:`t4lib.evidence.rehearse` copies this file as ``sitecustomize.py`` into a folder put first on the run's
``PYTHONPATH``, so every Python process of the run imports it at start. The kernel itself is left to
:mod:`t4lib.evidence.rehearsal_startup`; papermill and any process that never touches CUDA pay only for
:mod:`t4lib.evidence.rehearsal_memory`, a few t4lib modules without torch.

In a process that initialises CUDA, and only then (``torch.cuda._lazy_call``: the hook ``manual_seed`` uses
before CUDA exists), it applies the rehearsal's cap, ``T4LIB_REHEARSE_MEM_GIB`` per device, and at exit writes
torch's peak allocated and reserved bytes to ``<T4LIB_REHEARSE_PEAK_FILE>.proc-<pid>.json``. A process killed
before exit writes nothing: the rehearsal then counts fewer processes than ran, and says how many it read.

A ``sitecustomize`` already on the path (a distribution's) still runs: this one hands over to it at the end.
"""
import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


def _apply_cap():
    """Runs when CUDA initialises in this process: the cap, and the peak written at exit."""
    budget = rehearsal_memory.apply_cap()
    path = f"{os.environ['T4LIB_REHEARSE_PEAK_FILE']}.proc-{os.getpid()}.json"
    atexit.register(rehearsal_memory.write_peak, path, budget, pid=os.getpid(), argv=sys.argv[:4])


class _AfterTorchCuda(importlib.abc.MetaPathFinder):
    """Finds ``torch.cuda`` as the normal path would, and queues the cap once that module has run."""

    def find_spec(self, name, path, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            module._lazy_call(_apply_cap)   # at CUDA's first use; at once if it is already up

        spec.loader.exec_module = exec_module
        return spec


def _run_next_sitecustomize():
    """Run the ``sitecustomize`` this one shadows, if the path holds another."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


# the kernel is held by the IPython startup file instead; sys.argv is still ["-m", ...] while site runs,
# orig_argv holds the command line as given ("python -m ipykernel_launcher -f ...")
_KERNEL = any("ipykernel" in a for a in getattr(sys, "orig_argv", sys.argv)[:4])
if os.environ.get("T4LIB_REHEARSE_MEM_GIB") and os.environ.get("T4LIB_REHEARSE_PEAK_FILE") and not _KERNEL:
    from t4lib.evidence import rehearsal_memory   # torch-free: torch comes only with CUDA

    sys.meta_path.insert(0, _AfterTorchCuda())
_run_next_sitecustomize()
