"""Every benchmark, each reachable as ``python -m t4lib bench NAME``. Benchmarks import the library's
modules; of the library, only the evidence floor (``t4lib.evidence.verify`` runs them) imports a benchmark."""

from pathlib import Path

from t4lib.core import hw, results


def out_folder(arg: str | None) -> Path:
    """A benchmark's ``--out`` folder: the one given, or ``results/<device-slug>``."""
    return Path(arg) if arg else results.results_dir() / hw.device_slug()


def print_figures(figs: list[dict]) -> None:
    for f in figs:
        print(f"  {f['name']:<64} {f['value']:>12.4g} {f['unit']:<9} {f['tag']}")


def ncu_log_figures(path, parse, errors: list[str]) -> list[dict]:
    """The figures ``parse`` reads from the ncu log at ``path``; a log that cannot be read or parsed, or that
    gives no figure, is recorded in ``errors`` (the timed figures are written either way)."""
    try:
        figs = parse(Path(path).read_text())
    except Exception as e:
        errors.append(f"ncu log: {type(e).__name__}: {e}")
        return []
    if not figs:
        errors.append(f"no ncu figures parsed from {path}")
    return figs
