"""Decode loop for :class:`Qwen35Model`: preallocated caches, one token per step.

The prompt is fed one token per step (prefill), then each chosen token is fed
back. Attention layers keep a KV cache of ``max_len`` positions, Gated DeltaNet
layers their conv and recurrent state; all are allocated once. The step reads
the token and the position from device tensors, so on CUDA it is captured into
one CUDA graph per pipeline stage (``cuda_graph=True``) and replayed; if the
capture fails the engine warns, records why in ``graph_error`` and runs the
same step eagerly. With ``compile`` (default: with CUDA graphs) the elementwise work
between the matrix products (norms, rotary embedding, attention over the
cache, gates, residual adds) runs as ``torch.compile``'d functions
(:class:`~.model.StepFunctions`), a few fused kernels per layer instead of
dozens; if compiling fails the engine warns, records why in
``compile_error`` and runs them as written. Layers on several devices form
stages run in turn, the hidden state handed over once per boundary per token.
Batch size 1.

``generate(prompt, max_new_tokens)``: greedy by default; ``do_sample=True``
samples with ``temperature``, ``top_k``, ``top_p`` and a seeded generator;
``eos_token_id`` (an id or a list, as a generation config holds it) ends the
sequence at the first of them, which is kept as the last token.

Prefill (``prefill="batched"``, the default without ``mtp``): the prompt goes
through the layers as rows of one forward, up to :attr:`Qwen35Engine.PREFILL_ROWS`
rows a pass, so every weight is read once per GEMV group of rows instead of once
per prompt token: attention writes the rows' keys and each row attends up to its
own position, Gated DeltaNet projects all rows at once and steps its recurrence
row by row, and the head reads only the last row (all rows with
``return_logits``). The elementwise parts run as written (no compiled function
sees a new row count). ``prefill="step"`` feeds the prompt one token per decode
step, as ``mtp`` does (its NextN block needs every position's hidden state); the
two agree within float rounding (the tests and notebook 07 check it).

``generate(..., mtp=gamma)`` (greedy, any number of stages) drafts ``gamma`` tokens per round with the file's NextN
block (:mod:`.mtp`) and verifies them in one forward of ``gamma + 1`` rows: every matrix read once for all
rows, the Gated DeltaNet recurrence stepped row by row keeping the state after each row, so a rejection
restores a snapshot instead of recomputing; attention rows simply overwrite the rejected cache positions.
The verify forward also runs the NextN block over the same rows (its cache stays complete) and leaves the
next round's first draft. Only the target's own choices are kept, so in exact arithmetic the tokens are the
plain greedy ones (the CPU tests check it in fp32 and fp16). On a GPU the verify rows go through the
multi-row GEMVs, whose fp16 outputs may round differently from a single row's, so a near-tie between the
top two logits can go the other way (``gpu_checks``, ``mtp_vs_plain``, records where and the gap: on the H200
at the 27B widths with random weights, an exact tie).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from t4lib.core import graphs
from t4lib.decoding.sampling import scaled_logits
from t4lib.decoding.tokens import eos_ids
from t4lib.quant.gguf import GGUFFile
from t4lib.ops.gguf import MAX_M as GEMV_MAX_M
from t4lib.models.qwen35.model import (
    COMPUTE_DTYPES, EAGER, Qwen35Config, Qwen35Model, StepFunctions, layer_bytes, nextn_bytes,
)
from t4lib.models.qwen35.mtp import MTPDrafter
from t4lib.models.qwen35.split import StagePlan, device_capacities, plan_stages

__all__ = ["Qwen35Engine", "GenerateResult", "cache_bytes_per_layer", "sample"]


@dataclass
class GenerateResult:
    tokens: list                       # the new tokens
    prompt_logits: torch.Tensor | None = None   # [T, vocab] fp32: logits after each prompt token
    logits: torch.Tensor | None = None          # [new, vocab] fp32: the logits each new token was chosen from
    prefill_s: float = 0.0
    decode_s: float = 0.0
    cuda_graphs: bool = False
    info: dict = field(default_factory=dict)
    mtp: dict | None = None   # with generate(mtp=...): rounds, tokens_per_step, accepted histogram
    stopped_at_eos: bool = False   # the last token is one of eos_token_id (else max_new_tokens were generated)
    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens fed back per second after the prefill: (new tokens - 1) / decode time."""
        return (len(self.tokens) - 1) / self.decode_s if self.decode_s > 0 else float("nan")


