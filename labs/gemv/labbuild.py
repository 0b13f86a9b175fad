"""Build one lab .cu (of this folder, or any path) with the library's nvcc flags and load it (the labs are not part of the library).

A library built ahead of time (here, where nvcc runs without a GPU) at build/<stem>.so beside the lab, newer
than its .cu, the labs' headers and the library's kernel sources, is loaded instead, so the GPU machine's time is
not spent compiling: build it with ``python labs/gemv/labbuild.py NAME.cu`` and carry labs/gemv/build.
``--before COMMIT NAME.cu`` builds build/<stem>_before.so instead: the lab against the kernels/ of COMMIT, for a lab
that times a library change against the library of that commit in one process (gguf_raw_lab.py).
``--ptxas NAME.cu`` compiles with ``-Xptxas -v`` and writes $OUT/<stem>_ptxas.json (a lab record): registers and
spill bytes of every sm_75 kernel of the lab, the T4's own allocation (an H200 JIT-compiles the PTX for itself).
"""
import ctypes
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from t4lib.core import build as _build


def _source(cu_name: str) -> Path:
    """A name in this folder, or a path to a lab in another labs/ folder."""
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


def ptxas(cu_name: str) -> list[dict]:
    """Registers, spill stores/loads (bytes) and stack frame of every kernel of a lab, for sm_75."""
    src = _source(cu_name)
    with tempfile.TemporaryDirectory() as d:
        flags = [f for f in _build.NVCC_FLAGS if f != "--shared"]
        log = _build._run_nvcc([*flags, "-c", "-Xptxas", "-v", "-I", str(_build.kernels_dir()),
                                "-o", str(Path(d) / "lab.o"), str(src)], src.name)
    rows = []
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_75'", line)
        if m:
            name = subprocess.run(["c++filt", m.group(1)], capture_output=True, text=True).stdout.strip()
            rows.append({"kernel": name or m.group(1)})
        elif rows and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                      line)):
            rows[-1].update(zip(("stack", "spill_stores", "spill_loads"), map(int, m.groups())))
        elif rows and (m := re.search(r"Used (\d+) registers", line)):
            rows[-1]["registers"] = int(m.group(1))
    return rows


def load(cu_name: str) -> ctypes.CDLL:
    src = _source(cu_name)
    pre = src.parent / "build" / f"{src.stem}.so"
    if pre.exists() and pre.stat().st_mtime > _newest_source(src):
        return ctypes.CDLL(str(pre))
    return ctypes.CDLL(str(build(cu_name, Path(tempfile.gettempdir()) / f"{src.stem}.so")))


if __name__ == "__main__":
    args, before = sys.argv[1:], None
    if args[:1] == ["--ptxas"]:
        from t4lib.core.results import lab_record

        for name in args[1:]:
            here = Path(__file__).resolve().relative_to(Path(__file__).resolve().parents[2])
            rec = lab_record(" ".join(["python", str(here), *sys.argv[1:]]))
            rec["device"] = "none: nvcc -Xptxas -v for sm_75 (the T4's register allocation)"
            rec["kernels"] = ptxas(name)
            out = Path(os.environ.get("OUT", ".")) / f"{Path(name).stem}_ptxas.json"
            out.write_text(json.dumps(rec, indent=1))
            print(out, len(rec["kernels"]), "kernels")
        sys.exit(0)
    if args[:1] == ["--before"]:
        before, args = args[1], args[2:]
    for name in args:
        if before is None:
            print(build(name, _source(name).parent / "build" / f"{Path(name).stem}.so"))
            continue
        with tempfile.TemporaryDirectory() as d:
            out = _source(name).parent / "build" / f"{Path(name).stem}_before.so"
            print(build(name, out, kernels_at(before, Path(d))))
