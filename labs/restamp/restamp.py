"""Re-stamp records of provenance schema 1 (one sha256 over every GPU-test-reachable source) with the closure of
their producer, by content: the closure is rebuilt from the tree of the commit each record names, so a record
whose closure's fingerprints equal today's is current without a re-run, and one whose files changed since names
them.

What ran is established, not assumed, where the record allows it:
- a record written from a clean tree (``dirty: false``) ran its commit's files;
- otherwise the commit's own provenance code recomputes the old hash over the commit's tree; where it equals the
  record's ``sources_sha256``, every file that hash covered ran as committed. Closure files outside that set are
  taken from the commit only when the record said the tree was not dirty-tracked (``dirty: null``, a tree shipped
  to a GPU machine with ``$T4LIB_COMMIT``); with ``dirty: true`` they are ``unrecorded``;
- the GPU ledger recorded each file's raw sha256: each closure file is checked against it.
Anything not established gets the fingerprint ``unrecorded`` (never current). Each re-stamped block says how
(``restamped``).

    python labs/restamp/restamp.py [--dry-run]
"""
from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from t4lib.core import provenance as P  # noqa: E402
from t4lib.core import results  # noqa: E402

TREES = Path(tempfile.mkdtemp(prefix="restamp-"))
_trees: dict[str, Path | None] = {}
_old_hash: dict[str, tuple[str | None, set[str]]] = {}


def tree(commit: str) -> Path | None:
    """The commit's t4lib/, kernels/, tests/, notebooks/, labs/ and tools/ extracted (None: not in this history)."""
    if commit not in _trees:
        d = TREES / commit
        top = subprocess.run(["git", "ls-tree", "--name-only", commit], cwd=REPO, capture_output=True, text=True)
        wanted = [n for n in top.stdout.split() if n in ("t4lib", "kernels", "tests", "notebooks", "labs", "tools")]
        proc = subprocess.run(["git", "archive", commit, *wanted], cwd=REPO, capture_output=True) \
            if top.returncode == 0 and wanted else top
        if proc.returncode != 0:
            _trees[commit] = None
        else:
            d.mkdir(parents=True)
            with tarfile.open(fileobj=__import__("io").BytesIO(proc.stdout)) as t:
                t.extractall(d, filter="data")
            _trees[commit] = d
    return _trees[commit]


def _old_namespace(path: Path, root: Path) -> dict:
    """The hashing functions of an old provenance (or verify) module, run against ``root``: only its function
    definitions and upper-case constants are executed (not its imports of torch or the library)."""
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            or (isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() and t.id != "REPO"
                                                  for t in n.targets) and isinstance(n.value, (ast.Constant, ast.Tuple)))]
    for n in keep:   # drop decorators (lru_cache on a Path argument is fine, but keep it plain)
        if isinstance(n, ast.FunctionDef):
            n.decorator_list = []
    ns = {"__name__": "old", "Path": Path, "hashlib": hashlib, "ast": ast, "REPO": root, "os": __import__("os"),
          "lru_cache": functools.lru_cache, "annotations": None}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), ns)
    return ns


def old_hash(commit: str) -> tuple[str | None, set[str]]:
    """(the schema-1 sources hash, the files it covered), computed by the commit's own hashing code."""
    if commit not in _old_hash:
        d = tree(commit)
        val: tuple[str | None, set[str]] = (None, set())
        for mod in ("t4lib/core/provenance.py", "t4lib/verify.py", "t4lib/evidence/verify.py"):
            if d is None or not (d / mod).is_file():
                continue
            try:
                ns = _old_namespace(d / mod, d)
                if "source_hashes" in ns and "combined_hash" in ns:
                    fn = ns["source_hashes"]
                    h = fn(repo=d) if "repo" in fn.__code__.co_varnames else fn()
                    val = (ns["combined_hash"](h), set(h))
                    break
            except Exception as e:  # an old tree the old code cannot read: nothing established
                print(f"  {commit[:10]}: old hash not recomputed from {mod} ({type(e).__name__}: {e})")
        _old_hash[commit] = val
    return _old_hash[commit]


