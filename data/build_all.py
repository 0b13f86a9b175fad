"""Rebuild every generated data set and the tokenizer, then write
``manifest.json`` (per file: count, seed, sha256).

    python data/build_all.py            # into data/
    python data/build_all.py --out DIR  # elsewhere (the rebuild test does this)

Everything is deterministic: a rebuild reproduces the committed files bit
for bit (tested).
"""

from __future__ import annotations

import json

try:
    import _common  # noqa: F401  (puts the repository on sys.path)
    import build_copy, build_copy_long, build_honesty, build_math, build_open, build_tokenizer, build_traces
    from _common import out_dir
except ImportError:
    from data import build_copy, build_copy_long, build_honesty, build_math, build_open, build_tokenizer, build_traces
    from data._common import out_dir

MANIFEST = "manifest.json"


def build(out=None) -> dict:
    out = out_dir() if out is None else out
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for mod in (build_math, build_honesty, build_traces, build_copy, build_copy_long):
        files += mod.build(out)
    tok = build_tokenizer.build(out, data_root=out)
    opened = build_open.build(out)   # the procedural corpus's eval sets, SFT traces and tokenizer
    manifest = {"generator": "data/build_all.py", "files": {e.pop("path"): e for e in files + opened[:-1]},
                "tokenizer": tok[0], "tokenizer_open": opened[-1]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


if __name__ == "__main__":
    print(json.dumps(build(), indent=2))
