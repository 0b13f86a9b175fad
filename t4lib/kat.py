"""Known-answer tests (KATs) of the bit-level kernel families.

Each family builds its input bits directly from the format's definition (not
with the packing code under test) and knows the answer independently: the
integers themselves for INT4/INT3, PyTorch's ``torch.float8_e4m3fn``
conversion for FP8, a plain index formula for the swizzle. ``run(family,
backend)`` runs one family's vectors on ``backend`` ("reference" on the CPU,
or "cuda" on the current GPU) and returns ``{family, vectors, passed,
max_abs_diff}``; ``run_all(backend)`` runs them all. The rows are the same on
both backends when the kernels are right, so notebook 01 and
``python -m t4lib verify`` print and compare them.
"""
from __future__ import annotations

from typing import Callable

import torch

ROW_KEYS = ("family", "vectors", "passed", "max_abs_diff")


def _device(backend: str) -> torch.device:
    if backend == "reference":
        return torch.device("cpu")
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("backend='cuda' needs a CUDA device")
        return torch.device("cuda")
    raise ValueError(f"backend must be 'reference' or 'cuda', got {backend!r}")


def _to_i32(words: list[int]) -> torch.Tensor:
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)


def _compare(got: torch.Tensor, want: torch.Tensor, per: int = 1) -> tuple[int, int, float]:
    """(vectors, passed, max_abs_diff): a vector is ``per`` consecutive
    outputs; it passes when all are bit-identical (NaN matching NaN)."""
    got, want = got.detach().cpu().reshape(-1, per), want.detach().cpu().reshape(-1, per)
    if got.dtype.is_floating_point:
        gn, wn = torch.isnan(got), torch.isnan(want)
        same = (got.to(torch.float64) == want.to(torch.float64)) | (gn & wn)
        same &= (torch.signbit(got) == torch.signbit(want)) | (gn & wn)  # -0 vs +0 counts
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
        diff = torch.where(gn & wn, torch.zeros_like(diff), diff)
        diff = torch.where(gn ^ wn, torch.full_like(diff, float("inf")), diff)
    else:
        same = got == want
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
    ok = same.all(dim=1)
    return int(ok.numel()), int(ok.sum()), float(diff.max()) if diff.numel() else 0.0


# ---------------------------------------------------------------- families

def lane_sweep(lo: int, hi: int, lanes: int, offset: int = 1, step: int = 1) -> list[list[int]]:
    """Blocks of ``lanes`` values: block (v, j) holds v (every value in lo..hi) at lane j and
    ``lo + (v + offset + step * k) mod (hi - lo + 1)`` at every other lane k."""
    span = hi - lo + 1
    blocks = []
    for v in range(lo, hi + 1):
        for j in range(lanes):
            block = [lo + (v + offset + step * k) % span for k in range(lanes)]
            block[j] = v
            blocks.append(block)
    return blocks


def _grouped_kat(dequant, packed: torch.Tensor, vals: list[list[int]], scales: torch.Tensor, backend: str) -> dict:
    """Unscaled and scaled (one scale per block) known answers of a grouped-scale dequant."""
    per = len(vals[0])
    want = torch.tensor(vals, dtype=torch.float16).reshape(-1)
    n1, p1, d1 = _compare(dequant(packed, backend=backend), want, per=per)
    want_s = (torch.tensor(vals, dtype=torch.float64) * scales.to(torch.float64)[:, None]).to(torch.float16)
    n2, p2, d2 = _compare(dequant(packed, scales.to(packed.device), group_size=per, backend=backend), want_s, per=per)
    return {"vectors": n1 + n2, "passed": p1 + p2, "max_abs_diff": max(d1, d2)}


def kat_int4(backend: str) -> dict:
    """Every signed INT4 value (-8..7) in every one of the 8 lane positions of
    a word, the other lanes holding a different value; unscaled and scaled."""
    from .ops.int4 import int4_dequant
    from .ops.int4.reference import SLOT_OF_VALUE

    vals = lane_sweep(-8, 7, 8, offset=3)
    words = [sum((x & 0xF) << (4 * SLOT_OF_VALUE[k]) for k, x in enumerate(b)) for b in vals]
    # one scale per word, of mixed magnitude and sign
    scales = torch.tensor([(-1) ** i * 2.0 ** ((i % 7) - 3) * (1 + i % 5 / 8) for i in range(len(vals))],
                          dtype=torch.float16)
    return _grouped_kat(int4_dequant, _to_i32(words).to(_device(backend)), vals, scales, backend)