def cache_bytes_per_layer(cfg: Qwen35Config, max_len: int, dtype: torch.dtype = torch.float16) -> list[int]:
    """Bytes of each main layer's cache: KV for attention, conv + fp32 recurrent state for DeltaNet."""
    e = torch.finfo(dtype).bits // 8
    out = []
    for kind in cfg.layer_types:
        if kind == "attention":
            out.append(2 * cfg.attn_kv_heads * max_len * cfg.head_dim * e)
        else:
            out.append(4 * cfg.ssm_v_heads * cfg.ssm_k_dim * cfg.ssm_v_dim + 3 * cfg.conv_dim * e)
    return out


def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id [1] (long) drawn from logits [1, vocab] (temperature, then top-k, then top-p)."""
    scores = scaled_logits(logits, temperature, top_k)
    if top_p < 1.0:
        sorted_s, idx = torch.sort(scores, descending=True, dim=-1)
        p = torch.softmax(sorted_s, dim=-1)
        drop = (p.cumsum(-1) - p) > top_p            # keep the smallest prefix whose mass reaches top_p
        scores = scores.scatter(-1, idx, sorted_s.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).view(1)


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one (a CUDA device given without an index is the current one)."""
    def key(d):
        if d.type == "cuda" and d.index is None:
            return (d.type, torch.cuda.current_device() if torch.cuda.is_available() else 0)
        return (d.type, d.index)
    return key(a) == key(b)


