"""Signed INT3 bitplanes: format, known answers, fuzz, bad input, CUDA vs reference."""
import pytest
import torch

from t4lib.evidence import kat
from t4lib.ops.int3 import int3_dequant, pack_int3, unpack_int3
from t4lib.ops.int3 import reference as ref
from kernel_checks import bits_equal, poison_allocator




def _all_values_all_positions() -> torch.Tensor:
    return torch.tensor(kat.lane_sweep(-4, 3, 32, offset=3, step=5), dtype=torch.int8).reshape(-1)


def test_pack_is_the_bitplane_definition():
    v = _all_values_all_positions()
    w = pack_int3(v).to(torch.int64) & 0xFFFFFFFF
    for b, block in enumerate(v.reshape(-1, 32).tolist()):
        for p in range(3):
            assert int(w[3 * b + p]) == sum((((x & 7) >> p) & 1) << i for i, x in enumerate(block))


def test_every_value_at_every_position_reference():
    v = _all_values_all_positions()
    assert torch.equal(unpack_int3(pack_int3(v)), v)
    assert torch.equal(int3_dequant(pack_int3(v), backend="reference"), v.to(torch.float16))


def test_kernel_bit_algorithm_on_cpu():
    """The lop3/prmt steps of t4::dequant_int3x32, emulated on Python ints,
    give 1028 + v in fp16 for every value at every position."""
    v = _all_values_all_positions()
    w = (pack_int3(v).to(torch.int64) & 0xFFFFFFFF).reshape(-1, 3).tolist()
    got = []
    for p0, p1, p2 in w:
        halves = ref.dequant_int3x32_bitops(p0, p1, p2)
        assert all(h >> 10 == 25 for h in halves)  # exponent of 1024..2047
        got += [(h & 0x3FF) - 4 for h in halves]
    assert got == v.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fuzz(seed):
    g = torch.Generator().manual_seed(seed)
    n = 128 * int(torch.randint(1, 20, (1,), generator=g))
    v = torch.randint(-4, 4, (n,), generator=g, dtype=torch.int8)
    p = pack_int3(v)
    assert p.numel() == 3 * n // 32
    assert torch.equal(unpack_int3(p), v)
    s = (torch.rand(n // 64, generator=g) * 4 - 2).to(torch.float16)
    want = (v.double() * s.double().repeat_interleave(64)).to(torch.float16)
    assert bits_equal(int3_dequant(p, s, 64, backend="reference"), want)


def test_bad_input():
    p = pack_int3(torch.zeros(128, dtype=torch.int8))  # 12 words
    with pytest.raises(TypeError, match="packed"):
        int3_dequant(p.to(torch.int16))
    with pytest.raises(ValueError, match="multiple of 3"):
        int3_dequant(p[:11])
    with pytest.raises(ValueError, match="packed.*contiguous"):
        int3_dequant(torch.zeros(24, dtype=torch.int32)[::2])
    with pytest.raises(ValueError, match="multiple of 32"):
        pack_int3(torch.zeros(33, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"\[-4, 3\]"):
        pack_int3(torch.full((32,), 4, dtype=torch.int8))
    with pytest.raises(ValueError, match="group_size"):
        int3_dequant(p, torch.ones(8, dtype=torch.float16), 16)
    with pytest.raises(ValueError, match="scales must have 2"):
        int3_dequant(p, torch.ones(3, dtype=torch.float16), 64)
    with pytest.raises(TypeError, match="scales"):
        int3_dequant(p, torch.ones(2, dtype=torch.bfloat16), 64)
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        int3_dequant(p, backend="cuda")
    with pytest.raises(ValueError, match="max_blocks"):
        int3_dequant(p, max_blocks=0)


@pytest.mark.gpu
def test_int3_kat_cuda():
    row = kat.run("int3", "cuda")
    assert row["passed"] == row["vectors"] > 0, kat.verdict(row)


@pytest.mark.gpu
@pytest.mark.parametrize("staged", [True, False])
@pytest.mark.parametrize("n_blocks,group,max_blocks", [(1, None, None), (31, None, None), (33, 32, None),
                                                       (1000, 128, None), (777, 32, 2), (4096, 64, 1)])
def test_int3_cuda_matches_reference(n_blocks, group, max_blocks, staged):
    """Full and partial warp tiles, grid caps that force grid-stride looping."""
    g = torch.Generator().manual_seed(n_blocks)
    v = torch.randint(-4, 4, (32 * n_blocks,), generator=g, dtype=torch.int8)
    p = pack_int3(v)
    s = None if group is None else torch.randn(32 * n_blocks // group, generator=g).to(torch.float16)
    want = int3_dequant(p, s, group or 128, backend="reference")
    poison_allocator(64 * n_blocks)
    got = int3_dequant(p.cuda(), None if s is None else s.cuda(), group or 128, backend="cuda",
                       max_blocks=max_blocks, staged=staged)
    assert bits_equal(got, want)


@pytest.mark.gpu
def test_int3_cuda_bad_input():
    p = torch.zeros(12, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="one device"):
        int3_dequant(p, torch.ones(1, dtype=torch.float16), 128, backend="cuda")
    with pytest.raises(ValueError, match="multiple of 3"):
        int3_dequant(p[:10], backend="cuda")
