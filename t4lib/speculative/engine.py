"""Speculative decoding on a static KV cache: draft, verify k+1 positions in one target forward,
accept the longest prefix equal to the target's greedy choice plus one bonus token.

Design (after gpt-fast): the cache (:class:`.cache.RowStaticCache`) has one write position per
sequence and ``max_len + k_max + 1`` slots, so rollback is moving a position; rejected slots are
masked and later overwritten. On CUDA each verify shape ``(B, k+1)`` for ``k`` in ``ks`` is one
CUDA graph (captured once per batch size, before the prefill), optionally around a
``torch.compile``'d forward; a plain greedy step (``k = 0``) is a graph that feeds its own output
back, replayed ``plain_chunk`` times between two host synchronisations. The prefill is one CUDA graph
per prompt bucket (prompts right-padded to a multiple of ``prefill_bucket`` tokens), captured on first use
around the uncompiled forward (no recompiles; replaying it removes the host cost of an eager forward, which
dominated batch-1 latency on short outputs); it returns the logits of each row's last prompt token.
Host-to-device copies of positions and tokens go through pinned staging buffers.

Per iteration: the drafter proposes up to ``k`` tokens per active sequence (fewer near the token
budget; none across EOS), the target verifies ``[last, d_1 .. d_k]`` at positions
``pos[b] .. pos[b] + k``, row ``b`` keeps ``n_b`` drafts (the longest prefix with
``d_i == argmax_{i-1}``) and the bonus ``argmax_{n_b}``, and advances ``pos[b]`` by ``n_b + 1``.
The emitted tokens are by construction the target's greedy tokens, so the output equals plain
greedy decoding up to floating-point differences between a 1-token and a (k+1)-token forward
(none seen in fp32; near-ties in fp16).

Adaptive ``k`` (``adaptive=True``): the engine keeps a running estimate ``a`` of the chance that
a drafted token is accepted (each verify is ``n`` successes in ``n + 1`` trials, or ``n`` in ``n`` when
the whole draft held) and, before each step, picks the ``k`` in ``ks`` that maximises the expected
tokens per verify, ``(1 - a^(k+1)) / (1 - a)``, per unit of verify cost ``c(k+1)`` (the time of a
``(k+1)``-token forward over a 1-token one: timed on the captured graphs on CUDA, ``verify_cost``
elsewhere). It decodes plain steps instead when no ``k`` beats one token per plain step by
``margin`` (the host round trip each verify costs), and after each plain chunk asks the drafter what
it would have proposed at the chunk start, scoring that guess against the chunk's tokens, so ``a``
recovers when drafts would pay again. A fixed ``k`` (``adaptive=False``) drafts ``k`` whenever the
drafter has something.

Device rounds (greedy, a drafter with ``propose_device`` such as prompt lookup; default on CUDA): the loop
above costs a host round trip per verify (read the argmax, draft on the host, upload the next input), which
on a small model is a sizeable share of a step. With device rounds each row's tokens, length and budget live
on the device, and one round (draft by tensor lookup, verify ``k + 1`` positions, accept, append, advance) is
one CUDA graph. Rounds draft ``k`` = the largest of ``ks`` (or the ``k`` asked for) or nothing (a plain round,
which also scores a one-token draft for adaptive ``k``): a round's cost barely grows with ``k`` where the
forward is bound by weights or launches, and two graphs keep the compile and capture time short. The host
replays ``rounds_per_sync`` drafting rounds or ``plain_chunk`` plain rounds per chunk, keeps ``in_flight``
chunks queued (one by default: on a small model a round queued behind the last one costs more than the host's
read), and reads back only which rows are done and the counters, to stop and to choose the next chunk's kind
from the two rounds' timed costs (a drafting round when its expected tokens per unit of cost beat a plain
round's by ``round_margin``, 0 by default: unlike a verify of the host loop, a round pays no round trip of its
own). A row that finishes mid-chunk idles (its rounds emit nothing); chunks queued after the last row finished
still run and count as target forwards. The tokens are the same greedy tokens.

Sampling (``do_sample=True``, ``temperature``, ``top_k``, ``seed``): the target's distribution ``p`` at each
verified position is :class:`.sampling.Sampler` applied to the verify's logits (the graph's output buffer on
CUDA); each row keeps its drafts by the speculative-sampling rule (:func:`.sampling.speculative_accept`:
accept ``d_i`` with probability ``min(1, p_i(d_i) / q_i(d_i))``, at the first rejection resample from
``max(p_i - q_i, 0)``, else a bonus token from ``p_k``), so every emitted token is distributed as the target's
own sampling would draw it. Prompt lookup drafts are deterministic (``q`` one-hot); a draft model samples its
drafts with the same settings and returns its ``q`` (:meth:`.drafters.Drafter.propose_sampled`). Plain steps
sample one token per target forward on the host. All random draws come from one CPU generator seeded by
``seed`` (default: drawn from torch's global generator), so a seed reproduces the tokens.
"""
from __future__ import annotations

import math
import numbers
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from t4lib.decoding.tokens import eos_ids, token_rows, vocab_size
from t4lib.speculative.cache import RowStaticCache, causal_row_mask
from t4lib.core import graphs
from t4lib.decoding.drafter import Drafter
from t4lib.decoding import config as generation
from t4lib.decoding.sampling import Sampler, sample, speculative_accept
from t4lib.serving import hf_compat

# end-of-sequence ids a call on device rounds can stop at (``_BatchState.eos``, padded with -1)
EOS_MAX = 8
# device counters of a call on device rounds (``_BatchState.counts``)
_COUNTS = ("row_forwards", "drafted", "accepted", "no_draft", "trials", "probe_succ", "probe_trials")


def _round_pre(drafter, tokens, n, limit, ids, pos, k: int):
    """The first half of a device round: draft up to ``k`` tokens per row (``k = 0``: a one-token probe that
    only scores the drafter) and stage the verify's inputs, ``ids = [last, drafts]`` at ``pos = n - 1``."""
    draft, dlen = drafter.propose_device(tokens, n, max(k, 1))
    dlen = torch.minimum(dlen, (limit - n - 1).clamp(min=0))   # leave room for the bonus token
    ids[:, :1].copy_(tokens.gather(1, (n - 1)[:, None]))
    if k:
        ids[:, 1:].copy_(draft)
    pos.copy_(n - 1)
    return draft, dlen


