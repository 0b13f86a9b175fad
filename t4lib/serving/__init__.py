"""Serving: static KV cache and CUDA-graph-captured decoding (:mod:`.engine`), fused sibling
projections (:mod:`.fuse`)."""
from .engine import GenerateResult, StaticEngine, hf_generate, kv_bytes_per_position, linear_weight_bytes
from .fuse import FusedProjection, ProjectionSlice, fuse_projections, unfuse_projections

__all__ = ["StaticEngine", "GenerateResult", "hf_generate", "linear_weight_bytes", "kv_bytes_per_position",
           "fuse_projections", "unfuse_projections", "FusedProjection", "ProjectionSlice"]
