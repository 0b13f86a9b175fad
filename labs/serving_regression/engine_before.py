# Vendored for labs/serving_regression: t4lib/serving/engine.py as of commit 2b5649e (5d4529c^, the parent of
# "StaticEngine takes ragged batches"), unchanged except the import paths that moved since: ..quant.linear,
# ..quant.model and ..hw are now t4lib.quant.linear, t4lib.quant.model and t4lib.core.hw. Not part of the
# library; the lab times it beside today's engine.
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
``nn.Linear`` or :class:`t4lib.quant.QuantLinear` layers. Decoding always runs
``max_new_tokens`` steps; tokens after an ``eos_token_id`` are cut from the
returned ``sequences`` per row (``lengths``). ``output_logits=True`` also
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
copy bandwidth of :func:`t4lib.hw.copy_bandwidth` (the gpt-fast convention).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from t4lib.quant.linear import QuantLinear

# transformers 5.x renames the cache argument; the old name keeps older versions working.
warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)


@dataclass
class GenerateResult:
    sequences: torch.Tensor          # [B, T + new] prompt and generated tokens (CPU)
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
    from t4lib.quant.model import weight_bytes  # moved since 5d4529c^ (was ..quant.model)
    return weight_bytes(model)


def kv_bytes_per_position(model: nn.Module, batch_size: int = 1) -> int:
    cfg = model.config
    n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype = next(model.parameters()).dtype
    return 2 * cfg.num_hidden_layers * n_kv * head_dim * torch.finfo(dtype).bits // 8 * batch_size


