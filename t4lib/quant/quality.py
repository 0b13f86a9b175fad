"""Quantization quality: perplexity of fp16, RTN and GPTQ versions of one model.

When the project's trained tiny model is not available, :func:`markov_model`
trains a small random Qwen2 for a few hundred steps on a synthetic order-1
Markov corpus (a fixed random sparse transition table), so that held-out
perplexity is meaningful and quantization error shows up in it.
"""
from __future__ import annotations

import copy

import torch


def markov_tokens(n_seq: int, seq_len: int, vocab: int = 320, branching: int = 4, seed: int = 0,
                  table_seed: int = 1234) -> torch.Tensor:
    """[n_seq, seq_len] int64 from a sparse random transition table (``branching`` successors per token)."""
    gt = torch.Generator().manual_seed(table_seed)
    succ = torch.randint(0, vocab, (vocab, branching), generator=gt)
    probs = torch.softmax(torch.randn(vocab, branching, generator=gt) * 1.5, -1)
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n_seq, seq_len, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (n_seq,), generator=g)
    for t in range(1, seq_len):
        j = torch.multinomial(probs[out[:, t - 1]], 1, generator=g)[:, 0]
        out[:, t] = succ[out[:, t - 1], j]
    return out


def markov_model(steps: int = 300, seed: int = 0, hidden: int = 256, layers: int = 2, vocab: int = 320,
                 progress: bool = False):
    """A small Qwen2 trained on :func:`markov_tokens` (CPU-friendly, deterministic)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True)
    m = Qwen2ForCausalLM(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    it = range(steps)
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(it, desc="train tiny", leave=False)
    for s in it:
        ids = markov_tokens(16, 64, vocab, seed=10_000 + s)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return m.eval()


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch_size: int = 8) -> float:
    """exp(mean next-token NLL) over ``ids [n, T]``."""
    dev = next(model.parameters()).device
    tot, n = 0.0, 0
    for i in range(0, ids.shape[0], batch_size):
        b = ids[i:i + batch_size].to(dev)
        logits = model(input_ids=b).logits.float()
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), b[:, 1:].reshape(-1),
                                                reduction="sum")
        tot, n = tot + float(nll), n + b[:, 1:].numel()
    return float(torch.exp(torch.tensor(tot / n)))


def compare_quantizers(model, calib: list[torch.Tensor], test: torch.Tensor, group_size: int = 128) -> dict:
    """Perplexity of ``model`` as given, RTN-quantized and GPTQ-quantized (default policy otherwise)."""
    from .model import default_policy, quantize_model

    out = {"fp": perplexity(model, test)}
    rtn = quantize_model(copy.deepcopy(model), default_policy(model, group_size, "rtn"))
    out["rtn"] = perplexity(rtn, test)
    gptq = quantize_model(copy.deepcopy(model), default_policy(model, group_size, "gptq"), calib=calib)
    out["gptq"] = perplexity(gptq, test)
    out["gap_rtn"] = out["rtn"] - out["fp"]
    out["gap_gptq"] = out["gptq"] - out["fp"]
    out["gap_ratio"] = out["gap_gptq"] / out["gap_rtn"] if out["gap_rtn"] > 0 else float("nan")
    return out