def _round_post(logits, draft, dlen, tokens, n, limit, done, eos, counts, hist, snap, k: int):
    """The second half: keep each active row's longest draft prefix equal to the target's argmax plus one
    token (cut after an EOS and at the row's budget), append them to ``tokens``, advance ``n``, mark
    finished rows, and add this round to the counters (``_COUNTS``) and the accepted-count histogram."""
    q = k + 1
    g = logits.float().argmax(dim=-1)                                   # [B, q]
    j = torch.arange(q, device=g.device)
    active = ~done
    if k:
        nacc = ((draft == g[:, :k]) & (j[None, :k] < dlen[:, None])).long().cumprod(1).sum(1)
    else:
        nacc = torch.zeros_like(n)
    cnt = nacc + 1
    is_eos = (g[:, :, None] == eos).any(-1)
    first_eos = torch.where(is_eos & (j[None] < cnt[:, None]), j[None], q).amin(1)
    hit = (first_eos < q) & active
    cnt = torch.minimum(torch.where(hit, first_eos + 1, cnt), limit - n) * active
    tokens.scatter_(1, n[:, None] + j[None], g)    # slots past n + cnt are scratch, overwritten later
    n.add_(cnt)
    done.logical_or_(hit | (n >= limit))
    a = active.long()
    has = a * (dlen > 0)
    zero = torch.zeros_like(a.sum())
    if k:
        hist.index_add_(0, nacc, has)
        inc = [a.sum(), (dlen * a).sum(), (nacc * has).sum(), (a - has).sum(),
               ((nacc + (nacc < dlen).long()) * has).sum(), zero, zero]
    else:
        inc = [a.sum(), zero, zero, zero, zero, (has * (draft[:, 0] == g[:, 0])).sum(), has.sum()]
    counts.add_(torch.stack(inc))
    snap.copy_(torch.cat([done.long(), counts]))


def _median_replay_ms(graph, reset, reps: int = 5) -> float:
    """Median GPU milliseconds of one replay of a captured graph, ``reset()`` before each."""
    ts = []
    for _ in range(reps):
        reset()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[reps // 2]


@dataclass
class SpecStats:
    """What one ``generate`` call did (all counts over the whole batch)."""
    k_max: int
    target_forwards: int = 0          # verify forwards + plain steps (the prefill not counted)
    row_forwards: int = 0             # sum over forwards of the rows still active in it
    decode_tokens: int = 0            # tokens emitted after the prefill's first token
    drafted: int = 0
    accepted: int = 0
    accept_hist: list[int] = field(default_factory=list)   # [n] = verifies where a row kept n drafts
    no_draft: int = 0                 # row-verifies where the drafter had nothing
    plain_steps: int = 0
    k_trace: list[int] = field(default_factory=list)       # k of each iteration (0 = plain chunk)
    device_rounds: bool = False       # drafting and acceptance ran on the device (draft_s then counts nothing)
    prefill_s: float = 0.0
    prefill_graph: bool = False       # whether the prefill ran as a captured graph
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0

    @property
    def tokens_per_forward(self) -> float:
        """Tokens each active sequence gains per target forward (1.0 for plain greedy)."""
        return self.decode_tokens / self.row_forwards if self.row_forwards else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    def as_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items() if k != "k_trace"}
        d.update(tokens_per_forward=self.tokens_per_forward, acceptance_rate=self.acceptance_rate)
        return d


@dataclass
class SpecResult:
    new_tokens: list[list[int]]       # per row, up to and including EOS, at most max_new_tokens
    lengths: list[int]
    time_s: float                     # prefill + decode, wall clock (synchronised)
    tokens_per_s: float               # per sequence: mean generated tokens / time_s
    stats: SpecStats
    graph: bool
    compiled: bool
    compile_error: str | None = None
    do_sample: bool = False
    sequences: torch.Tensor | None = None   # from generate(): [B, T + n] prompt and new tokens, padded after EOS


class _BatchState:
    """Buffers, cache and graphs for one batch size."""

    def __init__(self, B, cache):
        self.B, self.cache = B, cache
        self.ids: dict[int, torch.Tensor] = {}       # q -> [B, q] input tokens
        self.argmax: dict[int, torch.Tensor] = {}    # q -> [B, q] target greedy tokens
        self.vlogits: dict[int, torch.Tensor] = {}   # q -> [B, q, V] logits of the last verify (graph output)
        self.plain_logits = None                     # [B, 1, V] logits of the last plain step (graph output)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}   # q -> graph: the plain step at 1, a verify of k at k + 1
        self.chunk = None                            # [B, chunk] plain-step outputs
        self.chunk_idx = None
        self.prefill_graphs: dict[int, torch.cuda.CUDAGraph] = {}   # padded prompt length T -> prefill graph
        self.pf_ids: dict[int, torch.Tensor] = {}    # T -> [B, T] prompt tokens (graph input)
        self.pf_last = None                          # [B] index of each row's last prompt token (graph input)
        self.pf_logits = None                        # [B, V] logits at those positions (graph output)
        self.h_pos = None                            # pinned host staging of cache.pos (CUDA)
        self.h_ids: dict[int, torch.Tensor] = {}     # q -> pinned host staging of ids[q] (CUDA)
        self.cost: dict[int, float] | None = None    # q -> timed cost of a q-token forward / a plain step
        self.graph_ms: dict[int, float] = {}         # q -> median GPU milliseconds of one replay (1: a plain step)
        # device rounds (greedy, a drafter with ``propose_device``): every row's tokens live on the device
        self.tokens = None                           # [B, slots] context of each row (slot >= n[b]: scratch)
        self.n = self.limit = self.done = None       # [B] context length, its cap, finished
        self.eos = None                              # [EOS_MAX] end-of-sequence ids (-1: none)
        self.counts = None                           # [len(_COUNTS)] device counters of this call
        self.hist = None                             # [k_max + 1] accepted-count histogram
        self.snap = None                             # [B + counters]: what the host reads after a chunk
        self.round_graphs: dict[int, torch.cuda.CUDAGraph] = {}   # k -> round graph (0: a plain round)
        self.round_drafter = None                    # the drafter the round graphs were captured with
        self.round_ms: dict[int, float] = {}         # k -> median GPU milliseconds of one round replay
        self.h_snap: list[torch.Tensor] = []         # pinned host copies of snap, one per chunk in flight


