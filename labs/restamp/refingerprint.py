"""Carry the closures of schema-2 records over to the fingerprint that does not depend on the Python version.

The first fingerprint of a ``.py`` file (and of a notebook's cells) was ``ast.dump`` of its syntax tree, which
shows every field the running Python knows: Python 3.12 added ``type_params`` to every function and class, so
the GPU machine (3.12) and this one (3.11) fingerprinted the same file differently. The fingerprint is now a
serialization that leaves out empty fields (:func:`t4lib.core.provenance._serialize`).

A recorded fingerprint is carried over only where what it fingerprinted is established: the file as it stands at
the record's commit must give the recorded *old* fingerprint under Python 3.11 or 3.12 (this script recomputes both;
3.12 through ``$PYTHON312``); the new fingerprint of that same content replaces it. Anything else becomes
``unrecorded`` (never current).

    python labs/restamp/refingerprint.py [--dry-run]
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))

from restamp import tree  # noqa: E402
from t4lib.core import provenance as P  # noqa: E402
from t4lib.core import results  # noqa: E402

PYTHON312 = os.environ.get("PYTHON312", "/root/.pyenv/versions/3.12.1/bin/python")

# The first fingerprint, as it was (ast.dump of the docstring-free tree); run by this Python and by 3.12.
OLD = r'''
import ast, hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from t4lib.core.provenance import _strip_docstrings, _strip_hash_comments, _cell_python, notebook_code, strip_c_comments
def py(text, name):
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError:
        return _strip_hash_comments(text)
    return ast.dump(_strip_docstrings(tree), annotate_fields=False, include_attributes=False)
def fp(path, text):
    if path.endswith(".py"):
        body = py(text, path)
    elif path.endswith((".cu", ".cuh")):
        body = strip_c_comments(text)
    elif path.endswith(".ipynb"):
        body = "\n\0\n".join(py(_cell_python(c), path) for c in notebook_code(text))
    else:
        body = text
    return hashlib.sha256(body.encode()).hexdigest()[:16]
files = json.loads(sys.stdin.read())
print(json.dumps({k: fp(k.split("::", 1)[1], open(v, encoding="utf-8").read()) for k, v in files.items()}))
'''


def old_fingerprints(files: dict[str, str]) -> tuple[dict, dict]:
    """{key: old fingerprint} under this Python and under 3.12, for {key "commit::path": file on disk}."""
    out = []
    for exe in (sys.executable, PYTHON312):
        proc = subprocess.run([exe, "-c", OLD, str(REPO)], input=json.dumps(files), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{exe}: {proc.stderr[-2000:]}")
        out.append(json.loads(proc.stdout))
    return out[0], out[1]


def closures(doc_kind: str, doc: dict):
    """(commit, closure dict to rewrite in place) pairs of one document."""
    if doc_kind == "results":
        yield doc["provenance"].get("commit"), doc["provenance"]["closure"]
        for f in doc.get("figures", []):
            prov = (f.get("carried_over") or {}).get("provenance")
            if isinstance(prov, dict) and isinstance(prov.get("closure"), dict):
                yield prov.get("commit"), prov["closure"]
    elif doc_kind == "notebook":
        meta = doc["metadata"]["t4lib"]
        yield meta.get("commit"), meta["closure"]
        if isinstance(meta.get("closure_after"), dict):
            yield meta.get("commit_after", meta.get("commit")), meta["closure_after"]
    elif doc_kind == "lab":
        yield doc["provenance"].get("commit"), doc["provenance"]["closure"]
    elif doc_kind == "ledger":
        for rec in (doc.get("files") or {}).values():
            yield rec.get("commit") or doc.get("commit"), rec["closure"]
        if isinstance((doc.get("kat") or {}).get("closure"), dict):
            yield doc["kat"].get("commit") or doc.get("commit"), doc["kat"]["closure"]
        for b in (doc.get("builds") or {}).values():
            if isinstance(b.get("sources"), dict):
                yield doc.get("commit"), b["sources"]


def documents():
    for p in sorted((REPO / "results").rglob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if "verification" in p.parts and "history" not in p.parts and isinstance(doc, dict) and doc.get("schema") == 2:
            yield p, "ledger", doc
        elif isinstance(doc, dict) and (doc.get("provenance") or {}).get("schema") == P.SCHEMA:
            yield p, "results", doc
    for p in sorted((REPO / "results").glob("*/[0-9][0-9]_*.ipynb")):
        doc = json.loads(p.read_text())
        if ((doc.get("metadata") or {}).get("t4lib") or {}).get("schema") == P.SCHEMA:
            yield p, "notebook", doc
    for p in sorted((REPO / "labs").rglob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and (doc.get("provenance") or {}).get("schema") == P.SCHEMA and "command" in doc:
            yield p, "lab", doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    docs = list(documents())
    wanted: dict[str, str] = {}
    for _, kind, doc in docs:
        for commit, c in closures(kind, doc):
            d = tree(commit) if commit and commit not in ("unknown", results.UNRECORDED) else None
            for path, v in c.items():
                if d is not None and v != P.UNRECORDED and (d / path).is_file():
                    wanted[f"{commit}::{path}"] = str(d / path)
    old311, old312 = old_fingerprints(wanted)
    kept = lost = 0
    for p, kind, doc in docs:
        before = json.dumps(doc, sort_keys=True)
        for commit, c in closures(kind, doc):
            for path, v in list(c.items()):
                if v == P.UNRECORDED:
                    continue
                key = f"{commit}::{path}"
                if key in wanted and v in (old311.get(key), old312.get(key)):
                    c[path] = P.fingerprint_text(path, Path(wanted[key]).read_text(encoding="utf-8"))
                    kept += 1
                else:
                    c[path] = P.UNRECORDED
                    lost += 1
        if json.dumps(doc, sort_keys=True) != before and not a.dry_run:
            if kind == "notebook":
                results.atomic_write_text(p, json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
            else:
                results.write_json(p, doc)
    print(f"{len(docs)} documents: {kept} fingerprints carried over, {lost} not established (now unrecorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
