"""Models: one loading path for local checkpoints and Hugging Face ids, and the
project's tiny pretrained models (:mod:`t4lib.models.tiny`).

    from t4lib import models
    model, tok = models.load("tiny-cpu")                 # committed preset
    model, tok = models.load("data/models/tiny-cpu")     # any local directory
    model, tok = models.load("Qwen/Qwen2.5-0.5B")        # hub id (cache or network)

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import os
from pathlib import Path

from t4lib.models import presets

__all__ = ["load", "ModelNotAvailableError", "CheckpointError"]


class ModelNotAvailableError(OSError):
    """A model id is neither a local path nor in the Hugging Face cache, and the
    hub cannot be reached."""


class CheckpointError(ValueError):
    """A checkpoint that does not fit its model (missing, unexpected or mismatched tensors)
    or comes without a usable tokenizer."""


_PROBE = "The quick brown fox, 12 + 30 = 42."


def _checked_model(auto_cls, where: str, strict: bool, **kw):
    """``auto_cls.from_pretrained(where, **kw)``; with ``strict``, refuses a checkpoint whose tensors
    do not match the model's (transformers would initialise the missing ones at random)."""
    model, info = auto_cls.from_pretrained(where, output_loading_info=True, **kw)
    if strict:
        parts = [f"{what}: {', '.join(sorted(map(str, keys))[:20])}" + (" ..." if len(keys) > 20 else "")
                 for what, keys in (("missing tensors", info.get("missing_keys") or ()),
                                    ("unexpected tensors", info.get("unexpected_keys") or ()),
                                    ("tensors of another shape", info.get("mismatched_keys") or ()),
                                    ("load errors", info.get("error_msgs") or ())) if keys]
        if parts:
            raise CheckpointError(f"checkpoint {where!r} does not match {type(model).__name__}: "
                                  + "; ".join(parts) + " (strict=False loads it anyway: missing tensors "
                                                        "randomly initialised, unexpected ones dropped)")
    return model


def _checked_tokenizer(where: str, **kw):
    """``AutoTokenizer.from_pretrained(where, **kw)``, refused when it cannot encode text (transformers
    builds an empty one from the model type when the tokenizer files are absent)."""
    from transformers import AutoTokenizer  # optional: transformers (the train extra)

    tok = AutoTokenizer.from_pretrained(where, **kw)
    try:
        ids = tok.encode(_PROBE, add_special_tokens=False)
    except Exception as e:
        raise CheckpointError(f"{where!r}: the tokenizer cannot encode text ({type(e).__name__}: {e})") from e
    if len(tok) < 2 or not ids:
        raise CheckpointError(
            f"{where!r} has no usable tokenizer: it has {len(tok)} token(s) and encodes text to {ids}; "
            "a tokenizer file (tokenizer.json, or vocab.json and merges.txt, or tokenizer.model) belongs beside "
            "config.json (tokenizer.save_pretrained(DIR))")
    return tok


def _check_fits(tok, model, where: str) -> None:
    """Refuse a tokenizer whose ids fall outside the model's embeddings."""
    ids = tok.encode(_PROBE, add_special_tokens=False)
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    n = getattr(emb, "num_embeddings", None)
    if isinstance(n, int) and max(ids) >= n:
        raise CheckpointError(f"{where!r}: the tokenizer gives token id {max(ids)} but the model embeds only {n} "
                              "tokens: tokenizer and model do not belong together")


