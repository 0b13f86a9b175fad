"""``QuantLinear``: a drop-in ``nn.Linear`` replacement holding a W4A16 weight."""
from __future__ import annotations

import torch
from torch import nn

from .quantize import quantize_gptq, quantize_rtn
from .w4a16 import QuantizedWeight, check_group_size

# what forward takes (cast to fp16 on CUDA, run by the reference in their own dtype elsewhere): an integer, bool
# or complex x would be truncated to real values where nn.Linear raises
INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class QuantLinear(nn.Module):
    """``y = x @ W_deq^T + b`` with ``W`` in the W4A16 format.

    Buffers: ``qweight [out, in/8] int32``, ``scales [out, in/group_size] fp16``,
    optional ``bias [out] fp16``. ``x [..., in]``: rows are flattened to
    ``[M, in]`` and go through :func:`t4lib.ops.w4a16.matmul` (on CUDA the GEMV for
    M = 1, the small-M tensor-core GEMM for M = 2..64, the WMMA GEMM above), the
    PyTorch reference elsewhere. On CUDA the computation is in fp16 (other
    input dtypes are cast and the result cast back); ``max_ctas`` (attribute)
    caps the kernels' grids for occupancy pacing. ``activations`` (attribute,
    "fp16" or "int8"; :func:`set_activations` sets a whole model): "int8" runs
    the GEMV rows (M <= ``ops.w4a16.MATMUL_GEMV_MAX_M``, decode) as W4A8, activations quantized to int8 per
    block of 32 (other numerics, see :mod:`t4lib.ops.int8_activations`); the
    GEMM keeps fp16 activations.

    Training (``module.training``, grad enabled, ``x.requires_grad``): the layer is differentiable
    with respect to ``x`` and frozen in its weight (no parameter, no weight
    gradient), so PEFT's LoRA wraps it like an ``nn.Linear`` (see
    :func:`t4lib.train.sft.lora_config`). Forward and backward dequantize the
    layer into a short-lived buffer (:func:`dequantize_into`) and run a tensor-core ``torch.matmul``:
    ``y = x @ W_deq^T``, ``dX = dY @ W_deq``. At training batch sizes this beats
    the WMMA GEMM on the H200 (results/nvidia-h200/w4a16_gemm.json: M=512,
    5120x17408, 181 us dequant-then-cuBLAS against 561 us for the kernel).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, group_size: int = 128,
                 device=None):
        super().__init__()
        check_group_size(group_size, in_features)
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer("qweight", torch.zeros(out_features, in_features // 8, dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.ones(out_features, in_features // group_size, dtype=torch.float16,
                                                  device=device))
        if bias:
            self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float16, device=device))
        else:
            self.bias = None
        self.max_ctas: int | None = None
        self.backend = "auto"
        self.activations = "fp16"

    @classmethod
    def from_quantized(cls, qw: QuantizedWeight, bias: torch.Tensor | None = None) -> "QuantLinear":
        m = cls(qw.K, qw.N, bias is not None, qw.group_size, device=qw.device)
        m.qweight.copy_(qw.qweight)
        m.scales.copy_(qw.scales)
        if bias is not None:
            m.bias.copy_(bias.detach().to(torch.float16))
        return m

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128, method: str = "rtn",
                    hessian: torch.Tensor | None = None) -> "QuantLinear":
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        if method == "rtn":
            qw = quantize_rtn(linear.weight, group_size)
        elif method == "gptq":
            if hessian is None:
                raise ValueError("method='gptq' needs the input hessian (calibration data)")
            qw = quantize_gptq(linear.weight, hessian, group_size)
        else:
            raise ValueError(f"method must be 'rtn' or 'gptq', got {method!r}")
        return cls.from_quantized(qw, linear.bias)

    def _apply(self, fn, recurse=True):
        # model.float() / .half() convert floating buffers; the format's scales stay fp16.
        super()._apply(fn, recurse)
        if self.scales.dtype != torch.float16:
            self.scales = self.scales.to(torch.float16)
        return self

    @property
    def weight_q(self) -> QuantizedWeight:
        return QuantizedWeight(self.qweight, self.scales, self.out_features, self.in_features, self.group_size)

    def dequantize(self) -> torch.Tensor:
        return self.weight_q.dequantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from ..ops import w4a16 as ops

        if not isinstance(x, torch.Tensor) or x.dtype not in INPUT_DTYPES:
            raise TypeError(f"x must be a floating-point tensor ({', '.join(str(d) for d in INPUT_DTYPES)}), "
                            f"got {getattr(x, 'dtype', type(x).__name__)}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x has {x.shape[-1]} features, QuantLinear expects in_features={self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if self.training and torch.is_grad_enabled() and x.requires_grad:
            y = _QuantLinearFn.apply(x2, self)
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
            return y.reshape(*lead, self.out_features)
        w = self.weight_q
        if x.is_cuda or x.dtype == torch.float16 or self.activations == "int8":  # int8 quantizes fp16 x
            y = ops.matmul(x2.to(torch.float16), w, max_ctas=self.max_ctas, backend=self.backend,
                           activations=self.activations).to(x.dtype)
        else:  # CPU in fp32/bf16: the reference in the input dtype
            from ..ops.w4a16 import reference
            y = reference.matmul(x2, w)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        extra = f", activations={self.activations}" if self.activations != "fp16" else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, group_size={self.group_size}{extra}")


def dequantize_into(layer: "QuantLinear") -> torch.Tensor:
    """``W_deq [out, in]`` of ``layer``: on CUDA written by the INT4 dequant kernel into a buffer
    from torch's caching allocator; elsewhere the reference dequantization (fp16 values, fp32
    tensor, so CPU matmuls stay in fp32).

    The buffer lives only until its matmul is done and then returns to the allocator's cache, so
    the next layer reuses the same memory and the step's peak holds no dequantized weight beyond
    the product in flight (a buffer kept for the model's life would sit under the loss's peak)."""
    if not layer.qweight.is_cuda:
        return layer.weight_q.dequantize(torch.float32)
    from ..ops.int4 import binding

    out = torch.empty(layer.out_features * layer.in_features, dtype=torch.float16, device=layer.qweight.device)
    # row-major [N, K] words and [N, K/g] scales flatten to the kernel's 1-D layout (K % g == 0)
    binding.int4_dequant(layer.qweight.reshape(-1), layer.scales.reshape(-1), layer.group_size, out, 0)
    return out.view(layer.out_features, layer.in_features)


class _QuantLinearFn(torch.autograd.Function):
    """``y = x @ W_deq^T`` differentiable in ``x`` only: ``dX = dY @ W_deq`` (the weight is frozen)."""

    @staticmethod
    def forward(ctx, x2: torch.Tensor, layer: "QuantLinear") -> torch.Tensor:
        ctx.layer = layer
        w = dequantize_into(layer)
        return torch.matmul(x2.to(w.dtype), w.t()).to(x2.dtype)

    @staticmethod
    def backward(ctx, gy: torch.Tensor):
        w = dequantize_into(ctx.layer)
        gx = torch.matmul(gy.to(w.dtype), w) if ctx.needs_input_grad[0] else None
        return (gx.to(gy.dtype) if gx is not None else None), None


def set_activations(model: nn.Module, activations: str) -> int:
    """Set ``activations`` ("fp16" or "int8") on every QuantLinear of ``model``; returns how many."""
    from ..ops.int8_activations import check_activations

    check_activations(activations)
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    if not layers:
        raise ValueError(f"model has no QuantLinear layers to set activations={activations!r} on "
                         "(quantize it first: t4lib.quant.quantize_model)")
    for m in layers:
        m.activations = activations
    return len(layers)