def kat_int3(backend: str) -> dict:
    """Every signed INT3 value (-4..3) at every one of the 32 positions of a
    bitplane block, the other positions holding a rotating pattern; unscaled
    and scaled."""
    from .ops.int3 import int3_dequant

    vals = lane_sweep(-4, 3, 32, offset=1, step=3)
    words = []
    for b in vals:  # bit i of plane p = bit p of value i (two's complement)
        words += [sum((((x & 7) >> p) & 1) << i for i, x in enumerate(b)) for p in range(3)]
    scales = torch.tensor([(-1) ** i * 2.0 ** ((i % 9) - 4) * (1 + i % 7 / 16) for i in range(len(vals))],
                          dtype=torch.float16)
    return _grouped_kat(int3_dequant, _to_i32(words).to(_device(backend)), vals, scales, backend)


def kat_fp8_decode(backend: str) -> dict:
    """All 256 E4M3 bytes against ``torch.float8_e4m3fn`` (on the CPU): the
    254 finite ones bit-exact, 0x7F and 0xFF NaN."""
    from .ops.fp8 import fp8_e4m3_decode

    dev = _device(backend)
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    want = b.view(torch.float8_e4m3fn).to(torch.float16)
    return dict(zip(("vectors", "passed", "max_abs_diff"), _compare(fp8_e4m3_decode(b.to(dev), backend=backend), want)))


def kat_fp8_encode(backend: str) -> dict:
    """Every one of the 65536 fp16 bit patterns against
    ``x.float().clamp(-448, 448).to(torch.float8_e4m3fn)`` (round to nearest
    even, saturating; NaN stays NaN with its sign)."""
    from .ops.fp8 import fp8_e4m3_encode

    dev = _device(backend)
    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    want = x.float().clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    return dict(zip(("vectors", "passed", "max_abs_diff"),
                    _compare(fp8_e4m3_encode(x.to(dev), backend=backend).to(torch.int32), want.to(torch.int32))))


def kat_swizzle(backend: str) -> dict:
    """The swizzled chunk of every (row, chunk) for rows of 2, 4, 8, 16 chunks
    (64 rows) against the formula; a 32 x 8 tile round trip through swizzled
    shared memory against a plain transpose; zero modelled bank conflicts."""
    from .ops.swizzle import swizzle_offsets, swizzle_transpose
    from .ops.swizzle.reference import bank_conflicts, column_read_addresses

    dev = _device(backend)
    n = p = 0
    dmax = 0.0
    for rc in (2, 4, 8, 16):
        rows = 64
        per_line = max(1, 8 // rc)  # rows sharing one 128-byte line
        want = torch.tensor([r * rc + (c ^ ((r // per_line) % min(rc, 8)) if rc < 8 else c ^ (r % 8))
                             for r in range(rows) for c in range(rc)], dtype=torch.int32)
        vn, vp, vd = _compare(swizzle_offsets(rows, rc, device=dev, backend=backend), want, per=rc)
        n, p, dmax = n + vn, p + vp, max(dmax, vd)
    tile = torch.arange(32 * 8 * 4, dtype=torch.int32).reshape(32, 8, 4) * 7 + 1
    want = torch.stack([tile[:, c] for c in range(8)])  # [8, 32, 4]
    vn, vp, vd = _compare(swizzle_transpose(tile.to(dev), backend=backend), want, per=32 * 4)
    n, p, dmax = n + vn, p + vp, max(dmax, vd)
    conflicts = [bank_conflicts(column_read_addresses("swizzled", c), 16) for c in range(8)]
    return {"vectors": n + len(conflicts), "passed": p + sum(c == 0 for c in conflicts), "max_abs_diff": dmax}


FAMILIES: dict[str, Callable[[str], dict]] = {
    "int4": kat_int4,
    "int3": kat_int3,
    "fp8_e4m3_decode": kat_fp8_decode,
    "fp8_e4m3_encode": kat_fp8_encode,
    "swizzle": kat_swizzle,
}


def run(family: str, backend: str = "reference") -> dict:
    """One family's KAT row; an exception becomes a failing row with ``error``."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    try:
        row = {"family": family, **FAMILIES[family](backend)}
    except Exception as e:  # one broken family must not hide the others
        row = {"family": family, "vectors": 0, "passed": 0, "max_abs_diff": float("nan"),
               "error": f"{type(e).__name__}: {e}"}
    if backend == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()
    return row


def run_all(backend: str = "reference") -> list[dict]:
    """KAT rows of every family on ``backend`` ("reference" or "cuda")."""
    return [run(f, backend) for f in FAMILIES]


def verdict(row: dict) -> str:
    """One deterministic line per row (what notebook 01 prints and nbval checks)."""
    ok = row["vectors"] > 0 and row["passed"] == row["vectors"]
    return (f"{row['family']:<16} {row['passed']:>6}/{row['vectors']:<6} max|diff| {row['max_abs_diff']:.3g}  "
            f"{'PASS' if ok else 'FAIL'}" + (f"  ({row['error']})" if row.get("error") else ""))


def all_passed(rows: list[dict]) -> bool:
    return all(r["vectors"] > 0 and r["passed"] == r["vectors"] for r in rows)
