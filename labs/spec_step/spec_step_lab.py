"""Why is a speculative forward slower than StaticEngine's decode step? GPU time of one graph replay, on a GPU.

    python labs/spec_step/spec_step_lab.py --out labs/spec_step/spec_step_lab.json

tiny-gpu, batch 1, fp16. StaticEngine's decode step (compiled with ``dynamic=False``, HF ``StaticCache``,
one logit row; wall time per step of its graph replays, median of 5 calls) against the SpeculativeEngine's
captured graphs (plain step, a 9-token verify, plain and k = 8 device rounds) built four ways, each in a fresh
dynamo state:

- ``default``: the engine as it was before this lab (``torch.compile`` with automatic dynamic shapes, the row
  cache written by ``scatter_`` with a per-element index);
- ``static_shapes``: ``default`` compiled with ``dynamic=False``, one specialisation per (batch, tokens) shape;
- ``eager``: ``default`` without ``torch.compile``, the eager forward captured;
- ``static_index_copy``: ``static_shapes`` with the row cache written by ``index_copy_``, as the library now
  does (``RowStaticCache.update``).

Every engine generates the same prompt first, and its tokens are compared with StaticEngine's.
"""
from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.serving import StaticEngine
from t4lib.speculative import PromptLookupDrafter, SpeculativeEngine
from t4lib.speculative import cache as row_cache
from t4lib.benchmarks.speculative import load_prompts

NEW = 32


def static_step_ms(se: StaticEngine, ids: torch.Tensor, reps: int = 5) -> float:
    """Median over ``reps`` calls of StaticEngine's decode time per step (graph replays, no host reads between)."""
    ts = []
    for _ in range(reps):
        r = se.generate_with_stats(ids, NEW)
        ts.append(1e3 * r.decode_s / (NEW - 1))
    return sorted(ts)[reps // 2]


def _scatter_update(self, key_states, value_states, layer_idx, *args, **kwargs):
    """RowStaticCache.update as it was before this lab (``scatter_`` with a per-element index), kept here so the
    lab still times it against the library's ``index_copy_`` writes."""
    q = key_states.shape[2]
    idx = (self.pos[:, None] + torch.arange(q, device=self.pos.device))[:, None, :, None].expand_as(key_states)
    k, v = self.keys[layer_idx], self.values[layer_idx]
    k.scatter_(2, idx, key_states.to(k.dtype))
    v.scatter_(2, idx, value_states.to(v.dtype))
    return k, v


def spec_variant(model, prompt, name: str, max_len: int) -> dict:
    torch._dynamo.reset()
    compile_fn, update = torch.compile, row_cache.RowStaticCache.update
    try:
        if name in ("static_shapes", "static_index_copy"):
            torch.compile = functools.partial(compile_fn, dynamic=False)
        if name != "static_index_copy":   # the others write as the engine did before the lab
            row_cache.RowStaticCache.update = _scatter_update
        eng = SpeculativeEngine(model, PromptLookupDrafter(), max_len=max_len, max_batch_size=1, ks=(8,),
                                compile=name != "eager")
        r = eng.generate_with_stats([prompt], NEW)
        st = eng._states[1]
        return {"tokens": r.new_tokens[0],
                "graph_ms": {str(q): round(t, 4) for q, t in st.graph_ms.items()},
                "round_ms": {str(k): round(t, 4) for k, t in st.round_ms.items()},
                "compile_error": eng.compile_error}
    finally:
        torch.compile, row_cache.RowStaticCache.update = compile_fn, update


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    model, tok = models.load("tiny-gpu", dtype=torch.float16, device="cuda")
    prompt = load_prompts(tok, "copy", 1)[0]
    ids = torch.tensor([prompt], device="cuda")
    max_len = len(prompt) + NEW + 8
    doc = {**results.lab_record(f"python labs/spec_step/spec_step_lab.py --out {a.out}"),
           "note": __doc__.split("\n\n", 2)[2].strip(), "prompt_tokens": len(prompt), "cases": {}}
    se = StaticEngine(model, max_len=max_len)
    ref_tokens = se.generate_with_stats(ids, NEW).new_tokens[0].tolist()
    doc["cases"]["static_engine"] = {"step_ms_wall": round(static_step_ms(se, ids), 4),
                                     "compiled": getattr(se, "_ran_compiled", None)}
    print("static_engine", doc["cases"]["static_engine"], flush=True)
    for name in ("default", "static_shapes", "eager", "static_index_copy"):
        try:
            c = spec_variant(model, prompt, name, max_len)
            toks = c.pop("tokens")
            c["same_tokens_as_static_engine"] = toks == ref_tokens[:len(toks)]
        except Exception as e:
            c = {"error": f"{type(e).__name__}: {e}"}
        doc["cases"][name] = c
        print(name, c, flush=True)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
