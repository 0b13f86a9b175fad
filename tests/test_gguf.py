"""GGUF formats: our reference against gguf-py (bit-exact), the reader and the
synthetic qwen35 writer, bad files (CPU); CUDA dequant and GEMV (GPU)."""
import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="the gguf package (t4lib[gguf]) is not installed")
from gguf import GGMLQuantizationType as T  # noqa: E402

from t4lib.ops.gguf import FORMATS, gguf_dequant, gguf_gemv, reference as ref, type_id  # noqa: E402
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


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M", [1, 3, 8])
def test_cuda_gemv_vs_reference(name, M):
    t = type_id(name)
    nv = FORMATS[t][1]
    N, K = 37, 4 * 256 if nv == 256 else 352
    raw = ref.random_blocks(t, N * K // nv, seed=M, scale=0.05).reshape(-1)
    w = ref.dequantize(raw, t, (N, K)).half().float()
    x = torch.randn(M, K).half()
    want = x.float() @ w.t()
    y = gguf_gemv(raw.cuda(), t, x.cuda(), N, K, backend="cuda").float().cpu()
    tol = 4 * 2.0 ** -11 * (x.float().abs() @ w.abs().t()) + 1e-3
    assert ((y - want).abs() <= tol).all(), (y - want).abs().max()
    y2 = gguf_gemv(raw.cuda(), t, x.cuda(), N, K, backend="cuda", max_ctas=2).float().cpu()
    assert torch.equal(y, y2)  # grid size never changes the result
