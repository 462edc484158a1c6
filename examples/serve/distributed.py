"""Serving on torch.distributed, one process per rank: tensor and context parallelism.

Tensor parallel (``ShardedLlama``, Megatron-style): rank r of N holds KV heads
[Hkv * r / N, Hkv * (r + 1) / N) with their query heads, the matching rows of the fused QKV
projection and columns of the output projection, a 1/N share of the MLP's intermediate features
(rows of gate/up, columns of down) and its heads' share of the paged KV cache. Embeddings, norms
and the LM head are replicated. Each layer does one all-reduce after the attention's output
projection and one after the MLP.

Context parallel (``ContextShardBackend``): every rank holds the whole model; rank r holds the
positions [r * C, (r + 1) * C) of every request (the last rank everything from (N - 1) * C on),
so a request's context is cut in contiguous shares. Each layer's attention runs on the rank's
share (``key_offsets``, ``key_counts``), which writes only the fresh tokens it holds; the ranks
all-gather their partial outputs and log-sum-exps and merge them (``dynattn.merge_states``).

Either way every rank ends a step with the same hidden states, logits and greedy tokens: the
scheduler runs identically on every rank, and no other message is needed. ``run`` spawns the
ranks (``torch.multiprocessing``, the ``gloo`` backend over loopback) and returns rank 0's
generated tokens and logits and every rank's timings.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

import llama
from engine import UnifiedBackend
from llama import AttendFn, LayerWeights, LlamaModel, rms_norm


class CommTimes:
    """This process's collective calls: count, bytes sent into them and seconds spent."""

    seconds = 0.0
    calls = 0
    bytes = 0

    @classmethod
    def timed(cls, collective, tensor: torch.Tensor, *args) -> None:
        start = time.perf_counter()
        collective(*args)
        cls.seconds += time.perf_counter() - start
        cls.calls += 1
        cls.bytes += tensor.numel() * tensor.element_size()


class ShardedLlama:
    """Rank ``rank`` of ``world``'s share of a LlamaModel; ``forward`` as LlamaModel's."""

    def __init__(self, model: LlamaModel, rank: int, world: int) -> None:
        cfg = model.config
        if cfg.num_key_value_heads % world or cfg.intermediate_size % world:
            raise ValueError(f"{world} ranks must divide the KV heads ({cfg.num_key_value_heads})"
                             f" and the MLP width ({cfg.intermediate_size})")
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        kv = cfg.num_key_value_heads // world
        self.kv_heads = (rank * kv, (rank + 1) * kv)
        self.heads = (rank * kv * group, (rank + 1) * kv * group)
        width = cfg.intermediate_size // world
        self.features = (rank * width, (rank + 1) * width)
        self.full_config = cfg
        # The config the engine sees: this rank's heads (its cache and plans are local).
        self.config = dataclasses.replace(cfg, num_attention_heads=kv * group,
                                          num_key_value_heads=kv)
        self.embed, self.lm_head, self.norm, self.rope = (model.embed, model.lm_head, model.norm,
                                                          model.rope)
        self.layers = [self._shard(layer) for layer in model.layers]

    def _shard(self, layer: LayerWeights) -> LayerWeights:
        cfg, d = self.full_config, self.full_config.head_dim
        nq, nk = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
        (q0, q1), (k0, k1), (f0, f1) = self.heads, self.kv_heads, self.features
        qkv = layer.qkv_proj
        return LayerWeights(
            input_norm=layer.input_norm,
            qkv_proj=torch.cat([qkv[q0 * d:q1 * d], qkv[nq + k0 * d:nq + k1 * d],
                                qkv[nq + nk + k0 * d:nq + nk + k1 * d]]).contiguous(),
            o_proj=layer.o_proj[:, q0 * d:q1 * d].contiguous(), post_norm=layer.post_norm,
            gate_proj=layer.gate_proj[f0:f1].contiguous(),
            up_proj=layer.up_proj[f0:f1].contiguous(),
            down_proj=layer.down_proj[:, f0:f1].contiguous())

    @staticmethod
    def _all_reduce(x: torch.Tensor) -> torch.Tensor:
        CommTimes.timed(dist.all_reduce, x, x)
        return x

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: AttendFn,
                logit_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """LlamaModel.forward on this rank's heads and features, all-reduced twice per layer."""
        cfg, local = self.full_config, self.config
        d = cfg.head_dim
        nq, nk = local.num_attention_heads * d, local.num_key_value_heads * d
        x = self.embed[tokens]
        for index, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, cfg.rms_norm_eps)
            qkv = h @ layer.qkv_proj.t()
            q = qkv[:, :nq].view(-1, local.num_attention_heads, d)
            k = qkv[:, nq:nq + nk].view(-1, local.num_key_value_heads, d)
            v = qkv[:, nq + nk:].view(-1, local.num_key_value_heads, d)
            q = self.rope.apply(q, positions)
            k = self.rope.apply(k, positions)
            attn = attend(index, q, k, v)
            x = x + self._all_reduce(attn.float().reshape(x.shape[0], -1) @ layer.o_proj.t())
            h = rms_norm(x, layer.post_norm, cfg.rms_norm_eps)
            gated = torch.nn.functional.silu(h @ layer.gate_proj.t()) * (h @ layer.up_proj.t())
            x = x + self._all_reduce(gated @ layer.down_proj.t())
        if logit_rows is not None:
            x = x[logit_rows]
        return rms_norm(x, self.norm, cfg.rms_norm_eps) @ self.lm_head.t()


