"""Build one lab .cu of this folder with the library's nvcc flags and load it (the labs are not part of the library).

A library built ahead of time (here, where nvcc runs without a GPU) at build/<stem>.so beside the lab, newer
than its .cu, the labs' headers and the library's kernel sources, is loaded instead, so the GPU machine's time is
not spent compiling: build it with ``python tools/gemv_lab/labbuild.py NAME.cu`` and carry tools/gemv_lab/build.
"""
import ctypes
import sys
import tempfile
from pathlib import Path

from t4lib import _build

PREBUILT = Path(__file__).with_name("build")


def build(cu_name: str, out: Path) -> Path:
    src = Path(__file__).with_name(cu_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    _build._run_nvcc([*_build.NVCC_FLAGS, "-I", str(_build.kernels_dir()), "-o", str(out), str(src)], src.name)
    return out


def _newest_source(src: Path) -> float:
    kernels = _build.kernels_dir()
    files = [src, *src.parent.glob("*.cuh"), *kernels.glob("*.cu"), *kernels.glob("*.cuh")]
    return max(f.stat().st_mtime for f in files)


def load(cu_name: str) -> ctypes.CDLL:
    src = Path(__file__).with_name(cu_name)
    pre = PREBUILT / f"{src.stem}.so"
    if pre.exists() and pre.stat().st_mtime > _newest_source(src):
        return ctypes.CDLL(str(pre))
    return ctypes.CDLL(str(build(cu_name, Path(tempfile.gettempdir()) / f"{src.stem}.so")))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(build(name, PREBUILT / f"{Path(name).stem}.so"))
