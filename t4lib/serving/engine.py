"""Static-KV-cache decoding of a Hugging Face causal LM with CUDA-graph-captured steps.

:class:`StaticEngine` preallocates a ``transformers.StaticCache`` and, on
CUDA, captures one decode step in a CUDA graph: the forward pass, the choice
of the next token (greedy argmax, or sampling by the Gumbel-max trick on
``softmax(logits / temperature)`` restricted to the top k), and the update of
the step's own inputs (token, position, output slot) all live on the device,
so decoding ``n`` tokens is ``n`` graph replays and no host synchronisation.
The prompt is right-padded to a multiple of ``prefill_bucket`` tokens (the pads
come after every real token, so causal attention never lets a real token see
them; decoding overwrites their cache slots before it reaches them) and, on
CUDA, each padded length's prefill forward is captured in a CUDA graph the first
time it is met and replayed after (one memory pool for all of them;
``prefill_graph=False`` prefills eagerly): a prefill
costs a replay instead of the host time of an eager forward, which dominates
the time to the first token of a small model. A cache that keeps its write
position on the host cannot be padded; such a model prefills eagerly, unpadded.
With ``compile`` (default on CUDA) the decode forward is first compiled by
``torch.compile`` (Inductor, no CUDA graphs of its own): the elementwise work
between the matrix products (RMSNorm, rotary embedding, SiLU-gating, residual
adds) is fused into a few kernels, and our graph captures the fused step. A
batch-1 decode step of a small model is bound by the number of kernels, not
by bytes, so this is where most of its time goes. If compilation fails, the
engine captures the uncompiled step and says why in ``compile_error``; it also
says so when dynamo ran the step as plain Python (past its recompile limit).
Works for any HF causal LM whose forward accepts ``past_key_values``,
``cache_position`` and ``position_ids`` (Qwen2, Llama, Mistral, ...), with
``nn.Linear`` or :class:`t4lib.quant.QuantLinear` layers; what it needs of
``transformers`` goes through :mod:`.hf_compat`.

Two calls. :meth:`StaticEngine.generate` is ``model.generate``'s: a
``GenerationConfig`` (default ``model.generation_config``) with keyword
overrides, greedy or sampled (temperature, top-k, top-p, repetition penalty, as
Hugging Face's logits processors compute them), each row stopping at its first
EOS and padded after it, a ``streamer``, and a LongTensor of sequences back (or,
with ``return_dict_in_generate=True``, a :class:`GenerateResult`).
:meth:`StaticEngine.generate_with_stats` is what benchmarks time: exactly
``max_new_tokens`` steps (no EOS stop unless asked); ``lengths`` says how many
tokens of each row come up to and including its first ``eos_token_id`` (an int
or a list of ints).

Ragged batches: prompts of different lengths (a list of token lists, or a
``[B, T]`` tensor with an ``attention_mask`` whose ones are contiguous, left or
right padding alike) are left-aligned to the longest, ``pad[b]`` slots before
row ``b``'s first token. Every forward then passes position ids
``cache_position - pad[b]`` and a 4D mask that hides row ``b``'s pad slots
(:func:`ragged_mask`), both computed on the device from ``pad``, so the prefill
and decode graphs capture them; each row attends to exactly the keys, at exactly
the positions, it would see alone. Batches of equal-length prompts take the
unmasked path unchanged. ``output_logits=True`` also
returns the logits each token was chosen from (``logits [B, new, V]`` fp32,
recorded on the device inside the graph). ``output_logprobs=True`` returns
only each chosen token's log-probability under the distribution it was drawn
from (``logprobs [B, new]``, ``log_softmax(logits / temperature)`` over the top
k), also computed inside the graph: what a sampler that keeps its own
probabilities (RL rollouts) needs, without moving ``new x V`` floats per row
off the device.

Reported per call (:class:`GenerateResult`): time to first token (prefill +
first choice), decode tokens/s (tokens after the first / decode time), weight
bytes, peak allocated memory, and *bandwidth achieved*: bytes one decode step
must read (every Linear weight incl. lm_head, plus the KV cache up to the
current length, averaged over the steps) x steps/s, as a fraction of the
copy bandwidth of :func:`t4lib.core.hw.copy_bandwidth` (the gpt-fast convention).
"""
from __future__ import annotations

