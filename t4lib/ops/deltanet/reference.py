"""Pure-PyTorch fp32 reference of the Gated DeltaNet decode step (qwen35).

One token per call, batch ``B``. Shapes (27B model in brackets)::

    qkv        [B, C]        raw (pre-conv) fused projection, C = 2*HK*Dk + H*Dv  [10240]
    z          [B, H*Dv]     output gate (attn_gate)                              [6144]
    alpha      [B, H]        ssm_alpha projection                                 [48]
    beta       [B, H]        ssm_beta projection
    conv_state [B, 3, C]     the previous three raw qkv rows, oldest first
    state      [B, H, Dk, Dv] fp32 recurrent state S (row = key index)           [48, 128, 128]
    conv_w     [C, 4]        ssm_conv1d taps, tap 3 multiplies the current token
    ssm_a      [H]           -exp(A_log), as the GGUF stores it
    dt_bias    [H]           ssm_dt bias
    ssm_norm   [Dv]          gated RMSNorm weight, used as stored

The step (all in fp32)::

    y      = SiLU(sum_j conv_w[:, j] * [conv_state; qkv][j])
    q, k, v = split(y, [HK*Dk, HK*Dk, H*Dv]);  q, k L2-normalized (eps 1e-6), q /= sqrt(Dk)
    kh(h)  = h // (H / HK)  (head_order "hf")   or   h % HK  (head_order "gguf")
    g      = ssm_a * softplus(alpha + dt_bias);  decay = exp(g);  b = sigmoid(beta)
    S'     = decay S;  delta = b (v - S'^T k);  S_new = S' + k delta^T;  o = S_new^T q
    out    = RMSNorm(o, eps) * ssm_norm * SiLU(z)

The kernel uses o = decay (S^T q) + delta (k . q) (one pass over S); the
reference computes o from S_new, the definition, so the shortcut is tested.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

HEAD_ORDERS = ("hf", "gguf")
CONV_TAPS = 4


def key_head_index(num_v_heads: int, num_k_heads: int, head_order: str, device=None) -> torch.Tensor:
    """[H] long: the key head each value head reads."""
    if head_order not in HEAD_ORDERS:
        raise ValueError(f"head_order must be one of {HEAD_ORDERS}, got {head_order!r}")
    h = torch.arange(num_v_heads, device=device)
    return h // (num_v_heads // num_k_heads) if head_order == "hf" else h % num_k_heads


def conv_update(qkv: torch.Tensor, conv_state: torch.Tensor, conv_w: torch.Tensor, dtype=torch.float32):
    """Causal depthwise conv (4 taps, no bias) + SiLU for one token.

    Returns (y [B, C] in ``dtype``, new_conv_state [B, 3, C] in conv_state's dtype)."""
    window = torch.cat([conv_state.to(dtype), qkv.to(dtype)[:, None, :]], dim=1)  # [B, 4, C], oldest first
    y = (window * conv_w.to(dtype).t()[None]).sum(dim=1)
    new_state = torch.cat([conv_state[:, 1:], qkv[:, None, :].to(conv_state.dtype)], dim=1)
    return F.silu(y), new_state


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gates(alpha: torch.Tensor, beta: torch.Tensor, ssm_a: torch.Tensor, dt_bias: torch.Tensor, dtype=torch.float32):
    """(decay [B, H], beta [B, H]) in fp32: decay = exp(ssm_a * softplus(alpha + dt_bias))."""
    g = ssm_a.to(dtype) * F.softplus(alpha.to(dtype) + dt_bias.to(dtype))
    return torch.exp(g), torch.sigmoid(beta.to(dtype))


def delta_rule_step(q, k, v, decay, b, state):
    """Gated delta rule for one token, decay first. q, k [B, H, Dk] (already
    mapped to value heads), v [B, H, Dv], decay, b [B, H], state [B, H, Dk, Dv].
    Returns (o [B, H, Dv], new_state)."""
    s = state * decay[..., None, None]
    u = torch.einsum("bhkv,bhk->bhv", s, k)
    delta = b[..., None] * (v - u)
    s_new = s + k[..., :, None] * delta[..., None, :]
    o = torch.einsum("bhkv,bhk->bhv", s_new, q)
    return o, s_new


def gated_rmsnorm(o: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                  dtype=torch.float32) -> torch.Tensor:
    """Per-head RMSNorm of o [..., Dv] times weight times SiLU(z), fp32."""
    o = o.to(dtype)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
    return weight.to(dtype) * o * F.silu(z.to(dtype))


def gated_deltanet_decode(qkv, z, alpha, beta, conv_state, state, conv_w, ssm_a, dt_bias, ssm_norm, *,
                          num_k_heads: int, head_order: str = "hf", eps: float = 1e-6,
                          out_dtype: torch.dtype = torch.float16):
    """One decode step (see module docstring). Functional: returns
    (out [B, H*Dv] out_dtype, new_conv_state [B, 3, C], new_state [B, H, Dk, Dv] fp32).
    Computes in fp32, or in float64 when ``state`` is float64 (a precision yardstick)."""
    B, C = qkv.shape
    cd = torch.float64 if state.dtype == torch.float64 else torch.float32
    H, Dk, Dv = state.shape[1], state.shape[2], state.shape[3]
    HK = num_k_heads
    y, new_conv = conv_update(qkv, conv_state, conv_w, cd)
    q, k, v = torch.split(y, [HK * Dk, HK * Dk, H * Dv], dim=-1)
    q = l2norm(q.reshape(B, HK, Dk)) / (Dk ** 0.5)
    k = l2norm(k.reshape(B, HK, Dk))
    v = v.reshape(B, H, Dv)
    kh = key_head_index(H, HK, head_order, device=qkv.device)
    decay, b = gates(alpha, beta, ssm_a, dt_bias, cd)
    o, new_state = delta_rule_step(q[:, kh], k[:, kh], v, decay, b, state.to(cd))
    out = gated_rmsnorm(o, z.reshape(B, H, Dv), ssm_norm, eps, cd).reshape(B, H * Dv)
    return out.to(out_dtype), new_conv, new_state


def random_layer(H: int, HK: int, Dk: int = 128, Dv: int = 128, *, seed: int = 0, device="cpu") -> dict:
    """Random layer parameters of realistic scale (fp32): conv_w, ssm_a, dt_bias, ssm_norm."""
    g = torch.Generator().manual_seed(seed)
    C = 2 * HK * Dk + H * Dv
    a_log = torch.empty(H).uniform_(0.0, 2.5, generator=g).log()  # A in (0, 2.5]
    p = {"conv_w": torch.randn(C, CONV_TAPS, generator=g) * 0.5,
         "ssm_a": -torch.exp(a_log),
         "dt_bias": torch.randn(H, generator=g) * 0.5,
         "ssm_norm": 1.0 + 0.1 * torch.randn(Dv, generator=g)}
    return {k: v.to(device) for k, v in p.items()}


def random_step(B: int, H: int, HK: int, Dk: int = 128, Dv: int = 128, *, seed: int = 0,
                dtype: torch.dtype = torch.float16, device="cpu") -> dict:
    """Random per-token inputs: qkv, z, alpha, beta (dtype)."""
    g = torch.Generator().manual_seed(seed)
    C = 2 * HK * Dk + H * Dv
    x = {"qkv": torch.randn(B, C, generator=g), "z": torch.randn(B, H * Dv, generator=g),
         "alpha": torch.randn(B, H, generator=g), "beta": torch.randn(B, H, generator=g)}
    return {k: v.to(device=device, dtype=dtype) for k, v in x.items()}


def random_state(B: int, H: int, HK: int, Dk: int = 128, Dv: int = 128, *, seed: int = 0,
                 dtype: torch.dtype = torch.float16, device="cpu") -> dict:
    """Random recurrent state (fp32, small) and conv state (dtype)."""
    g = torch.Generator().manual_seed(seed)
    C = 2 * HK * Dk + H * Dv
    return {"conv_state": torch.randn(B, 3, C, generator=g).to(device=device, dtype=dtype),
            "state": (0.05 * torch.randn(B, H, Dk, Dv, generator=g)).to(device)}
