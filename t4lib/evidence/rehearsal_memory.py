"""The dress rehearsal's memory cap and peak report, as the notebook's kernel
(:mod:`t4lib.evidence.rehearsal_startup`) and every CUDA subprocess (:mod:`t4lib.evidence.rehearsal_sitecustomize`)
apply them. Those two files are copied out of the package to run, so they import this one rather than hold a copy.

* ``T4LIB_REHEARSE_MEM_GIB``: the CUDA caching allocator may reserve at most this much on each device
  (``torch.cuda.set_per_process_memory_fraction``), a T4's usable 15 GiB: a process that needs more raises
  ``torch.OutOfMemoryError`` as it would on the T4.
* The peak is torch's largest allocated and reserved bytes over the devices, written atomically (the
  rehearsal never reads half a file).
"""
import os

from t4lib.core import results


def apply_cap() -> float:
    """Cap every device at ``T4LIB_REHEARSE_MEM_GIB``; returns the cap in bytes."""
    import torch  # here: the subprocesses' sitecustomize imports this module in every process, torch only with CUDA
    budget = float(os.environ["T4LIB_REHEARSE_MEM_GIB"]) * 2**30
    for d in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(d).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), d)
    return budget


def write_peak(path: str, budget: float, **extra) -> None:
    """torch's peak allocated and reserved bytes in this process (and ``extra``) to ``path``."""
    import torch  # here, as in apply_cap
    devices = range(torch.cuda.device_count())
    results.write_json(path, {**extra, "budget": budget,
                              "max_allocated": max(torch.cuda.max_memory_allocated(d) for d in devices),
                              "max_reserved": max(torch.cuda.max_memory_reserved(d) for d in devices)})
