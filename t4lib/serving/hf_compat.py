"""The parts of ``transformers`` that :class:`~t4lib.serving.StaticEngine` relies on, in one place.

The engine builds a ``StaticCache`` and drives it from outside: it rewinds the cache's own write
position (a device tensor per layer since 4.56's layered caches) when a padded prefill overshoots,
and keeps those tensors fixed across CUDA-graph replays. The constructor's signature, the layer
attributes and the forward's cache argument all changed across releases, so each is reached through
a function here that fails with the versions it knows instead of deep inside a forward.
"""
from __future__ import annotations

import inspect
import warnings

import torch

# StaticCache(config, max_cache_len) and per-layer caches arrived in 4.56; tested here on 4.57.1, 5.0.0
# and 5.24.0 (t4lib's own tokenizers need 5.x, the floor pyproject.toml declares).
MIN_VERSION = (4, 56)
TESTED = "4.57.1, 5.0.0 and 5.24.0"

# transformers 5.x renames the forward's cache argument; the old name keeps every version working.
warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)


def _known() -> str:
    return (f"StaticEngine drives transformers >= {MIN_VERSION[0]}.{MIN_VERSION[1]} "
            f"(tested on {TESTED})")


def version() -> tuple[int, int]:
    """``(major, minor)`` of the installed transformers."""
    import transformers  # optional: transformers (the train extra)

    parts = transformers.__version__.split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def check_version() -> None:
    """Raise if the installed transformers predates what the engine needs, naming both."""
    import transformers  # optional: transformers (the train extra)

    if version() < MIN_VERSION:
        raise RuntimeError(f"{_known()}; found transformers {transformers.__version__}. "
                           f"Upgrade: pip install 'transformers>=5.0'")


def static_cache(config, max_len: int):
    """A ``transformers.StaticCache`` of ``max_len`` positions for ``config``'s model."""
    import transformers  # optional: transformers (the train extra)
    from transformers import StaticCache  # optional: transformers (the train extra)

    try:
        cache = StaticCache(config=config, max_cache_len=max_len)
    except TypeError as e:
        raise RuntimeError(f"transformers {transformers.__version__}: StaticCache(config, max_cache_len) "
                           f"failed ({e}); {_known()}") from e
    if not hasattr(cache, "layers"):
        raise RuntimeError(f"transformers {transformers.__version__}: StaticCache has no per-layer caches "
                           f"(.layers); {_known()}")
    return cache


def cache_argument(model) -> str:
    """The name under which ``model``'s forward takes the cache: ``cache`` where it names it (newer 5.x),
    else ``past_key_values`` (every version, deprecated where renamed; a wrapper taking ``**kwargs``)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"


def cache_counters(cache) -> tuple[list[torch.Tensor], dict]:
    """Where the cache keeps its own position besides the K/V tensors: a ``StaticLayer`` writes each
    step's K/V at its ``cumulative_length`` (a device tensor it advances in place), not at the
    ``cache_position`` passed in. Returns those integer tensors, and the host-side integer counters
    (which a CUDA graph would freeze) as {(layer index, name): value}."""
    tensors, host = [], {}
    for i, layer in enumerate(getattr(cache, "layers", [])):
        for name, v in vars(layer).items():
            if name in ("keys", "values"):
                continue
            if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
                tensors.append(v)
            elif isinstance(v, int) and not isinstance(v, bool) and "length" in name:
                host[(i, name)] = v
    return tensors, host


def set_host_counter(cache, layer: int, name: str, value: int) -> None:
    """Restore a host-side counter found by :func:`cache_counters`."""
    setattr(cache.layers[layer], name, value)
