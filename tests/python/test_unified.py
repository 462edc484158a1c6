# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""dynattn.unified_attention and its plan on random steps: against the float64 reference
(tolerances of docs/numerics.md) and bit for bit against the C++ path (`dynattn run
unified_attention`), on torch and NumPy inputs, fp32/fp16/int8/int4 caches; outputs and caches
written in place."""

import types

import numpy as np
import pytest
import torch

import dynattn
from conftest import Step, assert_close, dequantize, reference_unified, run_cli

CASES = [  # (dtype, quant_bit, quant_group)
    ("float32", 0, 8),
    ("float16", 0, 8),
    ("float16", 8, 8),
    ("float32", 8, 16),
    ("float16", 4, 8),
]


def to_kind(kind, array):
    return torch.from_numpy(array) if kind == "torch" else array


def as_numpy(t):
    return t.numpy() if isinstance(t, torch.Tensor) else t


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype,quant_bit,quant_group", CASES)
def test_unified_matches_reference_and_cli(rng, tmp_path, kind, dtype, quant_bit, quant_group):
    step = Step(rng, dtype, quant_bit, quant_group)
    expected = run_cli("unified_attention", step.cli_inputs(), step.cli_attrs(), tmp_path)

    cache = to_kind(kind, step.cache.copy())
    scale = None if step.scale is None else to_kind(kind, step.scale.copy())
    k, v, ks, vs = step.paged(cache, scale)
    block_cache = dynattn.paged_block_cache(k, v, ks, vs, layout="NHD", quant_bit=quant_bit,
                                            quant_group=quant_group)
    index_type = torch.int32 if kind == "torch" else np.int64  # int32 index tensors too
    out, lse = dynattn.unified_attention(
        to_kind(kind, step.query), to_kind(kind, step.current_key),
        to_kind(kind, step.current_value),
        to_kind(kind, step.query_start_loc).to(index_type) if kind == "torch"
        else step.query_start_loc,
        to_kind(kind, step.context_lens), to_kind(kind, step.block_table), block_cache,
        return_lse=True)
    assert type(out) is type(cache) and type(lse) is type(cache)  # the query's framework
    assert as_numpy(out).dtype == step.query.dtype and as_numpy(lse).dtype == np.float32

    # Bit for bit the C++ path: output, log-sum-exp, and the cache (and scales) written in place.
    np.testing.assert_array_equal(as_numpy(out).view(np.uint8),
                                  expected["attn_output"].view(np.uint8))
    np.testing.assert_array_equal(as_numpy(lse).view(np.uint8), expected["lse"].view(np.uint8))
    np.testing.assert_array_equal(as_numpy(cache), expected["cache"])
    if scale is not None:
        np.testing.assert_array_equal(as_numpy(scale), expected["scale"])

    # Within the numerics contract of an independent float64 reference over the updated cache.
    c, s = as_numpy(cache), None if scale is None else as_numpy(scale)
    keys = dequantize(c[0, 0], None if s is None else s[0, 0], quant_bit, quant_group, dtype)
    values = dequantize(c[0, 1], None if s is None else s[0, 1], quant_bit, quant_group, dtype)
    ref, ref_lse, vmax = reference_unified(step, keys, values)
    assert_close(as_numpy(out), ref, vmax, dtype, "attn_output")
    np.testing.assert_allclose(as_numpy(lse), ref_lse, rtol=1e-5, atol=1e-4)
    if quant_bit == 0:  # plain caches hold the fresh tokens exactly
        t = np.arange(step.tokens)
        b = np.searchsorted(step.query_start_loc, t, side="right") - 1
        pos = step.context_lens[b] + t - step.query_start_loc[b]
        slots = np.array([step.slots(bb, pp) for bb, pp in zip(b, pos)])
        np.testing.assert_array_equal(c[0, 0][slots], step.current_key)
        np.testing.assert_array_equal(c[0, 1][slots], step.current_value)


@pytest.mark.parametrize("dtype,quant_bit,quant_group", [CASES[1], CASES[2]])
def test_pmx_block_cache_and_alibi_match_cli(rng, tmp_path, dtype, quant_bit, quant_group):
    step = Step(rng, dtype, quant_bit, quant_group, heads=(4, 4), d=40, block_size=8)
    expected = run_cli("unified_attention", step.cli_inputs(), step.cli_attrs(alibi=True),
                       tmp_path)
    cache = step.cache.copy()
    scale = None if step.scale is None else step.scale.copy()
    block_cache = dynattn.pmx_block_cache(cache, scale, num_kv_heads=step.hkv, head_dim=step.d,
                                          block_size=step.block_size, quant_bit=quant_bit,
                                          quant_group=quant_group, cache_layout=2)
    out = dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                    step.query_start_loc, step.context_lens, step.block_table,
                                    block_cache, alibi=True)
    np.testing.assert_array_equal(out.view(np.uint8), expected["attn_output"].view(np.uint8))
    np.testing.assert_array_equal(cache, expected["cache"])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_plan_runs_layers_bitwise_as_one_shot(rng, kind):
    step = Step(rng, "float16", 8, 8)
    layers = [types.SimpleNamespace(**{  # same shapes as `step`, other data
        name: rng.permutation(getattr(step, name).reshape(-1)).reshape(getattr(step, name).shape)
        for name in ("query", "current_key", "current_value", "cache", "scale")})
        for _ in range(2)]
    caches = [[to_kind(kind, layer.cache.copy()), to_kind(kind, layer.scale.copy())]
              for layer in layers]
    block_caches = [dynattn.paged_block_cache(*step.paged(c, s), quant_bit=8) for c, s in caches]
    index = dict(query_start_loc=step.query_start_loc, context_lens=step.context_lens,
                 block_table=step.block_table)
    plan = dynattn.plan_unified_attention(
        to_kind(kind, step.query), to_kind(kind, step.current_key),
        to_kind(kind, step.current_value), *index.values(), block_caches[0])
    assert plan.op == "UnifiedAttention" and plan.backend == "cpu/int8"
    assert isinstance(plan.workspace_bytes, int)
    summary = dynattn.describe_unified_step(step.query, step.current_key, step.current_value,
                                            *index.values(), block_caches[0])
    assert repr(plan.unified_summary) == repr(summary) and summary.query_len == step.tokens
    context = dynattn.Context(num_threads=2)
    for layer, block_cache in zip(layers, block_caches):
        got = plan.run(to_kind(kind, layer.query), to_kind(kind, layer.current_key),
                       to_kind(kind, layer.current_value), block_cache, context=context)
        fresh = [layer.cache.copy(), layer.scale.copy()]
        want = dynattn.unified_attention(layer.query, layer.current_key, layer.current_value,
                                         *index.values(),
                                         dynattn.paged_block_cache(*step.paged(*fresh),
                                                                   quant_bit=8))
        np.testing.assert_array_equal(as_numpy(got).view(np.uint16), want.view(np.uint16))
    for (c, s), layer in zip(caches, layers):  # each layer's own cache was written
        assert not np.array_equal(as_numpy(c), layer.cache)
    # index tensors changed after planning are not read again: the plan owns a copy
    before = plan.run(step.query, step.current_key, step.current_value, block_caches[0])
    index["context_lens"][:] = 0
    after = plan.run(step.query, step.current_key, step.current_value, block_caches[0])
    np.testing.assert_array_equal(before.view(np.uint16), after.view(np.uint16))


def test_plan_rejects_other_shapes_and_lse_without_with_lse(rng):
    """A plan's run checks its tensors against the plan's, optional ones included."""
    step = Step(rng, "float32", 0, 8)
    cache = dynattn.paged_block_cache(*step.paged(step.cache, None)[:2])
    args = (step.query_start_loc, step.context_lens, step.block_table)
    plan = dynattn.plan_unified_attention(step.query, step.current_key, step.current_value,
                                          *args, cache, with_lse=False)
    with pytest.raises(ValueError, match="query"):
        plan.run(step.query[:-1], step.current_key, step.current_value, cache)
    with pytest.raises(ValueError, match="lse"):
        plan.run(step.query, step.current_key, step.current_value, cache,
                 lse=np.empty((step.tokens, step.hq), np.float32))
    plan = dynattn.plan_unified_attention(step.query, step.current_key, step.current_value,
                                          *args, cache)
    out, lse = plan.run(step.query, step.current_key, step.current_value, cache,
                        return_lse=True)
    assert lse.shape == (step.tokens, step.hq) and np.all(np.isfinite(lse))


def test_paged_cache_with_values_of_another_size(rng):
    """MLA's non-absorbed K (192) and V (128) in separate paged tensors: the new rows land in
    each, and the output (T, Hq, 128) matches float64 attention over what the cache holds."""
    blocks, block_size, hkv, hq, dk, dv = 12, 4, 2, 4, 192, 128
    key = rng.standard_normal((blocks, block_size, hkv, dk)).astype(np.float32)
    value = rng.standard_normal((blocks, block_size, hkv, dv)).astype(np.float32)
    context_lens = np.array([5, 0, 9], dtype=np.int64)
    new = np.array([1, 6, 2], dtype=np.int64)
    query_start_loc = np.concatenate([[0], np.cumsum(new)]).astype(np.int64)
    table = rng.permutation(blocks).reshape(3, 4).astype(np.int64)
    t = int(query_start_loc[-1])
    query = rng.standard_normal((t, hq, dk)).astype(np.float32)
    current_key = rng.standard_normal((t, hkv, dk)).astype(np.float32)
    current_value = rng.standard_normal((t, hkv, dv)).astype(np.float32)
    cache = dynattn.paged_block_cache(key, value)
    assert (cache.head_dim, cache.head_dim_v) == (dk, dv)
    out, lse = dynattn.unified_attention(query, current_key, current_value, query_start_loc,
                                         context_lens, table, cache, return_lse=True)
    assert out.shape == (t, hq, dv)

    def slot(b, p):
        return table[b, p // block_size] * block_size + p % block_size

    keys, values = key.reshape(-1, hkv, dk), value.reshape(-1, hkv, dv)
    for b in range(3):
        for i in range(new[b]):
            row, s = query_start_loc[b] + i, slot(b, context_lens[b] + i)
            np.testing.assert_array_equal(keys[s], current_key[row])
            np.testing.assert_array_equal(values[s], current_value[row])
            n = context_lens[b] + i + 1
            rows = [slot(b, p) for p in range(n)]
            k, v = keys[rows].astype(np.float64), values[rows].astype(np.float64)
            for h in range(hq):
                scores = k[:, h // (hq // hkv)] @ query[row, h].astype(np.float64) / np.sqrt(dk)
                w = np.exp(scores - scores.max())
                want = w @ v[:, h // (hq // hkv)] / w.sum()
                assert np.abs(out[row, h] - want).max() <= 1e-5 * max(1.0, np.abs(v).max())
                want_lse = scores.max() + np.log(w.sum())
                assert abs(lse[row, h] - want_lse) <= 1e-4 * max(1.0, abs(want_lse))


def test_latent_cache_reads_values_from_the_keys(rng):
    """MLA's absorbed decode: one latent head (kv_lora_rank + rope_dim = 64 + 16 here) shared by
    every query head; the values are its first 64 elements, read from the same bytes (no
    current_value), and only the latent rows are written."""
    blocks, block_size, hq, dk, dv = 8, 4, 8, 80, 64
    latent = rng.standard_normal((blocks, block_size, 1, dk)).astype(np.float32)
    context_lens = np.array([6, 11], dtype=np.int64)
    new = np.array([1, 3], dtype=np.int64)
    query_start_loc = np.concatenate([[0], np.cumsum(new)]).astype(np.int64)
    table = rng.permutation(blocks).reshape(2, 4).astype(np.int64)
    t = int(query_start_loc[-1])
    query = rng.standard_normal((t, hq, dk)).astype(np.float32)
    current_key = rng.standard_normal((t, 1, dk)).astype(np.float32)
    cache = dynattn.latent_block_cache(latent)
    out = dynattn.unified_attention(query, current_key, None, query_start_loc, context_lens,
                                    table, cache, head_dim_v=dv)
    plan = dynattn.plan_unified_attention(query, current_key, None, query_start_loc,
                                          context_lens, table, cache, head_dim_v=dv)
    np.testing.assert_array_equal(plan.run(query, current_key, None, cache), out)
    assert out.shape == (t, hq, dv)
    rows = latent.reshape(-1, dk)
    for b in range(2):
        for i in range(new[b]):
            row = query_start_loc[b] + i
            slots = [table[b, p // block_size] * block_size + p % block_size
                     for p in range(context_lens[b] + i + 1)]
            np.testing.assert_array_equal(rows[slots[-1]], current_key[row, 0])
            k = rows[slots].astype(np.float64)
            for h in range(hq):
                scores = k @ query[row, h].astype(np.float64) / np.sqrt(dk)
                w = np.exp(scores - scores.max())
                want = w @ k[:, :dv] / w.sum()
                assert np.abs(out[row, h] - want).max() <= 1e-5 * max(1.0, np.abs(k).max())