import math
import numbers
import time
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from t4lib.quant.linear import QuantLinear
from t4lib.decoding import config as generation
from t4lib.decoding.sampling import check_top_p, penalize_repeats, scaled_logits
from t4lib.decoding.tokens import eos_ids, token_rows, vocab_size
from t4lib.serving import hf_compat
from t4lib.core import graphs, hw
from t4lib.quant.model import weight_bytes


@dataclass
class GenerateResult:
    sequences: torch.Tensor          # [B, T + new] prompt and generated tokens (CPU); ragged prompts left-padded
    new_tokens: torch.Tensor         # [B, new] generated tokens (CPU)
    lengths: list[int]               # generated tokens per row up to and including eos
    ttft_s: float
    decode_s: float
    decode_tokens_per_s: float       # per sequence: (new - 1) / decode_s
    graph: bool
    graph_error: str | None = None
    prefill_graph: bool = False      # whether the prefill ran as a captured graph
    compiled: bool = False
    compile_error: str | None = None
    logits: torch.Tensor | None = None   # [B, new, V] fp32 (CPU) with output_logits=True: the scores of each choice
    logprobs: torch.Tensor | None = None  # [B, new] fp32 (CPU) with output_logprobs=True: log p of each choice
    weight_bytes: int = 0
    peak_mem_bytes: int | None = None
    bytes_per_step: float = 0.0
    bandwidth_Bps: float | None = None
    frac_copy_bw: float | None = None
    prompt_lengths: list[int] = field(default_factory=list)   # real prompt tokens per row (the rest: padding)
    extra: dict = field(default_factory=dict)


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes of every Linear/QuantLinear weight (what one decode step streams), tied tensors once."""
    seen, total = set(), 0
    for m in model.modules():
        ts = []
        if isinstance(m, QuantLinear):
            ts = [m.qweight, m.scales] + ([m.bias] if m.bias is not None else [])
        elif isinstance(m, nn.Linear):
            ts = [m.weight] + ([m.bias] if m.bias is not None else [])
        for t in ts:
            key = (t.data_ptr(), t.numel())
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


def model_bytes(model: nn.Module) -> int:
    return weight_bytes(model)


def kv_bytes_per_position(model: nn.Module, batch_size: int = 1) -> int:
    cfg = model.config
    n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype = next(model.parameters()).dtype
    return 2 * cfg.num_hidden_layers * n_kv * head_dim * torch.finfo(dtype).bits // 8 * batch_size


def _select(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int, top_p: float = 1.0,
            logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, V] -> ([B] next tokens, [B] their log-probabilities under :func:`t4lib.decoding.sampling.scaled_logits` or None);
    capture-safe (no host sync). Greedy at ``temperature == 0``: the distribution is the point mass on the
    argmax, whose log-probability is 0 (dividing by the temperature would give NaN)."""
    if not do_sample:
        nxt = logits.float().argmax(dim=-1)
        if logprobs and temperature == 0:
            return nxt, torch.zeros(nxt.shape, dtype=torch.float32, device=nxt.device)
        scaled = scaled_logits(logits, temperature, top_k, top_p) if logprobs else None
    else:
        scaled = scaled_logits(logits, temperature, top_k, top_p)
        u = torch.rand_like(scaled).clamp_(1e-10, 1.0 - 1e-7)
        nxt = (scaled - torch.log(-torch.log(u))).argmax(dim=-1)  # Gumbel-max: a sample of softmax(scaled)
    if not logprobs:
        return nxt, None
    return nxt, torch.log_softmax(scaled, dim=-1).gather(-1, nxt[:, None]).squeeze(-1)


def ragged_mask(cache_position: torch.Tensor, pad: torch.Tensor, slots: int, dtype) -> torch.Tensor:
    """Additive mask ``[B, 1, q, slots]`` for queries at ``cache_position [q]`` of rows left-padded by
    ``pad [B]``: 0 where slot ``j <= cache_position[i]`` and ``j >= pad[b]``, the dtype's minimum elsewhere.
    A pad query also keeps its own slot, so no row of the softmax is empty (an all-masked row would give NaN
    values in the pad slots, and ``0 * NaN`` would reach the real rows)."""
    j = torch.arange(slots, device=pad.device)[None, None, :]
    c = cache_position[None, :, None]
    keep = (j <= c) & ((j >= pad[:, None, None]) | (j == c))
    zero = torch.zeros((), dtype=dtype, device=pad.device)
    return torch.where(keep, zero, torch.full((), torch.finfo(dtype).min, dtype=dtype, device=pad.device))[:, None]


