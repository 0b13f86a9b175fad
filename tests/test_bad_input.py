"""Bad input to the exported pack/unpack functions, GGUF shapes and the contract rule raises an
error naming the argument, instead of a silently wrong answer or a failure deep inside."""
import pytest
import torch

from t4lib.contract import rule as R
from t4lib.ops import gguf
from t4lib.ops.int3 import pack_int3, unpack_int3
from t4lib.ops.int4 import pack_int4, unpack_int4


@pytest.mark.parametrize("bad", [torch.zeros(4, dtype=torch.float32), torch.zeros(4, dtype=torch.int64),
                                 torch.zeros(2, 2, dtype=torch.int32), [0, 1, 2]],
                         ids=["float-words", "int64-words", "2-D", "list"])
@pytest.mark.parametrize("unpack", [unpack_int4, unpack_int3])
def test_unpack_rejects_wrong_dtype_or_shape(unpack, bad):
    with pytest.raises((TypeError, ValueError), match="packed"):
        unpack(bad)


def test_unpack_int3_rejects_a_partial_block():
    with pytest.raises(ValueError, match="packed length must be a multiple of 3"):
        unpack_int3(torch.zeros(4, dtype=torch.int32))


def test_unpack_still_inverts_pack():
    v4 = torch.arange(-8, 8, dtype=torch.int8).repeat(2)
    v3 = torch.arange(-4, 4, dtype=torch.int8).repeat(4)
    assert torch.equal(unpack_int4(pack_int4(v4)), v4) and torch.equal(unpack_int3(pack_int3(v3)), v3)


@pytest.mark.parametrize("pack,values,match", [
    (pack_int4, torch.zeros(8, dtype=torch.float32), "values must have dtype"),
    (pack_int4, torch.zeros(7, dtype=torch.int8), "values length must be a multiple of 8"),
    (pack_int4, torch.full((8,), 8, dtype=torch.int8), r"values must lie in \[-8, 7\]"),
    (pack_int3, torch.zeros(32, dtype=torch.float16), "values must have dtype"),
    (pack_int3, torch.zeros(31, dtype=torch.int8), "values length must be a multiple of 32"),
    (pack_int3, torch.full((32,), -5, dtype=torch.int8), r"values must lie in \[-4, 3\]"),
], ids=["int4-float", "int4-length", "int4-range", "int3-float", "int3-length", "int3-range"])
def test_pack_rejects_bad_values(pack, values, match):
    with pytest.raises((TypeError, ValueError), match=match):
        pack(values)


def test_gguf_dequant_rejects_non_positive_dimensions():
    raw = torch.zeros(2 * 34, dtype=torch.uint8)  # two Q8_0 blocks: 64 values
    assert gguf.gguf_dequant(raw, "Q8_0", (2, 32)).shape == (2, 32)
    for shape, name in (((-2, -32), r"shape\[0\]"), ((64, 1, 0), r"shape\[2\]"), ((), "at least one")):
        with pytest.raises(ValueError, match=name):
            gguf.gguf_dequant(raw, "Q8_0", shape)
    with pytest.raises(TypeError, match="shape must be a sequence of ints"):
        gguf.gguf_dequant(raw, "Q8_0", ("a", 32))


def test_pack_for_gemv_rejects_non_positive_dimensions():
    raw = torch.zeros(256 // 32 * 34 * 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match="N must be a positive int"):
        gguf.pack_for_gemv(raw, "Q8_0", -2, -256)


@pytest.mark.parametrize("actual", [torch.zeros(4, dtype=torch.float32), torch.zeros(4, dtype=torch.int64),
                                    torch.zeros(4, dtype=torch.complex64)], ids=["fp32", "int64", "complex"])
def test_contract_rule_rejects_an_output_of_another_dtype(actual):
    with pytest.raises(TypeError, match="actual"):
        R.compare(actual, torch.zeros(4, dtype=torch.float16))


def test_contract_rule_rejects_another_shape_and_accepts_the_contract():
    ref = torch.zeros(4, dtype=torch.float16)
    with pytest.raises(ValueError, match="shape"):
        R.compare(torch.zeros(2, 2, dtype=torch.float16), ref)
    assert R.compare(ref.clone(), ref).passed
