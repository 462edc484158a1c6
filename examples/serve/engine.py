"""The serving loop: scheduler step -> one plan -> every layer's attention -> greedy sampling.

``Engine`` runs a primary attention backend (``dynattn``, or the torch stand-in) and optionally a
reference backend in lockstep on the same steps: the same tokens, positions, block tables and
chunking, each over its own cache. The reference is pure torch over a float32 cache (for MLA,
another model object, the non-absorbed form, on torch's own attention: ``deepseek.py``). Greedy
tokens come from the primary; for each sampled row the reference's logits are compared with the
primary's (max error, and whether the reference's argmax is the same token: if it is at every
row, the reference run on its own would have produced exactly the same tokens).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from batching import Request, Scheduler, StepBatch
from llama import LlamaModel
from paged_kv import CacheSpec, PagedKVCache


class UnifiedBackend:
    """Attention of every layer through one unified-attention plan per step over a paged cache.

    ``lib`` is the ``dynattn`` module or ``torch_unified``; both write the step's fresh K/V into
    the cache themselves. ``attn_dtype`` is the dtype of query/key/value handed to the library.
    ``round_kv`` (for a float32 reference of an fp16 cache) rounds the fresh K/V through that
    dtype first, so the reference's cache holds the same values as the fp16 cache. Over an MLA
    latent cache (``spec.kv_lora_rank``) the model passes no values (``v`` None: they are the
    latent rows' first kv_lora_rank elements) and its ``softmax_scale`` (0: 1/sqrt(head_dim)).
    """

    def __init__(self, name: str, lib, spec: CacheSpec, attn_dtype: torch.dtype,
                 round_kv: Optional[torch.dtype] = None, context=None,
                 softmax_scale: float = 0.0) -> None:
        self.name = name
        self.lib = lib
        self.spec = spec
        self.attn_dtype = attn_dtype
        self.round_kv = round_kv
        self.context = context
        self.cache = PagedKVCache(spec)
        self.layer_caches = self.cache.layer_caches(lib)
        self.plan = None
        self.seconds = 0.0  # time spent in the library (plans and runs)
        self.phases: Counter = Counter()  # plan phases ("csu", "c-u", ...) when reported
        self.plan_options: Dict[str, object] = {}  # only what differs from the defaults
        if spec.kv_lora_rank:
            self.plan_options["head_dim_v"] = spec.kv_lora_rank
        if softmax_scale:
            self.plan_options["softmax_scale"] = softmax_scale

    def begin_step(self, num_heads: int, query_start_loc: torch.Tensor,
                   context_lens: torch.Tensor, block_table: torch.Tensor) -> None:
        """Plans the step once (only the shapes of query/key/value matter to the plan)."""
        t = int(query_start_loc[-1])
        q = torch.empty(t, num_heads, self.spec.head_dim, dtype=self.attn_dtype)
        kv = torch.empty(t, self.spec.num_kv_heads, self.spec.head_dim, dtype=self.attn_dtype)
        v = None if self.spec.kv_lora_rank else kv
        start = time.perf_counter()
        self.plan = self.lib.plan_unified_attention(q, kv, v, query_start_loc, context_lens,
                                                    block_table, self.layer_caches[0],
                                                    **self.plan_options)
        self.seconds += time.perf_counter() - start
        summary = getattr(self.plan, "unified_summary", None)  # dynattn reports its paths
        if summary is not None:
            self.phases[summary.phase] += 1

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: Optional[torch.Tensor]) -> torch.Tensor:
        """Writes this layer's fresh K/V into the cache and returns the attention output."""
        if self.round_kv is not None:
            k, v = k.to(self.round_kv), v.to(self.round_kv)
        dt = self.attn_dtype
        q, k = q.to(dt), k.to(dt)  # float32 slices of the fused QKV stay views
        v = None if v is None else v.to(dt)
        start = time.perf_counter()
        out = self.plan.run(q, k, v, self.layer_caches[layer], context=self.context)
        self.seconds += time.perf_counter() - start
        return out


@dataclass
class EngineStats:
    """What a run measured."""

    steps: int = 0
    step_tokens: int = 0          # tokens run through the model (prompt chunks + decodes)
    generated_tokens: int = 0
    prefix_hit_tokens: int = 0    # prompt tokens reused from the cache, never computed
    engine_seconds: float = 0.0   # scheduling + primary model + sampling
    attention_seconds: float = 0.0  # of which in the primary attention library
    reference_seconds: float = 0.0
    peak_blocks: int = 0          # physical blocks held by running requests (max over steps)
    peak_logical_blocks: int = 0  # what they would hold without prefix sharing
    max_saved_blocks: int = 0
    max_mixed_step: str = ""      # largest step that mixed prefill chunks with decodes
    mixed_step_tokens: int = 0
    compared_rows: int = 0
    agreeing_rows: int = 0
    max_logit_error: float = 0.0
    max_logit_violation: float = 0.0  # max of |err| / (atol + rtol*|ref|); <= 1 passes


class Engine:
    """Continuous-batching loop over a model with a primary and an optional reference backend.

    ``model`` is a ``LlamaModel`` or a ``DeepseekModel``; ``reference_model`` (default: the same)
    is what the reference backend runs (MLA checks its absorbed form against the non-absorbed).
    """

    def __init__(self, model: LlamaModel, scheduler: Scheduler, primary: UnifiedBackend,
                 reference: Optional[UnifiedBackend] = None, rtol: float = 1e-2,
                 atol: float = 1e-2, reference_model=None) -> None:
        self.model = model
        self.scheduler = scheduler
        self.primary = primary
        self.reference = reference
        self.reference_model = model if reference_model is None else reference_model
        self.rtol, self.atol = rtol, atol
        self.stats = EngineStats()
        self.record_logits = False  # keep every step's sampled logits in `logits`
        self.logits: List[torch.Tensor] = []

    def run(self, requests: List[Request], max_steps: int = 100000) -> EngineStats:
        """Serves ``requests`` (each arriving at its arrival_step) until all have finished."""
        for r in requests:
            self.scheduler.add(r)
        step = 0
        while self.scheduler.has_work():
            if step >= max_steps:
                raise RuntimeError(f"not finished after {max_steps} steps")
            self.step(step)
            step += 1
        self.stats.prefix_hit_tokens = sum(r.prefix_hit_tokens for r in requests)
        self.stats.attention_seconds = self.primary.seconds
        return self.stats

    def step(self, step: int) -> Optional[StepBatch]:
        """One scheduler step; returns its batch (None when nothing was ready)."""
        start = time.perf_counter()
        batch = self.scheduler.schedule(step)
        if batch is None:
            return None
        self._record_memory(batch)
        tokens, positions = batch.token_ids(), batch.positions()
        qsl = batch.query_start_loc()
        ctx = torch.tensor(batch.context_lens, dtype=torch.int32)
        table = batch.block_table()
        rows = batch.logit_rows()
        sampled_rows = torch.tensor([r for r in rows if r >= 0], dtype=torch.long)
        logits = self._forward(self.primary, tokens, positions, qsl, ctx, table, sampled_rows)
        if self.record_logits:
            self.logits.append(logits.clone())
        choice = logits.argmax(dim=-1).tolist()
        sampled_reqs = [r for r, row in zip(batch.requests, rows) if row >= 0]
        sampled: Dict[int, int] = {r.rid: tok for r, tok in zip(sampled_reqs, choice)}
        self.scheduler.complete(batch, sampled)
        self.stats.engine_seconds += time.perf_counter() - start
        self.stats.steps += 1
        self.stats.step_tokens += batch.total_tokens
        self.stats.generated_tokens += len(sampled)
        if self.reference is not None:
            ref_start = time.perf_counter()
            ref = self._forward(self.reference, tokens, positions, qsl, ctx, table, sampled_rows,
                                self.reference_model)
            self.stats.reference_seconds += time.perf_counter() - ref_start
            self._compare(logits, ref, choice)
        return batch

    def _forward(self, backend: UnifiedBackend, tokens: torch.Tensor, positions: torch.Tensor,
                 qsl: torch.Tensor, ctx: torch.Tensor, table: torch.Tensor,
                 rows: torch.Tensor, model=None) -> torch.Tensor:
        """Plans once, then runs ``model`` (default: the engine's) with ``backend`` doing each
        layer's attention."""
        model = self.model if model is None else model
        backend.begin_step(model.config.num_attention_heads, qsl, ctx, table)
        with torch.no_grad():
            return model.forward(tokens, positions, backend.attend, rows)

    def _compare(self, logits: torch.Tensor, ref: torch.Tensor, choice: List[int]) -> None:
        """Accumulates the logit error and the greedy agreement against the reference."""
        if ref.numel() == 0:
            return
        inf = torch.tensor(float("inf"))
        err = (logits - ref).abs()
        err = torch.where(torch.isfinite(err), err, inf)  # NaN or inf on either side fails
        ratio = err / (self.atol + self.rtol * ref.abs())
        ratio = torch.where(torch.isnan(ratio), inf, ratio)
        s = self.stats
        s.max_logit_error = max(s.max_logit_error, float(err.max()))
        s.max_logit_violation = max(s.max_logit_violation, float(ratio.max()))
        s.compared_rows += len(choice)
        s.agreeing_rows += sum(int(a == b) for a, b in zip(ref.argmax(dim=-1).tolist(), choice))

    def _record_memory(self, batch: StepBatch) -> None:
        """Tracks blocks in use, what sharing saves, and the step's prefill/decode mix."""
        s = self.stats
        used = self.scheduler.allocator.num_used
        logical = self.scheduler.logical_blocks()
        s.peak_blocks = max(s.peak_blocks, used)
        s.peak_logical_blocks = max(s.peak_logical_blocks, logical)
        s.max_saved_blocks = max(s.max_saved_blocks, logical - used)
        decodes = sum(1 for r, c in zip(batch.requests, batch.context_lens)
                      if c >= len(r.prompt))
        chunks = [n for r, n, c in zip(batch.requests, batch.num_tokens, batch.context_lens)
                  if c < len(r.prompt)]
        if decodes and chunks and batch.total_tokens > s.mixed_step_tokens:
            s.mixed_step_tokens = batch.total_tokens
            s.max_mixed_step = (f"step {batch.step}: {decodes} decode(s) + prefill chunk(s) "
                                f"{chunks} = {batch.total_tokens} tokens")
