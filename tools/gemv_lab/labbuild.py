"""Build one lab .cu of this folder with the library's nvcc flags and load it (the labs are not part of the library)."""
import ctypes
import tempfile
from pathlib import Path

from t4lib import _build


def load(cu_name: str) -> ctypes.CDLL:
    src = Path(__file__).with_name(cu_name)
    out = Path(tempfile.gettempdir()) / f"{src.stem}.so"
    _build._run_nvcc([*_build.NVCC_FLAGS, "-I", str(_build.kernels_dir()), "-o", str(out), str(src)], src.name)
    return ctypes.CDLL(str(out))
