"""Tests of the continuous-batching serving example (examples/serve/).

Run: /usr/bin/python3 -m pytest -q tests/python/test_serve.py
(with PYTHONPATH pointing at the built ``dynattn`` package to run the library tests too).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import List

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "serve"))

import llama  # noqa: E402
import safetensors_io  # noqa: E402
import serve  # noqa: E402
import tiny_checkpoint  # noqa: E402
import torch_unified  # noqa: E402
from batching import Request, Scheduler  # noqa: E402
from engine import Engine, UnifiedBackend  # noqa: E402
from paged_kv import BlockAllocator, CacheSpec, OutOfBlocks, block_hash  # noqa: E402

try:
    import dynattn  # type: ignore
    DYNATTN_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the build
    dynattn = None
    DYNATTN_ERROR = f"import dynattn failed ({e}); put its build on PYTHONPATH"

needs_dynattn = pytest.mark.skipif(dynattn is None, reason=str(DYNATTN_ERROR))

SMALL = tiny_checkpoint.TinySizes(vocab_size=256, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=512)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Small matmuls: one torch thread is faster and leaves the cores to dynattn."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("ckpt"))
    tiny_checkpoint.make_tiny_checkpoint(directory, SMALL, seed=1, num_shards=2)
    return directory


@pytest.fixture(scope="module")
def model(checkpoint) -> llama.LlamaModel:
    return llama.load_model(checkpoint)


# -- safetensors ------------------------------------------------------------------------------

def test_safetensors_round_trip(tmp_path):
    tensors = {
        "f32": torch.randn(3, 5),
        "f16": torch.randn(2, 7).half(),
        "bf16": torch.randn(4, 3).to(torch.bfloat16),
        "i8": torch.randint(-128, 127, (9,), dtype=torch.int8),
        "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 4),
    }
    path = str(tmp_path / "t.safetensors")
    safetensors_io.save_file(tensors, path, metadata={"format": "pt"})
    loaded = safetensors_io.load_file(path)
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == t.dtype and loaded[name].shape == t.shape
        assert torch.equal(loaded[name], t), name
    assert safetensors_io.load_metadata(path) == {"format": "pt"}
    header, _, start = safetensors_io.read_header(path)
    assert start % 8 == 0 and header["bf16"]["dtype"] == "BF16"


def test_safetensors_rejects_bad_offsets(tmp_path):
    path = str(tmp_path / "bad.safetensors")
    safetensors_io.save_file({"x": torch.zeros(4)}, path)
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:  # same header length, shape now claims 5 elements
        f.write(raw.replace(b'"shape":[4]', b'"shape":[5]'))
    with pytest.raises(ValueError):
        safetensors_io.load_file(path)


def test_sharded_checkpoint_loads(checkpoint, model):
    with open(os.path.join(checkpoint, "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert len(set(index["weight_map"].values())) == 2
    assert model.config.num_hidden_layers == SMALL.num_hidden_layers
    assert model.config.head_dim == SMALL.hidden_size // SMALL.num_attention_heads
    assert model.lm_head is not model.embed


def test_rope_rotates_pairs_i_and_i_plus_half():
    rope = llama.RotaryEmbedding(head_dim=4, theta=10000.0, max_positions=8)
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])
    y = rope.apply(x, torch.tensor([1]))
    # dims 0 and 2 form a pair rotated by angle 1 * theta^0 = 1 radian.
    assert torch.allclose(y[0, 0], torch.tensor([math.cos(1), 0.0, math.sin(1), 0.0]), atol=1e-6)


def test_rope_scaling_types():
    inv = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    assert torch.allclose(llama.scale_frequencies(inv, {"type": "linear", "factor": 4.0}),
                          inv / 4)
    cfg = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    out = llama.scale_frequencies(inv, cfg)
    wavelength = 2 * math.pi / inv
    assert torch.equal(out[wavelength < 2048], inv[wavelength < 2048])
    assert torch.allclose(out[wavelength > 8192], inv[wavelength > 8192] / 8)
    assert bool(((out <= inv) & (out >= inv / 8)).all())
    with pytest.raises(ValueError):
        llama.scale_frequencies(inv, {"rope_type": "yarn", "factor": 2.0})


def test_tied_embeddings_checkpoint(tmp_path):
    sizes = tiny_checkpoint.TinySizes(**{**SMALL.__dict__, "tie_word_embeddings": True,
                                         "num_hidden_layers": 1})
    tiny_checkpoint.make_tiny_checkpoint(str(tmp_path), sizes, seed=2)
    assert os.path.exists(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in safetensors_io.load_file(str(tmp_path / "model.safetensors"))
    m = llama.load_model(str(tmp_path))
    assert m.lm_head is m.embed


# -- allocator ----------------------------------------------------------------------------------

def test_allocator_refcounts_sharing_and_freeing():
    alloc = BlockAllocator(num_blocks=4, block_size=2)
    a, b = alloc.allocate(), alloc.allocate()
    assert (a, b) == (0, 1) and alloc.num_used == 2 and alloc.refcount[a] == 1
    h0 = block_hash(None, [5, 6])
    h1 = block_hash(h0, [7, 8])
    alloc.register(a, h0)
    alloc.register(b, h1)
    assert alloc.match_prefix([5, 6, 7, 8, 9], max_blocks=9) == [h0, h1]
    assert alloc.match_prefix([5, 6, 7, 0], max_blocks=9) == [h0]  # second block differs
    assert alloc.match_prefix([9, 6, 7, 8], max_blocks=9) == []    # hash chains the prefix
    alloc.acquire(alloc.lookup(h0))  # a second reader shares block a
    assert alloc.refcount[a] == 2
    alloc.release(a)
    alloc.release(a)
    alloc.release(b)
    assert alloc.num_used == 0 and alloc.num_free == 4
    # Freed blocks stay cached and can be revived while nobody reuses them.
    alloc.acquire(alloc.lookup(h0))
    assert alloc.refcount[a] == 1 and alloc.num_used == 1
    with pytest.raises(ValueError):
        alloc.release(3)  # never allocated
    # Allocation takes never-used blocks first, then the least recently freed (b), evicting it.
    assert {alloc.allocate(), alloc.allocate()} == {2, 3}
    assert alloc.allocate() == b and alloc.lookup(h1) is None
    assert alloc.lookup(h0) == a


def test_allocator_exhaustion_raises():
    alloc = BlockAllocator(num_blocks=2, block_size=4)
    alloc.allocate()
    alloc.allocate()
    with pytest.raises(OutOfBlocks):
        alloc.allocate()


def test_cache_bytes_per_block():
    fp16 = CacheSpec(num_layers=2, num_blocks=8, block_size=16, num_kv_heads=2, head_dim=32)
    assert fp16.bytes_per_block() == 2 * 2 * 16 * 2 * 32 * 2
    int8 = CacheSpec(**{**fp16.__dict__, "dtype": "int8", "quant_group": 8})
    assert int8.bytes_per_block() == 2 * 2 * 16 * 2 * (32 + 4 * 2)


# -- scheduler ----------------------------------------------------------------------------------

def test_scheduler_chunks_prompts_and_mixes_decodes():
    sched = Scheduler(BlockAllocator(64, 4), token_budget=8)
    sched.add(Request(rid=0, prompt=[3, 4, 5], max_new_tokens=3))
    sched.add(Request(rid=1, prompt=list(range(10, 30)), max_new_tokens=2))  # 20 tokens
    sched.add(Request(rid=2, prompt=[6, 7], max_new_tokens=2, arrival_step=5))
    b0 = sched.schedule(0)
    assert [r.rid for r in b0.requests] == [0, 1] and b0.num_tokens == [3, 5]
    assert b0.logit_rows() == [2, -1]  # request 0's prompt ends; request 1 is mid-prompt
    sched.complete(b0, {0: 9})
    b1 = sched.schedule(1)  # request 0 decodes, request 1 gets the rest of the budget
    assert b1.num_tokens == [1, 7] and b1.context_lens == [3, 5]
    assert b1.query_start_loc().tolist() == [0, 1, 8]
    assert b1.positions().tolist() == [3] + list(range(5, 12))
    assert b1.token_ids().tolist() == [9] + list(range(15, 22))
    table = b1.block_table()
    assert table.dtype == torch.int32 and table.shape == (2, 3)  # request 1: 12 tokens
    assert table[0, 0] != table[1, 0]
    sched.complete(b1, {0: 9})
    step = 2
    while sched.has_work():
        batch = sched.schedule(step)
        if batch is not None:
            assert batch.total_tokens <= 8
            sched.complete(batch, {r.rid: 7 for r, row in zip(batch.requests,
                                                               batch.logit_rows()) if row >= 0})
        step += 1
    finished = sorted(sched.finished, key=lambda r: r.rid)
    assert [len(r.output) for r in finished] == [3, 2, 2]
    assert finished[2].first_step == 5
    assert sched.allocator.num_used == 0


def test_scheduler_chunk_sizes_follow_budget():
    sched = Scheduler(BlockAllocator(64, 4), token_budget=5)
    sched.add(Request(rid=0, prompt=list(range(12)), max_new_tokens=1))
    chunks = []
    for step in range(10):
        batch = sched.schedule(step)
        if batch is None:
            break
        chunks.append((batch.context_lens[0], batch.num_tokens[0]))
        assert batch.positions().tolist() == list(range(batch.context_lens[0],
                                                        batch.context_lens[0]
                                                        + batch.num_tokens[0]))
        sched.complete(batch, {0: 1} if batch.logit_rows()[0] >= 0 else {})
    assert chunks == [(0, 5), (5, 5), (10, 2)]


def test_scheduler_shares_prefix_blocks_and_frees_them():
    alloc = BlockAllocator(32, 4)
    sched = Scheduler(alloc, token_budget=64)
    system = list(range(100, 110))  # 2 full blocks + 2 tokens
    sched.add(Request(rid=0, prompt=system + [1, 2], max_new_tokens=4))
    sched.add(Request(rid=1, prompt=system + [3], max_new_tokens=2, arrival_step=2))
    b = sched.schedule(0)
    sched.complete(b, {0: 9})
    b = sched.schedule(1)
    with pytest.raises(ValueError):
        sched.complete(b, {})  # request 0's decode ends its input: it needs its token
    sched.complete(b, {0: 9})
    r1 = sched.waiting[0]
    b = sched.schedule(2)
    assert r1.prefix_hit_tokens == 8 and r1.block_ids[:2] == sched.running[0].block_ids[:2]
    assert all(alloc.refcount[x] == 2 for x in r1.block_ids[:2])
    assert sched.logical_blocks() > alloc.num_used  # sharing saves blocks
    while b is not None:
        sched.complete(b, {r.rid: 9 for r, row in zip(b.requests, b.logit_rows()) if row >= 0})
        b = sched.schedule(b.step + 1)
    assert alloc.num_used == 0 and not sched.has_work()


def test_scheduler_finishes_at_eos():
    sched = Scheduler(BlockAllocator(8, 4), token_budget=16)
    sched.add(Request(rid=0, prompt=[5, 6, 7], max_new_tokens=10, eos_id=2))
    sched.complete(sched.schedule(0), {0: 9})
    done = sched.complete(sched.schedule(1), {0: 2})
    assert [r.rid for r in done] == [0] and done[0].output == [9, 2]
    assert done[0].finish_step == 1 and not sched.has_work()
    assert sched.allocator.num_used == 0


def test_scheduler_waits_for_blocks():
    sched = Scheduler(BlockAllocator(4, 4), token_budget=64)  # 16 token slots in all
    sched.add(Request(rid=0, prompt=list(range(8)), max_new_tokens=4))   # needs 3 blocks
    sched.add(Request(rid=1, prompt=list(range(50, 58)), max_new_tokens=4))
    batch = sched.schedule(0)
    assert [r.rid for r in batch.requests] == [0] and len(sched.waiting) == 1


# -- end to end ---------------------------------------------------------------------------------

def _naive_generate(model: llama.LlamaModel, prompt: List[int], n: int) -> List[int]:
    """Greedy tokens by recomputing the whole sequence each time (no cache, float32)."""
    cfg = model.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads

    def attend(layer, q, k, v):
        t = q.shape[0]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(cfg.head_dim)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return torch.einsum("hqk,khd->qhd", probs, v)

    tokens = list(prompt)
    for _ in range(n):
        ids = torch.tensor(tokens)
        logits = model.forward(ids, torch.arange(len(tokens)), attend,
                               torch.tensor([len(tokens) - 1]))
        tokens.append(int(logits[0].argmax()))
    return tokens[len(prompt):]


def _workload(seed: int = 3) -> List[Request]:
    system = [1] + list(range(40, 61))  # 22 tokens: shared, 2 full blocks of 8
    lengths = [(5, 6, 0), (30, 4, 0), (3, 7, 2), (12, 5, 3), (1, 3, 6)]
    g = torch.Generator().manual_seed(seed)
    requests = []
    for rid, (user, new, arrival) in enumerate(lengths):
        tail = torch.randint(3, SMALL.vocab_size, (user,), generator=g).tolist()
        requests.append(Request(rid=rid, prompt=system + tail, max_new_tokens=new,
                                arrival_step=arrival))
    return requests


def _engine(model, lib, dtype: str, check: bool, budget: int = 16) -> Engine:
    cfg = model.config
    spec = CacheSpec(num_layers=cfg.num_hidden_layers, num_blocks=48, block_size=8,
                     num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, dtype=dtype)
    primary = UnifiedBackend("primary", lib, spec, torch.float32)
    reference = None
    if check:
        ref_spec = CacheSpec(**{**spec.__dict__, "dtype": "fp32"})
        reference = UnifiedBackend("reference", torch_unified, ref_spec, torch.float32,
                                   round_kv=torch.float16 if dtype == "fp16" else None)
    return Engine(model, Scheduler(BlockAllocator(48, 8), budget), primary, reference,
                  rtol=serve.FP16_RTOL, atol=serve.FP16_ATOL)


def test_engine_matches_full_recompute(model):
    """Paged cache + chunking + prefix sharing give the tokens of a cache-free recompute."""
    requests = _workload()
    stats = _engine(model, torch_unified, "fp32", check=False).run(requests)
    assert stats.prefix_hit_tokens > 0 and stats.max_saved_blocks > 0
    for r in requests:
        assert r.output == _naive_generate(model, r.prompt, r.max_new_tokens), r.rid
    outputs = [t for r in requests for t in r.output]
    assert len(set(outputs)) >= len(outputs) // 3, "greedy output should not be degenerate"


def test_check_catches_a_wrong_attention(model):
    """The lockstep check has teeth: an attention that drops the oldest cached position fails."""

    class DropFirstPlan:
        def __init__(self, plan):
            self.plan = plan

        def run(self, q, k, v, cache, **kwargs):
            saved = [m.clone() for m in self.plan.masks]
            for m in self.plan.masks:
                if m.shape[1] > 1:  # position 0 hidden from every query that sees position 1
                    m[:, 0] = ~m[:, 1]
            try:
                return self.plan.run(q, k, v, cache, **kwargs)
            finally:
                self.plan.masks = saved

    broken = SimpleNamespace(
        paged_block_cache=torch_unified.paged_block_cache,
        plan_unified_attention=lambda *a, **kw: DropFirstPlan(
            torch_unified.plan_unified_attention(*a, **kw)))
    stats = _engine(model, broken, "fp16", check=True).run(_workload())
    assert stats.max_logit_violation > 1.0


def test_check_flags_non_finite_logits(model):
    engine = _engine(model, torch_unified, "fp16", check=True)
    engine._compare(torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, 2.0]]), [1])
    assert engine.stats.max_logit_violation == float("inf")
    assert engine.stats.max_logit_error == float("inf")
    other = _engine(model, torch_unified, "fp16", check=True)
    other._compare(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, float("nan")]]), [1])
    assert other.stats.max_logit_violation == float("inf")


def test_engine_int8_stand_in_reports_error(model):
    engine = _engine(model, torch_unified, "int8", check=True)
    stats = engine.run(_workload())
    assert stats.compared_rows == stats.generated_tokens > 0
    assert 0 < stats.max_logit_error < 1.0


@needs_dynattn
def test_dynattn_fp16_end_to_end_identical_tokens(model):
    """dynattn over an fp16 cache vs the torch float32 reference: same greedy tokens."""
    engine = _engine(model, dynattn, "fp16", check=True)
    stats = engine.run(_workload())
    assert stats.compared_rows == stats.generated_tokens > 0
    assert stats.agreeing_rows == stats.compared_rows
    assert stats.max_logit_violation <= 1.0, stats.max_logit_error


@needs_dynattn
def test_dynattn_int8_end_to_end_runs(model):
    stats = _engine(model, dynattn, "int8", check=True).run(_workload())
    assert stats.compared_rows > 0 and stats.max_logit_error < 1.0


@needs_dynattn
@pytest.mark.parametrize("cache_dtype", ["fp16", "int8"])
def test_dynattn_step_matches_stand_in(cache_dtype):
    """One mixed step (decode + chunk + prompt) through dynattn and the stand-in: the cache
    bytes written (and int8 scales) are identical, the outputs agree."""
    torch.manual_seed(0)
    nb, bs, hkv, hq, d, group = 12, 4, 2, 4, 16, 8
    qsl = torch.tensor([0, 1, 6, 9], dtype=torch.int32)
    ctx = torch.tensor([6, 4, 0], dtype=torch.int32)
    table = torch.tensor([[3, 7, 0], [5, 2, 9], [11, 0, 0]], dtype=torch.int32)
    q = torch.randn(9, hq, d)
    k = torch.randn(9, hkv, d)
    v = torch.randn(9, hkv, d)
    outs, tensors = [], []
    for lib in (dynattn, torch_unified):
        g = torch.Generator().manual_seed(1)
        plain = [torch.randn(nb, bs, hkv, d, generator=g) for _ in range(2)]
        if cache_dtype == "int8":
            parts = [torch_unified.quantize_int8(x, group) for x in plain]
            key, value = parts[0][0], parts[1][0]
            scales = [parts[0][1].clone(), parts[1][1].clone()]
            cache = lib.paged_block_cache(key, value, key_scale=scales[0],
                                          value_scale=scales[1], quant_bit=8,
                                          quant_group=group)
        else:
            key, value = plain[0].half(), plain[1].half()
            scales = []
            cache = lib.paged_block_cache(key, value)
        plan = lib.plan_unified_attention(q, k, v, qsl, ctx, table, cache)
        outs.append(plan.run(q, k, v, cache))
        tensors.append([key, value] + scales)
    for mine, theirs in zip(tensors[1], tensors[0]):
        assert torch.equal(mine, theirs)
    tol = 1e-4 if cache_dtype == "fp16" else 1e-3
    assert torch.allclose(outs[0], outs[1], atol=tol, rtol=tol)


def test_serve_cli_runs_small(checkpoint, capsys):
    """The entry point on the small checkpoint, with whichever library is available."""
    code = serve.main(["--checkpoint", checkpoint, "--check", "--num-requests", "4",
                       "--max-new-tokens", "4", "--token-budget", "32"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tokens/s" in out and "KV memory" in out and "PASS" in out


@needs_dynattn
@pytest.mark.parametrize("kind", ["tensor", "context"])
def test_serve_parallel_matches_one_process(checkpoint, kind):
    """--tensor-parallel 2 (each process with its share of the heads, the MLP and the KV cache)
    and --context-parallel 2 (each with a contiguous share of every request's context, partial
    attention merged by LSE), on torch.distributed (gloo), give the single process's greedy
    tokens and logits."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "serve", "serve.py"), "--checkpoint",
         checkpoint, f"--{kind}-parallel", "2", "--num-requests", "4", "--max-new-tokens", "6",
         "--token-budget", "32", "--cp-chunk", "32"], capture_output=True, text=True,
        timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{kind}-parallel check" in result.stdout and "PASS" in result.stdout
    assert "rank 1:" in result.stdout


