"""GGUF formats: our reference against gguf-py (bit-exact), the reader and the
synthetic qwen35 writer, bad files (CPU); CUDA dequant and GEMV (GPU)."""
import gc
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="the gguf package (t4lib[gguf]) is not installed")
from gguf import GGMLQuantizationType as T  # noqa: E402

from t4lib.ops.gguf import (
    FORMATS, gguf_dequant, gguf_gemv, gguf_gemv_packed, pack_for_gemv, packing, reference as ref,
    type_id,
)
from t4lib.ops import int8_activations as a8  # noqa: E402
from t4lib.quant.gguf import GGUFError, GGUFFile, TinyQwen35Dims, write_tiny_qwen35  # noqa: E402

NAMES = [v[0] for v in FORMATS.values()]


def _gguf_py(blocks: torch.Tensor, t: int) -> np.ndarray:
    return gguf.quants.dequantize(blocks.numpy(), T(t)).reshape(blocks.shape[0], -1).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_reference_bit_exact_vs_gguf_py(name):
    t = type_id(name)
    for seed, scale in ((1, 0.01), (2, 1.0), (3, 60000.0)):
        b = ref.random_blocks(t, 97, seed=seed, scale=scale)
        ours = ref.dequantize_blocks(b, t).numpy()
        theirs = _gguf_py(b, t)
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), (name, seed)


def test_iq4_xs_uses_the_nonlinear_codebook_not_q4_k_math():
    # one IQ4_XS block with d = 1, all sub-block scales = 33 (-> 1), index i in every position
    b = torch.zeros(1, 136, dtype=torch.uint8)
    b[0, 0:2] = torch.tensor([1.0], dtype=torch.float16).view(torch.uint8)
    b[0, 2:4] = 0                       # high scale bits 0
    b[0, 4:8] = 0x11                    # low nibbles 1 -> scale = 1 - 32 ... use 33 below
    b[0, 2:4] = torch.tensor([0xAA, 0xAA], dtype=torch.uint8)  # high bits 2 -> scale = 1 | 32 = 33 -> +1
    idx = torch.arange(16, dtype=torch.uint8)
    b[0, 8:24] = idx | (idx << 4)
    v = ref.dequantize_blocks(b, type_id("IQ4_XS"))[0, :16]
    assert v.tolist() == [float(x) for x in ref.IQ4_VALUES]
    assert np.array_equal(v.numpy(), _gguf_py(b, type_id("IQ4_XS"))[0, :16])


def test_unsupported_type_is_named():
    with pytest.raises(ValueError, match="unsupported GGUF tensor type 'Q2_K'"):
        type_id(T.Q2_K)
    with pytest.raises(ValueError, match="unsupported GGUF tensor type 'Q4_0'"):
        gguf_dequant(torch.zeros(18, dtype=torch.uint8), "Q4_0", (32,))


def test_dequant_and_gemv_reference_semantics():
    t = type_id("Q6_K")
    N, K = 5, 512
    raw = ref.random_blocks(t, N * K // 256, seed=4).reshape(-1)
    w = gguf_dequant(raw, t, (N, K))
    assert w.dtype == torch.float32 and w.shape == (N, K)
    assert torch.equal(gguf_dequant(raw, t, (N, K), out_dtype=torch.float16), w.half())
    x = torch.randn(3, K).half()
    y = gguf_gemv(raw, t, x, N, K)
    assert y.dtype == torch.float16 and y.shape == (3, N)
    assert torch.allclose(y.float(), x.float() @ w.half().float().t(), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="raw has"):
        gguf_dequant(raw[:-1], t, (N, K))
    with pytest.raises(ValueError, match="x must have K=512 columns"):
        gguf_gemv(raw, t, x[:, :256].contiguous(), N, K)
    with pytest.raises(ValueError, match="x must have 1..8 rows"):
        gguf_gemv(raw, t, torch.zeros(9, K).half(), N, K)
    with pytest.raises(TypeError, match="x must have dtype torch.float16"):
        gguf_gemv(raw, t, x.float(), N, K)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_qwen35(tmp_path_factory.mktemp("gguf") / "tiny-qwen35.gguf")


def test_writer_reader_roundtrip(tiny):
    f = GGUFFile(tiny)
    d = TinyQwen35Dims()
    assert f.architecture == "qwen35"
    assert f.key("block_count") == d.n_layers + 1
    assert f.key("full_attention_interval") == d.full_attention_interval
    assert f.key("nextn_predict_layers") == 1
    assert f.layer_types() == ["deltanet", "deltanet", "deltanet", "attention", "mtp"]
    assert {t.type_name for t in f.tensors.values()} >= set(NAMES) | {"F32"}
    m = d.n_layers
    for name in (f"blk.{m}.nextn.eh_proj.weight", f"blk.{m}.nextn.enorm.weight", f"blk.{m}.nextn.hnorm.weight",
                 f"blk.{m}.nextn.shared_head_norm.weight"):
        assert name in f.tensors
    conv = 2 * d.ssm_k_heads * d.ssm_head_dim + d.ssm_v_heads * d.ssm_head_dim
    assert f.info("blk.0.attn_qkv.weight").shape == (conv, d.hidden)
    assert f.info("blk.0.ssm_conv1d.weight").shape == (conv, 4)
    assert f.info(f"blk.{m}.nextn.eh_proj.weight").shape == (d.hidden, 2 * d.hidden)
    # every quantized tensor dequantizes bit-exactly like gguf-py
    for name, t in f.tensors.items():
        if t.type_id in FORMATS:
            ours = f.dequantize(name).numpy()
            theirs = gguf.quants.dequantize(np.asarray(t.data), T(t.type_id)).reshape(t.shape)
            assert np.array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32)), name
    assert f.dequantize("blk.0.ssm_a").max() < 0  # stored as -exp(A_log)


