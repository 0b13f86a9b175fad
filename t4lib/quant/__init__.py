"""Weight quantization: the W4A16 format and quantizers (:mod:`.w4a16`, checked by :mod:`.quantize`),
``QuantLinear`` and policy-driven quantization of Hugging Face causal LMs
(:mod:`.model`)."""
from .linear import QuantLinear, set_activations
from .model import (default_policy, load_quantized, quantize_model, resolve_policy, save_quantized,
                    weight_bytes)
from .quantize import quantize_gptq, quantize_rtn
from .w4a16 import QuantizedWeight

__all__ = ["QuantLinear", "QuantizedWeight", "quantize_rtn", "quantize_gptq", "quantize_model", "default_policy",
           "resolve_policy", "save_quantized", "load_quantized", "weight_bytes", "set_activations"]
