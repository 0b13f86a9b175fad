"""16-byte XOR swizzle: the layout formula, the analytical bank model, the device helper."""
import pytest
import torch

from t4lib.evidence import kat
from t4lib.ops.swizzle import bench_cycles, swizzle_offsets, swizzle_transpose
from t4lib.ops.swizzle import reference as ref


def test_bank_model_basics():
    assert ref.bank_conflicts([4 * t for t in range(32)], 4) == 0          # consecutive words
    assert ref.bank_conflicts([128 * t for t in range(32)], 4) == 31       # stride 32 words: 32-way
    assert ref.bank_conflicts([132 * t for t in range(32)], 4) == 0        # stride 33 (padding)
    assert ref.bank_conflicts([0] * 32, 4) == 0                            # broadcast
    assert ref.wavefronts([16 * t for t in range(32)], 16) == [1, 1, 1, 1]  # 4 phases of 8 lanes
    assert ref.wavefronts([128 * t for t in range(32)], 16) == [8, 8, 8, 8]
    assert ref.wavefronts([8 * t for t in range(32)], 8) == [1, 1]
    with pytest.raises(ValueError, match="access_bytes"):
        ref.wavefronts([0] * 32, 12)
    with pytest.raises(ValueError, match="32 lanes"):
        ref.wavefronts([0] * 31, 4)
    with pytest.raises(ValueError, match="aligned"):
        ref.wavefronts([4] * 32, 16)


def test_column_read_conflicts_per_layout():
    table = {r["layout"]: r for r in ref.conflict_table()}
    assert table["naive"]["column_conflicts"] == 8 * 4 * 7      # 8-way in each of 4 phases, 8 columns
    assert table["padded"]["column_conflicts"] == 0
    assert table["swizzled"]["column_conflicts"] == 0
    assert all(r["row_conflicts"] == 0 for r in table.values())  # row-wise fill stays conflict-free


@pytest.mark.parametrize("row_chunks", [2, 4, 8, 16])
def test_swizzle_is_a_bijection_per_row_group_and_conflict_free(row_chunks):
    rows = 64
    offs = ref.swizzle16_offsets(rows, row_chunks)
    assert sorted(offs) == list(range(rows * row_chunks))
    for r in range(rows):  # stays inside its own row
        assert {o // row_chunks for o in offs[r * row_chunks:(r + 1) * row_chunks]} == {r}
    for c in range(row_chunks):  # 8 lanes reading one column of 8 consecutive rows hit 8 distinct bank groups
        for r0 in range(0, rows, 8):
            groups = {offs[(r0 + t) * row_chunks + c] % 8 for t in range(8)}
            assert len(groups) == 8, (c, r0, groups)


def test_swizzle_ops_reference():
    assert swizzle_offsets(16, 8).tolist() == ref.swizzle16_offsets(16, 8)
    tile = torch.arange(32 * 8 * 4, dtype=torch.int32).reshape(32, 8, 4)
    assert torch.equal(swizzle_transpose(tile), tile.transpose(0, 1))
    with pytest.raises(ValueError, match="row_chunks"):
        swizzle_offsets(4, 3)
    with pytest.raises(ValueError, match="rows"):
        swizzle_offsets(0, 8)
    with pytest.raises(ValueError, match="tile must have shape"):
        swizzle_transpose(torch.zeros(32, 4, 4, dtype=torch.int32))
    with pytest.raises(TypeError, match="tile"):
        swizzle_transpose(torch.zeros(32, 8, 4, dtype=torch.float32))
    with pytest.raises(ValueError, match="layout"):
        bench_cycles("diagonal")
    with pytest.raises(ValueError, match="CUDA device"):
        bench_cycles("naive", device="cpu")


@pytest.mark.gpu
def test_swizzle_kat_cuda():
    row = kat.run("swizzle", "cuda")
    assert row["passed"] == row["vectors"] > 0, kat.verdict(row)


@pytest.mark.gpu
def test_swizzle_bench_runs():
    assert all(bench_cycles(l, warps=8, iters=64) > 0 for l in ref.LAYOUTS)


@pytest.mark.gpu
@pytest.mark.timing
def test_swizzle_bench_orders_layouts():
    c = {l: bench_cycles(l, warps=8, iters=64) for l in ref.LAYOUTS}
    assert c["naive"] > c["swizzled"] and c["naive"] > c["padded"]
