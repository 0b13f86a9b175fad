"""Exact-contract Transformer inference benchmark.

A reference Transformer (``BaselineTransformer``), an optimized drop-in
(``OptimizedTransformer``) that must match it element by element under the
strict rule (``rule``), a self-calibrating per-layer / per-shape dispatch
(``calibrate``), a timing protocol that cannot flatter it (``timing``), the
shape table and the long-context blockwise evaluator (``shapes``), and the
benchmark entry point (``bench``: ``python -m t4lib.contract.bench --out DIR``).

The contract dtype is fp16 on CUDA (see ``model``'s docstring).
"""
from .model import BaselineTransformer, OptimizedTransformer, shape_key  # noqa: F401
from .rule import compare, strict, judge  # noqa: F401
from .calibrate import Plan, PlanEntry, StalePlanError, calibrate_shape  # noqa: F401
