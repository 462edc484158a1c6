# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""A rank's share through the Python package: head shards with their share of the ALiBi slopes
give the whole call's bits; context shards (key_offsets, sinks on one rank) merged by their LSE
give the whole call's output; the LSE of multi_head_attention and multi_head_cache_attention
equals `dynattn run`'s with return_lse."""

import numpy as np
import pytest
import torch

import dynattn
from conftest import run_cli
from test_ops import PmxStep


def standard_slopes(heads):
    c = 1 << (heads.bit_length() - 1)
    slopes = [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)]
    slopes += [2.0 ** (-4.0 * k / c) for k in range(1, 2 * (heads - c), 2)]
    return np.array(slopes, dtype=np.float32)


@pytest.mark.parametrize("ranks", [2, 3])
def test_head_shards_give_the_whole_calls_bits(rng, ranks):
    s = PmxStep(rng, "float32", 0, hq=12, hkv=6)
    key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(np.float32)
    value = rng.standard_normal(key.shape).astype(np.float32)
    sinks = rng.standard_normal(s.hq).astype(np.float32)
    index = (s.seqstarts, s.kvstarts, 0, s.max_seqlen, s.max_kvlen)
    whole, whole_lse = dynattn.multi_head_attention(s.query, key, value, *index, is_alibi=True,
                                                    sinks=sinks, return_lse=True)
    slopes, group = standard_slopes(s.hq), s.hq // s.hkv
    assert np.array_equal(whole, dynattn.multi_head_attention(
        s.query, key, value, *index, alibi_slopes=slopes, sinks=sinks))
    for rank in range(ranks):
        k0, k1 = s.hkv * rank // ranks, s.hkv * (rank + 1) // ranks
        q0, q1 = k0 * group, k1 * group
        out, lse = dynattn.multi_head_attention(
            np.ascontiguousarray(s.query[:, q0:q1]), np.ascontiguousarray(key[:, k0:k1]),
            np.ascontiguousarray(value[:, k0:k1]), *index, alibi_slopes=slopes[q0:q1],
            sinks=sinks[q0:q1], return_lse=True)
        np.testing.assert_array_equal(out.view(np.uint32), whole[:, q0:q1].view(np.uint32))
        np.testing.assert_array_equal(lse.view(np.uint32), whole_lse[:, q0:q1].view(np.uint32))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("window_left", [-1, 5])
def test_context_shards_merge_to_the_whole_call(rng, kind, window_left):
    s = PmxStep(rng, "float32", 8)
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    sinks = rng.standard_normal(s.hq).astype(np.float32)
    options = dict(quant_bit=8, is_alibi=True, window_left=window_left)
    whole_cache = wrap(s.cache.copy())
    whole = dynattn.multi_head_cache_attention(
        wrap(s.query), wrap(s.current_key), wrap(s.current_value), *s.index().values(), 0,
        s.max_seqlen, s.max_kvlen, whole_cache, wrap(s.scale.copy()), sinks=sinks, **options)
    kvlen = np.diff(s.kvstarts)
    # Two ranks: rank 0 holds the first `cut` positions of each request, rank 1 the rest and the
    # new tokens from there on (the cut may fall inside the new tokens, or at either end).
    cut = np.array([rng.integers(0, n + 1) for n in kvlen], dtype=np.int64)
    if window_left >= 0:
        cut = cut // 64 * 64  # a window's reads stay inside what the whole call reads
    cache, scale = wrap(s.cache.copy()), wrap(s.scale.copy())
    outs, lses = [], []
    for rank, (begin, end) in enumerate(((np.zeros_like(cut), cut), (cut, kvlen))):
        kvstarts = np.concatenate([[0], np.cumsum(end - begin)]).astype(np.int64)
        out, lse = dynattn.multi_head_cache_attention(
            wrap(s.query), wrap(s.current_key), wrap(s.current_value), s.seqstarts, kvstarts,
            s.cachestarts + begin, s.start_pos, 0, s.max_seqlen, s.max_kvlen, cache, scale,
            key_offsets=begin, sinks=sinks if rank == 0 else None, return_lse=True, **options)
        outs.append(np.asarray(out))
        lses.append(np.asarray(lse))
    # The ranks wrote each new token once, as the whole call did.
    np.testing.assert_array_equal(np.asarray(cache).view(np.uint8),
                                  np.asarray(whole_cache).view(np.uint8))
    merged = dynattn.merge_states(out=np.stack(outs), lse=np.stack(lses))
    # Both within the fp32 bound 1e-5 * max(1, vmax) of the exact result; vmax is below 8 here
    # (int8 codes times scales under 0.03, and standard-normal new values).
    np.testing.assert_allclose(merged, np.asarray(whole), rtol=0, atol=2e-5 * 8)


