"""qwen35 layers built from GGUF tensors: the Gated DeltaNet (linear-attention)
decode layer, projections in GGUF formats through the fused dequant-GEMV and the
fused decode step of :mod:`t4lib.ops.deltanet`.

``DeltaNetLayer.step(x)``: x [B, hidden] fp16 (the normed hidden state) ->
[B, hidden] fp16, updating the layer's recurrent and conv states. Head order is
the GGUF one (value heads tiled over key heads).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...ops.deltanet import gated_deltanet_decode
from ...ops.gguf import FORMATS, gguf_gemv, reference as gguf_ref, type_id


@dataclass(frozen=True)
class DeltaNetDims:
    hidden: int = 5120
    k_heads: int = 16
    v_heads: int = 48
    head_dim: int = 128

    @property
    def conv_dim(self) -> int:
        return 2 * self.k_heads * self.head_dim + self.v_heads * self.head_dim

    @property
    def value_dim(self) -> int:
        return self.v_heads * self.head_dim


class GGUFLinear:
    """y = x @ W^T with W [N, K] kept as raw GGUF blocks on the device."""

    def __init__(self, raw: torch.Tensor, ggml_type, N: int, K: int):
        self.raw, self.type, self.N, self.K = raw, type_id(ggml_type), N, K

    @property
    def nbytes(self) -> int:
        return self.raw.numel()

    def __call__(self, x: torch.Tensor, backend: str = "auto") -> torch.Tensor:
        return gguf_gemv(self.raw, self.type, x, self.N, self.K, backend=backend)


class DeltaNetLayer:
    """One qwen35 linear-attention layer for decode (see the module docstring)."""

    def __init__(self, dims: DeltaNetDims, qkv: GGUFLinear, gate: GGUFLinear, out: GGUFLinear,
                 alpha_w: torch.Tensor, beta_w: torch.Tensor, conv_w: torch.Tensor, ssm_a: torch.Tensor,
                 dt_bias: torch.Tensor, ssm_norm: torch.Tensor, head_order: str = "gguf"):
        self.d, self.qkv, self.gate, self.out = dims, qkv, gate, out
        self.ab_w = torch.cat([alpha_w, beta_w], 0).to(torch.float16)  # [2H, hidden], one small GEMM
        self.conv_w, self.ssm_a, self.dt_bias, self.ssm_norm = conv_w, ssm_a, dt_bias, ssm_norm
        self.head_order = head_order
        self.state = self.conv_state = None

    @classmethod
    def from_gguf(cls, f, layer: int, device="cuda") -> "DeltaNetLayer":
        """Build from a :class:`t4lib.quant.gguf.GGUFFile` (tensors ``blk.{layer}.*``)."""
        p = f"blk.{layer}."
        H = int(f.key("ssm.time_step_rank"))
        HK = int(f.key("ssm.group_count"))
        D = int(f.key("ssm.state_size"))
        hidden = int(f.key("embedding_length"))
        dims = DeltaNetDims(hidden, HK, H, D)

        def lin(name):
            t = f.info(p + name + ".weight")
            return GGUFLinear(f.raw(t.name).to(device), t.type_id, t.shape[0], t.shape[1])

        def f32(name):
            return f.dequantize(p + name, device=device).float().contiguous()

        return cls(dims, lin("attn_qkv"), lin("attn_gate"), lin("ssm_out"), f32("ssm_alpha.weight"),
                   f32("ssm_beta.weight"), f32("ssm_conv1d.weight"), f32("ssm_a"), f32("ssm_dt.bias"),
                   f32("ssm_norm.weight"))

    @classmethod
    def random(cls, dims: DeltaNetDims = DeltaNetDims(), formats=("Q4_K", "Q4_K", "Q6_K"), seed: int = 0,
               device="cuda") -> "DeltaNetLayer":
        """Random valid GGUF weights at ``dims`` (attn_qkv, attn_gate, ssm_out formats)."""
        from ...ops.deltanet.reference import random_layer

        def lin(fmt, N, K, s):
            t = type_id(fmt)
            raw = gguf_ref.random_blocks(t, N * K // FORMATS[t][1], seed=s, scale=0.002).reshape(-1)
            return GGUFLinear(raw.to(device), t, N, K)

        d = dims
        g = torch.Generator().manual_seed(seed)
        p = random_layer(d.v_heads, d.k_heads, d.head_dim, d.head_dim, seed=seed, device=device)
        return cls(d, lin(formats[0], d.conv_dim, d.hidden, seed + 1), lin(formats[1], d.value_dim, d.hidden, seed + 2),
                   lin(formats[2], d.hidden, d.value_dim, seed + 3),
                   (0.01 * torch.randn(d.v_heads, d.hidden, generator=g)).to(device),
                   (0.01 * torch.randn(d.v_heads, d.hidden, generator=g)).to(device), p["conv_w"], p["ssm_a"],
                   p["dt_bias"], p["ssm_norm"])

    def reset(self, batch: int, device="cuda") -> None:
        d = self.d
        self.state = torch.zeros(batch, d.v_heads, d.head_dim, d.head_dim, dtype=torch.float32, device=device)
        self.conv_state = torch.zeros(batch, 3, d.conv_dim, dtype=torch.float16, device=device)

    @property
    def weight_bytes(self) -> int:
        return self.qkv.nbytes + self.gate.nbytes + self.out.nbytes + self.ab_w.numel() * 2

    def step(self, x: torch.Tensor, backend: str = "auto", variant="auto") -> torch.Tensor:
        if self.state is None or self.state.shape[0] != x.shape[0]:
            self.reset(x.shape[0], x.device)
        H = self.d.v_heads
        qkv = self.qkv(x, backend)
        z = self.gate(x, backend)
        ab = x @ self.ab_w.t()
        o = gated_deltanet_decode(qkv, z, ab[:, :H].contiguous(), ab[:, H:].contiguous(), self.conv_state,
                                  self.state, self.conv_w, self.ssm_a, self.dt_bias, self.ssm_norm,
                                  num_k_heads=self.d.k_heads, head_order=self.head_order, variant=variant,
                                  backend=backend)
        return self.out(o, backend)
