"""Known answers for the INT4 LOP3 family (and the KAT registry itself)."""
import pytest
import torch

from t4lib.evidence import kat
from t4lib.ops.int4 import int4_dequant, pack_int4, unpack_int4
from t4lib.ops.int4 import reference as ref
from kernel_checks import bits_equal, poison_allocator




def _all_values_all_lanes() -> torch.Tensor:
    """16 values x 8 lane positions: block (v, j) holds v at lane j, others rotate."""
    return torch.tensor(kat.lane_sweep(-8, 7, 8, offset=5), dtype=torch.int8).reshape(-1)


def test_every_nibble_in_every_lane_reference():
    v = _all_values_all_lanes()
    out = int4_dequant(pack_int4(v), backend="reference")
    assert torch.equal(out, v.to(torch.float16))


def test_pack_matches_format_definition():
    v = _all_values_all_lanes()
    words = pack_int4(v).to(torch.int64) & 0xFFFFFFFF
    for i, block in enumerate(v.reshape(-1, 8).tolist()):
        want = sum((x & 0xF) << (4 * ref.SLOT_OF_VALUE[k]) for k, x in enumerate(block))
        assert int(words[i]) == want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzz_roundtrip_and_scaled(seed):
    g = torch.Generator().manual_seed(seed)
    n = 8 * 128 * int(torch.randint(1, 9, (1,), generator=g))
    v = torch.randint(-8, 8, (n,), generator=g, dtype=torch.int8)
    p = pack_int4(v)
    assert torch.equal(unpack_int4(p), v)
    s = (torch.rand(n // 128, generator=g) * 4 - 2).to(torch.float16)
    want = (v.double() * s.double().repeat_interleave(128)).to(torch.float16)
    assert bits_equal(int4_dequant(p, s, 128, backend="reference"), want)


def test_bad_input():
    v = torch.zeros(64, dtype=torch.int8)
    p = pack_int4(v)
    with pytest.raises(TypeError, match="packed"):
        int4_dequant(p.to(torch.int64))
    with pytest.raises(ValueError, match="packed"):
        int4_dequant(p.reshape(2, -1))
    with pytest.raises(ValueError, match="packed.*contiguous"):
        int4_dequant(torch.zeros(16, dtype=torch.int32)[::2])
    with pytest.raises(ValueError, match="multiple of 8"):
        pack_int4(torch.zeros(9, dtype=torch.int8))  # odd length
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(torch.full((8,), 8, dtype=torch.int8))
    with pytest.raises(ValueError, match="scales must have"):
        int4_dequant(p, torch.ones(3, dtype=torch.float16), 32)
    with pytest.raises(TypeError, match="scales"):
        int4_dequant(p, torch.ones(2, dtype=torch.float32), 32)
    with pytest.raises(ValueError, match="group_size"):
        int4_dequant(p, torch.ones(2, dtype=torch.float16), 12)
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        int4_dequant(p, backend="cuda")
    with pytest.raises(ValueError, match="backend must be"):
        int4_dequant(p, backend="gpu")


def test_kat_registry_reference_passes():
    rows = kat.run_all("reference")
    assert [r["family"] for r in rows] == list(kat.FAMILIES)
    for r in rows:
        assert set(kat.ROW_KEYS) <= set(r), r
        assert r["vectors"] > 0 and r["passed"] == r["vectors"], kat.verdict(r)
        assert r["max_abs_diff"] == 0.0
    assert kat.all_passed(rows)


def test_kat_registry_catches_a_wrong_kernel(monkeypatch):
    """A KAT that cannot fail is no test: break the reference and watch it fail."""
    import t4lib.ops.int4.reference as r4

    real = r4.int4_dequant
    def broken(p, s, g):  # one element off by one in each call
        out = real(p, s, g).clone()
        out[77] += 1
        return out

    monkeypatch.setattr(r4, "int4_dequant", broken)
    row = kat.run("int4", "reference")
    assert row["passed"] == row["vectors"] - 2 and row["max_abs_diff"] == 1.0
    assert "FAIL" in kat.verdict(row)


@pytest.mark.gpu
def test_int4_kat_cuda():
    row = kat.run("int4", "cuda")
    assert row["passed"] == row["vectors"] > 0, kat.verdict(row)


@pytest.mark.gpu
@pytest.mark.parametrize("n_words,group,max_blocks", [(8, None, None), (1000, 32, None), (4096, 128, 3),
                                                      (333 * 4, 32, 1), (128, 8, None), (129, 8, None),
                                                      (128 * 37 + 8, 64, None), (128 * 600, None, 7),
                                                      (128 * 600 + 112, 128, None)])
def test_int4_cuda_matches_reference(n_words, group, max_blocks):
    g = torch.Generator().manual_seed(n_words)
    v = torch.randint(-8, 8, (n_words * 8,), generator=g, dtype=torch.int8)
    p = pack_int4(v)
    s = None if group is None else (torch.randn(n_words * 8 // group, generator=g)).to(torch.float16)
    want = int4_dequant(p, s, group or 128, backend="reference")
    poison_allocator(n_words * 16)
    got = int4_dequant(p.cuda(), None if s is None else s.cuda(), group or 128, backend="cuda", max_blocks=max_blocks)
    assert bits_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1, 2, 3, 4])
def test_int4_cuda_unaligned_view_matches_reference(offset):
    """A view starting off a 16-byte boundary takes the per-word path; same bits."""
    n_words = 128 * 9 + 3
    g = torch.Generator().manual_seed(offset)
    v = torch.randint(-8, 8, ((n_words + offset) * 8,), generator=g, dtype=torch.int8)
    p = pack_int4(v)
    s = torch.randn(n_words, generator=g).to(torch.float16)  # group_size 8: one scale per word
    want = int4_dequant(p[offset:], s, 8, backend="reference")
    got = int4_dequant(p.cuda()[offset:], s.cuda(), 8, backend="cuda")
    assert bits_equal(got, want)


@pytest.mark.gpu
def test_int4_cuda_bad_input():
    p = torch.zeros(16, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="one device"):  # scales left on the CPU
        int4_dequant(p, torch.ones(1, dtype=torch.float16), 128, backend="cuda")
