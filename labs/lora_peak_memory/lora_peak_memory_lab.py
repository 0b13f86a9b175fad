"""Where the peak of a LoRA step differs between the W4A16 base and bitsandbytes NF4 (Qwen2.5-1.5B shape).

Records the CUDA caching allocator's history (``torch.cuda.memory._record_memory_history``, Python frames) over
the LoRA bench's steps (``t4lib.benchmarks.lora.measure``) for each base, replays it to find the moment
allocated bytes peak, and groups the blocks live at that moment by the innermost frame in t4lib, PEFT,
transformers, bitsandbytes or torch.nn. The difference of the two peaks is then the difference of those groups.

    python labs/lora_peak_memory/lora_peak_memory_lab.py --out lora_peak_memory_lab.json [--batch 4 --seq 512]

The replay counts the sizes the history records, not the allocator's rounded blocks, so its peak falls short of
``torch.cuda.max_memory_allocated``: read its groups as indicative.
"""
import argparse
import json
from collections import defaultdict

from t4lib.core import results
from t4lib.benchmarks import lora as lora_bench

OWNERS = ("t4lib/", "peft/", "transformers/", "bitsandbytes/", "torch/nn/", "torch/optim/", "torch/amp/")


def owner(frames: list[dict]) -> str:
    """``file:line function`` of the innermost frame in a library that owns the block (the stack is innermost
    first); ``?`` when none is."""
    for f in frames:
        name = f.get("filename", "")
        for o in OWNERS:
            if o in name:
                return f"{o}{name.split(o, 1)[1]}:{f.get('line')} {f.get('name')}"
    return "?"


def peak_blocks(trace: list[dict]) -> tuple[int, dict]:
    """Replay alloc / free events: the peak of allocated bytes and ``{owner: bytes}`` live at that moment."""
    live, cur, peak, at_peak = {}, 0, 0, {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            cur += e["size"]
            if cur > peak:
                peak, at_peak = cur, dict(live)
        elif e["action"] == "free_requested" and e["addr"] in live:
            cur -= live.pop(e["addr"])["size"]
    groups = defaultdict(int)
    for e in at_peak.values():
        groups[owner(e.get("frames", []))] += e["size"]
    return peak, dict(groups)


def main(argv=None):
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    a = ap.parse_args(argv)
    rec = results.lab_record(f"python labs/lora_peak_memory/lora_peak_memory_lab.py --out {a.out} --batch {a.batch} --seq {a.seq}")
    by_base = {}
    for base in ("w4a16", "bnb_nf4"):
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        row = lora_bench.measure(base, a.batch, a.seq, steps=2, warmup=1)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        trace = [e for t in snap["device_traces"] for e in t]
        peak, groups = peak_blocks(trace)
        by_base[base] = dict(max_memory_allocated=row["peak_bytes"], replayed_peak=peak, events=len(trace),
                             groups=dict(sorted(groups.items(), key=lambda kv: -kv[1])))
        print(base, row["peak_bytes"], peak, flush=True)
    w, b = by_base["w4a16"]["groups"], by_base["bnb_nf4"]["groups"]
    diff = {k: w.get(k, 0) - b.get(k, 0) for k in set(w) | set(b) if w.get(k, 0) != b.get(k, 0)}
    rec.update(what=f"LoRA r=16 on the seven projections, {a.batch} x {a.seq} tokens, random Qwen2.5-1.5B-shape "
                    "weights; blocks live at the replayed peak of the allocator's history, by owning frame",
               bases=by_base, w4a16_minus_bnb_nf4=dict(sorted(diff.items(), key=lambda kv: -abs(kv[1]))),
               peak_difference_bytes=by_base["w4a16"]["replayed_peak"] - by_base["bnb_nf4"]["replayed_peak"])
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps(rec["w4a16_minus_bnb_nf4"], indent=1)[:3000])


if __name__ == "__main__":
    main()
