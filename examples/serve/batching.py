"""Continuous batching: requests, admission with prefix reuse, chunked prefill, step metadata.

Each step the scheduler admits the requests that have arrived (when the cache can hold their whole
length), then fills a token budget: one token for every decoding request first, then prompt
chunks in arrival order. The step's tokens of all requests go to the model as one flat batch; the
unified-attention metadata says which tokens belong to which request and what is already cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from paged_kv import BlockAllocator, block_hash


@dataclass(eq=False)  # identity: two requests are never "equal"
class Request:
    """One generation request and its progress."""

    rid: int
    prompt: List[int]
    max_new_tokens: int
    arrival_step: int = 0
    eos_id: Optional[int] = None
    output: List[int] = field(default_factory=list)
    block_ids: List[int] = field(default_factory=list)
    num_computed: int = 0      # leading tokens whose K/V are in the cache
    num_registered: int = 0    # leading full blocks published in the prefix table
    last_hash: Optional[bytes] = None
    prefix_hit_tokens: int = 0  # prompt tokens found in the cache at admission
    first_step: int = -1
    finish_step: int = -1

    @property
    def tokens(self) -> List[int]:
        """Prompt followed by the generated tokens."""
        return self.prompt + self.output

    @property
    def pending(self) -> int:
        """Tokens not yet run through the model (rest of the prompt, or 1 when decoding)."""
        return len(self.prompt) + len(self.output) - self.num_computed

    @property
    def finished(self) -> bool:
        return self.finish_step >= 0


@dataclass
class StepBatch:
    """The work of one step: per request, ``num_tokens`` tokens starting at ``num_computed``."""

    step: int
    requests: List[Request]
    num_tokens: List[int]
    context_lens: List[int]

    def token_ids(self) -> torch.Tensor:
        """The step's flat input tokens (T,)."""
        ids: List[int] = []
        for r, n, c in zip(self.requests, self.num_tokens, self.context_lens):
            ids.extend(r.tokens[c:c + n])
        return torch.tensor(ids, dtype=torch.long)

    def positions(self) -> torch.Tensor:
        """Position of every token (T,): context_lens[b] + its index in the request's chunk."""
        pos: List[int] = []
        for n, c in zip(self.num_tokens, self.context_lens):
            pos.extend(range(c, c + n))
        return torch.tensor(pos, dtype=torch.long)

    def query_start_loc(self) -> torch.Tensor:
        """(B+1) int32 prefix sums of the chunk lengths."""
        qsl = [0]
        for n in self.num_tokens:
            qsl.append(qsl[-1] + n)
        return torch.tensor(qsl, dtype=torch.int32)

    def block_table(self) -> torch.Tensor:
        """(B, max_blocks) int32 physical block ids; unused entries are 0 (never read)."""
        width = max(len(r.block_ids) for r in self.requests)
        table = torch.zeros(len(self.requests), width, dtype=torch.int32)
        for b, r in enumerate(self.requests):
            table[b, :len(r.block_ids)] = torch.tensor(r.block_ids, dtype=torch.int32)
        return table

    def logit_rows(self) -> List[int]:
        """Row of each request's last token when this step ends its pending input, else -1."""
        rows, start = [], 0
        for r, n in zip(self.requests, self.num_tokens):
            start += n
            rows.append(start - 1 if n == r.pending else -1)
        return rows

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)