class SpeculativeEngine:
    """Speculative decoding (greedy or sampled) of a Hugging Face causal LM (see module docstring).

    ``model``: the target (Qwen2/Llama-style forward; ``nn.Linear`` or ``QuantLinear`` layers,
    fp32/fp16). ``drafter``: a :class:`.drafters.Drafter`. ``max_len``: prompt + new tokens per
    sequence. ``max_batch_size``: largest batch accepted. ``ks``: the draft lengths with a verify
    graph. ``use_graph``/``compile``: default on for CUDA models. ``plain_chunk``: plain steps per host
    round trip. ``margin``, ``verify_cost`` (``{q: cost of a q-token forward / a 1-token one}``): the
    adaptive rule (module docstring). ``prefill_bucket``: prompts are right-padded to a multiple of it, so
    the prefill sees few shapes (one graph each on CUDA). ``device_rounds`` (default: on CUDA): greedy
    decoding with a drafter that has ``propose_device`` (prompt lookup) drafts and accepts on the device,
    ``rounds_per_sync`` rounds per host read and up to ``in_flight`` such chunks queued, ``round_margin``: the
    gain per unit of cost a drafting round must show over a plain round (default 0: a round has no host round
    trip of its own to pay for; ``margin`` prices that trip in the host loop) (module docstring).
    """

    def __init__(self, model: nn.Module, drafter: Drafter, max_len: int = 512, max_batch_size: int = 8,
                 ks=(1, 2, 4, 8), use_graph: bool | None = None, compile: bool | None = None,
                 adaptive: bool = True, plain_chunk: int = 4, margin: float = 0.2, prefill_bucket: int = 32,
                 verify_cost=None, device_rounds: bool | None = None, rounds_per_sync: int = 1, in_flight: int = 1,
                 round_margin: float = 0.0):
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a Hugging Face causal LM (nn.Module with .config), "
                            f"got {type(model).__name__}")
        if not isinstance(drafter, Drafter):
            raise TypeError(f"drafter must be a t4lib.speculative Drafter, got {type(drafter).__name__}")
        vocab = int(model.config.vocab_size)
        self.vocab = vocab_size(model)   # what a prompt's ids index (the embedding's rows)
        self._cache_arg = hf_compat.cache_argument(model)   # the forward's name for the cache
        dv = getattr(drafter, "vocab_size", None)
        if dv is not None and dv != vocab:
            raise ValueError(f"drafter: the draft model's vocabulary ({dv} tokens) differs from the target's "
                             f"({vocab}); a draft model must share the target's tokenizer")
        if not isinstance(max_len, int) or max_len < 2:
            raise ValueError(f"max_len must be an int >= 2, got {max_len!r}")
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
        ks = tuple(ks)
        if not ks or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
            raise ValueError(f"ks must be a non-empty sequence of ints >= 1, got {ks!r}")
        if not isinstance(plain_chunk, int) or plain_chunk < 1:
            raise ValueError(f"plain_chunk must be an int >= 1, got {plain_chunk!r}")
        for name, v in (("rounds_per_sync", rounds_per_sync), ("in_flight", in_flight)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        for name, v in (("device_rounds", device_rounds), ("use_graph", use_graph), ("compile", compile)):
            if v is not None and not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool or None, got {type(v).__name__}")
        if not isinstance(adaptive, bool):
            raise TypeError(f"adaptive must be a bool, got {type(adaptive).__name__}")
        for name, v in (("margin", margin), ("round_margin", round_margin)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        self.rounds_per_sync, self.in_flight = rounds_per_sync, in_flight
        self.model, self.drafter = model.eval(), drafter
        self.max_len, self.max_batch_size = max_len, max_batch_size
        self.ks = tuple(sorted(set(ks)))
        self.k_max = self.ks[-1]
        self.plain_chunk = min(plain_chunk, self.k_max + 1)   # a finished row's writes stay in the cache
        self.slots = max_len + self.k_max + 1
        if not isinstance(prefill_bucket, int) or prefill_bucket < 1:
            raise ValueError(f"prefill_bucket must be an int >= 1, got {prefill_bucket!r}")
        self.adaptive, self.margin, self.prefill_bucket = adaptive, float(margin), prefill_bucket
        self.round_margin = float(round_margin)
        # relative cost of a q-token forward; replaced by graph timings on CUDA
        self.cost = {q: 1.0 + 0.05 * (q - 1) for q in range(1, self.k_max + 2)}
        self._cost_given = verify_cost is not None
        if verify_cost is not None:
            self.cost.update({int(q): float(c) for q, c in dict(verify_cost).items()})
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        # rounds pay where the device runs ahead of the host (CUDA); on a CPU both loops do the same work
        self.device_rounds = (self.device.type == "cuda") if device_rounds is None else device_rounds
        self.use_graph = (self.device.type == "cuda") if use_graph is None else bool(use_graph)
        if self.use_graph and self.device.type != "cuda":
            raise ValueError("use_graph=True needs the model on a CUDA device")
        self.compile = self.use_graph if compile is None else bool(compile)
        self.compile_error = None
        self.prefill_graph_error = None
        self._compiled = None
        self._round_fns = (_round_pre, _round_post)   # compiled with the forward on CUDA (_ensure_rounds)
        self._states: dict[int, _BatchState] = {}
        self._prefill_pool = None   # one memory pool for every prefill graph (they never run concurrently)

    # ------------------------------------------------------------------ forward and steps
    def _forward(self, ids: torch.Tensor, cache: RowStaticCache) -> torch.Tensor:
        """Logits ``[B, q, V]`` of ``ids [B, q]`` placed at ``cache.pos[b] + i``; writes their K/V."""
        q = ids.shape[1]
        position_ids = cache.pos[:, None] + torch.arange(q, device=ids.device)
        mask = causal_row_mask(cache.pos, q, cache.slots, self.dtype)
        return self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                          use_cache=True, **{self._cache_arg: cache}).logits

    def _fwd(self):
        return self._compiled if self._compiled is not None else self._forward

    def _verify_step(self, st: _BatchState, q: int):
        logits = self._fwd()(st.ids[q], st.cache)
        st.vlogits[q] = logits   # captured: the graph rewrites this tensor at each replay
        st.argmax[q].copy_(logits.float().argmax(dim=-1))

    def _plain_step(self, st: _BatchState):
        logits = self._fwd()(st.ids[1], st.cache)
        st.plain_logits = logits
        g = logits[:, -1].float().argmax(dim=-1)
        st.ids[1].copy_(g[:, None])
        st.chunk.index_copy_(1, st.chunk_idx, g[:, None])
        st.cache.pos.add_(1)
        st.chunk_idx.add_(1)

    def _round(self, st: _BatchState, k: int):
        """One device round (what a round graph captures): draft, verify ``k + 1`` tokens, accept, advance."""
        pre, post = self._round_fns
        q = k + 1
        draft, dlen = pre(self.drafter, st.tokens, st.n, st.limit, st.ids[q], st.cache.pos, k)
        logits = self._fwd()(st.ids[q], st.cache)
        post(logits, draft, dlen, st.tokens, st.n, st.limit, st.done, st.eos, st.counts, st.hist, st.snap, k)

    def _uses_rounds(self, sampler) -> bool:
        return self.device_rounds and sampler is None and hasattr(self.drafter, "propose_device")

    # ------------------------------------------------------------------ setup and capture
    def _state(self, B: int) -> _BatchState:
        if B in self._states:
            return self._states[B]
        cache = RowStaticCache(self.model.config, B, self.slots, self.device, self.dtype)
        st = _BatchState(B, cache)
        dev = self.device
        for q in (1,) + tuple(k + 1 for k in self.ks):
            st.ids[q] = torch.zeros(B, q, dtype=torch.long, device=dev)
            st.argmax[q] = torch.zeros(B, q, dtype=torch.long, device=dev)
        st.chunk = torch.zeros(B, self.plain_chunk, dtype=torch.long, device=dev)
        st.chunk_idx = torch.zeros(1, dtype=torch.long, device=dev)
        if dev.type == "cuda":   # asynchronous copies need page-locked host memory
            st.h_pos = torch.zeros(B, dtype=torch.long, pin_memory=True)
            st.h_ids = {q: torch.zeros(B, q, dtype=torch.long, pin_memory=True) for q in st.ids}
        if self.use_graph:
            if self.compile and self._compiled is None and self.compile_error is None:
                import torch._dynamo.config as dcfg  # deferred: only a compiled engine sets dynamo's options
                # one compiled forward serves every (B, q): dynamo marks the changing sizes dynamic
                for name in ("recompile_limit", "cache_size_limit"):
                    if hasattr(dcfg, name):
                        setattr(dcfg, name, max(getattr(dcfg, name), 64))
                self._compiled = torch.compile(self._forward)
                try:
                    self._capture_all(st)
                except Exception as e:  # compile failure: capture the eager forward and say why
                    self.compile_error = f"{type(e).__name__}: {e}"
                    warnings.warn(f"SpeculativeEngine: torch.compile failed, verifying uncompiled "
                                  f"({self.compile_error})", RuntimeWarning)
                    self._compiled = None
                    st.graphs.clear()
                    torch.cuda.synchronize()
                    self._capture_all(st)
            else:
                self._capture_all(st)
        self._states[B] = st
        return st

    def _plain_graph_step(self, st: _BatchState) -> tuple:
        """The plain step's ``(q, step)``: one token forwarded, so q = 1; the cost curve is relative to it."""
        return 1, lambda: self._plain_step(st)

    def _graph_steps(self, st: _BatchState) -> list:
        """``(q, step)`` of each graph to capture, keyed like ``ids`` and ``graph_ms`` by the tokens one replay
        forwards: the plain step (q = 1) and a verify per k (q = k + 1; ks are >= 1, so no key is shared)."""
        return [self._plain_graph_step(st)] + [(k + 1, (lambda q: lambda: self._verify_step(st, q))(k + 1))
                                               for k in self.ks]

    def _capture_all(self, st: _BatchState):
        """Capture the plain step and one verify graph per k, before any prefill (warm-up writes the
        cache at position 0, which the prefill then overwrites)."""
        def reset():
            st.cache.pos.zero_()
            st.chunk_idx.zero_()

        for q, fn in self._graph_steps(st):   # two warm-up runs each: compile, load kernels
            st.graphs[q], _ = graphs.capture(fn, reset=reset)

        # the verify-cost curve of this model and batch, for adaptive k
        times = {q: _median_replay_ms(g, reset) for q, g in st.graphs.items()}
        st.graph_ms = times
        if not self._cost_given:
            st.cost = {q: t / times[1] for q, t in times.items()}
        st.cache.pos.zero_()
        st.chunk_idx.zero_()

    def _reset_rounds(self, st: _BatchState):
        """A harmless state for warm-up and capture: one token per row, room for one more."""
        st.tokens.zero_()
        st.n.fill_(1)
        st.limit.fill_(2)
        st.done.zero_()
        st.eos.fill_(-1)
        st.counts.zero_()
        st.hist.zero_()
        st.cache.pos.zero_()

    def _ensure_rounds(self, st: _BatchState, k: int):
        """Allocate the device-round buffers; on CUDA capture the round graphs of ``k`` and of plain rounds
        (``k = 0``) for the current drafter, with the round's own operations compiled beside the forward (eager
        if compiling fails). Runs before the prefill: the warm-up writes cache slots that the prefill then
        overwrites."""
        dev, B = self.device, st.B
        if st.tokens is None:
            st.tokens = torch.zeros(B, self.slots, dtype=torch.long, device=dev)
            st.n, st.limit = (torch.ones(B, dtype=torch.long, device=dev) for _ in range(2))
            st.done = torch.zeros(B, dtype=torch.bool, device=dev)
            st.eos = torch.full((EOS_MAX,), -1, dtype=torch.long, device=dev)
            st.counts = torch.zeros(len(_COUNTS), dtype=torch.long, device=dev)
            st.hist = torch.zeros(self.k_max + 1, dtype=torch.long, device=dev)
            st.snap = torch.zeros(B + len(_COUNTS), dtype=torch.long, device=dev)
        if not st.graphs:
            return
        if st.round_drafter is not self.drafter:
            st.round_graphs.clear()
        ks = [j for j in (0, k) if j not in st.round_graphs]
        if not ks:
            return
        if self._compiled is not None and self._round_fns[0] is _round_pre:
            self._round_fns = (torch.compile(_round_pre), torch.compile(_round_post))
        try:
            self._capture_rounds(st, ks)
        except Exception as e:  # compile failure: capture the eager round operations and say why
            self.compile_error = self.compile_error or f"rounds: {type(e).__name__}: {e}"
            warnings.warn(f"SpeculativeEngine: compiling the device rounds failed, running them uncompiled "
                          f"({type(e).__name__}: {e})", RuntimeWarning)
            self._round_fns = (_round_pre, _round_post)
            st.round_graphs.clear()
            torch.cuda.synchronize()
            self._capture_rounds(st, sorted({0, k}))
        st.round_drafter = self.drafter

    def _capture_rounds(self, st: _BatchState, ks):
        for k in ks:   # two warm-up runs each: compile, load kernels
            st.round_graphs[k], _ = graphs.capture(lambda k=k: self._round(st, k),
                                                   reset=lambda: self._reset_rounds(st))
        for k in ks:   # the rounds' own costs, for adaptive k
            st.round_ms[k] = _median_replay_ms(st.round_graphs[k], lambda: self._reset_rounds(st))
        self._reset_rounds(st)

    # ------------------------------------------------------------------ prefill
    def _prefill_step(self, st: _BatchState, T: int):
        """The prefill on the static buffers (what a prefill graph captures): ``pf_ids[T]`` at positions
        ``0 .. T-1`` (cache.pos is 0), the logits of each row's last prompt token into ``pf_logits``."""
        logits = self._forward(st.pf_ids[T], st.cache)
        last = logits[torch.arange(st.B, device=logits.device), st.pf_last]
        if st.pf_logits is None:
            st.pf_logits = torch.empty_like(last)
        st.pf_logits.copy_(last)

    def _capture_prefill(self, st: _BatchState, T: int) -> None:
        """Capture the prefill graph of bucket ``T`` (the warm-up writes cache slots 0..T-1, which the prefill
        then overwrites); on failure prefill eagerly from now on and say why in ``prefill_graph_error``."""
        st.pf_ids[T] = torch.zeros(st.B, T, dtype=torch.long, device=self.device)
        if st.pf_last is None:
            st.pf_last = torch.zeros(st.B, dtype=torch.long, device=self.device)
        st.pf_last.zero_()
        if self._prefill_pool is None:
            self._prefill_pool = torch.cuda.graph_pool_handle()
        # two warm-up runs: load kernels, let cuBLAS pick its algorithms
        g, why = graphs.try_capture(lambda: self._prefill_step(st, T), what="SpeculativeEngine: prefill",
                                    reset=st.cache.pos.zero_, pool=self._prefill_pool)
        if g is not None:
            st.prefill_graphs[T] = g
        else:   # capture-unsafe model code: prefill eagerly from now on
            self.prefill_graph_error = why
            st.pf_ids.pop(T, None)

    def _prefill(self, st: _BatchState, rows: list[list[int]]) -> tuple[torch.Tensor, bool]:
        """Right-padded rows at cache positions ``0 .. T-1`` (pads are masked later and overwritten); returns
        the logits of each row's last prompt token ``[B, V]`` and whether a graph ran."""
        B, lens = len(rows), [len(r) for r in rows]
        T = min(-(-max(lens) // self.prefill_bucket) * self.prefill_bucket, self.slots)  # few prefill shapes
        ids = torch.tensor([r + [r[-1]] * (T - len(r)) for r in rows], dtype=torch.long)
        last = torch.tensor(lens, dtype=torch.long) - 1
        st.cache.pos.zero_()
        if st.graphs and self.prefill_graph_error is None and T not in st.prefill_graphs:
            self._capture_prefill(st, T)
            st.cache.pos.zero_()
        if T in st.prefill_graphs:
            st.pf_ids[T].copy_(ids)
            st.pf_last.copy_(last)
            st.prefill_graphs[T].replay()
            return st.pf_logits, True
        logits = self._forward(ids.to(self.device), st.cache)
        return logits[torch.arange(B, device=self.device), last.to(self.device)], False

    # ------------------------------------------------------------------ generate
    def _check_inputs(self, input_ids, max_new_tokens, k, do_sample, temperature, top_k, seed, eos_token_id,
                      top_p=1.0):
        if not isinstance(do_sample, bool):
            raise TypeError(f"do_sample must be a bool, got {type(do_sample).__name__}")
        sampler = Sampler(temperature, top_k, top_p) if do_sample else None   # raises on a bad setting
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        rows = token_rows(input_ids, self.vocab)
        if len(rows) > self.max_batch_size:
            raise ValueError(f"input_ids: batch of {len(rows)} exceeds the engine's max_batch_size="
                             f"{self.max_batch_size}")
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        longest = max(len(r) for r in rows)
        if longest + max_new_tokens > self.max_len:
            raise ValueError(f"prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) exceeds the cache: "
                             f"max_len={self.max_len}")
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        if k is not None and k not in self.ks:
            raise ValueError(f"k={k} has no verify graph; choose one of ks={self.ks}")
        eos = eos_ids(eos_token_id, self.vocab)
        if len(eos) > EOS_MAX:
            raise ValueError(f"eos_token_id: at most {EOS_MAX} ids, got {len(eos)}")
        return rows, sampler, eos

    @torch.no_grad()
    def generate(self, input_ids=None, generation_config=None, streamer=None, **kwargs):
        """``model.generate``'s call (as :meth:`t4lib.serving.StaticEngine.generate`): ``input_ids [B, T]`` (with
        ``attention_mask`` for a padded batch) or a list of token lists, decoded under ``generation_config``
        (default ``model.generation_config``: its EOS list, ``do_sample``, ``temperature``, ``top_k``, ``top_p``)
        with keyword overrides; each row stops at its first EOS and is padded with ``pad_token_id`` after it.
        A ``repetition_penalty`` other than 1.0 raises (the drafts are verified against the plain
        distribution). ``streamer`` gets the prompt, then the new tokens once decoding ends (rounds emit tokens in
        bursts). The engine's own keywords: ``k``, ``seed``. Returns a LongTensor ``[B, T + n]`` of sequences,
        prompt included, on ``input_ids``' device; with ``return_dict_in_generate=True`` the :class:`SpecResult`
        with that tensor as ``sequences``, beside the statistics. :meth:`generate_with_stats` is the engine's
        own call."""
        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:
            raise TypeError("generate() needs input_ids (a [B, T] integer tensor or a list of token lists)")
        own = {key: kwargs.pop(key) for key in ("attention_mask", "seed", "k") if key in kwargs}
        mask = own.pop("attention_mask", None)
        tensor_in = isinstance(input_ids, torch.Tensor)
        if tensor_in:
            ids2 = input_ids if input_ids.dim() == 2 else input_ids[None]
            rows = token_rows(ids2, self.vocab)
            if mask is not None:
                m = mask if mask.dim() == 2 else mask[None]
                if tuple(m.shape) != tuple(ids2.shape):
                    raise ValueError(f"attention_mask must have input_ids' shape {list(ids2.shape)}, "
                                     f"got {list(m.shape)}")
                rows = [[t for t, keep in zip(r, mr) if keep] for r, mr in zip(rows, m.tolist())]
        else:
            rows = token_rows(input_ids, self.vocab)
        T = max(len(r) for r in rows)
        gen, rest = generation.resolve(self.model, T, self.vocab, generation_config, **kwargs)
        if rest:
            raise TypeError(f"generate() got keywords neither GenerationConfig nor SpeculativeEngine knows: "
                            f"{sorted(rest)}")
        if gen.repetition_penalty != 1.0:
            raise ValueError(f"repetition_penalty={gen.repetition_penalty}: SpeculativeEngine decodes the plain "
                             "distribution; pass repetition_penalty=1.0 or use StaticEngine")
        if streamer is not None:
            streamer.put(ids2 if tensor_in else torch.tensor([[r[0]] * (T - len(r)) + r for r in rows]))
        res = self.generate_with_stats(rows, gen.max_new_tokens, eos_token_id=list(gen.eos) or None,
                                       do_sample=gen.do_sample, temperature=gen.temperature, top_k=gen.top_k,
                                       top_p=gen.top_p, **own)
        n = max(res.lengths)
        new = torch.full((len(rows), n), gen.pad_token_id, dtype=torch.long)
        for b, toks in enumerate(res.new_tokens):
            new[b, :len(toks)] = torch.tensor(toks, dtype=torch.long)
        if tensor_in:
            prompt = ids2
        else:
            prompt = torch.tensor([[gen.pad_token_id] * (T - len(r)) + r for r in rows], dtype=torch.long)
        if streamer is not None:
            for j in range(n):
                streamer.put(new[:, j])
            streamer.end()
        res.sequences = torch.cat([prompt, new.to(prompt.device)], dim=1)
        return res if gen.return_dict_in_generate else res.sequences

    @torch.no_grad()
    def generate_with_stats(self, input_ids, max_new_tokens: int, *, k: int | None = None,
                            eos_token_id: int | list[int] | None = None, do_sample: bool = False,
                            temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                            seed: int | None = None) -> SpecResult:
        """The engine's own call: decode up to ``max_new_tokens`` per row of ``input_ids`` (``[B, T]`` tensor or
        ragged list of token lists), each row stopping at its first ``eos_token_id``: greedily, or with
        ``do_sample`` from ``softmax(logits / temperature)`` cut to ``top_k`` and ``top_p`` (module docstring),
        returning the tokens per row with the call's statistics. ``k``: the starting draft length (default the
        largest of ``ks``); fixed when the engine is not adaptive."""
        rows, sampler, eos = self._check_inputs(input_ids, max_new_tokens, k, do_sample, temperature, top_k, seed,
                                                eos_token_id, top_p)
        gen = None
        if sampler is not None:
            gen = torch.Generator().manual_seed(
                seed if seed is not None else int(torch.randint(0, 2 ** 62, (1,))))
        B = len(rows)
        cuda = self.device.type == "cuda"
        st = self._state(B)
        on_device = self._uses_rounds(sampler)
        # k: draft tokens per round. k_planned is the next round's (adaptive k re-plans it after each round);
        # k_round this round's, 0 when there is nothing to draft (a plain step); a verify forward scores k_round + 1.
        k_planned = k if k is not None else self.k_max
        if on_device:
            self._ensure_rounds(st, k_planned)
        stats = SpecStats(k_max=self.k_max, accept_hist=[0] * (self.k_max + 1), device_rounds=on_device)
        alpha = 0.5   # running chance that a drafted token is accepted (adaptive k)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()

        lens = [len(r) for r in rows]
        last, stats.prefill_graph = self._prefill(st, rows)
        first = last.float().argmax(dim=-1).tolist() if sampler is None else sample(sampler.probs(last), gen)
        stats.prefill_s = time.perf_counter() - t0
        ctx = [r + [f] for r, f in zip(rows, first)]      # every token so far; the last not in the cache
        out = [[f] for f in first]
        pos = np.array(lens, dtype=np.int64)               # next free cache slot of each row
        done = np.array([max_new_tokens == 1 or f in eos for f in first])

        def propose(contexts, n):
            if sampler is None:
                return self.drafter.propose(contexts, n), None
            return self.drafter.propose_sampled(contexts, n, sampler, gen)

        if on_device and not done.all():
            out = self._decode_rounds(st, rows, first, done, max_new_tokens, eos, k_planned, stats)
        while not on_device and not done.all():
            active = np.flatnonzero(~done)
            room = min(max_new_tokens - len(out[b]) for b in active)   # tokens the tightest row may still take
            k_round = k_planned
            if k_round > 0:
                t = time.perf_counter()
                drafts, qs = propose([ctx[b] for b in active], k_round)
                stats.draft_s += time.perf_counter() - t
                drafts = [d[:max_new_tokens - len(out[b]) - 1] for d, b in zip(drafts, active)]
                qs = [None] * len(drafts) if qs is None else [None if q is None else q[:len(d)]
                                                              for q, d in zip(qs, drafts)]
                if not any(drafts):
                    k_round = 0
            stats.k_trace.append(k_round)
            if k_round == 0:
                m = min(self.plain_chunk, room)
                start_ctx = [list(ctx[b]) for b in active] if self.adaptive else None
                t = time.perf_counter()
                if sampler is None:
                    new = self._run_plain(st, pos, [ctx[b][-1] for b in range(B)], m)
                else:
                    new = self._run_plain_sampled(st, pos, [ctx[b][-1] for b in range(B)], m, sampler, gen)
                stats.verify_s += time.perf_counter() - t
                stats.target_forwards += m
                stats.plain_steps += m
                stats.row_forwards += m * len(active)
                for b in active:
                    self._emit(b, new[b][:m], out, ctx, done, max_new_tokens, eos, stats)
                    pos[b] += m
                if self.adaptive:
                    t = time.perf_counter()
                    guess, _ = propose(start_ctx, m)
                    stats.draft_s += time.perf_counter() - t
                    alpha = self._update_alpha(alpha, guess, [new[b][:m] for b in active])
                    k_planned = self._choose_k(alpha, st.cost)
                continue
            q = k_round + 1
            t = time.perf_counter()
            tok = np.empty((B, q), dtype=np.int64)
            for b in range(B):
                tok[b] = ctx[b][-1]
            for d, b in zip(drafts, active):
                tok[b, 1:1 + len(d)] = d
            self._run_verify(st, pos, tok, q)
            if sampler is None:
                g = st.argmax[q].cpu().numpy()
                kept = [(g[b, :len(d) + 1].tolist(), self._prefix(d, g[b, :len(d)])) for d, b in zip(drafts, active)]
            else:
                p = sampler.probs(st.vlogits[q]).cpu()
                kept = [speculative_accept(p[b, :len(d) + 1], qd, torch.tensor(d, dtype=torch.long), gen)
                        for d, qd, b in zip(drafts, qs, active)]
            stats.verify_s += time.perf_counter() - t
            stats.target_forwards += 1
            stats.row_forwards += len(active)
            acc = prop = 0
            for d, b, (em, n) in zip(drafts, active, kept):   # n: drafts kept (greedy: equal to the argmax)
                if d:
                    stats.accept_hist[n] += 1
                else:
                    stats.no_draft += 1
                acc, prop = acc + n, prop + len(d)
                self._emit(b, em[:n + 1], out, ctx, done, max_new_tokens, eos, stats)
                pos[b] += n + 1
            stats.drafted += prop
            stats.accepted += acc
            if self.adaptive:
                alpha = self._update_alpha(alpha, drafts, [em[:len(d)] for d, (em, _) in zip(drafts, kept)])
                k_planned = self._choose_k(alpha, st.cost)
        if cuda:
            torch.cuda.synchronize()
        stats.total_s = time.perf_counter() - t0
        lengths = [len(o) for o in out]
        return SpecResult(new_tokens=out, lengths=lengths, time_s=stats.total_s,
                          tokens_per_s=(sum(lengths) / B) / stats.total_s, stats=stats,
                          graph=bool(st.graphs), compiled=self._compiled is not None,
                          compile_error=self.compile_error, do_sample=sampler is not None)

    def _decode_rounds(self, st, rows, first, done, max_new, eos, k_draft, stats) -> list[list[int]]:
        """Greedy decoding on device rounds: every row's tokens, lengths and counters stay on the device; the
        host replays ``rounds_per_sync`` rounds per chunk, each drafting ``k_draft`` tokens, or ``plain_chunk``
        plain rounds (adaptive k chooses between the two by their timed costs), keeps up to ``in_flight`` chunks
        queued, and reads back which rows are done and the counters per chunk. Returns each row's new tokens
        (the prefill's first one included)."""
        B, S, lens = len(rows), self.slots, [len(r) for r in rows]
        up = np.zeros((B, S + 3), dtype=np.int64)   # one upload: tokens | n | limit | done
        for b, r in enumerate(rows):
            up[b, :lens[b]] = r
            up[b, lens[b]] = first[b]
        up[:, S], up[:, S + 1], up[:, S + 2] = np.add(lens, 1), np.add(lens, max_new), done
        up = torch.from_numpy(up).to(self.device, non_blocking=False)
        st.tokens.copy_(up[:, :S])
        st.n.copy_(up[:, S])
        st.limit.copy_(up[:, S + 1])
        st.done.copy_(up[:, S + 2].bool())
        st.eos.copy_(torch.tensor(list(eos) + [-1] * (EOS_MAX - len(eos))))
        st.counts.zero_()
        st.hist.zero_()
        cuda = self.device.type == "cuda"
        while cuda and len(st.h_snap) < self.in_flight:   # a pinned read-back buffer per queued chunk
            st.h_snap.append(torch.zeros(B + len(_COUNTS), dtype=torch.long, pin_memory=True))
        cost = ({j + 1: t / st.round_ms[0] for j, t in st.round_ms.items()}
                if 0 in st.round_ms and k_draft in st.round_ms and not self._cost_given else st.cost or self.cost)
        c = {name: i + B for i, name in enumerate(_COUNTS)}
        k, alpha, prev, queued, slot = k_draft, 0.5, np.zeros(B + len(_COUNTS), dtype=np.int64), [], 0
        t = time.perf_counter()
        while True:
            while len(queued) < self.in_flight:   # on a CPU the queued chunks simply run before the read
                rounds = self.plain_chunk if k == 0 else self.rounds_per_sync
                for _ in range(rounds):
                    if st.round_graphs:
                        st.round_graphs[k].replay()
                    else:
                        self._round(st, k)
                if cuda:
                    h = st.h_snap[slot]
                    h.copy_(st.snap, non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record()
                    slot = (slot + 1) % self.in_flight
                else:
                    h, ev = st.snap.clone(), None
                queued.append((k, h, ev))
                stats.k_trace.append(k)
                stats.target_forwards += rounds
                stats.plain_steps += rounds * (k == 0)
            kc, h, ev = queued.pop(0)
            if ev is not None:
                ev.synchronize()
            snap = h.numpy().copy()
            if snap[:B].all():
                break
            if self.adaptive:
                d = snap - prev
                succ, trials = ((d[c["accepted"]], d[c["trials"]]) if kc else
                                (d[c["probe_succ"]], d[c["probe_trials"]]))
                if trials:
                    alpha = 0.7 * alpha + 0.3 * succ / trials
                k = k_draft if self._expected(alpha, k_draft) / cost[k_draft + 1] > 1.0 + self.round_margin else 0
            prev = snap
        # one read of everything (the chunks still queued ran too; their rows were done: no tokens)
        out = torch.cat([st.n, st.counts, st.hist, st.tokens.flatten()]).cpu().numpy()
        stats.verify_s += time.perf_counter() - t
        n, counts = out[:B], dict(zip(_COUNTS, out[B:B + len(_COUNTS)].tolist()))
        hist_end = B + len(_COUNTS) + self.k_max + 1
        toks = out[hist_end:].reshape(B, S)
        stats.row_forwards += counts["row_forwards"]
        stats.drafted += counts["drafted"]
        stats.accepted += counts["accepted"]
        stats.no_draft += counts["no_draft"]
        stats.accept_hist = out[B + len(_COUNTS):hist_end].tolist()
        stats.decode_tokens += int(sum(n[b] - lens[b] - 1 for b in range(B)))
        done[:] = True
        return [toks[b, lens[b]:n[b]].tolist() for b in range(B)]

    @staticmethod
    def _expected(alpha, k) -> float:
        """Expected tokens per verify of ``k`` drafts when each holds with chance ``alpha`` (plus the bonus)."""
        return k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)

    def _update_alpha(self, alpha, drafts, targets) -> float:
        """Fold one verify (or one scored guess) into the running per-token acceptance estimate."""
        succ = trials = 0
        for d, t in zip(drafts, targets):
            n = self._prefix(d, t)
            succ += n
            trials += n + (n < len(d))
        return alpha if trials == 0 else 0.7 * alpha + 0.3 * succ / trials

    def _choose_k(self, alpha, cost=None) -> int:
        """The draft length with the most expected tokens per unit of verify cost (``cost``: the batch's
        timed curve, else the engine's); 0 (plain steps) unless one beats a plain step by the margin."""
        cost = cost or self.cost
        best_k, best = 0, 1.0 + self.margin
        for k in self.ks:
            if self._expected(alpha, k) / cost[k + 1] > best:
                best_k, best = k, self._expected(alpha, k) / cost[k + 1]
        return best_k

    @staticmethod
    def _prefix(draft, target) -> int:
        n = 0
        for a, b in zip(draft, target):
            if int(a) != int(b):
                break
            n += 1
        return n

    @staticmethod
    def _emit(b, toks, out, ctx, done, max_new, eos, stats):
        toks = list(map(int, toks))[:max_new - len(out[b])]
        hit = next((i for i, t in enumerate(toks) if t in eos), None)
        if hit is not None:
            toks = toks[:hit + 1]
            done[b] = True
        out[b] += toks
        ctx[b] += toks
        stats.decode_tokens += len(toks)
        if len(out[b]) >= max_new:
            done[b] = True

    @staticmethod
    def _upload(dst: torch.Tensor, src: np.ndarray, pinned: torch.Tensor | None) -> None:
        """``dst.copy_(src)``; through the pinned buffer ``pinned`` (an asynchronous copy) when there is one.
        The buffer is rewritten only in the next iteration, after a host synchronisation (every iteration
        ends with one: the argmax or the plain chunk is read back)."""
        if pinned is None:
            dst.copy_(torch.from_numpy(src))
            return
        pinned.numpy()[...] = src
        dst.copy_(pinned, non_blocking=True)

    def _run_verify(self, st, pos, tok, q):
        self._upload(st.cache.pos, pos, st.h_pos)
        self._upload(st.ids[q], tok, st.h_ids.get(q))
        if st.graphs:
            st.graphs[q].replay()
        else:
            self._verify_step(st, q)

    def _run_plain(self, st, pos, last, m):
        self._upload(st.cache.pos, pos, st.h_pos)
        self._upload(st.ids[1], np.asarray(last, dtype=np.int64)[:, None], st.h_ids.get(1))
        st.chunk_idx.zero_()
        for _ in range(m):
            if st.graphs:
                st.graphs[1].replay()
            else:
                self._plain_step(st)
        return st.chunk.cpu().numpy()

    def _run_plain_sampled(self, st, pos, last, m, sampler, gen):
        """``m`` sampled plain steps, one host round trip each (the next input is the token just drawn)."""
        pos, last = pos.copy(), list(last)
        new = np.empty((len(last), m), dtype=np.int64)
        for j in range(m):
            self._run_plain(st, pos, last, 1)
            last = sample(sampler.probs(st.plain_logits[:, -1]), gen)
            new[:, j] = last
            pos += 1
        return new
