"""FP8 E4M3 emulation: all 256 bytes vs torch.float8_e4m3fn, every fp16 for the encoder."""
import pytest
import torch

from t4lib.evidence import kat
from t4lib.ops.fp8 import fp8_e4m3_decode, fp8_e4m3_encode
from kernel_checks import bits_equal, poison_allocator



ALL_BYTES = torch.arange(256, dtype=torch.int32).to(torch.uint8)
ALL_HALF = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)


def _oracle_decode(b):
    return b.view(torch.float8_e4m3fn).to(torch.float16)


def test_decode_all_256_bytes_against_torch():
    got = fp8_e4m3_decode(ALL_BYTES, backend="reference")
    want = _oracle_decode(ALL_BYTES)
    nan = torch.isnan(want)
    assert nan.nonzero().flatten().tolist() == [0x7F, 0xFF]
    assert torch.isnan(got[nan]).all()
    assert int((~nan).sum()) == 254
    assert bits_equal(got[~nan], want[~nan])  # bit-exact, signed zero included


def test_decode_known_values():
    b = torch.tensor([0x00, 0x80, 0x01, 0x07, 0x08, 0x38, 0x7E, 0xFE, 0x40], dtype=torch.uint8)
    want = [0.0, -0.0, 2.0 ** -9, 7 * 2.0 ** -9, 2.0 ** -6, 1.0, 448.0, -448.0, 2.0]
    got = fp8_e4m3_decode(torch.cat([b, torch.zeros(7, dtype=torch.uint8)]), backend="reference")[:9]
    assert got.tolist() == want
    assert torch.signbit(got[1])


def test_decode_scaled():
    g = torch.Generator().manual_seed(0)
    b = torch.randint(0, 256, (512,), generator=g, dtype=torch.int32).to(torch.uint8)
    b[b == 0x7F] = 0
    b[b == 0xFF] = 0
    s = (torch.rand(16, generator=g) * 8 - 4).to(torch.float16)
    want = (_oracle_decode(b).double() * s.double().repeat_interleave(32)).to(torch.float16)
    assert bits_equal(fp8_e4m3_decode(b, s, 32, backend="reference"), want)


def test_encode_every_fp16_against_torch():
    got = fp8_e4m3_encode(ALL_HALF, backend="reference")
    want = ALL_HALF.float().clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(got, want)
    # where no saturation is involved (|x| <= 464, NaN) it is PyTorch's plain conversion
    plain = (ALL_HALF.float().abs() <= 464) | torch.isnan(ALL_HALF)
    assert torch.equal(got[plain], ALL_HALF[plain].to(torch.float8_e4m3fn).view(torch.uint8))


def test_encode_saturates_and_rounds_to_even():
    x = torch.tensor([448, 449, 464, 470, 1e4, float("inf"), -float("inf"), 0.0, 1.0625, 1.1875],
                     dtype=torch.float16)
    got = fp8_e4m3_encode(torch.cat([x, torch.zeros(6, dtype=torch.float16)]), backend="reference")[:10]
    # 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): even -> 0x38; 1.1875 -> 1.25 (0x3A)
    assert got.tolist() == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x00, 0x38, 0x3A]


def test_roundtrip_of_every_finite_byte():
    finite = torch.cat([ALL_BYTES[(ALL_BYTES != 0x7F) & (ALL_BYTES != 0xFF)], torch.zeros(2, dtype=torch.uint8)])
    back = fp8_e4m3_encode(fp8_e4m3_decode(finite, backend="reference"), backend="reference")
    assert torch.equal(back, finite)


def test_bad_input():
    with pytest.raises(TypeError, match="data"):
        fp8_e4m3_decode(torch.zeros(8, dtype=torch.int8))
    with pytest.raises(ValueError, match="data length must be a multiple of 8"):
        fp8_e4m3_decode(torch.zeros(9, dtype=torch.uint8))
    with pytest.raises(ValueError, match="data.*contiguous"):
        fp8_e4m3_decode(torch.zeros(32, dtype=torch.uint8)[::2])
    with pytest.raises(ValueError, match="data must be 1-D"):
        fp8_e4m3_decode(torch.zeros(2, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="scales must have 2"):
        fp8_e4m3_decode(torch.zeros(64, dtype=torch.uint8), torch.ones(3, dtype=torch.float16), 32)
    with pytest.raises(ValueError, match="group_size"):
        fp8_e4m3_decode(torch.zeros(64, dtype=torch.uint8), torch.ones(8, dtype=torch.float16), 4)
    with pytest.raises(TypeError, match="x must have dtype"):
        fp8_e4m3_encode(torch.zeros(8, dtype=torch.float32))
    with pytest.raises(ValueError, match="x length must be a multiple of 8"):
        fp8_e4m3_encode(torch.zeros(7, dtype=torch.float16))
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        fp8_e4m3_decode(torch.zeros(8, dtype=torch.uint8), backend="cuda")
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        fp8_e4m3_encode(torch.zeros(8, dtype=torch.float16), backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["fp8_e4m3_decode", "fp8_e4m3_encode"])
def test_fp8_kat_cuda(family):
    row = kat.run(family, "cuda")
    assert row["passed"] == row["vectors"] > 0, kat.verdict(row)


@pytest.mark.gpu
@pytest.mark.parametrize("n,group,max_blocks", [(8, None, None), (4096 + 8, None, None), (8192, 32, None),
                                                (100_000, 40, 3)])
def test_fp8_decode_cuda_matches_reference(n, group, max_blocks):
    g = torch.Generator().manual_seed(n)
    b = torch.randint(0, 256, (n,), generator=g, dtype=torch.int32).to(torch.uint8)
    s = None if group is None else torch.randn(n // group, generator=g).to(torch.float16)
    want = fp8_e4m3_decode(b, s, group or 128, backend="reference")
    poison_allocator(2 * n)
    got = fp8_e4m3_decode(b.cuda(), None if s is None else s.cuda(), group or 128, backend="cuda",
                          max_blocks=max_blocks)
    nan = torch.isnan(want)
    assert torch.isnan(got.cpu()[nan]).all()
    assert bits_equal(got.cpu()[~nan], want[~nan])


@pytest.mark.gpu
def test_fp8_encode_cuda_every_fp16():
    poison_allocator(65536)
    got = fp8_e4m3_encode(ALL_HALF.cuda(), backend="cuda")
    assert torch.equal(got.cpu(), fp8_e4m3_encode(ALL_HALF, backend="reference"))