def test_sharded_llama_splits_heads_and_features(model):
    """Each rank's share: whole KV heads with their query heads, a slice of the MLP; the shares
    of the projections put back together are the model's."""
    import distributed
    shards = [distributed.ShardedLlama(model, rank, 2) for rank in range(2)]
    cfg = model.config
    assert sum(s.config.num_attention_heads for s in shards) == cfg.num_attention_heads
    assert all(s.config.num_key_value_heads == cfg.num_key_value_heads // 2 for s in shards)
    whole = model.layers[0]
    assert torch.equal(torch.cat([s.layers[0].o_proj for s in shards], dim=1), whole.o_proj)
    assert torch.equal(torch.cat([s.layers[0].gate_proj for s in shards]), whole.gate_proj)
    assert torch.equal(torch.cat([s.layers[0].down_proj for s in shards], dim=1),
                       whole.down_proj)
    with pytest.raises(ValueError, match="must divide"):
        distributed.ShardedLlama(model, 0, 3)


def test_context_shares_are_contiguous_and_cover_each_request():
    """Rank r holds positions [r*C, (r+1)*C) of each request, the last rank the rest."""
    import distributed
    spec = CacheSpec(num_layers=1, num_blocks=4, block_size=16, num_kv_heads=2, head_dim=8)
    context, query = torch.tensor([0, 40, 200, 10]), torch.tensor([5, 1, 1, 0])
    shares = []
    for rank in range(3):
        backend = distributed.ContextShardBackend("torch", torch_unified, spec, torch.float32,
                                                  rank=rank, world=3, chunk=32)
        shares.append(backend.share(context, query))
    assert torch.equal(shares[0][0], torch.zeros(4, dtype=torch.long))
    for (_, end), (begin, _) in zip(shares, shares[1:]):
        assert torch.equal(end, begin)  # contiguous
    assert torch.equal(shares[-1][1], context + query)  # the last rank holds the rest
    assert shares[1][0].tolist() == [5, 32, 32, 10] and shares[1][1].tolist() == [5, 41, 64, 10]
    with pytest.raises(ValueError, match="multiple of the block size"):
        distributed.ContextShardBackend("torch", torch_unified, spec, torch.float32, rank=0,
                                        world=2, chunk=20)
