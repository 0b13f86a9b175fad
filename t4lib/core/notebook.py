"""Small helpers every notebook uses: the install cell, profile resolution, result paths, and the stamp an
executed notebook carries (what it ran at)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from t4lib.core import hw, results
from t4lib.core.provenance import provenance_of

# The one repository URL; pyproject.toml's [project.urls] Repository declares the same (tested).
REPOSITORY_URL = "https://github.com/t4lib/t4lib"

# The first code cell of every notebook is ``install_cell(extras)`` verbatim, with the extras of pyproject.toml
# that the notebook imports (tests/test_install_cell.py derives them from the notebook's imports and compares).
# It cannot import t4lib (it is what installs it), so the URL is spelled out. It is keyed on what is installed, not
# on a folder: it asks the installed t4lib's metadata for the requirements of its core and of those extras and
# installs only when one is missing or outside its range (t4lib itself, or an extra that a notebook run earlier in
# the same folder did not ask for), reusing ./t4lib when it is there. It keeps the runtime's torch (a pip
# constraint pins the installed version), says what it installs, and offline (Kaggle with the internet off)
# installs from attached wheels: T4LIB_GIT names a copy of the repository, T4LIB_WHEELS a folder of wheels.
# `bash run_all.sh test` runs it, as committed, in a fresh Colab-like environment from the checkout under test
# (tests/colab_env_check.py: google.colab presented to the cell only, T4LIB_GIT naming a copy of the checkout),
# and runs the Kaggle loop of the README (several notebooks, one folder) in a fresh environment.
def install_cell(extras=()) -> str:
    """The install cell for a notebook whose imports need ``extras`` (names of pyproject.toml's extras)."""
    extras = sorted(set(extras))
    spec = "./t4lib" + (f"[{','.join(extras)}]" if extras else "")
    return f"""\
# Colab / Kaggle: install t4lib with the extras this notebook imports ({", ".join(extras) or "none"}), keeping the
# runtime's torch; kernels are built from source on first use. It installs only what is missing (a notebook run
# earlier in this folder may have installed t4lib with other extras). Elsewhere this cell does nothing.
import os, shutil, subprocess, sys
if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    from importlib.metadata import PackageNotFoundError, requires, version
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors packaging
        from pip._vendor.packaging.requirements import Requirement

    def _t4lib_missing(extras):
        try:
            reqs = [Requirement(r) for r in requires("t4lib") or []]
        except PackageNotFoundError:
            return ["t4lib"]
        missing = []
        for r in reqs:
            if r.marker is None or any(r.marker.evaluate({{"extra": e}}) for e in ("", *extras)):
                try:
                    if not r.specifier.contains(version(r.name), prereleases=True):
                        missing.append(f"{{r.name}} {{version(r.name)}} (needs {{r.specifier}})")
                except PackageNotFoundError:
                    missing.append(r.name)
        return missing

    missing = _t4lib_missing({extras!r})
    if missing:
        src, wheels = os.environ.get("T4LIB_GIT", "{REPOSITORY_URL}"), os.environ.get("T4LIB_WHEELS")
        if os.path.isdir("t4lib"):
            src = os.path.abspath("t4lib")
        elif os.path.isdir(src):
            shutil.copytree(src, "t4lib")
        else:
            subprocess.run(["git", "clone", "--depth", "1", src, "t4lib"], check=True)
        with open("torch-constraint.txt", "w") as f:
            f.write(f"torch=={{version('torch')}}\\n")
        offline = ["--no-index", "--find-links", wheels, "--no-build-isolation"] if wheels else []
        print(f"t4lib: missing {{', '.join(missing)}}; pip install {spec} from {{src}} (torch {{version('torch')}} kept)"
              f"{{' offline from ' + wheels if wheels else ''}}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", "torch-constraint.txt", *offline, "-e", "{spec}"], check=True)
    if os.path.isdir("t4lib") and os.path.abspath("t4lib") not in sys.path:
        sys.path.insert(0, os.path.abspath("t4lib"))"""


PROFILES = ("auto", "cpu", "gpu", "t4", "kaggle-2xt4")


def resolve_profile(profile: str) -> str:
    """``auto`` -> ``gpu`` when CUDA is present, else ``cpu``; other names are
    checked and returned. ``t4`` and ``kaggle-2xt4`` need a GPU."""
    import torch  # the provenance and stamp commands run without torch

    if profile not in PROFILES:
        raise ValueError(f"PROFILE must be one of {PROFILES}, got {profile!r}")
    if profile == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if profile != "cpu" and not torch.cuda.is_available():
        raise RuntimeError(f"PROFILE={profile!r} needs a CUDA GPU; none is visible (use 'cpu' or 'auto')")
    if profile == "kaggle-2xt4" and torch.cuda.device_count() < 2:
        raise RuntimeError(f"PROFILE='kaggle-2xt4' needs 2 GPUs, found {torch.cuda.device_count()}")
    return profile


def device_results_dir() -> Path:
    """``results/<device-slug>/`` for figures measured on this machine."""
    d = results.results_dir() / hw.device_slug()
    d.mkdir(parents=True, exist_ok=True)
    return d


def figure(device: str, file: str, name: str) -> dict:
    """One figure of ``results/<device>/<file>`` by name, for prose a notebook formats from the results
    rather than typing its numbers. The file is validated (``t4lib.core.results.validate``) before it is read."""
    for arg, val in (("device", device), ("file", file), ("name", name)):
        if not isinstance(val, str) or not val:
            raise TypeError(f"{arg} must be a non-empty string, got {val!r}")
    for arg, val in (("device", device), ("file", file)):
        if "/" in val or "\\" in val or val in (".", ".."):
            raise ValueError(f"{arg} must be a plain name (a folder or file of results/), got {val!r}")
    path = results.results_dir() / device / (file if file.endswith(".json") else file + ".json")
    if not path.is_file():
        raise ValueError(f"file: no results file {path}")
    figs = results.figures_by_name(path)
    if name not in figs:
        raise ValueError(f"name: no figure {name!r} in {path}")
    return figs[name]


# ---------------------------------------------------------------- the stamp of an executed notebook

STAMP_KEY = "t4lib"


def run_provenance(profile: str, notebook: str | Path) -> dict[str, Any]:
    """What a notebook run is about to execute at: schema, commit, dirty tree, the notebook (``producer``) and its
    closure (its code cells and everything they import: ``t4lib.core.provenance``), the profile asked for and the
    one it resolves to here, and the device. Taken before the run, stamped after it."""
    try:
        resolved = resolve_profile(profile)
    except (ValueError, RuntimeError) as e:
        resolved = f"unresolved: {e}"
    return {**provenance_of(notebook), "profile": profile, "profile_resolved": resolved,
            "device": hw.device_info()["name"], "device_slug": hw.device_slug(), "started": results.now()}


def stamp(path: str | Path, before: dict[str, Any]) -> dict[str, Any]:
    """Write ``metadata["t4lib"]`` into the executed notebook at ``path`` (atomically): the provenance ``before``
    (:func:`run_provenance`, taken before the run) and the time it finished. Sources edited while it ran are said
    so (``closure_after``, ``dirty``: True), never passed off as the ones it started with. Returns the stamp."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError(f"path: {path} is not a notebook (no 'cells' list)")
    missing = [k for k in ("schema", "commit", "dirty", "producer", "closure", "profile", "device") if k not in before]
    if missing:
        raise ValueError(f"before: missing {missing} (take it with run_provenance before the run)")
    mark = {**before, "finished": results.now()}
    after = provenance_of(before["producer"])
    if after["closure"] != before["closure"]:
        mark.update(closure_after=after["closure"], dirty=True)
    if after["commit"] != before["commit"]:
        mark["commit_after"] = after["commit"]
    nb.setdefault("metadata", {})[STAMP_KEY] = mark
    # as nbformat writes a notebook: sorted keys, one-space indent, non-ASCII kept
    results.atomic_write_text(path, json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return mark


def stamp_status(meta: dict[str, Any] | None) -> str:
    """``current``, ``changed since: <files>``, ``changed during the run`` or ``not recorded`` for an executed
    notebook's stamp."""
    if meta and meta.get("closure_after") is not None:
        return "changed during the run"
    return results.status_of(meta)


def main(argv: list[str] | None = None) -> int:
    """``python -m t4lib.core.notebook provenance PROFILE NOTEBOOK`` prints :func:`run_provenance` as JSON;
    ``python -m t4lib.core.notebook stamp NOTEBOOK JSON`` stamps an executed notebook with it (run_all.sh does both
    around each papermill run)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "provenance":
        print(json.dumps(run_provenance(argv[1], argv[2])))
        return 0
    if len(argv) == 3 and argv[0] == "stamp":
        stamp(argv[1], json.loads(argv[2]))
        return 0
    print("usage: python -m t4lib.core.notebook provenance PROFILE NOTEBOOK | stamp NOTEBOOK PROVENANCE_JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
