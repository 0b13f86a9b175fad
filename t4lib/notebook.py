"""Small helpers every notebook uses: profile resolution and result paths."""
from __future__ import annotations

from pathlib import Path

PROFILES = ("auto", "cpu", "gpu", "t4", "kaggle-2xt4")


def resolve_profile(profile: str) -> str:
    """``auto`` -> ``gpu`` when CUDA is present, else ``cpu``; other names are
    checked and returned. ``t4`` and ``kaggle-2xt4`` need a GPU."""
    import torch

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
    from . import hw, results

    d = results.results_dir() / hw.device_slug()
    d.mkdir(parents=True, exist_ok=True)
    return d
