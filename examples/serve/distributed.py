"""Tensor-parallel serving on torch.distributed (Megatron-style, one process per rank).

Rank r of N holds KV heads [Hkv * r / N, Hkv * (r + 1) / N) with their query heads, the matching
rows of the fused QKV projection and columns of the output projection, a 1/N share of the MLP's
intermediate features (rows of gate/up, columns of down) and its heads' share of the paged KV
cache. Embeddings, norms and the LM head are replicated. Each layer does one all-reduce after the
attention's output projection and one after the MLP, so every rank ends a step with the same
hidden states, the same logits and the same greedy tokens: the scheduler runs identically on
every rank, and no other message is needed.

``run`` spawns the ranks (``torch.multiprocessing``, the ``gloo`` backend over loopback) and
returns rank 0's generated tokens and logits and every rank's timings.
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
from llama import AttendFn, LayerWeights, LlamaModel, rms_norm


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
        self.comm_seconds = 0.0
        self.comm_calls = 0
        self.comm_bytes = 0

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

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        dist.all_reduce(x)
        self.comm_seconds += time.perf_counter() - start
        self.comm_calls += 1
        self.comm_bytes += x.numel() * x.element_size()
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
        model = ShardedLlama(llama.load_model(checkpoint), rank, world)
        engine, _ = build_engine(model, args)
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
                         comm_seconds=model.comm_seconds, comm_calls=model.comm_calls,
                         comm_bytes=model.comm_bytes))
    finally:
        dist.destroy_process_group()


def run(world: int, checkpoint: str, requests, build_engine, args) -> List[Dict]:
    """Serves `requests` (not yet run) on `world` ranks; returns each rank's report, rank 0
    first: its generated tokens per request, rank 0's logits per step, and its timings.

    `build_engine(model, args)` builds a rank's engine (a module-level function, so that the
    spawned ranks can import it)."""
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