def test_truncated_and_corrupt_files(tiny, tmp_path):
    data = tiny.read_bytes()
    p = tmp_path / "bad.gguf"
    p.write_bytes(data[:10])
    with pytest.raises(GGUFError, match="truncated GGUF file"):
        GGUFFile(p)
    p.write_bytes(b"GGML" + data[4:])
    with pytest.raises(GGUFError, match="not a GGUF file"):
        GGUFFile(p)
    p.write_bytes(data[: len(data) - 1000])  # cut inside the last tensor's data
    with pytest.raises(GGUFError, match="corrupt or truncated|truncated or corrupt"):
        GGUFFile(p)
    p.write_bytes(data[:200])  # cut inside the metadata
    with pytest.raises(GGUFError, match="corrupt or truncated|truncated or corrupt"):
        GGUFFile(p)
    with pytest.raises(GGUFError, match="GGUF file not found"):
        GGUFFile(tmp_path / "missing.gguf")


def test_unsupported_tensor_type_in_file(tmp_path):
    p = tmp_path / "q2k.gguf"
    w = gguf.GGUFWriter(str(p), "qwen35")
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((2, 84), dtype=np.uint8), raw_dtype=T.Q2_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = GGUFFile(p)
    assert f.info("blk.0.ffn_up.weight").type_name == "Q2_K"
    with pytest.raises(GGUFError, match="'blk.0.ffn_up.weight' has unsupported GGUF tensor type Q2_K"):
        f.dequantize("blk.0.ffn_up.weight")


# ----------------------------------------------------------------------------- GEMV layout (CPU)

PACKED_NAMES = [packing.PACKED[t] for t in sorted(packing.PACKED)]


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_gemv_layout_is_lossless_and_bit_exact_vs_gguf_py(name):
    t = type_id(name)
    nv = FORMATS[t][1]
    for (N, K), seed, scale in (((3, 512), 1, 0.01), ((5, 1024), 2, 1.0), ((1, 256), 3, 60000.0), ((7, 2304), 4, 0.5)):
        raw = ref.random_blocks(t, N * K // nv, seed=seed, scale=scale).reshape(-1)
        p = packing.pack(raw, t, N, K)
        assert p.dtype == torch.uint8 and p.numel() == raw.numel()
        assert not torch.equal(p, raw)  # it is a real permutation
        assert torch.equal(packing.unpack(p, t, N, K), raw)
        ours = packing.dequantize(p, t, N, K).numpy()
        theirs = gguf.quants.dequantize(raw.numpy().reshape(N, -1), T(t)).astype(np.float32)
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), (name, N, K)


