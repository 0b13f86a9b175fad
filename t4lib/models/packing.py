"""Packed training batches of the procedural corpus, generated while the model trains.

Each ``DataLoader`` worker renders its own document stream (:func:`procedural.stream`, seeded
by the run's seed and the worker's index), tokenizes it and cuts the concatenation into rows
of ``seq_len + 1`` tokens; a batch comes whole from one worker, and the loader takes workers in
turn, so a run is deterministic for a given seed and worker count. Prompt tokens carry
``prompt_weight`` in the loss, completion tokens 1.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from t4lib.models import procedural

_DOCS_PER_CHUNK = 256


class PackedStream(IterableDataset):
    """Endless ``(ids [B, L + 1] int64, weights [B, L] float32)`` batches: ``weights[:, j]`` is the
    loss weight of predicting ``ids[:, j + 1]``."""

    def __init__(self, tokenizer_dir: str, seed: int, seq_len: int, batch_size: int, prompt_weight: float = 0.25,
                 split: str = "train", pseudo_words: float = 0.0):
        procedural.check_seed(seed)
        procedural.check_split(split)
        self.pseudo_words = procedural.check_pseudo_words(pseudo_words, split)
        for name, v in (("seq_len", seq_len), ("batch_size", batch_size)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not 0.0 <= prompt_weight <= 1.0:
            raise ValueError(f"prompt_weight must be in [0, 1], got {prompt_weight!r}")
        self.tokenizer_dir, self.seed, self.split = str(tokenizer_dir), seed, split
        self.seq_len, self.batch_size, self.prompt_weight = seq_len, batch_size, prompt_weight

    def __iter__(self):
        from transformers import AutoTokenizer  # optional: transformers (the train extra)
        info = get_worker_info()
        wid = info.id if info is not None else 0
        tok = AutoTokenizer.from_pretrained(self.tokenizer_dir)
        docs = procedural.stream(self.seed * 1000 + wid, self.split, self.pseudo_words)
        need = self.batch_size * (self.seq_len + 1)
        ids: list[int] = []
        wts: list[float] = []
        while True:
            chunk = [next(docs) for _ in range(_DOCS_PER_CHUNK)]
            P = tok([p for _, p, _ in chunk], add_special_tokens=False)["input_ids"]
            C = tok([c for _, _, c in chunk], add_special_tokens=False)["input_ids"]
            for p, c in zip(P, C):
                ids += p
                ids += c
                wts += [self.prompt_weight] * len(p)
                wts += [1.0] * len(c)
            while len(ids) >= need:
                x = torch.tensor(ids[:need], dtype=torch.long).view(self.batch_size, self.seq_len + 1)
                w = torch.tensor(wts[:need], dtype=torch.float32).view(self.batch_size, self.seq_len + 1)
                del ids[:need], wts[:need]
                yield x, w[:, 1:].contiguous()


def loader(stream: PackedStream, workers: int) -> DataLoader:
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    return DataLoader(stream, batch_size=None, num_workers=workers, prefetch_factor=4, pin_memory=torch.cuda.is_available(),
                      persistent_workers=False)


def generator_rate(stream: PackedStream, workers: int, seconds: float = 10.0) -> dict:
    """Tokens per second the workers deliver with no consumer in the way (the generator alone)."""
    it = iter(loader(stream, workers))
    next(it)                                  # workers started and warm
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        x, _ = next(it)
        n += x[:, 1:].numel()
    dt = time.perf_counter() - t0
    del it
    return dict(tokens_per_s=n / dt, workers=workers, seconds=round(dt, 2))