@pytest.mark.parametrize("op", ["multi_head_attention", "multi_head_cache_attention"])
def test_lse_matches_the_cli(rng, tmp_path, op):
    s = PmxStep(rng, "float16", 0)
    attrs = dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, return_lse=1)
    if op == "multi_head_attention":
        key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(np.float16)
        value = rng.standard_normal(key.shape).astype(np.float16)
        inputs = dict(query=s.query, key=key, value=value, seqstarts=s.seqstarts,
                      kvstarts=s.kvstarts, decoding_batches=np.array(0),
                      max_seqlen=np.array(s.max_seqlen), max_kvlen=np.array(s.max_kvlen))
        out, lse = dynattn.multi_head_attention(s.query, key, value, s.seqstarts, s.kvstarts, 0,
                                                s.max_seqlen, s.max_kvlen, return_lse=True)
    else:
        inputs = s.cli_inputs(op)
        out, lse = dynattn.multi_head_cache_attention(
            s.query, s.current_key, s.current_value, *s.index().values(), 0, s.max_seqlen,
            s.max_kvlen, s.cache.copy(), s.scale, return_lse=True)
    want = run_cli(op, inputs, attrs, tmp_path)
    np.testing.assert_array_equal(out.view(np.uint16), want["attn_output"].view(np.uint16))
    np.testing.assert_array_equal(lse.view(np.uint32), want["lse"].view(np.uint32))


@pytest.mark.parametrize("quant_bit", [0, 8])
def test_unified_context_shards_merge_to_the_whole_step(rng, quant_bit):
    from conftest import Step
    s = Step(rng, "float32", quant_bit, max_context=90)
    bs, total = s.block_size, s.context_lens + np.diff(s.query_start_loc)
    sinks = rng.standard_normal(s.hq).astype(np.float32)
    args = (s.query, s.current_key, s.current_value, s.query_start_loc, s.context_lens)

    def run(block_table, cache, scale, **shard):
        k, v, ks, vs = s.paged(cache, scale)
        return dynattn.unified_attention(
            *args, block_table, dynattn.paged_block_cache(k, v, ks, vs, quant_bit=quant_bit),
            return_lse=True, **shard)

    whole_cache = s.cache.copy()
    whole_scale = None if s.scale is None else s.scale.copy()
    whole, _ = run(s.block_table, whole_cache, whole_scale, sinks=sinks)
    # Rank 0 holds each request's first whole blocks, rank 1 the rest with the fresh tokens
    # (a cut may fall inside them, or at either end).
    cut = np.array([rng.integers(0, n + 1) // bs * bs for n in total], dtype=np.int64)
    cache = s.cache.copy()
    scale = None if s.scale is None else s.scale.copy()
    outs, lses = [], []
    for rank, (begin, end) in enumerate(((np.zeros_like(cut), cut), (cut, total))):
        table = np.zeros_like(s.block_table)
        for b, first in enumerate(begin // bs):
            table[b, :table.shape[1] - first] = s.block_table[b, first:]
        out, lse = run(table, cache, scale, key_offsets=begin, key_counts=end - begin,
                       sinks=sinks if rank == 1 else None)
        outs.append(out)
        lses.append(lse)
    np.testing.assert_array_equal(cache.view(np.uint8), whole_cache.view(np.uint8))
    merged = dynattn.merge_states(out=np.stack(outs), lse=np.stack(lses))
    vmax = max(1.0, float(np.abs(s.current_value).max()), 2.0)  # int8: codes x scales < 4
    np.testing.assert_allclose(merged, whole, rtol=0, atol=2e-5 * vmax)
    summary = dynattn.describe_unified_step(*args, table, dynattn.paged_block_cache(
        *s.paged(cache, scale)[:2], *s.paged(cache, scale)[2:], quant_bit=quant_bit),
        key_offsets=begin, key_counts=end - begin)
    assert summary.phase == "shard"