def _spec_pack_q5k(raw, N, K):
    """Q5_K GEMV layout bit by bit, as packing.py's docstring states it (an oracle independent of its tensor code)."""
    b = raw.reshape(N, K // 256, 176).tolist()
    qa, qb, hd, hb = [], [], [], []
    for n in range(N):
        for blk in b[n]:
            for p in range(4):
                qs = blk[48 + 32 * p: 80 + 32 * p]
                qa += qs[:16]
                qb += qs[16:]
                u = [0, 0]
                for v in range(64):  # value v = 32e + 16s + 4ww + k of chunk p: qh byte v % 32, bit 2p + e
                    e, s_, ww, k = v >> 5, (v >> 4) & 1, (v >> 2) & 3, v & 3
                    u[s_] |= ((blk[16 + (v & 31)] >> (2 * p + e)) & 1) << (8 * k + 2 * ww + e)
                hb += [(u[s_] >> (8 * i)) & 0xFF for s_ in range(2) for i in range(4)]
            hd += blk[0:16]
    return torch.tensor(qa + qb + hd + hb, dtype=torch.uint8)


def _spec_pack_q3k(raw, N, K):
    """Q3_K GEMV layout bit by bit, as packing.py's docstring states it."""
    b = raw.reshape(N, K // 256, 110).tolist()
    qa, hb, sc, d = [], [], [], []
    for n in range(N):
        for blk in b[n]:
            q2 = [(blk[32 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i & 127) >> 5))) & 3 for i in range(256)]
            h = [(blk[i & 31] >> (i >> 5)) & 1 for i in range(256)]
            for p in range(4):
                w, u = [0] * 4, [0, 0]
                for v in range(64):
                    w[v >> 4] |= q2[64 * p + v] << (8 * (v & 3) + 2 * ((v >> 2) & 3))  # v = 16w + 4j + k
                    u[v >> 5] |= h[64 * p + v] << (8 * (v & 3) + ((v >> 2) & 7))      # v = 32s + 4jj + k
                qa += [(x >> (8 * i)) & 0xFF for x in w for i in range(4)]
                hb += [(x >> (8 * i)) & 0xFF for x in u for i in range(4)]
            sc += blk[96:108]
            d += blk[108:110]
    return torch.tensor(qa + hb + sc + d, dtype=torch.uint8)