def producer_at(d: Path, names: list[str]) -> str | None:
    """The first name that is a unit of the tree ``d``: a path, or a dotted module (longest prefix that is one)."""
    for name in names:
        for token in re.findall(r"[\w./-]+", name or ""):
            token = token.split("labs/", 1)[-1] if "/labs/" in token else token
            token = "labs/" + token if (d / "labs" / token).is_file() and not token.startswith("labs/") else token
            if token.endswith((".py", ".ipynb", ".sh")) and (d / token).is_file():
                return token
            parts = token.split(".")
            for i in range(len(parts), 0, -1):
                try:
                    return P.rel(P.resolve_unit(".".join(parts[:i]), d), d)
                except ValueError:
                    continue
    return None


def restamp(prov: dict, producer_names: list[str], what: str) -> dict | None:
    """A schema-2 provenance block for a schema-1 one, or None when it is already schema 2."""
    if prov.get("schema") == P.SCHEMA:
        return None
    commit, dirty, sha = prov.get("commit"), prov.get("dirty"), prov.get("sources_sha256")
    d = tree(commit) if commit and commit != results.UNRECORDED else None
    producer = producer_at(d, producer_names) if d else None
    if d is None or producer is None:
        name = next((n for n in producer_names if n), "unknown")
        print(f"  {what}: commit {commit!r} or producer {producer_names} not found: closure unrecorded")
        return {"schema": P.SCHEMA, "commit": str(commit), "dirty": True, "producer": name.split()[0],
                "closure": {name.split()[0]: P.UNRECORDED},
                "restamped": {"from_schema": 1, "sources_sha256": sha, "dirty_recorded": dirty,
                              "method": "commit or producer not found: nothing established"}}
    closure = P.closure(producer, d)
    reproduced, covered = old_hash(commit)
    if dirty is False:
        method, keep = "clean tree at the commit: its files ran", set(closure)
    elif sha and reproduced == sha:
        keep = set(closure) if dirty is None else set(closure) & covered
        method = ("the commit's own code reproduces the recorded sources hash over the commit's tree; "
                  + ("files outside that hash taken from the commit (a tree shipped with T4LIB_COMMIT)"
                     if dirty is None else "files outside that hash unrecorded (dirty tree)"))
    else:
        keep, method = set(), "sources hash not reproduced at the commit: nothing established"
    out = {p: (fp if p in keep else P.UNRECORDED) for p, fp in closure.items()}
    return {"schema": P.SCHEMA, "commit": commit, "dirty": bool(dirty) if dirty is not None else False,
            "producer": producer, "closure": out,
            "restamped": {"from_schema": 1, "sources_sha256": sha, "dirty_recorded": dirty, "method": method}}


def figure_sources(doc: dict) -> list[str]:
    return [s for s, _ in Counter(f.get("source", "") for f in doc.get("figures", [])).most_common()]


def restamp_results(dry: bool) -> Counter:
    stats = Counter()
    for p in sorted((REPO / "results").rglob("*.json")):
        if "verification" in p.parts:
            continue
        doc = json.loads(p.read_text())
        if not isinstance(doc, dict) or "figures" not in doc:
            continue
        new = restamp(doc.get("provenance") or {}, figure_sources(doc), str(p.relative_to(REPO)))
        if new is None:
            continue
        doc["provenance"] = new
        for f in doc["figures"]:
            co = f.get("carried_over")
            if co and isinstance(co.get("provenance"), dict):
                n2 = restamp(co["provenance"], [f.get("source", "")], f"{p.name}:{f['name']}")
                if n2:
                    co["provenance"] = n2
        results.validate(doc)
        stats[results.provenance_status(doc).split(":")[0]] += 1
        print(f"{p.relative_to(REPO)}: {new['producer']} -> {results.provenance_status(doc)[:160]}")
        if not dry:
            results.write_json(p, doc)
    return stats


