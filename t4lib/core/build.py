"""Lazy, per-family build of the CUDA kernels with plain nvcc, loaded with ctypes.

Each ``kernels/<family>.cu`` becomes its own shared library exporting
``extern "C"`` launchers (raw pointers, sizes, a ``cudaStream_t``), linked with
``-cudart static`` so it needs only the driver. Libraries are cached under
``$T4LIB_CACHE`` (default ``~/.cache/t4lib``) keyed by the hash of the sources
and flags, so a rebuild happens only when a kernel changes. The same build runs
on a machine with nvcc and no GPU.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the t4lib package
ARCH_FLAGS = ["-gencode", "arch=compute_75,code=[sm_75,compute_75]"]
NVCC_FLAGS = ["-O3", "-lineinfo", "-std=c++17", "-cudart", "static", "--shared", "-Xcompiler", "-fPIC",
              "-Xcompiler", "-fvisibility=hidden", *ARCH_FLAGS]
SMEM_LIMIT = 64 * 1024  # bytes per block on a T4


class BuildError(RuntimeError):
    """nvcc failed or is missing; ``.log`` holds nvcc's output."""

    def __init__(self, msg: str, log: str = ""):
        super().__init__(f"{msg}\n--- nvcc log ---\n{log}" if log else msg)
        self.log = log


def kernels_dir() -> Path:
    """``$T4LIB_KERNELS`` or the ``kernels/`` folder beside the package."""
    env = os.environ.get("T4LIB_KERNELS")
    d = Path(env) if env else PACKAGE_DIR.parent / "kernels"
    if not d.is_dir():
        raise BuildError(f"kernel sources not found at {d}; install t4lib from a checkout "
                         f"(pip install -e .) or set T4LIB_KERNELS")
    return d


def families() -> list[str]:
    return sorted(p.stem for p in kernels_dir().glob("*.cu"))


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(family: str) -> list[Path]:
    """The family's .cu and the headers of kernels/ it includes, directly or through another
    header (a header change rebuilds exactly the families that include it)."""
    d = kernels_dir()
    cu = d / f"{family}.cu"
    if not cu.is_file():
        raise BuildError(f"unknown kernel family {family!r}; known: {families()}")
    seen: list[Path] = []
    todo = [cu]
    while todo:
        for name in _INCLUDE.findall(todo.pop().read_text()):
            h = d / name
            if h.is_file() and h not in seen:
                seen.append(h)
                todo.append(h)
    return [cu, *sorted(seen)]


def source_hash(family: str, flags: list[str] | None = None) -> str:
    h = hashlib.sha256()
    for p in sources(family):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(" ".join(flags or NVCC_FLAGS).encode())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    d = Path(os.environ.get("T4LIB_CACHE", Path.home() / ".cache" / "t4lib"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def find_nvcc() -> str:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise BuildError("nvcc not found: install the CUDA toolkit or set NVCC=/path/to/nvcc "
                     "(the reference backend works without it)")


def _run_nvcc(args: list[str], what: str) -> str:
    nvcc = find_nvcc()
    proc = subprocess.run([nvcc, *args], capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed building {what} (exit {proc.returncode})", log)
    return log


def build(family: str, force: bool = False) -> Path:
    """Build (or find in the cache) the shared library of one kernel family."""
    out = cache_dir() / f"lib{family}-{source_hash(family)}.so"
    if out.exists() and not force:
        return out
    cu = sources(family)[0]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        tmp_out = Path(tmp) / out.name
        _run_nvcc([*NVCC_FLAGS, "-I", str(kernels_dir()), "-o", str(tmp_out), str(cu)], family)
        os.replace(tmp_out, out)  # atomic: concurrent builders never see half a file
    return out


def build_many(families_: list[str] | None = None, force: bool = False) -> dict[str, Path | BuildError]:
    """Build several families at once (one nvcc process each); per family the
    library's path, or the BuildError that stopped it."""
    fams = list(families_ or families())

    def one(fam):
        try:
            return build(fam, force=force)
        except BuildError as e:
            return e

    with ThreadPoolExecutor(max(1, min(len(fams), os.cpu_count() or 1))) as ex:
        return dict(zip(fams, ex.map(one, fams)))


@functools.lru_cache(maxsize=None)
def load(family: str) -> ctypes.CDLL:
    """Build if needed and load a family's library (cached per process)."""
    return ctypes.CDLL(str(build(family)))


def available(family: str) -> bool:
    """True when the family's library builds and loads here (never raises)."""
    try:
        load(family)
        return True
    except (BuildError, OSError):
        return False


def check_status(lib: ctypes.CDLL, status: int, what: str) -> None:
    """Raise RuntimeError with CUDA's message when a launcher returned an error."""
    if status != 0:
        lib.t4lib_error_string.restype = ctypes.c_char_p
        msg = lib.t4lib_error_string(ctypes.c_int(status)).decode()
        raise RuntimeError(f"{what}: CUDA error {status}: {msg}")


# ---------------------------------------------------------------- resource report

_HOT_RE = re.compile(r"//\s*t4lib:hot\s+(.+)")


def hot_kernels(family: str) -> list[str]:
    """Kernel names a family marks hot with ``// t4lib:hot name [name...]``."""
    text = sources(family)[0].read_text()
    return [n for m in _HOT_RE.finditer(text) for n in m.group(1).split()]


def resource_report(family: str) -> list[dict]:
    """Compile with ``-Xptxas -v`` and parse registers, spills, stack and shared
    memory of every kernel (for sm_75)."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = [f for f in NVCC_FLAGS if f not in ("--shared",)]
        log = _run_nvcc([*flags, "-c", "-Xptxas", "-v", "-I", str(kernels_dir()),
                         "-o", str(Path(tmp) / "x.o"), str(sources(family)[0])], family)
    rows, cur = [], None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_75'", line)
        if m:
            cur = {"family": family, "kernel": _demangle(m.group(1)), "registers": 0, "stack": 0,
                   "spill_stores": 0, "spill_loads": 0, "smem": 0}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    hot = hot_kernels(family)
    for r in rows:
        r["hot"] = any(h in r["kernel"] for h in hot)
    return rows


def _demangle(name: str) -> str:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not name.startswith("_Z"):
        return name
    return subprocess.run([cxxfilt, name], capture_output=True, text=True).stdout.strip() or name


def format_report(rows: list[dict]) -> str:
    lines = [f"{'family':<10} {'kernel':<60} {'regs':>4} {'spill':>6} {'stack':>5} {'smem':>6} hot"]
    for r in rows:
        lines.append(f"{r['family']:<10} {r['kernel'][:60]:<60} {r['registers']:>4} "
                     f"{r['spill_stores'] + r['spill_loads']:>6} {r['stack']:>5} {r['smem']:>6} "
                     f"{'*' if r['hot'] else ''}")
    return "\n".join(lines)