class Scheduler:
    """Admits arrived requests, chooses each step's tokens and keeps the block tables."""

    def __init__(self, allocator: BlockAllocator, token_budget: int,
                 prefix_sharing: bool = True) -> None:
        if token_budget < 1:
            raise ValueError("token_budget must be >= 1")
        self.allocator = allocator
        self.token_budget = token_budget
        self.prefix_sharing = prefix_sharing
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.finished: List[Request] = []

    def add(self, request: Request) -> None:
        """Queues a request; it is considered from its arrival step on."""
        self.waiting.append(request)
        self.waiting.sort(key=lambda r: (r.arrival_step, r.rid))

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- admission --------------------------------------------------------------------------

    def _blocks_for(self, num_tokens: int) -> int:
        bs = self.allocator.block_size
        return (num_tokens + bs - 1) // bs

    def _outstanding(self) -> int:
        """Blocks the running requests may still allocate (their reservations)."""
        return sum(self._blocks_for(len(r.prompt) + r.max_new_tokens) - len(r.block_ids)
                   for r in self.running)

    def _try_admit(self, request: Request, step: int) -> bool:
        """Admits ``request`` if the free blocks cover its whole length; reuses cached blocks."""
        alloc = self.allocator
        hashes: List[bytes] = []
        if self.prefix_sharing:  # keep >= 1 prompt token to compute, for the first logits
            max_blocks = (len(request.prompt) - 1) // alloc.block_size
            hashes = alloc.match_prefix(request.prompt, max_blocks)
        hits = [alloc.lookup(h) for h in hashes]
        revived = sum(1 for b in hits if alloc.refcount[b] == 0)
        need = self._blocks_for(len(request.prompt) + request.max_new_tokens) - len(hits)
        if need > alloc.num_blocks:
            raise ValueError(f"request {request.rid} needs more blocks than the cache has")
        if alloc.num_free - self._outstanding() < need + revived:
            return False
        for block in hits:
            alloc.acquire(block)
        request.block_ids = list(hits)
        request.num_registered = len(hits)
        request.num_computed = len(hits) * alloc.block_size
        request.prefix_hit_tokens = request.num_computed
        request.last_hash = hashes[-1] if hashes else None
        request.first_step = step
        self.running.append(request)
        return True

    def _admit(self, step: int) -> None:
        """Admits arrived requests in arrival order, stopping at the first that does not fit."""
        while self.waiting and self.waiting[0].arrival_step <= step:
            if not self._try_admit(self.waiting[0], step):
                break
            self.waiting.pop(0)

    # -- one step ---------------------------------------------------------------------------

    def schedule(self, step: int) -> Optional[StepBatch]:
        """The step's batch: all decodes, then prompt chunks within the token budget."""
        self._admit(step)
        decodes = [r for r in self.running if r.num_computed >= len(r.prompt)]
        prefills = [r for r in self.running if r.num_computed < len(r.prompt)]
        chosen: List[Request] = []
        counts: List[int] = []
        budget = self.token_budget
        for r in decodes + prefills:
            n = r.pending if r.num_computed >= len(r.prompt) else min(r.pending, budget)
            if n <= 0:
                continue
            chosen.append(r)
            counts.append(n)
            budget -= n
        if not chosen:
            return None
        for r, n in zip(chosen, counts):
            while len(r.block_ids) < self._blocks_for(r.num_computed + n):
                r.block_ids.append(self.allocator.allocate())
        return StepBatch(step, chosen, counts, [r.num_computed for r in chosen])

    def complete(self, batch: StepBatch, sampled: Dict[int, int]) -> List[Request]:
        """Records the step: advances the cached lengths, publishes full blocks, appends the
        sampled token of each request in ``sampled`` (rid -> token) and retires finished ones.
        Returns the requests that finished in this step."""
        done = []
        for r, n in zip(batch.requests, batch.num_tokens):
            if (n == r.pending) != (r.rid in sampled):
                raise ValueError(f"request {r.rid}: a token is sampled exactly when its input "
                                 f"is used up")
        for r, n in zip(batch.requests, batch.num_tokens):
            r.num_computed += n
            self._register_full_blocks(r)
            if r.rid in sampled:
                r.output.append(sampled[r.rid])
                if len(r.output) >= r.max_new_tokens or sampled[r.rid] == r.eos_id:
                    r.finish_step = batch.step
                    done.append(r)
        for r in done:
            self._retire(r)
        return done

    def _register_full_blocks(self, r: Request) -> None:
        """Publishes every newly filled block of ``r`` under its prefix hash."""
        bs = self.allocator.block_size
        tokens = r.tokens
        while (r.num_registered + 1) * bs <= r.num_computed:
            i = r.num_registered
            r.last_hash = block_hash(r.last_hash, tokens[i * bs:(i + 1) * bs])
            if self.prefix_sharing:
                self.allocator.register(r.block_ids[i], r.last_hash)
            r.num_registered += 1

    def _retire(self, r: Request) -> None:
        """Releases the blocks of a finished request."""
        for block in r.block_ids:
            self.allocator.release(block)
        r.block_ids = []
        self.running.remove(r)
        self.finished.append(r)

    def logical_blocks(self) -> int:
        """Blocks the running requests would hold without sharing (sum of table lengths)."""
        return sum(len(r.block_ids) for r in self.running)