class Qwen35Engine:
    """Generation over a :class:`Qwen35Model` (see the module docstring)."""

    def __init__(self, model: Qwen35Model, max_len: int = 512, dtype: torch.dtype = torch.float16,
                 cuda_graph: bool = True, plan: StagePlan | None = None, compile: bool | None = None):
        if compile is not None and not isinstance(compile, bool):
            raise TypeError(f"compile must be a bool or None, got {type(compile).__name__}")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        if dtype not in COMPUTE_DTYPES:
            raise TypeError(f"dtype must be torch.float16 or torch.float32, got {dtype}")
        self.model, self.max_len, self.dtype, self.plan = model, max_len, dtype, plan
        self.cfg = model.cfg
        # stages: the plan's layer ranges, else runs of consecutive layers on one device
        if plan is not None:
            ranges = list(plan.ranges)
        else:
            ranges, start = [], 0
            for i in range(1, len(model.blocks) + 1):
                if i == len(model.blocks) or model.devices[i] != model.devices[start]:
                    ranges.append(range(start, i))
                    start = i
        if [i for r in ranges for i in r] != list(range(len(model.blocks))):
            raise ValueError(f"stage ranges {ranges} must cover layers 0..{len(model.blocks) - 1} in order")
        self.stages: list[tuple[torch.device, list]] = []
        for r in ranges:
            if len({str(model.devices[i]) for i in r}) != 1:
                raise ValueError(f"stage of layers {r.start}..{r.stop - 1} spans several devices")
            self.stages.append((model.devices[r.start], [model.blocks[i] for i in r]))
        for dev, blocks in self.stages:
            for b in blocks:   # room past max_len for the rows of a verify that runs over the end
                b.mixer.allocate(1, max_len + GEMV_MAX_M, dtype, dev)
        devs = [d for d, _ in self.stages]
        self.tok = torch.zeros(1, dtype=torch.long, device=devs[0])
        self.pos = [torch.zeros(1, dtype=torch.long, device=d) for d in devs]
        self.h = [torch.zeros(1, self.cfg.hidden, dtype=torch.float32, device=d) for d in devs]
        self.logits = torch.zeros(1, self.cfg.vocab, dtype=torch.float32, device=devs[-1])
        self.next_tok = torch.zeros(1, dtype=torch.long, device=devs[-1])
        # the normed final hidden state (what the head reads): the MTP block's input
        self.hidden = torch.zeros(1, self.cfg.hidden, dtype=dtype, device=devs[-1]) if model.mtp else None
        self.rows: dict[int, dict] = {}   # verify buffers and graphs per row count (generate(mtp=...))
        self.mtp_bufs: dict | None = None
        self.mtp_step_graph = None
        self._first_draft: int | None = None   # the NextN block's pending first draft (generate(mtp=...))
        self.use_graphs = bool(cuda_graph) and all(d.type == "cuda" for d in devs)
        self.graphs = None
        self.graph_error: str | None = None
        # default: compiled with the graphs only; without them each compiled function's Python wrapper runs
        # on every call, which can cost more than the fusion saves
        self.fns = StepFunctions(compiled=True) if (self.use_graphs if compile is None else compile) else EAGER
        self.compile_error: str | None = None
        self._ready = False   # compiled (or fallen back) and captured, once

    @classmethod
    def from_gguf(cls, path, devices=None, max_len: int = 512, dtype: torch.dtype = torch.float16,
                  cuda_graph: bool = True, capacities=None, activations: str = "fp16",
                  compile: bool | None = None, mtp: bool = True) -> "Qwen35Engine":
        """Load a qwen35 GGUF over ``devices`` (one stage per device, layers assigned by
        :func:`plan_stages` on measured bytes, caches included). ``capacities``: bytes per
        device (default: free CUDA memory less 1 GiB; unbounded on CPU). ``devices`` defaults
        to the current CUDA device, or the CPU without one. ``mtp``: load the file's NextN block when it has one
        (placed with the last stage, counted in the plan)."""
        f = path if isinstance(path, GGUFFile) else GGUFFile(path)
        cfg = Qwen35Config.from_gguf(f)
        if devices is None:
            devices = ["cuda"] if torch.cuda.is_available() else ["cpu"]
        if isinstance(devices, (str, torch.device)):
            devices = [devices]
        devices = [torch.device(d) for d in devices]
        per_layer = [w + c for w, c in zip(layer_bytes(f, cfg), cache_bytes_per_layer(cfg, max_len, dtype))]
        embed = f.info("token_embd.weight").n_bytes
        head = embed if cfg.tied else f.info("output.weight").n_bytes
        nextn = nextn_bytes(f, cfg) if mtp else 0
        if nextn:   # the NextN block, its KV cache and, when the last stage is on another device, a table copy
            nextn += cache_bytes_per_layer(cfg, max_len, dtype)[cfg.layer_types.index("attention")] \
                if "attention" in cfg.layer_types else 0
            nextn += 0 if _same_device(devices[0], devices[-1]) else embed
        caps = device_capacities(devices) if capacities is None else list(capacities)
        plan = plan_stages(per_layer, len(devices), caps, first_extra=embed,
                           last_extra=head + 4 * cfg.hidden + nextn)
        model = Qwen35Model.from_gguf(f, devices=plan.device_of_layer(devices), activations=activations, mtp=mtp)
        return cls(model, max_len=max_len, dtype=dtype, cuda_graph=cuda_graph, plan=plan, compile=compile)

    # ------------------------------------------------------------------ the step

    def _run_stage(self, s: int) -> None:
        """Stage ``s`` on its static buffers: token/hidden in, hidden or logits out, position + 1."""
        m, dev_blocks = self.model, self.stages[s][1]
        h = m.embed(self.tok) if s == 0 else self.h[s]
        for b in dev_blocks:
            h = b(h, self.pos[s], self.dtype, self.fns)
        if s == len(self.stages) - 1:
            x = self.fns.norm(h, m.output_norm, self.cfg.eps, self.dtype)
            logits = m.head(x).float()
            self.logits.copy_(logits)
            self.next_tok.copy_(logits.argmax(-1))
            if self.hidden is not None:
                self.hidden.copy_(x)
        else:
            self.h[s].copy_(h)
        self.pos[s].add_(1)

    def _step(self) -> None:
        for s in range(len(self.stages)):
            if s > 0:
                self.h[s].copy_(self.h[s - 1])   # the one hand-over per boundary
            if self.graphs is not None:
                self.graphs[s].replay()
            else:
                self._run_stage(s)

    def reset(self) -> None:
        """Empty every cache and state; position 0."""
        for _, blocks in self.stages:
            for b in blocks:
                b.mixer.reset()
        if self.model.mtp is not None and self.model.mtp.block.mixer.k_cache is not None:
            self.model.mtp.reset()
        for p in self.pos:
            p.zero_()

    def _prepare(self) -> None:
        """Once: run one step with the compiled functions (compiling them; on failure warn, record
        ``compile_error`` and use them as written), then capture the graphs if asked."""
        if self.fns.compiled:
            try:
                for s in range(len(self.stages)):
                    self._run_stage(s)
            except Exception as e:
                self.compile_error = f"{type(e).__name__}: {e}"
                self.fns = EAGER
                warnings.warn(f"torch.compile of the step's elementwise parts failed, running them as written: "
                              f"{self.compile_error}", RuntimeWarning)
            self.reset()
        if self.use_graphs:
            self._capture()
        self._ready = True

    def _capture(self) -> None:
        try:   # two warm-up runs per stage build kernels, pack layouts and allocate workspaces
            self.graphs = [graphs.capture(lambda s=s: self._run_stage(s), device=dev)[0]
                           for s, (dev, _) in enumerate(self.stages)]
        except Exception as e:  # capture is an optimisation: fall back to the same step, eager
            self.graphs, self.use_graphs = None, False
            self.graph_error = f"{type(e).__name__}: {e}"
            warnings.warn(f"CUDA graph capture failed, decoding eagerly: {self.graph_error}")
        self.reset()

    def _sync(self) -> None:
        for dev, _ in self.stages:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

    # ------------------------------------------------------------------ MTP drafts and their verification

    def _deltanet_mixers(self):
        return [b.mixer for _, blocks in self.stages for b in blocks if b.kind == "deltanet"]

    def _run_rows(self, rb: dict, s: int) -> None:
        """Stage ``s`` of one forward of R rows (the last committed token and R - 1 drafts) at positions
        ``rb["pos"][s]``; hidden rows in and out through ``rb["h"][s]``. The last stage gives the target's choice
        and normed hidden state per row, then runs the NextN block over the same rows (each row's choice as its
        next token), keeping its cache complete and leaving each row's draft of the token after."""
        m, fns = self.model, self.fns
        h = m.embed(rb["tok"]) if s == 0 else rb["h"][s]
        for b in self.stages[s][1]:
            h = b(h, rb["pos"][s], self.dtype, fns)
        if s < len(self.stages) - 1:
            rb["h"][s].copy_(h)
            return
        x = fns.norm(h, m.output_norm, self.cfg.eps, self.dtype)
        rb["next"].copy_(m.head(x).float().argmax(-1))
        logits, out = m.mtp(rb["next"], x, rb["pos"][s], m.mtp_embed, m.head, self.dtype, fns)
        rb["draft"].copy_(logits.argmax(-1))
        rb["out"].copy_(out)

    def _rows_forward(self, rb: dict) -> None:
        """All stages of the rows forward in turn, the hidden rows handed over once per boundary."""
        for s in range(len(self.stages)):
            if s > 0:
                rb["h"][s].copy_(rb["h"][s - 1])
            if rb["graphs"] is not None:
                rb["graphs"][s].replay()
            else:
                self._run_rows(rb, s)

    def _run_mtp_step(self) -> None:
        """One step of the NextN block on (``mtok``, ``mhid``) at ``mpos``; its draft and output state become
        the inputs of the next step (a chain of drafts needs no host round trip)."""
        m, b = self.model, self.mtp_bufs
        logits, out = m.mtp(b["tok"], b["hid"], b["pos"], m.mtp_embed, m.head, self.dtype, self.fns)
        b["next"].copy_(logits.argmax(-1))
        b["tok"].copy_(b["next"])
        b["hid"].copy_(out)
        b["pos"].add_(1)

    def _mtp_step(self) -> None:
        if self.mtp_step_graph is not None:
            self.mtp_step_graph.replay()
        else:
            self._run_mtp_step()

    def _mtp_setup(self, R: int) -> dict:
        """Buffers (and on CUDA graphs) for verifying R rows, once per R; the NextN block's cache and step."""
        if R in self.rows:
            return self.rows[R]
        m, devs = self.model, [d for d, _ in self.stages]
        dev = devs[-1]   # the NextN block's device: the last stage's
        if self.mtp_bufs is None:   # the block's cache at this engine's length (a cache of another is replaced)
            m.mtp.allocate(self.max_len + GEMV_MAX_M, self.dtype, dev)
            long1 = lambda: torch.zeros(1, dtype=torch.long, device=dev)  # noqa: E731
            self.mtp_bufs = {"tok": long1(), "pos": long1(), "next": long1(), "chain": torch.zeros(
                GEMV_MAX_M, dtype=torch.long, device=dev),
                "hid": torch.zeros(1, self.cfg.hidden, dtype=self.dtype, device=dev)}
            self.mtp_step_graph = self._try_graph(lambda: graphs.capture(self._run_mtp_step, device=dev)[0])
        mixers = self._deltanet_mixers()
        if any(x.snap_state is None or x.snap_state.shape[0] < R - 1 for x in mixers):
            for x in mixers:   # the graphs of fewer rows hold the old snapshots: drop them
                x.allocate_snapshots(R)
            self.rows.clear()
        rb = {"tok": torch.zeros(R, dtype=torch.long, device=devs[0]),
              "pos": [torch.arange(R, device=d) for d in devs], "ar": [torch.arange(R, device=d) for d in devs],
              "h": [torch.zeros(R, self.cfg.hidden, dtype=torch.float32, device=d) for d in devs],
              "next": torch.zeros(R, dtype=torch.long, device=dev),
              "draft": torch.zeros(R, dtype=torch.long, device=dev),
              "out": torch.zeros(R, self.cfg.hidden, dtype=self.dtype, device=dev), "graphs": None}
        rb["graphs"] = self._try_graph(
            lambda: [graphs.capture(lambda s=s: self._run_rows(rb, s), device=d)[0] for s, d in enumerate(devs)])
        # a rejection's restore, one graph per accepted count and device: from Python it is two copies per
        # DeltaNet layer, launched while the GPU waits for the next round
        by_dev = {}
        for x in mixers:
            by_dev.setdefault(x.state.device, []).append(x)
        rb["restore"] = self._try_graph(lambda: [
            [graphs.capture(lambda a=a, xs=xs: [x.restore(a) for x in xs], device=d)[0] for d, xs in by_dev.items()]
            for a in range(R - 1)])
        self.rows[R] = rb
        return rb

    def _try_graph(self, capture):
        """``capture()`` when the engine uses CUDA graphs; on failure warn, record ``graph_error`` and return None
        (the same work then runs eagerly)."""
        if not self.use_graphs:
            return None
        try:
            return capture()
        except Exception as e:
            self.graph_error = f"{type(e).__name__}: {e}"
            warnings.warn(f"CUDA graph capture of the MTP verify failed, running it eagerly: {self.graph_error}")
            return None

    def _mtp_drafts(self, k: int) -> list[int]:
        """The pending first draft and ``k - 1`` more from the NextN block's chain (for :class:`MTPDrafter`)."""
        out = [self._first_draft]
        if k > 1:
            chain = self.mtp_bufs["chain"]
            for j in range(k - 1):
                self._mtp_step()
                chain[j:j + 1].copy_(self.mtp_bufs["next"])
            out += chain[:k - 1].tolist()
        return out

    def _generate_mtp(self, prompt: list[int], max_new_tokens: int, gamma: int, eos=frozenset()) -> GenerateResult:
        R = gamma + 1
        rb = self._mtp_setup(R)
        drafter = MTPDrafter(self)
        mixers, b = self._deltanet_mixers(), self.mtp_bufs
        self.reset()
        self._sync()
        t0 = time.perf_counter()
        L = len(prompt)
        for i, t in enumerate(prompt):
            self.tok.fill_(t)
            self._step()
            if i + 1 < L:   # the NextN block's cache needs every (hidden state, next token) pair of the prompt
                b["tok"].fill_(prompt[i + 1])
                b["hid"].copy_(self.hidden)
                b["pos"].fill_(i)
                self._mtp_step()
        b["tok"].copy_(self.next_tok)   # the first new token, then the block's first draft
        b["hid"].copy_(self.hidden)
        b["pos"].fill_(L - 1)
        self._mtp_step()
        first, self._first_draft = torch.cat([self.next_tok, b["next"]]).tolist()
        self._sync()
        t1 = time.perf_counter()
        tokens, p, hist = [first], L, [0] * R
        while len(tokens) < max_new_tokens and not eos.intersection(tokens[-R:]):
            drafts = drafter.propose([prompt + tokens], gamma)[0]
            rb["tok"].copy_(torch.tensor([tokens[-1]] + drafts))
            for ar, pos in zip(rb["ar"], rb["pos"]):
                torch.add(ar, p, out=pos)
            self._rows_forward(rb)
            res = torch.cat([rb["next"], rb["draft"]]).tolist()
            nxt, nd = res[:R], res[R:]
            a = 0
            while a < gamma and drafts[a] == nxt[a]:
                a += 1
            tokens += drafts[:a] + [nxt[a]]
            hist[a] += 1
            if a < gamma:   # rows after a are rejected: the recurrent state as it was after row a
                if rb["restore"] is not None:
                    for g in rb["restore"][a]:
                        g.replay()
                else:
                    for x in mixers:
                        x.restore(a)
            p += a + 1
            self._first_draft = nd[a]   # next round: the block's draft from row a, its state, position p
            b["tok"].copy_(rb["draft"][a:a + 1])
            b["hid"].copy_(rb["out"][a:a + 1])
            b["pos"].fill_(p)
        self._sync()
        t2 = time.perf_counter()
        cut = next((i + 1 for i, t in enumerate(tokens[:max_new_tokens]) if t in eos), None)
        tokens = tokens[:cut] if cut is not None else tokens
        rounds = sum(hist)
        stats = {"gamma": gamma, "rounds": rounds, "accepted_histogram": hist,
                 "tokens_per_step": (len(tokens) - 1) / rounds if rounds else float("nan"),
                 "acceptance_rate": sum(i * n for i, n in enumerate(hist)) / (gamma * rounds) if rounds else
                 float("nan")}
        return GenerateResult(tokens=tokens[:max_new_tokens], prefill_s=t1 - t0, decode_s=t2 - t1,
                              stopped_at_eos=cut is not None,
                              cuda_graphs=self.graphs is not None and rb["graphs"] is not None, mtp=stats,
                              info={"graph_error": self.graph_error, "compiled": self.fns.compiled,
                                    "compile_error": self.compile_error, "stages": [str(d) for d, _ in self.stages],
                                    "max_len": self.max_len, "dtype": str(self.dtype)})

    # ------------------------------------------------------------------ generation

    #: prompt rows per pass of the batched prefill (the attention scores of a pass are rows x heads x max_len)
    PREFILL_ROWS = 256

    def _prefill_rows(self, prompt: list[int], return_logits: bool) -> list[torch.Tensor]:
        """The prompt through every stage as rows of one forward (:attr:`PREFILL_ROWS` at a time), leaving the
        caches, states, position, logits and next token as ``len(prompt)`` decode steps leave them. Returns the
        logits after each prompt token ([rows, vocab] fp32 per pass) with ``return_logits``, else []."""
        m, eps, dtype = self.model, self.cfg.eps, self.dtype
        mixers = self._deltanet_mixers()
        snaps = [(x.snap_state, x.snap_conv) for x in mixers]
        out = []
        try:
            for x in mixers:   # an MTP verify's snapshots: not kept (nor limiting the rows) here
                x.snap_state = x.snap_conv = None
            for c0 in range(0, len(prompt), self.PREFILL_ROWS):
                ids = prompt[c0:c0 + self.PREFILL_ROWS]
                h = None
                for s, (dev, blocks) in enumerate(self.stages):
                    pos = torch.arange(c0, c0 + len(ids), device=dev)
                    h = m.embed(torch.tensor(ids, device=dev)) if s == 0 else h.to(dev)
                    for b in blocks:
                        h = b(h, pos, dtype, EAGER)
                last = c0 + len(ids) == len(prompt)
                if not (return_logits or last):
                    continue
                x = EAGER.norm(h if return_logits else h[-1:].clone(), m.output_norm, eps, dtype)
                logits = m.head(x).float()
                if return_logits:
                    out.append(logits)
                if last:
                    self.logits.copy_(logits[-1:])
                    self.next_tok.copy_(logits[-1:].argmax(-1))
                    if self.hidden is not None:
                        self.hidden.copy_(x[-1:])
        finally:
            for x, (st, cv) in zip(mixers, snaps):
                x.snap_state, x.snap_conv = st, cv
        for p in self.pos:
            p.fill_(len(prompt))
        return out

    def _check_prompt(self, prompt, max_new_tokens: int) -> list[int]:
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() == 2 and prompt.shape[0] == 1:
                prompt = prompt[0]
            if prompt.dim() != 1:
                raise ValueError(f"prompt must be 1-D token ids (batch size 1), got shape {tuple(prompt.shape)}")
            prompt = prompt.tolist()
        prompt = list(prompt)
        if not prompt:
            raise ValueError("prompt must hold at least one token id")
        bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.cfg.vocab]
        if bad:
            raise ValueError(f"prompt token ids must be ints in [0, {self.cfg.vocab}), got {bad[:5]}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if len(prompt) > self.max_len:
            raise ValueError(f"prompt of {len(prompt)} tokens is longer than the cache (max_len={self.max_len})")
        if len(prompt) + max_new_tokens > self.max_len:
            raise ValueError(f"prompt of {len(prompt)} tokens + max_new_tokens={max_new_tokens} does not fit the "
                             f"cache (max_len={self.max_len})")
        return prompt

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int, *, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 return_logits: bool = False, mtp: int | None = None, eos_token_id=None,
                 prefill: str = "batched") -> GenerateResult:
        """Prefill ``prompt`` (token ids), then decode up to ``max_new_tokens`` tokens, ending early at the first
        id of ``eos_token_id`` (an int or a list of ints; kept as the last token, ``result.stopped_at_eos``).
        ``prefill``: ``"batched"`` (the prompt as rows of one forward; see the module docstring) or ``"step"``
        (one token per decode step). ``mtp``: draft that many tokens per round with the NextN block and verify
        them (greedy, step prefill; see the module docstring); ``result.mtp`` holds the rounds, tokens per step
        and the accepted-count histogram."""
        prompt = self._check_prompt(prompt, max_new_tokens)
        if prefill not in ("batched", "step"):
            raise ValueError(f"prefill must be 'batched' or 'step', got {prefill!r}")
        eos = set(eos_ids(eos_token_id, self.cfg.vocab))
        if mtp is not None:
            if isinstance(mtp, bool) or not isinstance(mtp, int) or not 1 <= mtp < GEMV_MAX_M:
                raise ValueError(f"mtp must be an int in [1, {GEMV_MAX_M - 1}] (tokens drafted per round), "
                                 f"got {mtp!r}")
            if self.model.mtp is None:
                raise ValueError("mtp: the model has no NextN/MTP block (the GGUF's nextn_predict_layers is 0, "
                                 "or it was loaded with mtp=False)")
            if do_sample or return_logits:
                raise ValueError("mtp drafts are verified greedily: do_sample and return_logits are not "
                                 "supported with mtp")
            if not self._ready:
                self._prepare()
            return self._generate_mtp(prompt, max_new_tokens, mtp, eos)
        if do_sample:
            if not temperature > 0:
                raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
                raise ValueError(f"top_k must be a non-negative int, got {top_k!r}")
            if not 0 < top_p <= 1:
                raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        last_dev = self.stages[-1][0]
        gen = torch.Generator(device=last_dev)
        if seed is not None:
            gen.manual_seed(seed)
        if not self._ready:
            self._prepare()
        self.reset()
        prompt_logits, logits, tokens = [], [], []
        stopped = False
        self._sync()
        t0 = time.perf_counter()
        if prefill == "batched":
            prompt_logits = self._prefill_rows(prompt, return_logits)
        else:
            for t in prompt:
                self.tok.fill_(t)
                self._step()
                if return_logits:
                    prompt_logits.append(self.logits.clone())
        self._sync()
        t1 = time.perf_counter()
        for i in range(max_new_tokens):
            if return_logits:
                logits.append(self.logits.clone())
            nxt = sample(self.logits, temperature, top_k, top_p, gen) if do_sample else self.next_tok.clone()
            tokens.append(nxt)
            if eos and int(nxt) in eos:   # a host read per token, only when asked to stop
                stopped = True
                break
            if i + 1 < max_new_tokens:
                self.tok.copy_(nxt.to(self.tok.device))
                self._step()
        self._sync()
        t2 = time.perf_counter()
        return GenerateResult(
            tokens=torch.cat(tokens).tolist(),
            prompt_logits=torch.cat(prompt_logits).cpu() if return_logits else None,
            logits=torch.cat(logits).cpu() if return_logits else None,
            prefill_s=t1 - t0, decode_s=t2 - t1, cuda_graphs=self.graphs is not None, stopped_at_eos=stopped,
            info={"graph_error": self.graph_error, "compiled": self.fns.compiled, "compile_error": self.compile_error, "stages": [str(d) for d, _ in self.stages],
                  "max_len": self.max_len, "dtype": str(self.dtype)})


def load(path: str | Path, **kw) -> Qwen35Engine:
    """Shorthand for :meth:`Qwen35Engine.from_gguf`."""
    return Qwen35Engine.from_gguf(path, **kw)
