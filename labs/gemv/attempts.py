"""What the GEMV labs of this folder tried on the M = 1 INT4 GEMV, each attempt beside the library's kernel timed
in the same process (MEASURED; ratios ARITHMETIC). Reads the lab records beside this script and writes
``gemv_attempts.json`` (read by notebook 03):

    python labs/gemv/attempts.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from t4lib.core import results

HERE = Path(__file__).resolve().parent

# What the labs of this folder tried on the M = 1 GEMV:
# (approach, kind, lab file, shape, which cases count as the attempt, the library's case in that run).
# kind: "floor" (not a GEMV), "library numerics" (the same results as the library), "int8 activations" (other numerics).
_ATTEMPTS = [
    ("the same weight loads, no arithmetic (read floor)", "floor", "gemv_lab.json", "5120x17408", ("R2U4_RO/p1",),
     "lib"),
    ("a copy_ of the same byte count", "floor", "xs_lab.json", "5120x17408", ("copy_same_bytes",), "rowgroup"),
    ("x held in registers, no activation loads (best of 10)", "library numerics", "xs_lab.json", "5120x17408",
     "variants", "rowgroup"),
    ("3-8 register stages of loads (best of 15)", "library numerics", "stages_lab.json", "5120x17408", "variants",
     "R2U2ST2MB4"),
    ("dot products on the tensor cores (best of 3)", "library numerics", "mma_lab.json", "5120x17408", "variants", "lib"),
    ("K split forced to 4 (17408x5120)", "library numerics", "stages_split_lab.json", "17408x5120", ("R2U2ST2MB4/S4",),
     "R2U2ST2MB4/S1"),
    ("x quantized to int8, DP4A dot products (best of 8)", "int8 activations", "dp4a_lab.json", "5120x17408",
     "variants", "library"),
]


def recorded_gemv_attempts(labs: dict[str, dict]) -> list[dict]:
    """The recorded lab attempts at the M = 1 INT4 GEMV (MEASURED; ratios ARITHMETIC), each as its
    fastest case's median time beside the library's kernel timed in the same process:
    ``{"approach", "kind", "shape", "case", "us", "library_us", "ratio", "source"}``, ``ratio`` = us /
    library_us (above 1: slower than the library). ``labs``: lab records by file stem.
    "variants" means every variant the lab lists except the library's own tuning. Labs not in ``labs`` are left
    out."""
    rows = []
    for approach, kind, name, shape, cases, lib in _ATTEMPTS:
        doc = labs.get(name.removesuffix(".json"))
        if doc is None:
            continue
        timed = doc["gemv"][shape]
        if cases == "variants":
            cases = [v for v in doc["variants"].values() if v != lib and "/S" not in v]
        us, case = min((timed[c]["us"], c) for c in cases if c in timed)
        where = f"{doc['device']} lab {name} @ {str(doc.get('commit', '?'))[:7]}"
        rows.append({"approach": approach, "kind": kind, "shape": shape, "case": case, "us": us,
                     "library_us": timed[lib]["us"], "ratio": us / timed[lib]["us"], "source": where})
    return rows


def main() -> int:
    labs = {p.stem: json.loads(p.read_text()) for p in sorted(HERE.glob("*.json")) if p.stem != "gemv_attempts"}
    for doc in labs.values():
        results.validate_lab(doc)
    rows = recorded_gemv_attempts(labs)
    devices = sorted({labs[name.removesuffix(".json")]["device"] for _, _, name, *_ in _ATTEMPTS})
    rec = {"device": ", ".join(devices), "commit": results.git_commit()[0] or "0000000",
           "command": "python labs/gemv/attempts.py", "date": results.now(),
           "note": "arithmetic over the lab records named in each row's source: the fastest case of each attempt "
                   "against the library's kernel timed in the same process; ratio = us / library_us",
           "rows": rows}
    out = HERE / "gemv_attempts.json"
    out.write_text(json.dumps(rec, indent=1) + "\n")
    for a in rows:
        print(f"{a['approach']:52s} {a['kind']:16s} {a['shape']:11s} {a['us']:5.1f} us vs {a['library_us']:5.1f} us:"
              f" x{a['ratio']:.2f}  ({a['source']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
