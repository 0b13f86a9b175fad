"""qwen35 (Qwen3.5-class: Gated DeltaNet + gated full attention) from GGUF files.

- :mod:`.deltanet`: one Gated DeltaNet decode layer with GGUF projections (``DeltaNetLayer``)
- :mod:`.model`: the whole model read from a GGUF file, weights in their GGUF formats
- :mod:`.engine`: the decode loop (caches, greedy/sampling, CUDA graphs, pipeline stages, MTP drafts)
- :mod:`.mtp`: the file's NextN block as a drafter (``MTPHead``, ``MTPDrafter``); :mod:`.mtp_reference`: its
  transformers-layer oracle (``Qwen35MTP``)
- :mod:`.split`: layers over N stages by measured bytes
- :mod:`.convert`: Hugging Face Qwen3.5 state dict <-> qwen35 GGUF
- :mod:`.oracle`: the engine against transformers' ``Qwen3_5ForCausalLM`` at tiny size
- :mod:`.bench`: the 27B-shape decode benchmark against transformers (GPU)
- :mod:`.copy_model`: a small qwen35 with its NextN block trained on the copy tasks; :mod:`.mtp_bench`: what
  MTP drafts accept and buy
"""
from .deltanet import DeltaNetDims, DeltaNetLayer, GGUFLinear
from .engine import GenerateResult, Qwen35Engine, cache_bytes_per_layer, sample
from .model import Qwen35Config, Qwen35Model
from .mtp import MTPDrafter, MTPHead
from .split import StagePlan, plan_stages

__all__ = ["DeltaNetDims", "DeltaNetLayer", "GGUFLinear", "Qwen35Config", "Qwen35Model", "Qwen35Engine",
           "GenerateResult", "cache_bytes_per_layer", "sample", "StagePlan", "plan_stages", "MTPHead", "MTPDrafter"]