@pytest.mark.parametrize("name,spec", [("Q5_K", _spec_pack_q5k), ("Q3_K", _spec_pack_q3k)])
def test_gemv_layout_matches_its_bit_level_spec(name, spec):
    t = type_id(name)
    for N, K, seed in ((3, 512, 1), (1, 256, 2), (2, 1280, 3)):
        raw = ref.random_blocks(t, N * K // 256, seed=seed, scale=0.5).reshape(-1)
        assert torch.equal(packing.pack(raw, t, N, K), spec(raw, N, K)), (name, N, K)


def test_gemv_layout_support_and_errors():
    assert packing.supports(type_id("Q8_0"), 1024) and not packing.supports(type_id("Q8_0"), 352)
    assert packing.supports(type_id("Q4_K"), 5120) and not packing.supports(type_id("IQ4_NL"), 5120)
    assert packing.supports(type_id("Q5_K"), 5120) and packing.supports(type_id("Q3_K"), 17408)
    assert not packing.supports(type_id("Q5_K"), 320) and not packing.supports(type_id("IQ3_S"), 5120)
    with pytest.raises(ValueError, match="no GEMV layout for IQ4_NL"):
        packing.pack(torch.zeros(144, dtype=torch.uint8), type_id("IQ4_NL"), 1, 256)
    with pytest.raises(ValueError, match="expected 144 uint8 bytes"):
        packing.pack(torch.zeros(143, dtype=torch.uint8), type_id("Q4_K"), 1, 256)
    raw = ref.random_blocks(type_id("Q8_0"), 11, seed=1).reshape(-1)
    x = torch.randn(1, 352).half()
    with pytest.raises(ValueError, match="layout='packed': Q8_0 with K=352 has no GEMV layout"):
        gguf_gemv(raw, "Q8_0", x, 1, 352, layout="packed")
    with pytest.raises(ValueError, match="layout must be"):
        gguf_gemv(raw, "Q8_0", x, 1, 352, layout="tiled")
    with pytest.raises(ValueError, match=r"out must be float16 of shape \(1, 1\)"):
        gguf_gemv(raw, "Q8_0", x, 1, 352, out=torch.empty(2, 1, dtype=torch.float16))
    out = torch.full((1, 1), float("nan"), dtype=torch.float16)
    assert gguf_gemv(raw, "Q8_0", x, 1, 352, out=out) is out and torch.isfinite(out).all()


def test_gemv_packed_op_reference_and_errors():
    t = type_id("Q6_K")
    N, K = 3, 512
    raw = ref.random_blocks(t, N * K // 256, seed=9).reshape(-1)
    p = pack_for_gemv(raw, "Q6_K", N, K)
    x = torch.randn(2, K).half()
    assert torch.equal(gguf_gemv_packed(p, t, x, N, K), gguf_gemv(raw, t, x, N, K))
    with pytest.raises(ValueError, match="packed has 1259 bytes but 1536 Q6_K values need 1260"):
        gguf_gemv_packed(p[:-1], t, x, N, K)
    with pytest.raises(ValueError, match="IQ3_S with K=512 has no GEMV layout"):
        gguf_gemv_packed(p, "IQ3_S", x, N, K)
    with pytest.raises(ValueError, match="IQ3_S with K=512 has no GEMV layout"):
        pack_for_gemv(torch.zeros(N * 2 * 110, dtype=torch.uint8), "IQ3_S", N, K)
    with pytest.raises(TypeError, match="packed must have dtype torch.uint8"):
        gguf_gemv_packed(p.float(), t, x, N, K)
    with pytest.raises(ValueError, match="x must have K=512 columns"):
        gguf_gemv_packed(p, t, x[:, :256].contiguous(), N, K)


def test_gemv_layout_cache_follows_the_tensor():
    from t4lib.ops import gguf as ops_gguf

    t = type_id("Q4_K")
    raw = ref.random_blocks(t, 8, seed=5).reshape(-1)
    a = ops_gguf._gemv_layout(raw, t, 2, 1024)
    assert ops_gguf._gemv_layout(raw, t, 2, 1024) is a                 # made once
    assert torch.equal(a, packing.pack(raw, t, 2, 1024))
    assert ops_gguf._gemv_layout(raw, t, 4, 512) is not a             # other shape: other copy
    raw[:144].zero_()                                                 # in-place write: version changes
    b = ops_gguf._gemv_layout(raw, t, 4, 512)
    assert torch.equal(b, packing.pack(raw, t, 4, 512)) and b[-128:-112].eq(0).all()  # header of block 0 zeroed
    n = len(ops_gguf._GEMV_CACHE)
    del raw, a, b
    gc.collect()
    assert len(ops_gguf._GEMV_CACHE) == n - 1                         # dropped with the tensor
    ops_gguf.clear_gemv_cache()
    assert not ops_gguf._GEMV_CACHE


@pytest.fixture(scope="module")
def host_check(tmp_path_factory):
    """The GEMV-layout traits of kernels/gguf_gemv_fp16.cuh and gguf_gemv_int8.cuh compiled for the CPU."""
    from t4lib.core import build

    try:
        nvcc = build.find_nvcc()
    except Exception:
        pytest.skip("nvcc not available")
    src = Path(packing.__file__).with_name("host_check.cu")
    if not src.is_file():
        pytest.skip("host_check.cu not shipped with this install")
    exe = tmp_path_factory.mktemp("hostcheck") / "host_check"
    subprocess.run([nvcc, "-std=c++17", "-O1", "-arch=compute_75", "-I", str(build.kernels_dir()), "-o", str(exe),
                    str(src)], check=True, capture_output=True)
    return exe


def _host_gemv(exe, tmp_path, t, packed, x, N, K, R):
    """y [M, N] (float64) of the host-built trait of type t over the packed weights."""
    M = x.shape[0]
    packed.numpy().tofile(tmp_path / "w.bin")
    x.view(torch.int16).numpy().tofile(tmp_path / "x.bin")
    subprocess.run([str(exe), str(t), str(N), str(K), str(M), str(R), str(tmp_path / "w.bin"),
                    str(tmp_path / "x.bin"), str(tmp_path / "y.bin")], check=True)
    return torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).reshape(M, N).double()


def _host_gemv_ok(y, raw, t, x, N, K):
    """Whether y matches the reference GEMV within the trait's bound, relative to sum |x w| per output:
    fp32 sums of exact products (Q8_0, Q3_K, Q4_K, Q5_K, Q6_K), fp16 partials of 8 as gemv.cuh's dot8 (IQ4_XS)."""
    w = ref.dequantize(raw, t, (N, K)).double()
    err = (y - x.double() @ w.t()).abs()
    rel = 4 * 2.0 ** -11 if FORMATS[t][0] == "IQ4_XS" else 2.0 ** -16
    return bool((err <= rel * (x.double().abs() @ w.abs().t())).all()), err.max().item()


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_gemv_traits_on_cpu(name, host_check, tmp_path):
    """The CUDA traits' load/dot (host build) over the template's lane walk, vs the reference GEMV."""
    t = type_id(name)
    nv = FORMATS[t][1]
    for (N, K), (M, R) in zip(((37, 1024), (5, 2560), (9, 4096), (3, 256), (7, 1280)),
                              ((1, 2), (3, 2), (8, 1), (1, 1), (1, 4))):
        raw = ref.random_blocks(t, N * K // nv, seed=N + M, scale=0.05).reshape(-1)
        x = torch.randn(M, K, generator=torch.Generator().manual_seed(M)).half()
        y = _host_gemv(host_check, tmp_path, t, packing.pack(raw, t, N, K), x, N, K, R)
        ok, err = _host_gemv_ok(y, raw, t, x, N, K)
        assert ok, (name, N, K, M, err)


@pytest.mark.parametrize("name", ["Q5_K", "Q3_K"])
def test_gemv_traits_on_cpu_catch_corrupt_layouts(name, host_check, tmp_path):
    """Negative controls of the host check: one corrupted byte in any section of the layout, or a packer that
    swaps the two words of every third/fifth-bit record, must make the check fail."""
    t = type_id(name)
    N, K, M, R = 5, 1024, 3, 2
    raw = ref.random_blocks(t, N * K // 256, seed=3, scale=0.05).reshape(-1)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(3)).half()
    good = packing.pack(raw, t, N, K)
    assert _host_gemv_ok(_host_gemv(host_check, tmp_path, t, good, x, N, K, R), raw, t, x, N, K)[0]
    sizes = [len(p) for p in packing._sections(good, t, N, K)]
    starts = np.cumsum([0] + sizes[:-1])
    for i, (start, size) in enumerate(zip(starts, sizes)):
        bad = good.clone()
        bad[start + size // 2] ^= 0x5A
        ok, _ = _host_gemv_ok(_host_gemv(host_check, tmp_path, t, bad, x, N, K, R), raw, t, x, N, K)
        assert not ok, (name, "corrupted byte in section", i)
    hb = 3 if name == "Q5_K" else 1  # the section of third / fifth bits: 8-byte records of two words
    bad = good.clone()
    rec = bad[starts[hb]:starts[hb] + sizes[hb]].view(-1, 2, 4)
    rec.copy_(rec.flip(1))
    ok, _ = _host_gemv_ok(_host_gemv(host_check, tmp_path, t, bad, x, N, K, R), raw, t, x, N, K)
    assert not ok, (name, "swapped bit-plane words")


# ----------------------------------------------------------------------------- int8 activations (CPU)

def _x_with_edges(M, K, seed):
    """fp16 x with the quantizer's edge cases: an all-zero block, a block with one outlier, a block of tiny values,
    and a block of exact rounding ties (d = 1: 127, +-0.5, 1.5, 2.5 round half to even)."""
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(seed))
    x[0, 32:64] = 0
    x[-1, 64] = 40.0
    x[:, 96:128] *= 1e-3
    x[:, 128:160] = torch.tensor([127.0, 0.5, -0.5, 1.5, 2.5, -2.5] + [3.0] * 26)
    return x.half()


def _x8_want(raw, t, x, N, K):
    """(x~ @ W^T, |x~| @ |W|^T) in float64: x~ the int8 activations, W the fp32 dequantized weight."""
    q, d, _ = a8.quantize(x)
    xt = a8.dequantize(q, d).double()
    w = ref.dequantize(raw, t, (N, K)).double()
    return xt @ w.t(), xt.abs() @ w.abs().t()


def _x8_tol(want, mag, out_fp16=True):
    """The int8 kernels' error against x~ @ W^T: fp32 summation (block sums are exact integers), plus the fp16
    rounding of y."""
    return 1e-4 * mag + (1e-3 * want.abs() if out_fp16 else 0) + 1e-5


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_int8_activations_reference_semantics(name):
    t = type_id(name)
    N, K, M = 7, 768, 3
    raw = ref.random_blocks(t, N * K // FORMATS[t][1], seed=6, scale=0.05).reshape(-1)
    x = _x_with_edges(M, K, 6)
    y = gguf_gemv(raw, t, x, N, K, activations="int8")
    q, d, _ = a8.quantize(x)
    w = ref.dequantize(raw, t, (N, K))
    assert y.dtype == torch.float16 and torch.equal(y, (a8.dequantize(q, d) @ w.t()).half())
    assert torch.equal(gguf_gemv_packed(pack_for_gemv(raw, t, N, K), t, x, N, K, activations="int8"), y)
    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    assert gguf_gemv(raw, t, x, N, K, activations="int8", out=out) is out and torch.equal(out, y)
    # against fp16 activations: inside the int8 bound, plus the fp16 rounding of W (fp16 path) and of both outputs
    y16 = gguf_gemv(raw, t, x, N, K)
    xw = x.float().abs() @ w.abs().t()
    bound = a8.error_bound(x, w.abs()) + 2.0 ** -11 * (xw + y.float().abs() + y16.float().abs()) + 1e-5 * xw
    assert ((y.float() - y16.float()).abs() <= bound).all()
    assert not torch.equal(y, y16)  # int8 is other numerics


def test_int8_activations_bad_input():
    t = type_id("Q4_K")
    N, K = 3, 512
    raw = ref.random_blocks(t, N * K // 256, seed=7).reshape(-1)
    x = torch.randn(1, K).half()
    with pytest.raises(ValueError, match="activations must be one of"):
        gguf_gemv(raw, t, x, N, K, activations="int4")
    with pytest.raises(ValueError, match="activations must be one of"):
        gguf_gemv_packed(pack_for_gemv(raw, t, N, K), t, x, N, K, activations="bf16")
    with pytest.raises(ValueError, match="activations='int8' is not supported for Q4_K with layout='gguf'"):
        gguf_gemv(raw, t, x, N, K, layout="gguf", activations="int8")
    for name in ("IQ4_NL", "IQ3_S"):
        t2 = type_id(name)
        raw2 = ref.random_blocks(t2, N * K // FORMATS[t2][1], seed=7).reshape(-1)
        with pytest.raises(ValueError, match=f"activations='int8' is not supported for {name}: it needs the GEMV"):
            gguf_gemv(raw2, t2, x, N, K, activations="int8")
        with pytest.raises(ValueError, match=f"activations='int8' is not supported for {name}"):
            gguf_gemv_packed(raw2, t2, x, N, K, activations="int8")
    raw3 = ref.random_blocks(8, 11, seed=7).reshape(-1)  # Q8_0 with K = 352: no GEMV layout
    with pytest.raises(ValueError, match="activations='int8' is not supported for Q8_0 with K=352"):
        gguf_gemv(raw3, "Q8_0", torch.randn(1, 352).half(), 1, 352, activations="int8")
    assert torch.equal(gguf_gemv(raw, t, x, N, K, activations="fp16"), gguf_gemv(raw, t, x, N, K))


def _host_gemv_x8(exe, tmp_path, t, packed, x, N, K, R, sums=None):
    """y [M, N] (float64) of the host-built int8-activation trait of type t over the packed weights."""
    M = x.shape[0]
    q, d, s = a8.quantize(x)
    if sums is not None:
        s = sums
    packed.numpy().tofile(tmp_path / "w.bin")
    q.numpy().tofile(tmp_path / "xq.bin")
    torch.stack([d.view(torch.int32), s], dim=-1).numpy().tofile(tmp_path / "xs.bin")  # gemv.cuh's XBlock
    subprocess.run([str(exe), str(t), str(N), str(K), str(M), str(R), str(tmp_path / "w.bin"),
                    str(tmp_path / "xq.bin"), str(tmp_path / "y.bin"), str(tmp_path / "xs.bin")], check=True)
    return torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).reshape(M, N).double()


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_int8_traits_on_cpu(name, host_check, tmp_path):
    """The int8-activation traits' load/dot (host build, DP4A emulated) over the template's lane walk, vs x~ @ W^T."""
    t = type_id(name)
    nv = FORMATS[t][1]
    for (N, K), (M, R) in zip(((37, 1024), (5, 2560), (9, 4096), (3, 256), (7, 1280), (6, 512)),
                              ((1, 2), (3, 2), (8, 1), (1, 1), (1, 4), (2, 4))):
        raw = ref.random_blocks(t, N * K // nv, seed=N + M, scale=0.05).reshape(-1)
        x = _x_with_edges(M, K, M)
        y = _host_gemv_x8(host_check, tmp_path, t, packing.pack(raw, t, N, K), x, N, K, R)
        want, mag = _x8_want(raw, t, x, N, K)
        err = (y - want).abs()
        assert (err <= _x8_tol(want, mag, out_fp16=False)).all(), (name, N, K, M, err.max().item())


@pytest.mark.parametrize("name", ["Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_int8_traits_on_cpu_use_the_block_sums(name, host_check, tmp_path):
    """Negative control: the formats with an offset or a min read x's block sums; wrong sums must fail the check."""
    t = type_id(name)
    N, K, M, R = 37, 1024, 1, 2
    raw = ref.random_blocks(t, N * K // 256, seed=8, scale=0.05).reshape(-1)
    x = _x_with_edges(M, K, 8)
    want, mag = _x8_want(raw, t, x, N, K)
    p = packing.pack(raw, t, N, K)
    assert ((_host_gemv_x8(host_check, tmp_path, t, p, x, N, K, R) - want).abs() <= _x8_tol(want, mag, False)).all()
    bad = a8.quantize(x)[2] + 20
    y = _host_gemv_x8(host_check, tmp_path, t, p, x, N, K, R, sums=bad)
    assert not ((y - want).abs() <= _x8_tol(want, mag, False)).all()



# ----------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_cuda_dequant_bit_exact_vs_gguf_py(name):
    t = type_id(name)
    nv = FORMATS[t][1]
    b = ref.random_blocks(t, 1001, seed=11, scale=0.5)
    theirs = _gguf_py(b, t)
    raw = b.reshape(-1).cuda()
    out = gguf_dequant(raw, t, (1001 * nv,), backend="cuda").cpu().numpy().reshape(1001, nv)
    assert np.array_equal(out.view(np.uint32), theirs.view(np.uint32))
    out16 = gguf_dequant(raw, t, (1001 * nv,), out_dtype=torch.float16, backend="cuda").cpu()
    assert torch.equal(out16, torch.from_numpy(theirs).reshape(-1).half())
    capped = gguf_dequant(raw, t, (1001 * nv,), backend="cuda", max_blocks=3).cpu().numpy().reshape(1001, nv)
    assert np.array_equal(capped.view(np.uint32), theirs.view(np.uint32))


def _gemv_check(t, N, K, M, seed, layout="auto", scale=0.05):
    nv = FORMATS[t][1]
    raw = ref.random_blocks(t, N * K // nv, seed=seed, scale=scale).reshape(-1)
    w = ref.dequantize(raw, t, (N, K)).half().float()
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(seed)).half()
    want = x.float() @ w.t()
    rc, xc = raw.cuda(), x.cuda()
    out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    y = gguf_gemv(rc, t, xc, N, K, backend="cuda", layout=layout, out=out).float().cpu()
    if layout == "auto" and packing.supports(t, K):  # the GEMV layout was taken: its copy is cached for rc
        from t4lib.ops import gguf as ops_gguf
        assert any(ent[0]() is rc for ent in ops_gguf._GEMV_CACHE.values()), (FORMATS[t][0], K)
    # fp16 output rounding plus, on the raw path, fp16 partials of 8 (gemv.cuh's dot8)
    tol = 4 * 2.0 ** -11 * (x.float().abs() @ w.abs().t()) + 1e-3
    assert torch.isfinite(y).all()
    assert ((y - want).abs() <= tol).all(), (FORMATS[t][0], N, K, M, layout, (y - want).abs().max())
    out2 = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    y2 = gguf_gemv(rc, t, xc, N, K, backend="cuda", max_ctas=2, layout=layout, out=out2).float().cpu()
    assert torch.equal(y, y2)  # grid size never changes the result
    return y


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M", range(1, 9))
def test_cuda_gemv_vs_reference(name, M):
    t = type_id(name)
    nv = FORMATS[t][1]
    shapes = [(37, 1024)] + ([(13, 352)] if nv == 32 else [(6, 256), (7, 768)])  # 352: Q8_0 without a GEMV layout
    for N, K in shapes:
        for layout in ("auto", "gguf"):
            _gemv_check(t, N, K, M, seed=M + N, layout=layout)


@pytest.mark.gpu
@pytest.mark.parametrize("name", PACKED_NAMES)
@pytest.mark.parametrize("N,K", [(1001, 5120), (300, 17408)])  # the benchmark's K: split 1 and split 4 paths
def test_cuda_gemv_benchmark_shapes(name, N, K):
    t = type_id(name)
    for layout in ("auto", "gguf"):
        _gemv_check(t, N, K, 1, seed=N, layout=layout)


def _replayed_over_weight_sets(t, N, K, seed, rows, **kw):
    """Weight sets (random blocks, x [M, K] for M in rows) run eagerly, then captured in one CUDA graph and
    replayed into NaN-filled outputs; asserts replay == eager. Returns (sets, eager, outputs, graph)."""
    nv = FORMATS[t][1]
    sets = []
    for s, M in enumerate(rows):
        raw = ref.random_blocks(t, N * K // nv, seed=seed + s, scale=0.01).reshape(-1).cuda()
        sets.append((raw, torch.randn(M, K, device="cuda").half()))
    eager = [gguf_gemv(r, t, x, N, K, backend="cuda", **kw).clone() for r, x in sets]
    outs = [torch.full((x.shape[0], N), float("nan"), dtype=torch.float16, device="cuda") for _, x in sets]
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for (r, x), o in zip(sets, outs):
            gguf_gemv(r, t, x, N, K, backend="cuda", out=o, **kw)
    for o in outs:
        o.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    for o, e in zip(outs, eager):
        assert torch.equal(o, e)
    return sets, eager, outs, g


@pytest.mark.gpu
@pytest.mark.parametrize("name", PACKED_NAMES)
def test_cuda_gemv_graph_replay_and_inplace_update(name):
    """As the benchmark runs it: eager warm-up, then CUDA-graph capture and replay over rotating weights."""
    t = type_id(name)
    N, K = 512, 5120
    sets, eager, _, _ = _replayed_over_weight_sets(t, N, K, 20, (1, 1, 1))
    for (r, x), e in zip(sets, eager):
        w = ref.dequantize(r.cpu(), t, (N, K)).half().float()
        want = x.float().cpu() @ w.t()
        assert ((e.float().cpu() - want).abs() <= 4 * 2.0 ** -11 * (x.float().cpu().abs() @ w.abs().t()) + 1e-3).all()
    p = pack_for_gemv(sets[2][0], t, N, K)  # the explicit packed op gives the same bits
    out = torch.full((1, N), float("nan"), dtype=torch.float16, device="cuda")
    assert torch.equal(gguf_gemv_packed(p, t, sets[2][1], N, K, backend="cuda", out=out), eager[2])
    raw, x = sets[0]
    raw.copy_(sets[1][0])  # in place: the GEMV-layout copy must follow
    assert torch.equal(gguf_gemv(raw, t, x, N, K, backend="cuda"), gguf_gemv(sets[1][0], t, x, N, K, backend="cuda"))


def _cuda_x8_check(t, N, K, M, seed):
    nv = FORMATS[t][1]
    raw = ref.random_blocks(t, N * K // nv, seed=seed, scale=0.05).reshape(-1)
    x = _x_with_edges(M, K, seed)
    want, mag = _x8_want(raw, t, x, N, K)
    rc, xc = raw.cuda(), x.cuda()
    out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    y = gguf_gemv(rc, t, xc, N, K, backend="cuda", activations="int8", out=out)
    assert y is out
    y = y.double().cpu()
    assert torch.isfinite(y).all()
    err = (y - want).abs()
    assert (err <= _x8_tol(want, mag)).all(), (FORMATS[t][0], N, K, M, err.max().item())
    out2 = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    y2 = gguf_gemv(rc, t, xc, N, K, backend="cuda", max_ctas=2, activations="int8", out=out2).double().cpu()
    assert torch.equal(y, y2)  # grid size never changes the result
    p = pack_for_gemv(rc, t, N, K)
    assert torch.equal(gguf_gemv_packed(p, t, xc, N, K, backend="cuda", activations="int8").double().cpu(), y)


@pytest.mark.gpu
@pytest.mark.parametrize("name", PACKED_NAMES)
@pytest.mark.parametrize("M", [1, 2, 3, 8])
def test_cuda_int8_gemv_vs_reference(name, M):
    t = type_id(name)
    for N, K in ((37, 1024), (7, 768)):
        _cuda_x8_check(t, N, K, M, seed=M + N)


@pytest.mark.gpu
@pytest.mark.parametrize("name", PACKED_NAMES)
@pytest.mark.parametrize("N,K", [(1001, 5120), (300, 17408)])  # split 1 and split 4 paths
@pytest.mark.parametrize("M", [1, 2])
def test_cuda_int8_gemv_benchmark_shapes(name, N, K, M):
    _cuda_x8_check(type_id(name), N, K, M, seed=N + M)


@pytest.mark.gpu
@pytest.mark.parametrize("M,K", [(1, 5120), (3, 1024), (8, 17408)])
def test_cuda_quantize_x8_bit_exact(M, K):
    """The quantization kernel against int8_activations.quantize: q, d (fp32 bits) and sums bit for bit."""
    from t4lib.ops.gguf import binding

    x = _x_with_edges(M, K, K)
    q_want, d_want, s_want = a8.quantize(x)
    xc = x.cuda()
    for max_ctas in (0, 1):
        q = torch.full((M, K), 0x55, dtype=torch.int8, device="cuda")
        s = torch.full((M, K // 32, 2), -1, dtype=torch.int32, device="cuda")
        binding.quantize_x8(xc, q, s, max_ctas)
        s = s.cpu()
        assert torch.equal(q.cpu(), q_want)
        assert torch.equal(s[..., 0], d_want.view(torch.int32))
        assert torch.equal(s[..., 0].contiguous().view(torch.float32), d_want)
        assert torch.equal(s[..., 1], s_want)


@pytest.mark.gpu
def test_cuda_int8_gemv_rejects_a_type_without_int8_trait():
    from t4lib.ops.gguf import binding

    p = torch.zeros(2 * 256 // 32 * 18, dtype=torch.uint8, device="cuda")
    q = torch.zeros(1, 256, dtype=torch.int8, device="cuda")
    s = torch.zeros(1, 8, 2, dtype=torch.int32, device="cuda")
    y = torch.empty(1, 2, dtype=torch.float16, device="cuda")
    with pytest.raises(RuntimeError, match="t4_gguf_gemv_packed_x8: CUDA error"):
        binding.gemv_packed_x8(type_id("IQ4_NL"), p, q, s, y, 1, 2, 256)


@pytest.mark.gpu
@pytest.mark.parametrize("name", PACKED_NAMES)
def test_cuda_int8_gemv_graph_capture(name):
    """Quantization and GEMV captured in one CUDA graph: replay matches eager, and follows x updated in place."""
    t = type_id(name)
    N, K = 512, 5120
    sets, eager, outs, g = _replayed_over_weight_sets(t, N, K, 30, (1, 2, 3), activations="int8")
    raw, x = sets[1]
    x.copy_(torch.randn(x.shape, device="cuda").half())  # in place: the captured quantization reads it
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(outs[1], gguf_gemv(raw, t, x, N, K, backend="cuda", activations="int8"))
    assert not torch.equal(outs[1], eager[1])
