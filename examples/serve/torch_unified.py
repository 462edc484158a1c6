"""A pure-torch stand-in for the unified-attention subset of the ``dynattn`` package.

Same functions and semantics as the contract of ``dynattn`` (``paged_block_cache``,
``latent_block_cache``, ``unified_attention``, ``plan_unified_attention`` / ``plan.run``): token
t of request b sits at position ``context_lens[b] + t - query_start_loc[b]``, its fresh key and
value are written into the cache first (quantized for an int8 cache), and it attends causally to
positions 0..p of its own request, read back from the cache. Over an MLA latent cache the calls
pass ``current_value=None`` and ``head_dim_v``: the values are the first head_dim_v elements of
the key rows, and only keys are written. Used when ``dynattn`` is not built, and (over a float32
cache) as the reference the engine checks the library against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch

__version__ = "torch-stand-in"


def cpu_target() -> str:
    """Name of the code path (the stand-in has one)."""
    return "torch"


class Context:
    """Accepted for interface compatibility; torch manages its own threads."""

    def __init__(self, num_threads: int = 0) -> None:
        self.num_threads = num_threads


@dataclass
class PagedBlockCache:
    """Key/value tensors [num_blocks, block_size, Hkv, D] (NHD) and optional int8 scales; a
    latent cache names its one tensor (and scales) as both."""

    key: torch.Tensor
    value: torch.Tensor
    key_scale: Optional[torch.Tensor]
    value_scale: Optional[torch.Tensor]
    quant_bit: int
    quant_group: int
    latent: bool = False

    @property
    def block_size(self) -> int:
        return self.key.shape[1]


def paged_block_cache(key: torch.Tensor, value: torch.Tensor,
                      key_scale: Optional[torch.Tensor] = None,
                      value_scale: Optional[torch.Tensor] = None, layout: str = "NHD",
                      quant_bit: int = 0, quant_group: int = 8) -> PagedBlockCache:
    """Wraps cache tensors in place (only NHD, plain fp16/fp32 or int8)."""
    if layout != "NHD":
        raise ValueError("the stand-in supports layout NHD only")
    if key.dim() != 4 or key.shape[:3] != value.shape[:3]:
        raise ValueError("key and value must both be [num_blocks, block_size, Hkv, D]")
    if quant_bit == 0 and key.dtype not in (torch.float16, torch.float32):
        raise ValueError("a plain cache is float16 or float32")
    if quant_bit == 8:
        if key.dtype != torch.int8 or key_scale is None or value_scale is None:
            raise ValueError("an int8 cache needs int8 tensors and both scale tensors")
        if key.shape[-1] % quant_group:
            raise ValueError("quant_group must divide head_dim")
    elif quant_bit != 0:
        raise ValueError("the stand-in supports quant_bit 0 and 8")
    return PagedBlockCache(key, value, key_scale, value_scale, quant_bit, quant_group)


def latent_block_cache(latent: torch.Tensor, scale: Optional[torch.Tensor] = None,
                       layout: str = "NHD", quant_bit: int = 0,
                       quant_group: int = 8) -> PagedBlockCache:
    """Wraps an MLA latent tensor [num_blocks, block_size, 1, D] (and its int8 scales)."""
    if latent.dim() != 4 or latent.shape[2] != 1:
        raise ValueError("a latent cache is [num_blocks, block_size, 1, D]")
    cache = paged_block_cache(latent, latent, scale, scale, layout, quant_bit, quant_group)
    cache.latent = True
    return cache


def quantize_int8(x: torch.Tensor, group: int):
    """Spec int8 quantization of x (..., D) per group of ``group`` elements, in x's dtype T1:
    s = max(T1(m / 127), T1(1e-5)) for the group's max |x| = m, q = clamp(rne(T1(x / s)), ±127),
    and s is stored as fp16. Returns (q int8, stored s float16)."""
    g = x.float().reshape(*x.shape[:-1], x.shape[-1] // group, group)
    scale = g.abs().amax(dim=-1) / 127.0
    floor = torch.tensor(1e-5)
    if x.dtype == torch.float16:
        scale, floor = scale.half().float(), floor.half().float()
    scale = torch.maximum(scale, floor)
    ratio = g / scale.unsqueeze(-1)
    if x.dtype == torch.float16:
        ratio = ratio.half().float()
    q = ratio.round().clamp(-127, 127)
    return q.to(torch.int8).reshape(x.shape), scale.half()


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """Float32 values of int8 groups: q * s, rounded to the scale's type (fp16 or fp32)."""
    g = q.float().reshape(*q.shape[:-1], q.shape[-1] // group, group)
    values = g * scale.float().unsqueeze(-1)
    if scale.dtype == torch.float16:
        values = values.half().float()
    return values.reshape(q.shape)


class UnifiedPlan:
    """The slot indexes of one step, computed once and reused by every layer."""

    def __init__(self, query_start_loc: torch.Tensor, context_lens: torch.Tensor,
                 block_table: torch.Tensor, block_size: int, num_tokens: int,
                 head_dim_v: int = 0, softmax_scale: float = 0.0) -> None:
        self.head_dim_v, self.softmax_scale = head_dim_v, softmax_scale
        qsl = [int(v) for v in query_start_loc.tolist()]
        ctx = [int(v) for v in context_lens.tolist()]
        if len(qsl) != len(ctx) + 1 or qsl[0] != 0 or qsl[-1] != num_tokens:
            raise ValueError("query_start_loc must be (B+1) from 0 to T")
        if any(b > e for b, e in zip(qsl, qsl[1:])) or any(c < 0 for c in ctx):
            raise ValueError("query_start_loc must not decrease; context_lens must be >= 0")
        table = block_table.long()
        self.qsl, self.ctx = qsl, ctx
        self.write_blocks = torch.empty(num_tokens, dtype=torch.long)
        self.write_offsets = torch.empty(num_tokens, dtype=torch.long)
        self.read_blocks: List[torch.Tensor] = []
        self.read_offsets: List[torch.Tensor] = []
        self.masks: List[torch.Tensor] = []
        for b, c in enumerate(ctx):
            n = qsl[b + 1] - qsl[b]
            total = c + n
            if (total + block_size - 1) // block_size > table.shape[1]:
                raise ValueError(f"request {b}: block_table has too few columns")
            positions = torch.arange(total)
            blocks = table[b, positions // block_size]
            offsets = positions % block_size
            self.write_blocks[qsl[b]:qsl[b + 1]] = blocks[c:]
            self.write_offsets[qsl[b]:qsl[b + 1]] = offsets[c:]
            self.read_blocks.append(blocks)
            self.read_offsets.append(offsets)
            query_pos = torch.arange(c, total).unsqueeze(1)
            self.masks.append(positions.unsqueeze(0) > query_pos)  # (n, total): True = masked

    def run(self, query: torch.Tensor, current_key: torch.Tensor,
            current_value: Optional[torch.Tensor], cache: PagedBlockCache, *,
            out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
            context: Optional[Context] = None) -> torch.Tensor:
        """Writes the fresh K/V into ``cache``, then attends; returns (T, Hq, Dv)."""
        _check_step(query, current_key, current_value, len(self.write_blocks))
        if (current_value is None) != cache.latent:
            raise ValueError("current_value=None goes with a latent cache, and only there")
        self._write(cache, current_key, current_value)
        hq, d = query.shape[1], query.shape[2]
        dv = current_value.shape[2] if current_value is not None else self.head_dim_v or d
        result = query.new_empty(query.shape[:2] + (dv,)) if out is None else out
        hkv = current_key.shape[1]
        scale = self.softmax_scale or 1.0 / math.sqrt(d)
        for b in range(len(self.ctx)):
            lo, hi = self.qsl[b], self.qsl[b + 1]
            if lo == hi:
                continue
            keys, values = self._read(cache, b)  # (L, Hkv, D), (L, Hkv, Dv) float32
            values = values[..., :dv]  # a latent cache's values: the key rows' first Dv
            q = query[lo:hi].float().reshape(hi - lo, hkv, hq // hkv, d)
            scores = torch.einsum("nkgd,lkd->kgnl", q, keys) * scale
            scores = scores.masked_fill(self.masks[b], float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)  # (Hkv, G, n)
            probs = torch.exp(scores - row_lse.unsqueeze(-1))
            o = torch.einsum("kgnl,lkd->nkgd", probs, values).reshape(hi - lo, hq, dv)
            result[lo:hi] = o.to(result.dtype)
            if lse is not None:
                lse[lo:hi] = row_lse.reshape(hq, hi - lo).t()
        return result

    def _write(self, cache: PagedBlockCache, key: torch.Tensor,
               value: Optional[torch.Tensor]) -> None:
        """Stores the step's fresh keys and values (None: a latent cache's) in their slots."""
        blocks, offsets = self.write_blocks, self.write_offsets
        planes = [(key, cache.key, cache.key_scale)]
        if value is not None:
            planes.append((value, cache.value, cache.value_scale))
        for x, data, scale in planes:
            if cache.quant_bit:
                q, s = quantize_int8(x, cache.quant_group)
                data[blocks, offsets] = q
                scale[blocks, offsets] = s.to(scale.dtype)
            else:
                data[blocks, offsets] = x.to(data.dtype)

    def _read(self, cache: PagedBlockCache, b: int):
        """Keys and values of positions 0..context+n-1 of request b, as float32."""
        blocks, offsets = self.read_blocks[b], self.read_offsets[b]
        if cache.quant_bit:
            g = cache.quant_group
            keys = dequantize_int8(cache.key[blocks, offsets], cache.key_scale[blocks, offsets], g)
            values = dequantize_int8(cache.value[blocks, offsets],
                                     cache.value_scale[blocks, offsets], g)
            return keys, values
        return cache.key[blocks, offsets].float(), cache.value[blocks, offsets].float()


def _check_step(query: torch.Tensor, key: torch.Tensor, value: Optional[torch.Tensor],
                tokens: int) -> None:
    """Validates the step's tensors against each other and the planned token count."""
    if value is not None and (value.dim() != 3 or key.shape[:2] != value.shape[:2]):
        raise ValueError("current_value is (T, Hkv, Dv)")
    if query.dim() != 3 or key.dim() != 3:
        raise ValueError("query is (T, Hq, D); current_key (T, Hkv, D)")
    if query.shape[0] != tokens or key.shape[0] != tokens:
        raise ValueError(f"the plan is for {tokens} tokens")
    if query.shape[1] % key.shape[1] or query.shape[2] != key.shape[2]:
        raise ValueError("Hq must be a multiple of Hkv and head dims must match")


def plan_unified_attention(query: torch.Tensor, current_key: torch.Tensor,
                           current_value: Optional[torch.Tensor], query_start_loc: torch.Tensor,
                           context_lens: torch.Tensor, block_table: torch.Tensor,
                           cache: PagedBlockCache, *, alibi: bool = False, head_dim_v: int = 0,
                           softmax_scale: float = 0.0) -> UnifiedPlan:
    """Plans a step once (slot indexes per request) for ``run`` on every layer."""
    if alibi:
        raise ValueError("the stand-in has no ALiBi")
    _check_step(query, current_key, current_value, query.shape[0])
    return UnifiedPlan(query_start_loc, context_lens, block_table, cache.block_size,
                       query.shape[0], head_dim_v, softmax_scale)


def unified_attention(query: torch.Tensor, current_key: torch.Tensor,
                      current_value: Optional[torch.Tensor], query_start_loc: torch.Tensor,
                      context_lens: torch.Tensor, block_table: torch.Tensor,
                      cache: PagedBlockCache, *, alibi: bool = False,
                      out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                      context: Optional[Context] = None, head_dim_v: int = 0,
                      softmax_scale: float = 0.0) -> torch.Tensor:
    """Plan and run in one call."""
    plan = plan_unified_attention(query, current_key, current_value, query_start_loc,
                                  context_lens, block_table, cache, alibi=alibi,
                                  head_dim_v=head_dim_v, softmax_scale=softmax_scale)
    return plan.run(query, current_key, current_value, cache, out=out, lse=lse, context=context)
