"""Stand-ins for Hugging Face hub models: random-weight checkpoints of the public configurations, laid out
as a Hugging Face hub cache, so a dress rehearsal loads them through the library's unchanged loading path.

A stand-in of ``Org/Name`` is written where ``huggingface_hub`` looks for a downloaded one::

    <cache>/models--Org--Name/refs/main                 the revision below
    <cache>/models--Org--Name/snapshots/<rev>/          config.json, model.safetensors, tokenizer files

and a process started with ``HF_HUB_CACHE=<cache> HF_HUB_OFFLINE=1`` then gets it from
``t4lib.models.load("Org/Name")`` (or ``from_pretrained``) exactly as it would get the real download.

* The configuration is the public ``config.json`` of the model, committed as small JSON in
  ``hub_configs/`` (one file per id: ``id``, ``source``, ``tokenizer_size``, ``config``).
* The weights are random (``from_config``, seed 0): shapes, dtype, memory and time are the real model's,
  its text is garbage. No learning figure may be read from a stand-in.
* The tokenizer is the project's own byte-level BPE (``data/tokenizer``), its vocabulary filled with
  unreachable entries up to the real tokenizer's size (``tokenizer_size``: 151665 for Qwen2.5), so that
  ``len(tokenizer)`` and the id range are the real ones. On the project's math traces it writes about
  3.2 characters a token, close to what a large byte-level BPE writes on digit-heavy text, so sequence
  lengths (and the time they cost) are of the right size. Its special tokens (``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>``) are Qwen's strings at the project's ids; the configuration's
  ``bos``/``eos`` ids follow the tokenizer.

``python -m t4lib.evidence.hub_standins CACHE ID...`` writes the stand-ins (on the GPU when there is one:
a 1.5B model initialises in seconds there); ids already written are kept.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from t4lib.core import results

CONFIG_DIR = Path(__file__).with_name("hub_configs")
TOKENIZER_SRC = results.REPO_ROOT / "data" / "tokenizer"
# A quoted "Org/Name" whose name carries a parameter count ("1.5B", "0.5B-Instruct"): a model id, not a data
# set ("openai/gsm8k"), a unit ("GB/s") or a figure name ("w4a16_gemv/M1").
HUB_ID = re.compile(r"""["']([A-Za-z0-9][\w-]*/[\w.-]*\d+(?:\.\d+)?B\b[\w.-]*)["']""")


def configs() -> dict[str, dict]:
    """``{hub id: spec}`` of every committed configuration (``hub_configs/*.json``)."""
    out = {}
    for path in sorted(CONFIG_DIR.glob("*.json")):
        spec = json.loads(path.read_text())
        out[spec["id"]] = spec
    return out


def hub_ids(notebook: str | Path) -> list[str]:
    """The hub model ids named in a notebook's code cells (its parameters and profile tables)."""
    nb = json.loads(Path(notebook).read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return sorted(set(HUB_ID.findall(src)))


def repo_dir(cache: str | Path, model_id: str) -> Path:
    """``<cache>/models--Org--Name``: huggingface_hub's folder for a model repository."""
    return Path(cache) / ("models--" + model_id.replace("/", "--"))


def revision(spec: dict) -> str:
    """A 40-hex revision derived from the spec: a changed configuration is a new snapshot."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def snapshot_dir(cache: str | Path, model_id: str, spec: dict) -> Path:
    return repo_dir(cache, model_id) / "snapshots" / revision(spec)


def is_written(cache: str | Path, model_id: str, spec: dict) -> bool:
    ref = repo_dir(cache, model_id) / "refs" / "main"
    return ref.is_file() and ref.read_text().strip() == revision(spec)


def write_tokenizer(dest: str | Path, size: int, src: str | Path = TOKENIZER_SRC):
    """The project tokenizer with its BPE vocabulary filled to ``size`` ids; returns it loaded from ``dest``.
    The filler entries are never produced by a merge, so text tokenizes as with the project tokenizer."""
    from transformers import AutoTokenizer  # optional (train extra)

    dest, src = Path(dest), Path(src)
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    doc = json.loads((src / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    first = max([*vocab.values(), *(t["id"] for t in doc["added_tokens"])]) + 1
    if size < first:
        raise ValueError(f"size: the tokenizer already has {first} ids, more than {size}")
    vocab.update({f"<|standin_{i}|>": i for i in range(first, size)})
    (dest / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False))
    return AutoTokenizer.from_pretrained(str(dest))


def write_standin(cache: str | Path, model_id: str, spec: dict, *, device: str = "cpu", seed: int = 0) -> Path:
    """Write one stand-in (random weights, padded tokenizer, ``refs/main``); returns its snapshot folder."""
    import torch  # a rehearsal dry run plans without torch
    from transformers import AutoConfig, AutoModelForCausalLM  # optional (train extra)

    snap = snapshot_dir(cache, model_id, spec)
    tok = write_tokenizer(snap, spec["tokenizer_size"])
    kw = dict(spec["config"])
    dtype = getattr(torch, kw.pop("torch_dtype", kw.pop("dtype", "float32")))
    kw.update(bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.save_pretrained(str(snap))
    refs = repo_dir(cache, model_id) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(revision(spec))  # written last: a half-written stand-in is not found
    return snap


def populate(cache: str | Path, ids, *, device: str | None = None) -> dict[str, Path]:
    """Write the stand-ins of ``ids`` not yet in ``cache``; ``{id: snapshot folder}``. KeyError naming an id
    without a committed configuration."""
    specs = configs()
    missing = [i for i in ids if i not in specs]
    if missing:
        raise KeyError(f"no committed configuration for {missing} in {CONFIG_DIR} (known: {sorted(specs)})")
    if device is None:
        import torch  # a rehearsal dry run plans without torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    out = {}
    for i in ids:
        out[i] = (snapshot_dir(cache, i, specs[i]) if is_written(cache, i, specs[i])
                  else write_standin(cache, i, specs[i], device=device))
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m t4lib.evidence.hub_standins CACHE ID...")
    for model_id, snap in populate(sys.argv[1], sys.argv[2:]).items():
        print(f"{model_id} -> {snap}")