def _check_mask(input_ids: torch.Tensor, attention_mask) -> list[tuple[int, int]]:
    """``[start, end)`` of each row's ones in ``attention_mask`` (same shape as ``input_ids``, 0/1, the ones
    contiguous and at least one per row)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dtype.is_floating_point \
            or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be an integer or bool tensor, got "
                        f"{getattr(attention_mask, 'dtype', type(attention_mask).__name__)}")
    if attention_mask.dim() == 1:
        attention_mask = attention_mask[None]
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask must have input_ids' shape {list(input_ids.shape)}, "
                         f"got {list(attention_mask.shape)}")
    m = attention_mask.long().cpu()
    if ((m != 0) & (m != 1)).any():
        raise ValueError("attention_mask must hold only 0 and 1")
    spans = []
    for b, row in enumerate(m.tolist()):
        ones = [i for i, v in enumerate(row) if v]
        if not ones:
            raise ValueError(f"attention_mask[{b}] has no ones: every prompt needs at least one token")
        if ones[-1] - ones[0] + 1 != len(ones):
            raise ValueError(f"attention_mask[{b}]: the ones must be contiguous (left or right padding)")
        spans.append((ones[0], ones[-1] + 1))
    return spans


class StaticEngine:
    """Greedy/sampled decoding with a static KV cache and CUDA-graph decode steps (see module docstring)."""

    def __init__(self, model: nn.Module, max_len: int = 512, use_graph: bool | None = None,
                 compile: bool | None = None, prefill_bucket: int = 16, prefill_graph: bool | None = None):
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a Hugging Face causal LM (nn.Module with .config), "
                            f"got {type(model).__name__}")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
            raise ValueError(f"max_len must be an int >= 2, got {max_len!r}")
        hf_compat.check_version()
        self.model = model.eval()
        self.vocab = vocab_size(model)
        self._cache_arg = hf_compat.cache_argument(model)
        emb = model.get_input_embeddings() if callable(getattr(model, "get_input_embeddings", None)) else None
        # the hidden states' dtype: the ragged mask is added to attention scores of that dtype
        self._act_dtype = emb.weight.dtype if isinstance(emb, nn.Embedding) else next(
            (p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        self.max_len = max_len
        self.device = next(model.parameters()).device
        if use_graph is not None and not isinstance(use_graph, bool):
            raise TypeError(f"use_graph must be a bool or None, got {type(use_graph).__name__}")
        self.use_graph = (self.device.type == "cuda") if use_graph is None else use_graph
        if self.use_graph and self.device.type != "cuda":
            raise ValueError("use_graph=True needs the model on a CUDA device")
        if compile is not None and not isinstance(compile, bool):
            raise TypeError(f"compile must be a bool or None, got {type(compile).__name__}")
        self.compile = self.use_graph if compile is None else compile
        if isinstance(prefill_bucket, bool) or not isinstance(prefill_bucket, int) or prefill_bucket < 1:
            raise ValueError(f"prefill_bucket must be an int >= 1, got {prefill_bucket!r}")
        self.prefill_bucket = prefill_bucket
        if prefill_graph is not None and not isinstance(prefill_graph, bool):
            raise TypeError(f"prefill_graph must be a bool or None, got {type(prefill_graph).__name__}")
        self.prefill_graph = self.use_graph if prefill_graph is None else prefill_graph
        if self.prefill_graph and not self.use_graph:
            raise ValueError("prefill_graph=True needs use_graph (a CUDA model)")
        self.prefill_graph_error = None
        self._pf_pool = None       # one memory pool for the prefill graphs of one setup (replayed one at a time)
        self._key = None      # (batch, do_sample, temperature, top_k, output_logits, output_logprobs, ragged)
        self._pad = None      # [B] left padding of each row of a ragged batch (None: equal-length prompts)
        self.graph = None
        self.graph_error = None
        self.compile_error = None
        self._decode_forward = None  # the compiled decode forward, once built
        self._logits_to_keep = True  # whether the model's forward takes logits_to_keep
        self._ran_compiled = False   # whether the decode step has run as compiled code

    # ------------------------------------------------------------------ setup
    def _setup(self, B: int, do_sample: bool, temperature: float, top_k: int, output_logits: bool,
               output_logprobs: bool, ragged: bool, top_p: float = 1.0, repetition_penalty: float = 1.0):
        key = (B, do_sample, temperature, top_k, output_logits, output_logprobs, ragged, top_p, repetition_penalty)
        if self._key != key:
            self.cache = hf_compat.static_cache(self.model.config, self.max_len)
            dev = self.device
            # a ragged batch's graphs read the padding from this buffer (rewritten before each prefill)
            self._pad = torch.zeros(B, dtype=torch.long, device=dev) if ragged else None
            self.ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
            self.pos = torch.zeros(1, dtype=torch.long, device=dev)
            self.step_idx = torch.zeros(1, dtype=torch.long, device=dev)
            self.out = torch.zeros(B, self.max_len, dtype=torch.long, device=dev)
            self.graph, self.graph_error, self._key = None, None, key
            self._sel = (do_sample, temperature, top_k, top_p)
            self._penalty = repetition_penalty
            # tokens each row has seen (prompt and generated), for the repetition penalty
            self._seen = torch.zeros(B, self.vocab, dtype=torch.bool, device=dev) if repetition_penalty != 1.0 \
                else None
            self.scores = None  # [B, max_len, V] fp32, allocated at the first prefill when output_logits
            self.logprobs = torch.zeros(B, self.max_len, device=dev) if output_logprobs else None
            # prefill buffers and graphs per padded length (they hold this cache's tensors)
            self._pf_graphs, self._pf_ids, self._pf_pos = {}, {}, {}
            self._pf_pool = None   # a pool lives only while a graph uses it: a new one for the new graphs
            self._pf_last = torch.zeros(1, dtype=torch.long, device=dev)   # index of the last prompt token
            self._pf_len = torch.zeros(1, dtype=torch.long, device=dev)    # prompt length: the write position
            self._pf_logits = None
            # the bytes a step reads, counted once per setup (walking the modules costs ~0.5 ms a call)
            self._bytes = (model_bytes(self.model), linear_weight_bytes(self.model),
                           kv_bytes_per_position(self.model, B))
        else:
            self.cache.reset()

    def _forward(self, ids, cache_position, last: torch.Tensor | None = None):
        """Logits [B, 1, V] of the last position, or of position ``last`` ([1] long tensor) when given."""
        B = ids.shape[0]
        if torch.compiler.is_compiling():
            # Replayed by every call of the compiled code; never set when dynamo runs this frame eagerly
            # (e.g. after its recompile limit), so the engine can tell compiled from merely wrapped.
            self._ran_compiled = True
        kw = {"input_ids": ids, self._cache_arg: self.cache, "cache_position": cache_position, "use_cache": True}
        if self._pad is None:
            kw["position_ids"] = cache_position.view(1, -1).expand(B, -1)
        else:   # pad slots sit at position 0 (any valid position: every real query masks them)
            kw["position_ids"] = (cache_position.view(1, -1) - self._pad[:, None]).clamp(min=0)
            kw["attention_mask"] = ragged_mask(cache_position, self._pad, self.max_len, self._act_dtype)
        if self._logits_to_keep:
            try:
                return self.model(**kw, logits_to_keep=1 if last is None else last).logits
            except TypeError:  # models without logits_to_keep (found by the eager prefill, before any tracing)
                self._logits_to_keep = False
        logits = self.model(**kw).logits
        return logits[:, -1:] if last is None else logits.index_select(1, last)

    def _step(self):
        """One decode step on the static buffers (what the graph captures)."""
        fwd = self._decode_forward if self._decode_forward is not None else self._forward
        logits = fwd(self.ids, self.pos)
        if self.scores is not None:
            self.scores.index_copy_(1, self.step_idx, logits[:, -1:].float())
        nxt, lp = self._choose(logits[:, -1])
        if lp is not None:
            self.logprobs.index_copy_(1, self.step_idx, lp[:, None])
        self.ids.copy_(nxt[:, None])
        self.out.index_copy_(1, self.step_idx, nxt[:, None])
        self.pos.add_(1)
        self.step_idx.add_(1)

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The next token of each row from its logits ``[B, V]`` (the repetition penalty on the tokens it has
        seen, then :func:`_select`), recorded as seen. Capture-safe."""
        if self._seen is not None:
            logits = penalize_repeats(logits, self._seen, self._penalty)
        nxt, lp = _select(logits, *self._sel, logprobs=self.logprobs is not None)
        if self._seen is not None:
            self._seen.scatter_(1, nxt[:, None], True)
        return nxt, lp

    # ------------------------------------------------------------------ prefill
    def _prefill_body(self, Tp: int):
        """The prefill on its static buffers (what a prefill graph captures): the padded prompt at positions
        0 .. Tp - 1, the logits of the last real token into ``_pf_logits``, and the cache's write position
        moved back from Tp to the prompt length."""
        logits = self._forward(self._pf_ids[Tp], self._pf_pos[Tp], last=self._pf_last)
        if self._pf_logits is None:
            self._pf_logits = torch.empty_like(logits)
        self._pf_logits.copy_(logits)
        for c in self._cache_counters()[0]:
            c.copy_(self._pf_len.reshape(c.shape))

    def _capture_prefill(self, Tp: int) -> None:
        """Capture the prefill graph of padded length ``Tp`` (warm-up on a side stream; the warm-up writes
        the cache slots the prefill then rewrites); on failure prefill eagerly and say why."""
        counters = self._cache_counters()[0]

        def reset():
            for c in counters:
                c.zero_()

        if self._pf_pool is None:
            self._pf_pool = torch.cuda.graph_pool_handle()
        g, why = graphs.try_capture(lambda: self._prefill_body(Tp), what="StaticEngine: prefill", warmup=1,
                                    reset=reset, pool=self._pf_pool)
        if g is not None:
            self._pf_graphs[Tp] = g
        else:   # capture-unsafe model code: prefill eagerly from now on
            self.prefill_graph_error = why
        reset()

    def _prefill(self, ids: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Logits [B, 1, V] of the last prompt token of ``ids [B, T]`` (on the device) with the cache filled
        and positioned at T, and whether a graph ran (see the module docstring)."""
        B, T = ids.shape
        counters, host = self._cache_counters()
        if host:   # a host-side write position: no padding, no graph
            return self._forward(ids, torch.arange(T, device=self.device)), False
        Tp = min(-(-T // self.prefill_bucket) * self.prefill_bucket, self.max_len)
        if Tp not in self._pf_ids:
            self._pf_ids[Tp] = torch.zeros(B, Tp, dtype=torch.long, device=self.device)
            self._pf_pos[Tp] = torch.arange(Tp, device=self.device)
        self._pf_ids[Tp][:, :T].copy_(ids)
        self._pf_ids[Tp][:, T:].copy_(ids[:, -1:].expand(B, Tp - T))   # pads: the last token repeated
        self._pf_last.fill_(T - 1)
        self._pf_len.fill_(T)
        if self.prefill_graph and self.prefill_graph_error is None and Tp not in self._pf_graphs:
            if any(c.device != self.device for c in counters):
                self._prefill_body(Tp)   # a fresh cache allocates its tensors (here) at its first write
            self._capture_prefill(Tp)
        if Tp in self._pf_graphs:
            self._pf_graphs[Tp].replay()
            return self._pf_logits, True
        self._prefill_body(Tp)
        return self._pf_logits, False

    def _capture(self):
        if self.compile and self._decode_forward is None and self.compile_error is None:
            # dynamic=False: one decode shape per engine; Inductor's own CUDA graphs stay off (ours capture it).
            self._decode_forward = torch.compile(self._forward, dynamic=False)
            self._capture_graph()
            if self.graph is None:  # compilation (or capturing its kernels) failed: capture the plain step
                self.compile_error, self.graph_error = self.graph_error, None
                self._decode_forward = None
                warnings.warn(f"StaticEngine: torch.compile of the decode step failed, decoding uncompiled "
                              f"({self.compile_error})", RuntimeWarning)
            else:
                return
        self._capture_graph()

    def _cache_counters(self) -> tuple[list[torch.Tensor], dict]:
        """The cache's own position counters (:func:`.hf_compat.cache_counters`)."""
        return hf_compat.cache_counters(self.cache)

    def _warm_up(self, steps: int = 2) -> None:
        """Run the step ``steps`` times (compiling it, loading kernels) and leave every buffer, the
        cache's position counters included, as it was: the captured step then starts from the state
        the eager step would see. Raises if the cache keeps a host-side counter that a step advances."""
        counters, host = self._cache_counters()
        bufs = [self.ids, self.pos, self.step_idx, self.out, *counters] + ([self._seen] if self._seen is not None else [])
        saved = [t.clone() for t in bufs]

        def restore():
            for t, v in zip(bufs, saved):
                t.copy_(v)
            for (i, name), v in host.items():
                hf_compat.set_host_counter(self.cache, i, name, v)

        try:
            for i in range(steps):
                if i:
                    restore()
                self._step()
                if self._cache_counters()[1] != host:
                    raise RuntimeError("the cache advances a host-side position counter each step "
                                       f"({sorted(name for _, name in host)}), which a CUDA graph would freeze")
        finally:
            restore()

    def _capture_graph(self):
        # the warm-up rewrites the K/V slot at pos with the values the real step writes; capture-unsafe
        # model code: decode eagerly, the reason in graph_error
        self.graph, self.graph_error = graphs.try_capture(self._step, warm_up=self._warm_up, warmup=1)

    # ------------------------------------------------------------------ generate
    def _check_generate(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, seed,
                        eos_token_id) -> tuple[list[list[int]], tuple[int, ...]]:
        """The prompts as checked token lists and the eos ids; every argument checked before any work."""
        if attention_mask is not None:
            if not isinstance(input_ids, torch.Tensor):
                raise TypeError("attention_mask goes with a [B, T] tensor input_ids; pass ragged prompts as a "
                                "list of token lists instead")
            ids2 = input_ids[None] if input_ids.dim() == 1 else input_ids
            spans = _check_mask(ids2, attention_mask)
            if ids2.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"input_ids must be an integer tensor, got {ids2.dtype}")
            input_ids = [r[a:e] for r, (a, e) in zip(ids2.tolist(), spans)]
        rows = token_rows(input_ids, self.vocab)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        T = max(map(len, rows))
        if T + max_new_tokens > self.max_len:
            raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) exceeds max_len={self.max_len}")
        if not isinstance(do_sample, bool):
            raise TypeError(f"do_sample must be a bool, got {type(do_sample).__name__}")
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
                or not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if do_sample and not temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: the whole vocabulary), got {top_k!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        return rows, eos_ids(eos_token_id, self.vocab)

    @torch.no_grad()
    def generate(self, input_ids=None, generation_config=None, streamer=None, **kwargs):
        """``model.generate``'s call: the prompts (``input_ids [B, T]``, with ``attention_mask [B, T]`` for a
        padded batch, left or right; or a list of token lists) decoded under ``generation_config`` (a
        ``transformers.GenerationConfig``, default ``model.generation_config``: its EOS list, ``do_sample``,
        ``temperature``, ``top_k``, ``top_p``, ``repetition_penalty``), updated by keyword overrides
        (``max_new_tokens=64``, ``do_sample=False``, ``eos_token_id=...``). Each row stops at its first EOS and is
        filled with ``pad_token_id`` after it; decoding ends when every row has stopped or after
        ``max_new_tokens``. ``streamer`` (``transformers.TextStreamer``, or anything with ``put``/``end``) gets
        the prompt, then each step's tokens. The engine's own keywords: ``seed``, ``output_logprobs``.

        Returns what ``model.generate`` returns: a LongTensor ``[B, T + n]`` of sequences, prompt included
        (``input_ids`` as given; token lists left-padded with ``pad_token_id``), on ``input_ids``' device; with
        ``return_dict_in_generate=True`` a :class:`GenerateResult` whose ``sequences`` is that tensor, beside the
        engine's statistics (time to first token, decode tokens/s, ``lengths``, ``logits`` with
        ``output_logits=True`` as one ``[B, n, V]`` tensor). Greedy decoding gives ``model.generate``'s tokens.

        :meth:`generate_with_stats` decodes a fixed number of tokens (no EOS stop) and returns the statistics:
        what benchmarks time."""
        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:
            raise TypeError("generate() needs input_ids (a [B, T] integer tensor or a list of token lists)")
        own = {k: kwargs.pop(k) for k in ("attention_mask", "seed", "output_logprobs") if k in kwargs}
        if isinstance(input_ids, torch.Tensor):
            T = input_ids.shape[-1]
        else:
            T = max((len(r) if isinstance(r, (list, tuple)) else 1 for r in input_ids), default=0) \
                if isinstance(input_ids, (list, tuple)) else 0
        gen, rest = generation.resolve(self.model, T, self.vocab, generation_config, **kwargs)
        if rest:
            raise TypeError(f"generate() got keywords neither GenerationConfig nor StaticEngine knows: "
                            f"{sorted(rest)}")
        res = self.generate_with_stats(
            input_ids, gen.max_new_tokens, attention_mask=own.get("attention_mask"), do_sample=gen.do_sample,
            temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
            repetition_penalty=gen.repetition_penalty, seed=own.get("seed"), eos_token_id=list(gen.eos) or None,
            output_logits=gen.output_logits, output_logprobs=own.get("output_logprobs", False),
            stop_at_eos=True, streamer=streamer, pad_token_id=gen.pad_token_id)
        new, res.lengths = generation.pad_after_eos(res.new_tokens, gen.eos, gen.pad_token_id)
        n = new.shape[1]
        if isinstance(input_ids, torch.Tensor):
            prompt = input_ids if input_ids.dim() == 2 else input_ids[None]
        else:
            prompt = res.sequences[:, :T]
            for b, m in enumerate(res.prompt_lengths):
                prompt[b, :T - m] = gen.pad_token_id
        res.sequences = torch.cat([prompt, new.to(prompt.device)], dim=1)
        res.new_tokens = new
        if res.logits is not None:
            res.logits = res.logits[:, :n]
        if res.logprobs is not None:
            res.logprobs = res.logprobs[:, :n]
        return res if gen.return_dict_in_generate else res.sequences

    @torch.no_grad()
    def generate_with_stats(self, input_ids, max_new_tokens: int, *, attention_mask: torch.Tensor | None = None,
                            do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                            repetition_penalty: float = 1.0, seed: int | None = None,
                            eos_token_id: int | list[int] | None = None, output_logits: bool = False,
                            output_logprobs: bool = False, stop_at_eos: bool = False, streamer=None,
                            pad_token_id: int = 0) -> GenerateResult:
        """The engine's own call: decode exactly ``max_new_tokens`` tokens after each prompt of ``input_ids`` (no
        stop at EOS unless ``stop_at_eos``; ``lengths`` says where each row's first ``eos_token_id`` is), and
        return them with the call's statistics (:class:`GenerateResult`, tensors on the CPU). ``input_ids``: a
        ``[B, T]`` (or ``[T]``) integer tensor, with an optional ``attention_mask [B, T]`` marking each row's real
        tokens, or a list of token lists of any lengths (see module docstring: each row decodes as it would
        alone). A fixed token count is what benchmarks time; :meth:`generate` is ``model.generate``'s call.
        ``stop_at_eos``: end once every row has produced an EOS (checked every step on the CPU or with a
        ``streamer``, every 8 graph replays otherwise; tokens past a row's EOS are left as decoded).
        ``streamer`` gets the prompt, then each step's tokens (``pad_token_id`` for rows past their EOS)."""
        rows, eos = self._check_generate(input_ids, attention_mask, max_new_tokens, do_sample, temperature,
                                         top_k, seed, eos_token_id)
        if do_sample:
            check_top_p(top_p)
        if isinstance(repetition_penalty, bool) or not isinstance(repetition_penalty, numbers.Real) \
                or not math.isfinite(repetition_penalty) or not repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0 (1.0: none), got {repetition_penalty!r}")
        lens = [len(r) for r in rows]
        B, T = len(rows), max(lens)
        ragged = min(lens) != T
        # left padding with each row's first token (any id would do: the mask hides them)
        prompt = torch.tensor([[r[0]] * (T - len(r)) + r for r in rows], dtype=torch.long)
        cuda = self.device.type == "cuda"
        self._setup(B, do_sample, float(temperature), int(top_k), bool(output_logits), bool(output_logprobs), ragged,
                    float(top_p) if do_sample else 1.0, float(repetition_penalty))
        if ragged:
            self._pad.copy_(torch.tensor([T - n for n in lens]))
        if seed is not None:
            torch.manual_seed(seed)
        ids = prompt.to(self.device)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
        t0 = time.perf_counter()
        logits, prefill_graph = self._prefill(ids)
        if output_logits:
            if self.scores is None:
                self.scores = torch.zeros(B, self.max_len, logits.shape[-1], device=self.device)
            self.scores[:, 0] = logits[:, -1].float()
        if self._seen is not None:   # a ragged row's left pads repeat its first token: seen either way
            self._seen.zero_().scatter_(1, ids, True)
        first, lp = self._choose(logits[:, -1])
        if lp is not None:
            self.logprobs[:, 0] = lp
        self.ids.copy_(first[:, None])
        self.out[:, 0] = first
        self.pos.fill_(T)
        self.step_idx.fill_(1)
        if cuda:
            torch.cuda.synchronize()
        ttft = time.perf_counter() - t0
        if self.use_graph and self.graph is None and self.graph_error is None and max_new_tokens > 1:
            self._capture()
        elif self.compile and not self.use_graph and self._decode_forward is None and self.compile_error is None:
            self._decode_forward = torch.compile(self._forward, dynamic=False)
        eos_t = torch.tensor(eos, device=self.device) if eos else None
        stop = stop_at_eos and eos_t is not None

        def stopped(n: int) -> torch.Tensor:   # [B] whether row b has an EOS among its first n tokens
            return torch.isin(self.out[:, :n], eos_t).any(dim=1)

        if streamer is not None:
            streamer.put(prompt)
            streamer.put(self.out[:, 0].cpu())
        t1 = time.perf_counter()
        n = 1
        if not (stop and bool(stopped(1).all())):
            for _ in range(max_new_tokens - 1):
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self._step()
                n += 1
                if streamer is not None:
                    tok = self.out[:, n - 1].cpu()
                    if eos_t is not None:
                        tok = tok.masked_fill(stopped(n - 1).cpu(), pad_token_id)
                    streamer.put(tok)
                if stop and (streamer is not None or self.graph is None or n % 8 == 0) and bool(stopped(n).all()):
                    break
        if streamer is not None:
            streamer.end()
        if cuda:
            torch.cuda.synchronize()
        decode = time.perf_counter() - t1
        if self._decode_forward is not None and not self._ran_compiled and self.compile_error is None \
                and n > 1:
            self.compile_error = ("torch.compile ran the decode step uncompiled (dynamo's recompile limit for "
                                  "StaticEngine._forward reached? see torch._dynamo.config.recompile_limit)")
            warnings.warn(f"StaticEngine: {self.compile_error}", RuntimeWarning)
        # copies: on a CPU .cpu() would return views of the engine's buffers, which the next call rewrites
        new = self.out[:, :n].to("cpu", copy=True)
        lengths = [n] * B
        if eos:
            hits = torch.isin(new, torch.tensor(eos))
            for b in range(B):
                hit = hits[b].nonzero()
                if len(hit):
                    lengths[b] = int(hit[0]) + 1
        steps = n - 1
        if ragged:   # the pads shown as the model's pad id (0 without one)
            pad_id = getattr(self.model.config, "pad_token_id", None)
            pad_id = pad_id if isinstance(pad_id, int) and 0 <= pad_id < self.vocab else 0
            for b, m in enumerate(lens):
                prompt[b, :T - m] = pad_id
        res = GenerateResult(sequences=torch.cat([prompt, new], dim=1), new_tokens=new, prompt_lengths=lens,
                             lengths=lengths, ttft_s=ttft, decode_s=decode,
                             decode_tokens_per_s=steps / decode if steps and decode > 0 else float("nan"),
                             graph=self.graph is not None, graph_error=self.graph_error,
                             prefill_graph=prefill_graph,
                             compiled=self._decode_forward is not None and self._ran_compiled,
                             compile_error=self.compile_error,
                             logits=self.scores[:, :n].to("cpu", copy=True) if output_logits else None,
                             logprobs=self.logprobs[:, :n].to("cpu", copy=True) if output_logprobs else None,
                             weight_bytes=self._bytes[0])
        avg_len = T + n / 2
        res.bytes_per_step = self._bytes[1] + self._bytes[2] * avg_len
        if cuda:
            res.peak_mem_bytes = torch.cuda.max_memory_allocated(self.device)
            if steps and decode > 0:
                res.bandwidth_Bps = res.bytes_per_step * steps / decode
                res.frac_copy_bw = res.bandwidth_Bps / hw.copy_bandwidth()
        return res


@torch.no_grad()
def hf_generate(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, static_cache: bool = True,
                **kw) -> torch.Tensor:
    """The baseline: ``model.generate`` greedy, exactly ``max_new_tokens`` tokens, optional static cache."""
    args = dict(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                pad_token_id=getattr(model.config, "eos_token_id", None) or 0)
    if static_cache:
        args["cache_implementation"] = "static"
    args.update(kw)
    return model.generate(input_ids.to(next(model.parameters()).device), **args)
