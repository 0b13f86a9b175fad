"""Shared helpers for the data generators (entity pools, deterministic writing).

Entity pools are split: ``NAMES``/``ITEMS`` may appear in any training file;
``QUARANTINE_NAMES``/``QUARANTINE_ITEMS`` are reserved for the quarantined
honesty eval set and appear in no training text (tested).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
REPO = DATA_DIR.parent
if str(REPO) not in sys.path:          # make t4lib importable when run as a script
    sys.path.insert(0, str(REPO))

NAMES = ["Ana", "Ben", "Carla", "David", "Emma", "Felix", "Grace", "Hugo", "Iris",
         "Jonas", "Kira", "Leo", "Maya", "Nina", "Omar", "Paula", "Rosa", "Sam",
         "Tara", "Victor", "Wendy", "Yusuf", "Zoe", "Marco", "Lena", "Ravi"]
# (plural, singular) countable items used in training-side problems
ITEMS = [("apples", "apple"), ("pencils", "pencil"), ("books", "book"), ("stamps", "stamp"),
         ("marbles", "marble"), ("cards", "card"), ("shells", "shell"), ("cookies", "cookie"),
         ("stickers", "sticker"), ("coins", "coin"), ("beads", "bead"), ("eggs", "egg"),
         ("oranges", "orange"), ("pens", "pen"), ("buttons", "button"), ("cups", "cup")]

# Reserved for the quarantined honesty eval set only (one list, shared with the procedural corpus's pools).
from t4lib.models.pools import QUARANTINE_ITEMS, QUARANTINE_NAMES  # noqa: E402,F401


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_jsonl(path, records) -> dict:
    """Write records one JSON object per line (sorted keys, ASCII, '\\n'), and
    return ``{"path", "count", "sha256"}``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True, ensure_ascii=True) + "\n")
    return {"path": path.name, "count": len(records), "sha256": sha256_file(path)}


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def out_dir(argv=None) -> Path:
    """``--out DIR`` from the command line, default ``data/``."""
    argv = sys.argv[1:] if argv is None else argv
    if "--out" in argv:
        return Path(argv[argv.index("--out") + 1])
    return DATA_DIR
