"""Speculative decoding on a static KV cache: drafters (:mod:`.drafters`), the per-row static
cache (:mod:`.cache`) and the engine (:mod:`.engine`); the speculative-sampling rule is shared
with the other engines (:mod:`t4lib.decoding.sampling`), the benchmark is
:mod:`t4lib.benchmarks.speculative`."""
from t4lib.speculative.cache import RowStaticCache, causal_row_mask
from t4lib.decoding.drafter import Drafter
from t4lib.speculative.drafters import DraftModelDrafter, PromptLookupDrafter
from t4lib.speculative.engine import SpecResult, SpecStats, SpeculativeEngine
from t4lib.decoding.sampling import Sampler, speculative_accept

__all__ = ["SpeculativeEngine", "SpecResult", "SpecStats", "Drafter", "PromptLookupDrafter",
           "DraftModelDrafter", "RowStaticCache", "causal_row_mask", "Sampler", "speculative_accept"]
