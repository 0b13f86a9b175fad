"""LoRA training step time and peak memory on three frozen bases of one shape:
fp16 ``nn.Linear`` (PEFT LoRA), our W4A16 ``QuantLinear`` (PEFT LoRA through
the custom-module hook), and bitsandbytes NF4 ``Linear4bit`` (PEFT QLoRA, what
a user would pick to fit a model that does not fit in fp16).

Shape: Qwen2.5-1.5B (hidden 1536, 28 layers, 12 heads / 2 KV heads, MLP 8960,
vocab 151936, tied embeddings) with random weights. One step = forward,
loss on the inputs, backward, AdamW on the LoRA parameters (r=16 on all seven
projections, fp32 adapters, fp16 autocast). Step time: median of timed steps
after warm-up (CUDA-synchronised wall clock); peak memory: the allocator's peak
over the timed steps (``torch.cuda.max_memory_allocated``), weights included.
Each base is built, measured and freed in turn, in one process.

    python -m t4lib.benchmarks.lora --out results/nvidia-h200/lora_bench.json
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

from t4lib.models.shapes import QWEN25_15B
from t4lib.core import results
from t4lib.quant import quantize_model
from t4lib.train.sft import lora_config

BASES = ("fp16", "w4a16", "bnb_nf4")
SHAPE_NAME = "qwen2.5-1.5b-shape"


def build_model(base: str, cfg_kw: dict | None = None, seed: int = 0):
    """A random-weight Qwen2 causal LM on CUDA with ``base`` linear layers (lm_head stays fp16)."""
    import torch  # this module imports without torch, as the library does
    from torch import nn  # this module imports without torch, as the library does
    from transformers import Qwen2Config, Qwen2ForCausalLM  # optional (train extra)

    if base not in BASES:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    torch.manual_seed(seed)
    cfg = Qwen2Config(**(cfg_kw or QWEN25_15B))
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.float16)
    if base == "w4a16":
        quantize_model(model)
    elif base == "bnb_nf4":
        import bitsandbytes as bnb  # optional: the bitsandbytes baseline
        for name, mod in list(model.named_modules()):
            for cname, child in list(mod.named_children()):
                if isinstance(child, nn.Linear) and cname != "lm_head":
                    q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=torch.float16, quant_type="nf4", device="meta")
                    q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, quant_type="nf4")
                    if child.bias is not None:
                        q.bias = nn.Parameter(child.bias.data, requires_grad=False)
                    setattr(mod, cname, q.cuda())
                    del child
        gc.collect()
        torch.cuda.empty_cache()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def lora_wrap(model, r: int = 16):
    from peft import get_peft_model  # optional (train extra)

    return get_peft_model(model, lora_config(model, r=r, alpha=2 * r))


def measure(base: str, batch: int, seq: int, *, steps: int = 8, warmup: int = 3, cfg_kw: dict | None = None,
            r: int = 16) -> dict:
    """Median step seconds and peak bytes of LoRA training on ``base`` at ``batch x seq`` tokens."""
    import torch  # this module imports without torch, as the library does

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = lora_wrap(build_model(base, cfg_kw), r)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    vocab = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda", generator=g)
    times, losses = [], []
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
    peak = torch.cuda.max_memory_allocated()
    n_train = sum(p.numel() for p in params)
    del model, opt, params, scaler
    gc.collect()
    torch.cuda.empty_cache()
    return dict(base=base, batch=batch, seq=seq, step_s=statistics.median(times), step_s_all=times,
                peak_bytes=peak, trainable_params=n_train, loss_last=losses[-1])


def run(out: str | None = None, *, shapes=((4, 512), (1, 512)), steps: int = 8, cfg_kw: dict | None = None,
        bases=BASES, name: str = SHAPE_NAME) -> dict:
    """Measure every base at every ``(batch, seq)``; write figures to ``out`` (t4lib.core.results) if given."""
    import torch  # this module imports without torch, as the library does

    if not torch.cuda.is_available():
        raise RuntimeError("lora_bench needs a CUDA GPU")
    rows, errors = [], []
    for batch, seq in shapes:
        for base in bases:
            try:
                rows.append(measure(base, batch, seq, steps=steps, cfg_kw=cfg_kw))
            except Exception as e:  # a baseline that cannot run here is reported, not hidden
                errors.append(f"{base} {batch}x{seq}: {type(e).__name__}: {e}")
            print(rows[-1] if rows else None, errors[-1:] if errors else "", flush=True)
    figs = figures(rows, shapes, name)
    doc = dict(rows=rows, errors=errors, config=cfg_kw or QWEN25_15B, shapes=[list(s) for s in shapes])
    if out:
        results.write(out, figs, rows=rows, errors=errors, config=doc["config"])
    doc["figures"] = figs
    return doc


def figures(rows: list[dict], shapes, name: str = SHAPE_NAME, env: dict | None = None) -> list[dict]:
    """t4lib.core.results figures of :func:`measure` rows (``env``: the environment they ran in; default live)."""
    figs = []

    def _fig(*a, **k):
        return results.figure(*a, env=env, **k)
    src = "t4lib.benchmarks.lora"
    by = {(r_["base"], r_["batch"], r_["seq"]): r_ for r_ in rows}
    for r_ in rows:
        tag = f"lora/{name}/{r_['base']}_base/b{r_['batch']}x{r_['seq']}"
        figs.append(_fig(f"{tag}/step_s", r_["step_s"], "s", "MEASURED", src, note=(
            f"median of {len(r_['step_s_all'])} LoRA steps (fwd+bwd+AdamW, r=16 on 7 projections, fp16 autocast)")))
        figs.append(_fig(f"{tag}/peak_mem", r_["peak_bytes"] / 2**30, "GiB", "MEASURED", src,
                                   note="torch.cuda.max_memory_allocated over the timed steps, weights included"))
    for batch, seq in shapes:
        ours, bnb, fp16 = (by.get((b, batch, seq)) for b in ("w4a16", "bnb_nf4", "fp16"))
        suffix = "" if (batch, seq) == tuple(shapes[0]) else f"/b{batch}x{seq}"
        if ours and bnb:
            figs.append(_fig(f"lora/{name}/w4a16_base/speedup_vs_bnb_nf4{suffix}",
                                       bnb["step_s"] / ours["step_s"], "x", "ARITHMETIC", src,
                                       note=f"bnb NF4 step / W4A16 step at {batch}x{seq}, same process"))
            figs.append(_fig(f"lora/{name}/w4a16_base/peak_mem_over_bnb_nf4{suffix}",
                                       ours["peak_bytes"] / bnb["peak_bytes"], "x", "ARITHMETIC", src,
                                       note=f"W4A16 peak / bnb NF4 peak at {batch}x{seq}, same process"))
        if ours and fp16:
            figs.append(_fig(f"lora/{name}/w4a16_base/step_over_fp16{suffix}",
                                       ours["step_s"] / fp16["step_s"], "x", "ARITHMETIC", src,
                                       note=f"W4A16 step / fp16 step at {batch}x{seq}, same process"))
        if ours and (batch, seq) == tuple(shapes[0]):
            figs.append(_fig(f"lora/{name}/w4a16_base/step_s", ours["step_s"], "s", "MEASURED", src,
                                       note=f"= b{batch}x{seq} step_s (the issue's headline shape)"))
    return figs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--small", action="store_true", help="a 2-layer shape (smoke test)")
    a = ap.parse_args(argv)
    cfg = dict(QWEN25_15B, num_hidden_layers=2, vocab_size=4096) if a.small else None
    run(a.out, steps=a.steps, cfg_kw=cfg, name="small-shape" if a.small else SHAPE_NAME)


if __name__ == "__main__":
    main()