def _scaled(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """fp32 ``logits / temperature``, outside the top k set to -inf: the sampling distribution's logits."""
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def _select(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int,
            logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, V] -> ([B] next tokens, [B] their log-probabilities under :func:`_scaled` or None);
    capture-safe (no host sync)."""
    if not do_sample:
        nxt = logits.float().argmax(dim=-1)
        scaled = _scaled(logits, temperature, top_k) if logprobs else None
    else:
        scaled = _scaled(logits, temperature, top_k)
        u = torch.rand_like(scaled).clamp_(1e-10, 1.0 - 1e-7)
        nxt = (scaled - torch.log(-torch.log(u))).argmax(dim=-1)  # Gumbel-max: a sample of softmax(scaled)
    if not logprobs:
        return nxt, None
    return nxt, torch.log_softmax(scaled, dim=-1).gather(-1, nxt[:, None]).squeeze(-1)


class StaticEngine:
    """Greedy/sampled decoding with a static KV cache and CUDA-graph decode steps (see module docstring)."""

    def __init__(self, model: nn.Module, max_len: int = 512, use_graph: bool | None = None,
                 compile: bool | None = None, prefill_bucket: int = 16, prefill_graph: bool | None = None):
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a Hugging Face causal LM (nn.Module with .config), "
                            f"got {type(model).__name__}")
        if not isinstance(max_len, int) or max_len < 2:
            raise ValueError(f"max_len must be an int >= 2, got {max_len!r}")
        self.model = model.eval()
        self.max_len = max_len
        self.device = next(model.parameters()).device
        self.use_graph = (self.device.type == "cuda") if use_graph is None else bool(use_graph)
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
        self._key = None      # (batch, do_sample, temperature, top_k, output_logits, output_logprobs): the buffers/graph
        self.graph = None
        self.graph_error = None
        self.compile_error = None
        self._decode_forward = None  # the compiled decode forward, once built
        self._logits_to_keep = True  # whether the model's forward takes logits_to_keep
        self._ran_compiled = False   # whether the decode step has run as compiled code

    # ------------------------------------------------------------------ setup
    def _setup(self, B: int, do_sample: bool, temperature: float, top_k: int, output_logits: bool,
               output_logprobs: bool):
        from transformers import StaticCache  # optional: transformers (as in the original)

        key = (B, do_sample, temperature, top_k, output_logits, output_logprobs)
        if self._key != key:
            self.cache = StaticCache(config=self.model.config, max_cache_len=self.max_len)
            dev = self.device
            self.ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
            self.pos = torch.zeros(1, dtype=torch.long, device=dev)
            self.step_idx = torch.zeros(1, dtype=torch.long, device=dev)
            self.out = torch.zeros(B, self.max_len, dtype=torch.long, device=dev)
            self.graph, self.graph_error, self._key = None, None, key
            self._sel = (do_sample, temperature, top_k)
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
        pos_ids = cache_position.view(1, -1).expand(B, -1)
        if torch.compiler.is_compiling():
            # Replayed by every call of the compiled code; never set when dynamo runs this frame eagerly
            # (e.g. after its recompile limit), so the engine can tell compiled from merely wrapped.
            self._ran_compiled = True
        kw = dict(input_ids=ids, past_key_values=self.cache, cache_position=cache_position, position_ids=pos_ids,
                  use_cache=True)
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
        nxt, lp = _select(logits[:, -1], *self._sel, logprobs=self.logprobs is not None)
        if lp is not None:
            self.logprobs.index_copy_(1, self.step_idx, lp[:, None])
        self.ids.copy_(nxt[:, None])
        self.out.index_copy_(1, self.step_idx, nxt[:, None])
        self.pos.add_(1)
        self.step_idx.add_(1)

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
        try:
            if self._pf_pool is None:
                self._pf_pool = torch.cuda.graph_pool_handle()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for c in counters:
                    c.zero_()
                self._prefill_body(Tp)
            torch.cuda.current_stream().wait_stream(side)
            for c in counters:
                c.zero_()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self._pf_pool):  # records; runs nothing
                self._prefill_body(Tp)
            self._pf_graphs[Tp] = g
        except Exception as e:  # capture-unsafe model code: prefill eagerly and say so
            self.prefill_graph_error = f"{type(e).__name__}: {e}"
            torch.cuda.synchronize()
            warnings.warn(f"StaticEngine: prefill graph capture failed, prefilling eagerly "
                          f"({self.prefill_graph_error})", RuntimeWarning)
        for c in counters:
            c.zero_()

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
        """Where the cache keeps its own position besides the K/V tensors: transformers' StaticLayer
        writes each step's K/V at its ``cumulative_length`` (a device tensor it advances in place),
        not at the ``cache_position`` passed in. Returns those integer tensors, and the host-side
        integer counters (which a CUDA graph would freeze) as {(layer index, name): value}."""
        tensors, host = [], {}
        for i, layer in enumerate(getattr(self.cache, "layers", [])):
            for name, v in vars(layer).items():
                if name in ("keys", "values"):
                    continue
                if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
                    tensors.append(v)
                elif isinstance(v, int) and not isinstance(v, bool) and "length" in name:
                    host[(i, name)] = v
        return tensors, host

    def _warm_up(self, steps: int = 2) -> None:
        """Run the step ``steps`` times (compiling it, loading kernels) and leave every buffer, the
        cache's position counters included, as it was: the captured step then starts from the state
        the eager step would see. Raises if the cache keeps a host-side counter that a step advances."""
        counters, host = self._cache_counters()
        bufs = [self.ids, self.pos, self.step_idx, self.out, *counters]
        saved = [t.clone() for t in bufs]

        def restore():
            for t, v in zip(bufs, saved):
                t.copy_(v)
            for (i, name), v in host.items():
                setattr(self.cache.layers[i], name, v)

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
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # rewrites the K/V slot at pos with the values the real step writes
                self._warm_up()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):  # records the step; runs nothing, so no buffer changes
                self._step()
            self.graph = g
        except Exception as e:  # capture-unsafe model code: decode eagerly and say so
            self.graph, self.graph_error = None, f"{type(e).__name__}: {e}"
            torch.cuda.synchronize()

    # ------------------------------------------------------------------ generate
    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, *, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int = 0, seed: int | None = None,
                 eos_token_id: int | None = None, output_logits: bool = False,
                 output_logprobs: bool = False) -> GenerateResult:
        """Decode ``max_new_tokens`` tokens after ``input_ids [B, T]`` (see module docstring)."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"input_ids must be an integer tensor, got "
                            f"{getattr(input_ids, 'dtype', type(input_ids).__name__)}")
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be [B, T] with T >= 1, got shape {list(input_ids.shape)}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        B, T = input_ids.shape
        if T + max_new_tokens > self.max_len:
            raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) exceeds max_len={self.max_len}")
        if do_sample and not temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
        cuda = self.device.type == "cuda"
        self._setup(B, bool(do_sample), float(temperature), int(top_k), bool(output_logits), bool(output_logprobs))
        if seed is not None:
            torch.manual_seed(seed)
        ids = input_ids.to(self.device, torch.long)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
        t0 = time.perf_counter()
        logits, prefill_graph = self._prefill(ids)
        if output_logits:
            if self.scores is None:
                self.scores = torch.zeros(B, self.max_len, logits.shape[-1], device=self.device)
            self.scores[:, 0] = logits[:, -1].float()
        first, lp = _select(logits[:, -1], *self._sel, logprobs=self.logprobs is not None)
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
        t1 = time.perf_counter()
        for _ in range(max_new_tokens - 1):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        if cuda:
            torch.cuda.synchronize()
        decode = time.perf_counter() - t1
        if self._decode_forward is not None and not self._ran_compiled and self.compile_error is None \
                and max_new_tokens > 1:
            self.compile_error = ("torch.compile ran the decode step uncompiled (dynamo's recompile limit for "
                                  "StaticEngine._forward reached? see torch._dynamo.config.recompile_limit)")
            warnings.warn(f"StaticEngine: {self.compile_error}", RuntimeWarning)
        new = self.out[:, :max_new_tokens].cpu()
        lengths = [max_new_tokens] * B
        if eos_token_id is not None:
            for b in range(B):
                hit = (new[b] == eos_token_id).nonzero()
                if len(hit):
                    lengths[b] = int(hit[0]) + 1
        steps = max_new_tokens - 1
        res = GenerateResult(sequences=torch.cat([input_ids.cpu().long(), new], dim=1), new_tokens=new,
                             lengths=lengths, ttft_s=ttft, decode_s=decode,
                             decode_tokens_per_s=steps / decode if steps and decode > 0 else float("nan"),
                             graph=self.graph is not None, graph_error=self.graph_error,
                             prefill_graph=prefill_graph,
                             compiled=self._decode_forward is not None and self._ran_compiled,
                             compile_error=self.compile_error,
                             logits=self.scores[:, :max_new_tokens].cpu() if output_logits else None,
                             logprobs=self.logprobs[:, :max_new_tokens].cpu() if output_logprobs else None,
                             weight_bytes=self._bytes[0])
        avg_len = T + max_new_tokens / 2
        res.bytes_per_step = self._bytes[1] + self._bytes[2] * avg_len
        if cuda:
            from t4lib.core import hw  # moved since 5d4529c^ (was t4lib.hw)
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
