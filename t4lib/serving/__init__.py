"""Serving: static KV cache and CUDA-graph-captured decoding (:mod:`.engine`)."""
from .engine import GenerateResult, StaticEngine, hf_generate, kv_bytes_per_position, linear_weight_bytes

__all__ = ["StaticEngine", "GenerateResult", "hf_generate", "linear_weight_bytes", "kv_bytes_per_position"]
