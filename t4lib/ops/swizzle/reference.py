"""Shared-memory layouts and an analytical bank-conflict model (pure Python).

Shared memory has 32 banks of 4 bytes. A warp's request is served in phases:
4-byte accesses as one phase of 32 threads, 8-byte accesses as two phases of
16, 16-byte accesses as four phases of 8 (each phase can move 128 bytes). In a
phase, threads reading the same 4-byte word are served together (broadcast);
distinct words in one bank are serialised. The number of wavefronts of a phase
is the largest number of distinct words any bank must deliver; bank conflicts
are wavefronts beyond one per phase (what Nsight Compute's
``l1tex__data_bank_conflicts_pipe_lsu_mem_shared`` counts, up to hardware
details this model leaves out).

The tile: 32 rows of 128 bytes (8 chunks of 16 bytes), read column-wise with
16-byte accesses, lane ``t`` taking chunk ``c`` of row ``t``.
"""
from __future__ import annotations

BANKS = 32
BANK_BYTES = 4
LAYOUTS = ("naive", "padded", "swizzled")


def swizzle16(row: int, chunk: int, row_chunks: int) -> int:
    """Mirror of ``t4::swizzle16<row_chunks>``: the chunk where chunk ``chunk``
    of row ``row`` is stored (16-byte units within the row)."""
    if row_chunks >= 8:
        if row_chunks % 8:
            raise ValueError(f"row_chunks must be 2, 4 or a multiple of 8, got {row_chunks}")
        return chunk ^ (row & 7)
    if row_chunks not in (2, 4):
        raise ValueError(f"row_chunks must be 2, 4 or a multiple of 8, got {row_chunks}")
    return chunk ^ ((row // (8 // row_chunks)) & (row_chunks - 1))


def swizzle16_offsets(rows: int, row_chunks: int) -> list[int]:
    """Chunk index (16-byte units from the tile start) of every (row, chunk),
    row-major: what ``swizzle_offsets_kernel`` writes."""
    return [r * row_chunks + swizzle16(r, c, row_chunks) for r in range(rows) for c in range(row_chunks)]


def chunk_address(layout: str, row: int, chunk: int, row_chunks: int = 8) -> int:
    """Byte address of chunk ``chunk`` of row ``row`` in one of the three layouts."""
    if layout == "naive":
        return (row * row_chunks + chunk) * 16
    if layout == "padded":
        return (row * (row_chunks + 1) + chunk) * 16  # 16 bytes of padding per row
    if layout == "swizzled":
        return (row * row_chunks + swizzle16(row, chunk, row_chunks)) * 16
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def wavefronts(addresses: list[int], access_bytes: int) -> list[int]:
    """Wavefronts per phase for one warp-wide access: ``addresses`` are the 32
    lanes' byte addresses, each accessing ``access_bytes`` (4, 8 or 16)."""
    if access_bytes not in (4, 8, 16):
        raise ValueError(f"access_bytes must be 4, 8 or 16, got {access_bytes}")
    if len(addresses) != 32:
        raise ValueError(f"a warp has 32 lanes, got {len(addresses)} addresses")
    per_phase = 128 // access_bytes
    out = []
    for start in range(0, 32, per_phase):
        words_in_bank: dict[int, set[int]] = {}
        for a in addresses[start:start + per_phase]:
            if a % access_bytes:
                raise ValueError(f"address {a} is not {access_bytes}-byte aligned")
            for w in range(a // BANK_BYTES, (a + access_bytes) // BANK_BYTES):
                words_in_bank.setdefault(w % BANKS, set()).add(w)
        out.append(max(len(s) for s in words_in_bank.values()))
    return out


def bank_conflicts(addresses: list[int], access_bytes: int) -> int:
    """Extra wavefronts beyond one per phase (0 = conflict-free)."""
    wf = wavefronts(addresses, access_bytes)
    return sum(wf) - len(wf)


def column_read_addresses(layout: str, chunk: int, row_chunks: int = 8) -> list[int]:
    """Lane t reads chunk ``chunk`` of row t: the column-wise 16-byte access."""
    return [chunk_address(layout, t, chunk, row_chunks) for t in range(32)]


def row_read_addresses(layout: str, row0: int, row_chunks: int = 8) -> list[int]:
    """The warp reads 4 consecutive rows of 8 chunks row-major (lane t: row
    row0 + t // 8, chunk t % 8): the coalesced fill of a tile."""
    return [chunk_address(layout, row0 + t // row_chunks, t % row_chunks, row_chunks) for t in range(32)]


def conflict_table(row_chunks: int = 8) -> list[dict]:
    """Per layout: total wavefronts and conflicts of the column-wise read
    (summed over the 8 columns) and of the row-wise fill (over 8 row groups)."""
    rows = []
    for layout in LAYOUTS:
        col = [wavefronts(column_read_addresses(layout, c, row_chunks), 16) for c in range(row_chunks)]
        row = [wavefronts(row_read_addresses(layout, r0, row_chunks), 16) for r0 in range(0, 32, 32 // row_chunks)]
        rows.append({"layout": layout,
                     "column_wavefronts": sum(map(sum, col)),
                     "column_conflicts": sum(sum(w) - len(w) for w in col),
                     "row_wavefronts": sum(map(sum, row)),
                     "row_conflicts": sum(sum(w) - len(w) for w in row)})
    return rows


def swizzle_transpose(tile):
    """Reference of ``swizzle_transpose``: [32, 8, ...] -> [8, 32, ...] (chunk-level transpose)."""
    return tile.transpose(0, 1).contiguous()
