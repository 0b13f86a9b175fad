"""Build one lab .cu (of this folder, or any path) with the library's nvcc flags and load it (the labs are not part of the library).

A library built ahead of time (here, where nvcc runs without a GPU) at build/<stem>.so beside the lab, newer
than its .cu, the labs' headers and the library's kernel sources, is loaded instead, so the GPU machine's time is
not spent compiling: build it with ``python tools/gemv_lab/labbuild.py NAME.cu`` and carry tools/gemv_lab/build.
``--before COMMIT NAME.cu`` builds build/<stem>_before.so instead: the lab against the kernels/ of COMMIT, for a lab
that times a library change against the library of that commit in one process (gguf_raw_lab.py).
"""
import ctypes
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from t4lib import _build


def _source(cu_name: str) -> Path:
    """A name in this folder, or a path to a lab in another tools/ folder."""
    return Path(cu_name) if "/" in cu_name else Path(__file__).with_name(cu_name)


def build(cu_name: str, out: Path, kernels: Path | None = None) -> Path:
    src = _source(cu_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    inc = kernels or _build.kernels_dir()
    _build._run_nvcc([*_build.NVCC_FLAGS, "-I", str(inc), "-o", str(out), str(src)], src.name)
    return out


def kernels_at(commit: str, dest: Path) -> Path:
    """kernels/ as of ``commit`` (git archive of this checkout), extracted under ``dest``."""
    repo = Path(__file__).resolve().parents[2]
    tar = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, "kernels"], check=True,
                         capture_output=True).stdout
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(dest)
    return dest / "kernels"


def _newest_source(src: Path) -> float:
    kernels = _build.kernels_dir()
    files = [src, *src.parent.glob("*.cuh"), *kernels.glob("*.cu"), *kernels.glob("*.cuh")]
    return max(f.stat().st_mtime for f in files)


def load(cu_name: str) -> ctypes.CDLL:
    src = _source(cu_name)
    pre = src.parent / "build" / f"{src.stem}.so"
    if pre.exists() and pre.stat().st_mtime > _newest_source(src):
        return ctypes.CDLL(str(pre))
    return ctypes.CDLL(str(build(cu_name, Path(tempfile.gettempdir()) / f"{src.stem}.so")))


if __name__ == "__main__":
    args, before = sys.argv[1:], None
    if args[:1] == ["--before"]:
        before, args = args[1], args[2:]
    for name in args:
        if before is None:
            print(build(name, _source(name).parent / "build" / f"{Path(name).stem}.so"))
            continue
        with tempfile.TemporaryDirectory() as d:
            out = _source(name).parent / "build" / f"{Path(name).stem}_before.so"
            print(build(name, out, kernels_at(before, Path(d))))
