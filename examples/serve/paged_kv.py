"""Paged KV cache: a block allocator with reference counts and prefix sharing, and the tensors.

A block holds ``block_size`` consecutive token positions of one request, in every layer. A full
block is identified by a hash of *all* tokens from the start of its request up to its end (the
hash chains through the previous block), so two requests that start with the same tokens (a shared
system prompt) map those positions to the same physical blocks. Only full blocks are shared, and
they are never written again, so no copy-on-write is needed.

Freed blocks keep their hash while they sit on the free list: a later request with the same
prefix revives them. Allocation takes the least recently freed block first, and a block that is
handed out for new content loses its old hash (eviction).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch


class OutOfBlocks(RuntimeError):
    """The allocator has no free block left."""


def block_hash(parent: Optional[bytes], tokens: Sequence[int]) -> bytes:
    """Hash of a full block: its tokens chained to the hash of the blocks before it."""
    h = hashlib.sha256(parent or b"root")
    h.update(b",".join(str(t).encode() for t in tokens))
    return h.digest()


class BlockAllocator:
    """Free list, reference counts and the prefix table (hash of full block -> block id)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.refcount: List[int] = [0] * num_blocks
        self._free: "OrderedDict[int, None]" = OrderedDict((b, None) for b in range(num_blocks))
        self._hash_of: Dict[int, bytes] = {}
        self._block_of: Dict[bytes, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks with no reader (including cached ones that may still be revived)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks with at least one reader."""
        return self.num_blocks - len(self._free)

    def allocate(self) -> int:
        """Takes the least recently freed block for new content (evicting its cached hash)."""
        if not self._free:
            raise OutOfBlocks(f"all {self.num_blocks} KV blocks are in use")
        block, _ = self._free.popitem(last=False)
        old = self._hash_of.pop(block, None)
        if old is not None:
            del self._block_of[old]
        self.refcount[block] = 1
        return block

    def acquire(self, block: int) -> None:
        """Adds a reader to ``block`` (reviving it from the free list if it had none)."""
        if self.refcount[block] == 0:
            if block not in self._hash_of:
                raise ValueError(f"block {block} is free and holds no cached prefix")
            del self._free[block]
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        """Drops a reader; a block with none goes to the end of the free list (still cached)."""
        if self.refcount[block] <= 0:
            raise ValueError(f"block {block} is not in use")
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self._free[block] = None

    def register(self, block: int, digest: bytes) -> None:
        """Publishes a full block under its prefix hash (first writer wins on duplicates)."""
        if digest not in self._block_of and block not in self._hash_of:
            self._block_of[digest] = block
            self._hash_of[block] = digest

    def lookup(self, digest: bytes) -> Optional[int]:
        """The block cached under ``digest``, if any (does not add a reader)."""
        return self._block_of.get(digest)

    def match_prefix(self, tokens: Sequence[int], max_blocks: int) -> List[bytes]:
        """Hashes of the leading full blocks of ``tokens`` that are cached (at most max_blocks)."""
        hashes: List[bytes] = []
        parent: Optional[bytes] = None
        bs = self.block_size
        for i in range(min(max_blocks, len(tokens) // bs)):
            parent = block_hash(parent, tokens[i * bs:(i + 1) * bs])
            if parent not in self._block_of:
                break
            hashes.append(parent)
        return hashes


@dataclass
class CacheSpec:
    """Shape and element format of the paged cache."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "fp16"  # "fp16", "fp32", "int8" or "fp8" (e4m3 bytes, per-tensor scale 1.0)
    quant_group: int = 8
    # MLA: > 0 makes one latent plane per layer (num_kv_heads 1, head_dim kv_lora_rank + rope
    # dims) whose first kv_lora_rank elements are also the values: no value plane is stored.
    kv_lora_rank: int = 0

    @property
    def quant_bit(self) -> int:
        """8 for the int8 cache, 0 otherwise."""
        return 8 if self.dtype == "int8" else 0

    @property
    def planes(self) -> int:
        """Stored planes per layer: keys and values, or the one latent plane."""
        return 1 if self.kv_lora_rank else 2

    def element_dtype(self) -> torch.dtype:
        """Torch dtype of the stored elements."""
        return {"fp16": torch.float16, "fp32": torch.float32, "int8": torch.int8,
                "fp8": torch.uint8}[self.dtype]

    def bytes_per_block(self) -> int:
        """Bytes of one block over all layers: every plane and (int8) its fp16 scales."""
        slots = self.block_size * self.num_kv_heads
        elem = torch.empty((), dtype=self.element_dtype()).element_size()
        per_plane = slots * self.head_dim * elem
        if self.quant_bit:
            per_plane += slots * (self.head_dim // self.quant_group) * 2
        return self.planes * per_plane * self.num_layers


class PagedKVCache:
    """Per-layer key/value tensors [num_blocks, block_size, Hkv, D] (+ int8 scale tensors); with
    ``spec.kv_lora_rank`` one latent tensor [num_blocks, block_size, 1, D] per layer, which
    ``values`` and ``value_scales`` name again (the same tensors)."""

    def __init__(self, spec: CacheSpec) -> None:
        if spec.quant_bit and spec.head_dim % spec.quant_group:
            raise ValueError("quant_group must divide head_dim")
        self.spec = spec
        shape = (spec.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim)
        dtype = spec.element_dtype()
        sshape = shape[:3] + (spec.head_dim // spec.quant_group,)

        def zeros(tensor_shape, tensor_dtype) -> List[torch.Tensor]:
            return [torch.zeros(tensor_shape, dtype=tensor_dtype) for _ in range(spec.num_layers)]

        self.keys = zeros(shape, dtype)
        self.values = self.keys if spec.kv_lora_rank else zeros(shape, dtype)
        self.key_scales: List[Optional[torch.Tensor]] = [None] * spec.num_layers
        self.value_scales: List[Optional[torch.Tensor]] = [None] * spec.num_layers
        if spec.quant_bit:
            self.key_scales = zeros(sshape, torch.float16)
            self.value_scales = (self.key_scales if spec.kv_lora_rank
                                 else zeros(sshape, torch.float16))

    def layer_caches(self, lib) -> list:
        """One ``lib.paged_block_cache`` (``lib.latent_block_cache`` for MLA) per layer over
        these tensors (zero copy)."""
        spec = self.spec
        fp8 = {"cache_dtype": "fp8_e4m3"} if spec.dtype == "fp8" else {}
        if spec.kv_lora_rank:
            return [lib.latent_block_cache(self.keys[i], self.key_scales[i], layout="NHD",
                                           quant_bit=spec.quant_bit,
                                           quant_group=spec.quant_group, **fp8)
                    for i in range(spec.num_layers)]
        return [lib.paged_block_cache(self.keys[i], self.values[i], key_scale=self.key_scales[i],
                                      value_scale=self.value_scales[i], layout="NHD",
                                      quant_bit=spec.quant_bit, quant_group=spec.quant_group,
                                      **fp8)
                for i in range(spec.num_layers)]
