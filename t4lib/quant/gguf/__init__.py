"""GGUF files for qwen35: a reader (metadata, tensor types, memory-mapped data)
on top of the ``gguf`` package, dequantization through :mod:`t4lib.ops.gguf`,
and a writer of small synthetic qwen35 files (every layer type and the MTP
tensors) for tests.

Shapes are reported in numpy order (``[rows, cols]``, last dim fastest), i.e.
reversed from ggml's ``ne``: the GGUF tensor ``attn_qkv`` listed as
``[5120, 10240]`` is ``(10240, 5120)`` here, ``N = 10240`` rows of ``K = 5120``.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from t4lib.ops.gguf import gguf_dequant
from t4lib.ops.gguf.reference import FORMATS, TYPE_OF, random_blocks

__all__ = ["GGUFError", "GGUFFile", "TensorInfo", "write_tiny_qwen35", "TinyQwen35Dims"]

FLOAT_TYPES = {0: ("F32", np.float32), 1: ("F16", np.float16)}


class GGUFError(ValueError):
    """A GGUF file is missing, truncated, corrupt or holds something unsupported."""


def _gguf():
    try:
        import gguf  # optional: gguf (the gguf extra)
    except ImportError as e:  # pragma: no cover - the gguf extra is a declared dependency
        raise ImportError("reading GGUF files needs the 'gguf' package: pip install 't4lib[gguf]'") from e
    return gguf


@dataclass
class TensorInfo:
    name: str
    type_id: int
    type_name: str
    shape: tuple       # numpy order
    n_bytes: int
    data: np.ndarray   # memory-mapped raw bytes (uint8) or values (F32/F16)


class GGUFFile:
    """A GGUF file opened read-only with its tensor data memory-mapped.

    ``metadata`` maps keys to Python values; ``tensors`` maps names to
    :class:`TensorInfo`; ``raw(name)`` gives the bytes as a uint8 tensor
    (zero-copy); ``dequantize(name)`` returns float values.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise GGUFError(f"GGUF file not found: {self.path}")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(24)
        if len(head) < 24:
            raise GGUFError(f"{self.path}: truncated GGUF file ({size} bytes, the header alone is 24)")
        if head[:4] != b"GGUF":
            raise GGUFError(f"{self.path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
        gguf = _gguf()
        try:
            reader = gguf.GGUFReader(self.path, "r")
        except Exception as e:
            raise GGUFError(f"{self.path}: corrupt or truncated GGUF file: {type(e).__name__}: {e}") from None
        self._reader = reader
        self.metadata = {}
        for name, field in reader.fields.items():
            try:
                self.metadata[name] = field.contents()
            except Exception:
                self.metadata[name] = None
        self.tensors: dict[str, TensorInfo] = {}
        for t in reader.tensors:
            tid = int(t.tensor_type)
            shape = tuple(int(s) for s in reversed(t.shape.tolist()))
            n = math.prod(shape)
            qs = gguf.GGML_QUANT_SIZES.get(gguf.GGMLQuantizationType(tid))
            expect = n // qs[0] * qs[1] if qs and n % qs[0] == 0 else None
            if expect is None:
                raise GGUFError(f"{self.path}: tensor {t.name!r} has shape {shape} that does not fit "
                                f"{t.tensor_type.name} blocks")
            if int(t.n_bytes) != expect or t.data.nbytes != expect:
                raise GGUFError(f"{self.path}: tensor {t.name!r} ({t.tensor_type.name}, shape {shape}) should "
                                f"have {expect} bytes of data, the file holds {t.data.nbytes}: truncated or corrupt")
            self.tensors[t.name] = TensorInfo(t.name, tid, t.tensor_type.name, shape, expect, t.data)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def key(self, suffix: str, default=None):
        """Metadata ``{arch}.{suffix}``."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        return self.tensors[name]

    def raw(self, name: str) -> torch.Tensor:
        """The tensor's bytes as a 1-D uint8 tensor sharing the memory map."""
        d = np.ascontiguousarray(self.info(name).data).reshape(-1).view(np.uint8)
        with warnings.catch_warnings():  # read-only memory map: the tensor must not be written
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(d)

    def dequantize(self, name: str, device="cpu", out_dtype=torch.float32, backend: str = "auto") -> torch.Tensor:
        """Float values of a tensor, shape in numpy order. Quantized types go
        through :func:`t4lib.ops.gguf.gguf_dequant` (CUDA when ``device`` is)."""
        t = self.info(name)
        if t.type_id in FLOAT_TYPES:
            arr = np.asarray(t.data).reshape(t.shape)
            return torch.from_numpy(np.array(arr, dtype=np.float32)).to(device=device, dtype=out_dtype)
        if t.type_id not in FORMATS:
            raise GGUFError(f"tensor {name!r} has unsupported GGUF tensor type {t.type_name}; supported: F32, F16, "
                            f"{', '.join(v[0] for v in FORMATS.values())}")
        return gguf_dequant(self.raw(name).to(device), t.type_id, t.shape, out_dtype=out_dtype, backend=backend)

    def layer_types(self) -> list[str]:
        """'attention', 'deltanet' or 'mtp' per block, from the tensors present."""
        n = int(self.key("block_count", 0))
        out = []
        for i in range(n):
            if f"blk.{i}.nextn.eh_proj.weight" in self.tensors:
                out.append("mtp")
            elif f"blk.{i}.ssm_a" in self.tensors:
                out.append("deltanet")
            else:
                out.append("attention")
        return out


# ----------------------------------------------------------------------------- writer

@dataclass(frozen=True)
class TinyQwen35Dims:
    vocab: int = 64
    hidden: int = 256
    ffn: int = 512
    n_layers: int = 4                # main layers; one MTP block follows
    full_attention_interval: int = 4
    attn_heads: int = 4
    attn_kv_heads: int = 1
    attn_head_dim: int = 64
    rope_dim: int = 16
    ssm_k_heads: int = 2
    ssm_v_heads: int = 6
    ssm_head_dim: int = 32


# Quant types of the synthetic file: every format the loader handles appears.
_TYPES = {"attn_qkv": "Q4_K", "attn_gate": "Q5_K", "ssm_out": "Q8_0", "ffn_gate": "IQ4_XS", "ffn_up": "Q6_K",
          "ffn_down": "Q3_K", "attn_q": "IQ3_S", "attn_k": "IQ4_NL", "attn_v": "Q8_0", "attn_output": "Q4_K",
          "token_embd": "Q8_0", "output": "Q6_K", "nextn.eh_proj": "Q8_0"}


def write_tiny_qwen35(path: str | os.PathLike, dims: TinyQwen35Dims = TinyQwen35Dims(), seed: int = 0) -> Path:
    """Write a small qwen35 GGUF with random valid weights; returns the path.

    Layers ``full_attention_interval - 1, 2*interval - 1, ...`` are full
    attention, the others Gated DeltaNet; block ``n_layers`` is the MTP/NextN
    block (attention + FFN + ``nextn.eh_proj``, ``enorm``, ``hnorm``,
    ``shared_head_norm``). Quantized tensors hold random blocks with finite
    scales (see :func:`t4lib.ops.gguf.reference.random_blocks`)."""
    gguf = _gguf()
    d = dims
    rng = np.random.default_rng(seed)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_block_count(d.n_layers + 1)
    w.add_context_length(4096)
    w.add_embedding_length(d.hidden)
    w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.attn_heads)
    w.add_head_count_kv(d.attn_kv_heads)
    w.add_key_length(d.attn_head_dim)
    w.add_value_length(d.attn_head_dim)
    w.add_rope_dimension_count(d.rope_dim)
    w.add_rope_freq_base(1e7)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_full_attention_interval(d.full_attention_interval)
    w.add_nextn_predict_layers(1)
    w.add_ssm_conv_kernel(4)
    w.add_ssm_state_size(d.ssm_head_dim)
    w.add_ssm_group_count(d.ssm_k_heads)
    w.add_ssm_time_step_rank(d.ssm_v_heads)
    w.add_ssm_inner_size(d.ssm_v_heads * d.ssm_head_dim)
    w.add_vocab_size(d.vocab)
    counter = [seed * 1000]

    def quant(name, kind, rows, cols):
        t = TYPE_OF[_TYPES[kind]]
        _, nv, nb = FORMATS[t]
        if cols % nv:
            raise ValueError(f"{name}: {cols} columns do not fit {_TYPES[kind]} blocks of {nv}")
        counter[0] += 1
        blocks = random_blocks(t, rows * cols // nv, seed=counter[0]).numpy().reshape(rows, cols // nv * nb)
        w.add_tensor(name, blocks, raw_dtype=gguf.GGMLQuantizationType(t))

    def f32(name, *shape, base=0.0, scale=0.1):
        w.add_tensor(name, (base + scale * rng.standard_normal(shape)).astype(np.float32))

    H, HK, Dh = d.ssm_v_heads, d.ssm_k_heads, d.ssm_head_dim
    conv_dim = 2 * HK * Dh + H * Dh
    quant("token_embd.weight", "token_embd", d.vocab, d.hidden)
    f32("output_norm.weight", d.hidden, base=1.0)
    quant("output.weight", "output", d.vocab, d.hidden)

    def attention(i):
        hd = d.attn_head_dim
        quant(f"blk.{i}.attn_q.weight", "attn_q", 2 * d.attn_heads * hd, d.hidden)  # query and gate fused
        quant(f"blk.{i}.attn_k.weight", "attn_k", d.attn_kv_heads * hd, d.hidden)
        quant(f"blk.{i}.attn_v.weight", "attn_v", d.attn_kv_heads * hd, d.hidden)
        quant(f"blk.{i}.attn_output.weight", "attn_output", d.hidden, d.attn_heads * hd)
        f32(f"blk.{i}.attn_q_norm.weight", hd, base=1.0)
        f32(f"blk.{i}.attn_k_norm.weight", hd, base=1.0)

    def ffn_and_norms(i):
        f32(f"blk.{i}.attn_norm.weight", d.hidden, base=1.0)
        f32(f"blk.{i}.post_attention_norm.weight", d.hidden, base=1.0)
        quant(f"blk.{i}.ffn_gate.weight", "ffn_gate", d.ffn, d.hidden)
        quant(f"blk.{i}.ffn_up.weight", "ffn_up", d.ffn, d.hidden)
        quant(f"blk.{i}.ffn_down.weight", "ffn_down", d.hidden, d.ffn)

    for i in range(d.n_layers):
        ffn_and_norms(i)
        if (i + 1) % d.full_attention_interval == 0:
            attention(i)
        else:
            quant(f"blk.{i}.attn_qkv.weight", "attn_qkv", conv_dim, d.hidden)
            quant(f"blk.{i}.attn_gate.weight", "attn_gate", H * Dh, d.hidden)
            f32(f"blk.{i}.ssm_alpha.weight", H, d.hidden, scale=0.02)
            f32(f"blk.{i}.ssm_beta.weight", H, d.hidden, scale=0.02)
            f32(f"blk.{i}.ssm_conv1d.weight", conv_dim, 4, scale=0.5)
            w.add_tensor(f"blk.{i}.ssm_a", (-np.exp(rng.uniform(-1, 1, H))).astype(np.float32))
            f32(f"blk.{i}.ssm_dt.bias", H, scale=0.5)
            f32(f"blk.{i}.ssm_norm.weight", Dh, base=1.0)
            # ssm_out's K (H*Dh) is not a multiple of 256, so it is Q8_0 (blocks of 32)
            quant(f"blk.{i}.ssm_out.weight", "ssm_out", d.hidden, H * Dh)
    m = d.n_layers  # MTP / NextN block
    ffn_and_norms(m)
    attention(m)
    quant(f"blk.{m}.nextn.eh_proj.weight", "nextn.eh_proj", d.hidden, 2 * d.hidden)
    f32(f"blk.{m}.nextn.enorm.weight", d.hidden, base=1.0)
    f32(f"blk.{m}.nextn.hnorm.weight", d.hidden, base=1.0)
    f32(f"blk.{m}.nextn.shared_head_norm.weight", d.hidden, base=1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
