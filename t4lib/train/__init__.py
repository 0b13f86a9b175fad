"""Training glue over TRL and PEFT (SFT, GRPO with engine rollouts, evaluation, LoRA benchmarks).

Submodules are imported on use, so ``import t4lib.train`` imports neither
TRL nor PEFT::

    from t4lib.train import data, sft, evaluate, grpo
"""
from __future__ import annotations

import importlib

_SUBMODULES = ("data", "sft", "evaluate", "lora_bench",
               "grpo", "rollout", "importance", "cp_hybrid", "rewards", "fused_adamw")
_FROM_SUBMODULE = {"FusedAdamWLinear": "fused_adamw"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_SUBMODULE:
        return getattr(importlib.import_module(f"{__name__}.{_FROM_SUBMODULE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