class ContextShardBackend(UnifiedBackend):
    """Unified attention on rank `rank`'s share of every request's context, merged across ranks.

    Rank r holds positions [r * chunk, (r + 1) * chunk) of each request, the last rank all from
    (world - 1) * chunk on; chunk is a multiple of the block size, so a rank's blocks are whole
    blocks of the request's table and a block shared by several requests (a common prefix) sits
    at the same positions, so on the same rank, for all of them. Every rank keeps a pool of the
    whole size (the scheduler's block ids are shared) and writes and reads its share only.
    """

    def __init__(self, *args, rank: int, world: int, chunk: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if chunk % self.spec.block_size:
            raise ValueError(f"the context-parallel chunk {chunk} must be a multiple of the "
                             f"block size {self.spec.block_size}")
        self.rank, self.world, self.chunk = rank, world, chunk

    def share(self, context_lens: torch.Tensor, query_lens: torch.Tensor):
        """This rank's positions [begin, end) of each request."""
        total = context_lens.long() + query_lens.long()
        begin = torch.clamp(torch.full_like(total, self.rank * self.chunk), max=total)
        if self.rank == self.world - 1:
            return begin, total
        return begin, torch.minimum(total, begin.new_tensor((self.rank + 1) * self.chunk))

    def begin_step(self, num_heads: int, query_start_loc: torch.Tensor,
                   context_lens: torch.Tensor, block_table: torch.Tensor) -> None:
        begin, end = self.share(context_lens, query_start_loc[1:] - query_start_loc[:-1])
        first = (begin // self.spec.block_size).tolist()
        table = torch.zeros_like(block_table)  # the share's blocks from its first one on
        for b, j in enumerate(first):
            table[b, :table.shape[1] - j] = block_table[b, j:]
        t = int(query_start_loc[-1])
        q = torch.empty(t, num_heads, self.spec.head_dim, dtype=self.attn_dtype)
        kv = torch.empty(t, self.spec.num_kv_heads, self.spec.head_dim, dtype=self.attn_dtype)
        start = time.perf_counter()
        self.plan = self.lib.plan_unified_attention(
            q, kv, kv, query_start_loc, context_lens, table, self.layer_caches[0],
            key_offsets=begin, key_counts=end - begin)
        self.seconds += time.perf_counter() - start

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Writes the fresh K/V this rank holds; returns the merged attention of all ranks."""
        dt = self.attn_dtype
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
        start = time.perf_counter()
        out, lse = self.plan.run(q, k, v, self.layer_caches[layer], context=self.context,
                                 return_lse=True)
        self.seconds += time.perf_counter() - start
        outs = [torch.empty_like(out, dtype=torch.float32) for _ in range(self.world)]
        lses = [torch.empty_like(lse) for _ in range(self.world)]
        mine = out.float()
        CommTimes.timed(dist.all_gather, mine, outs, mine)
        CommTimes.timed(dist.all_gather, lse, lses, lse)
        start = time.perf_counter()
        merged = self.lib.merge_states(out=torch.stack(outs), lse=torch.stack(lses))
        self.seconds += time.perf_counter() - start
        return merged


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, checkpoint: str, requests, build_engine,
               args, results) -> None:
    """One rank: joins the group, serves the workload on its share, reports to `results`."""
    torch.set_num_threads(max(1, args.torch_threads))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        model = llama.load_model(checkpoint)
        if args.tensor_parallel > 1:
            model = ShardedLlama(model, rank, world)
        engine, _ = build_engine(model, rank, world, args)
        engine.record_logits = True
        start = time.perf_counter()
        stats = engine.run(requests)
        wall = time.perf_counter() - start
        results.put(dict(rank=rank, outputs={r.rid: list(r.output) for r in requests},
                         # NumPy, not torch: a torch tensor would travel as a shared-memory
                         # handle that dies with this process.
                         logits=[l.numpy() for l in engine.logits] if rank == 0 else None,
                         steps=stats.steps,
                         wall_seconds=wall, attention_seconds=stats.attention_seconds,
                         comm_seconds=CommTimes.seconds, comm_calls=CommTimes.calls,
                         comm_bytes=CommTimes.bytes))
    finally:
        dist.destroy_process_group()


def run(world: int, checkpoint: str, requests, build_engine, args) -> List[Dict]:
    """Serves `requests` (not yet run) on `world` ranks; returns each rank's report, rank 0
    first: its generated tokens per request, rank 0's logits per step, and its timings.

    `build_engine(model, rank, world, args)` builds a rank's engine (a module-level function,
    so that the spawned ranks can import it); `args.tensor_parallel > 1` shards the model."""
    context = torch.multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    port = free_port()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ranks = torch.multiprocessing.spawn(
        _rank_main, args=(world, port, checkpoint, requests, build_engine, args, results),
        nprocs=world, join=False)
    # Read the reports before joining: a rank's report is larger than a pipe's buffer, so its
    # put() returns only once it is read.
    reports = [results.get() for _ in range(world)]
    while not ranks.join():
        pass
    return sorted(reports, key=lambda r: r["rank"])