def restamp_notebooks(dry: bool) -> Counter:
    from t4lib.core import notebook as nbmod
    stats = Counter()
    for p in sorted((REPO / "results").glob("*/[0-9][0-9]_*.ipynb")):
        nb = json.loads(p.read_text())
        meta = nb.get("metadata", {}).get("t4lib")
        if not meta or meta.get("schema") == P.SCHEMA:
            continue
        prov = {"commit": meta.get("commit"), "dirty": meta.get("dirty"), "sources_sha256": meta.get("sources_sha256")}
        if meta.get("sources_sha256_after"):
            prov["dirty"] = True
        new = restamp(prov, [f"notebooks/{p.name}"], str(p.relative_to(REPO)))
        keep = {k: v for k, v in meta.items() if k not in ("commit", "dirty", "sources_sha256")}
        nb["metadata"]["t4lib"] = {**keep, **new}
        state = nbmod.stamp_status(nb["metadata"]["t4lib"])
        stats[state.split(":")[0]] += 1
        print(f"{p.relative_to(REPO)}: {state[:160]}")
        if not dry:
            results.atomic_write_text(p, json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return stats


def restamp_labs(dry: bool) -> Counter:
    stats = Counter()
    for p in sorted((REPO / "labs").rglob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except json.JSONDecodeError:
            continue
        if not isinstance(doc, dict) or "command" not in doc or "commit" not in doc or "provenance" in doc:
            continue
        prov = {"commit": doc["commit"], "dirty": doc.get("dirty"), "sources_sha256": doc.get("sources_sha256")}
        new = restamp(prov, [doc["command"]], str(p.relative_to(REPO)))
        doc["provenance"] = new
        doc.pop("sources_sha256", None)
        stats[results.status_of(new).split(":")[0]] += 1
        if not dry:
            results.write_json(p, doc)
    return stats


def restamp_ledger(dry: bool) -> None:
    from t4lib.evidence import verify
    for p in sorted((REPO / "results/verification").glob("*.json")):
        e = json.loads(p.read_text())
        if e.get("schema") == verify.LEDGER_SCHEMA:
            continue
        commit, raw = e["commit"], e.get("sources") or {}
        d = tree(commit)

        def checked(closure: dict) -> dict:
            # each file against the raw sha256 the entry recorded when it ran
            ok = {q for q in closure if (d / q).is_file() and hashlib.sha256((d / q).read_bytes()).hexdigest() == raw.get(q)}
            return {q: (fp if q in ok else P.UNRECORDED) for q, fp in closure.items()}

        files: dict = {}
        for nodeid, outcome in (e.get("gpu_tests") or {}).get("tests", {}).items():
            f = nodeid.split("::", 1)[0]
            if f not in files:
                c = P.closure(f, d)
                if (d / verify.CONFTEST).is_file():
                    c.update(P.closure(verify.CONFTEST, d))
                files[f] = {"closure": checked(dict(sorted(c.items()))), "tests": {}, "when": e.get("when"),
                            "commit": commit, "dirty": e.get("dirty")}
            files[f]["tests"][nodeid] = outcome
        builds = {fam: {**b, "sources": checked({P.rel(q, d): P.fingerprint(q) for q in P.kernel_sources(fam, d)})}
                  for fam, b in (e.get("builds") or {}).items()}
        kat = {"closure": checked(P.closure("t4lib/evidence/kat.py", d)), "rows": e.get("kat") or [],
               "when": e.get("when"), "commit": commit}
        new = {"schema": verify.LEDGER_SCHEMA, **{k: e[k] for k in ("when", "device", "capability", "driver", "torch",
                                                                     "cuda_runtime", "nvcc_flags", "commit", "dirty")
                                                   if k in e},
               "files": files, "builds": builds, "kat": kat,
               **{k: e[k] for k in ("sanitizer_targets", "sanitizers", "sanitizers_clean", "bench") if k in e},
               "restamped": {"from_schema": 1, "sources_sha256": e.get("sources_sha256"),
                             "method": "each closure file checked against the raw sha256 the entry recorded"}}
        unrec = sorted({q for f in files.values() for q, v in f["closure"].items() if v == P.UNRECORDED})
        print(f"{p.relative_to(REPO)}: {len(files)} files, unrecorded closure files: {unrec[:8]}")
        if not dry:
            results.write_json(p, new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    print("results:", dict(restamp_results(a.dry_run)))
    print("executed notebooks:", dict(restamp_notebooks(a.dry_run)))
    print("lab records:", dict(restamp_labs(a.dry_run)))
    restamp_ledger(a.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
