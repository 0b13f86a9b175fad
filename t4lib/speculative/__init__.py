"""Speculative decoding on a static KV cache: drafters (:mod:`.drafters`), the per-row static
cache (:mod:`.cache`), the engine (:mod:`.engine`), the speculative-sampling rule
(:mod:`.sampling`) and the benchmark (:mod:`.bench`)."""
from .cache import RowStaticCache, causal_row_mask
from .drafters import DraftModelDrafter, Drafter, PromptLookupDrafter
from .engine import SpecResult, SpecStats, SpeculativeEngine
from .sampling import Sampler, speculative_accept

__all__ = ["SpeculativeEngine", "SpecResult", "SpecStats", "Drafter", "PromptLookupDrafter",
           "DraftModelDrafter", "RowStaticCache", "causal_row_mask", "Sampler", "speculative_accept"]