def _dtype_kw(dtype):
    """``dtype=`` on transformers >= 4.56 (and 5.x), ``torch_dtype=`` before."""
    if dtype is None:
        return {}
    import transformers  # optional: transformers (the train extra)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def _offline_env() -> bool:
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def load(model_id_or_path: str, *, dtype=None, device=None, offline: bool | None = None,
         trust_remote_code: bool = False, strict: bool = True, **kwargs):
    """Return ``(model, tokenizer)`` for a preset name, a local directory or a
    Hugging Face id.

    * a preset name of :mod:`t4lib.models.tiny` (``"tiny-cpu"``, ``"tiny-gpu"``)
      loads ``data/models/<preset>``; a missing checkpoint raises
      FileNotFoundError naming the path and the command that trains it;
    * an existing directory loads with ``from_pretrained`` (never touches the network);
    * anything else is a hub id: the local cache is tried first; then, unless
      ``offline`` (default: ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``), the hub.
      When neither works a :class:`ModelNotAvailableError` explains what to do.

    ``dtype``: a torch dtype (``None`` keeps the checkpoint's); ``device``: where
    to put the model (``None`` leaves it on CPU).

    :class:`CheckpointError` (a ValueError) refuses a tokenizer that encodes text to nothing (no
    tokenizer files) or to ids outside the model's embeddings, and, with ``strict`` (the default), a
    checkpoint with missing, unexpected or mismatched tensors, naming them.
    """
    if not isinstance(model_id_or_path, (str, os.PathLike)) or not str(model_id_or_path).strip():
        raise ValueError(f"model_id_or_path must be a non-empty string or path, got {model_id_or_path!r}")
    from transformers import AutoModelForCausalLM  # optional: transformers (the train extra)

    if device is not None:
        import torch  # optional: torch comes with transformers
        try:
            torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device must be a torch device or its name (cpu, cuda, cuda:1), got {device!r}") from e
    name = str(model_id_or_path)
    if name in presets.PRESETS and not Path(name).exists():
        path = presets.checkpoint_dir(name)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"no checkpoint for preset {name!r} at {path}; train it with "
                f"`{presets.train_command(name)}` (or add `--out DIR` and copy DIR to {path})")
        name = str(path)

    kw = dict(_dtype_kw(dtype), trust_remote_code=trust_remote_code, **kwargs)
    p = Path(name).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"model_id_or_path {name!r} is a path but has no config.json")
        tok = _checked_tokenizer(str(p), trust_remote_code=trust_remote_code)  # before the weights: cheaper
        model = _checked_model(AutoModelForCausalLM, str(p), strict, **kw)
    else:
        if name.startswith((".", "/", "~")) or name.count("/") > 1:
            raise FileNotFoundError(f"model_id_or_path {name!r} looks like a path but does not exist")
        offline = _offline_env() if offline is None else bool(offline)
        try:   # the cache first: no network needed when the model was downloaded before
            from huggingface_hub import try_to_load_from_cache  # optional: huggingface_hub (comes with transformers)
            # Checked here because transformers' adapter lookup asks the hub (with retries) even
            # under local_files_only when the model is not cached.
            if not isinstance(try_to_load_from_cache(name, "config.json"), str):
                raise OSError(f"{name} has no config.json in the Hugging Face cache")
            tok = _checked_tokenizer(name, local_files_only=True, trust_remote_code=trust_remote_code)
            model = _checked_model(AutoModelForCausalLM, name, strict, local_files_only=True, **kw)
        except OSError as cached_err:
            if offline:
                raise ModelNotAvailableError(
                    f"model {name!r} is not a local path and is not in the Hugging Face cache "
                    f"({_cache_dir()}), and the hub is not used (offline mode). Download it on a machine "
                    f"with network access (`huggingface-cli download {name}`), copy the cache here, "
                    f"or pass a local directory.") from cached_err
            try:
                tok = _checked_tokenizer(name, trust_remote_code=trust_remote_code)
                model = _checked_model(AutoModelForCausalLM, name, strict, **kw)
            except CheckpointError:
                raise
            except Exception as err:  # network, auth or missing repository
                raise ModelNotAvailableError(
                    f"model {name!r} is not a local path, not in the Hugging Face cache ({_cache_dir()}), "
                    f"and could not be fetched from the hub: {type(err).__name__}: {err}. "
                    f"Check the id and network access, or pass a local directory.") from err
    _check_fits(tok, model, name)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    if device is not None:
        model = model.to(device)
    model.eval()
    return model, tok


def _cache_dir() -> str:
    try:
        from huggingface_hub import constants  # optional: huggingface_hub (comes with transformers); fallback below
        return str(constants.HF_HUB_CACHE)
    except Exception:  # pragma: no cover
        return os.environ.get("HF_HOME", "~/.cache/huggingface")
