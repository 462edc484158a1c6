# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""The PMX ops (key_value_cache, multi_head_attention, multi_head_cache_attention) and their
plans bit for bit against `dynattn run`, multi_head_attention against the float64 reference,
merge_states against its formula, and the engines' caches and metadata adapters."""

import numpy as np
import pytest
import torch

import dynattn
from conftest import FLOAT, Step, assert_close, run_cli


class PmxStep:
    """A random PMX step: B requests with start_pos (cached) and seqlen (new) tokens, a layout-0
    cache (MaxT, 1, 2, Hkv, Dc) with offset addressing (cachestarts)."""

    def __init__(self, rng, dtype, quant_bit, hq=4, hkv=2, d=32, requests=4, group=8):
        self.dtype, self.quant_bit, self.hq, self.hkv, self.d = dtype, quant_bit, hq, hkv, d
        self.seqlen = rng.integers(1, 7, requests)
        self.start_pos = rng.integers(0, 40, requests)
        kvlen = self.start_pos + self.seqlen
        self.seqstarts = np.concatenate([[0], np.cumsum(self.seqlen)]).astype(np.int64)
        self.kvstarts = np.concatenate([[0], np.cumsum(kvlen)]).astype(np.int64)
        capacity = kvlen + rng.integers(0, 5, requests)
        self.cachestarts = np.concatenate([[0], np.cumsum(capacity)[:-1]]).astype(np.int64)
        self.start_pos = self.start_pos.astype(np.int64)
        self.max_seqlen, self.max_kvlen = int(self.seqlen.max()), int(kvlen.max())
        slots = int(capacity.sum())
        t, tq = FLOAT[dtype], int(self.seqstarts[-1])
        self.query = rng.standard_normal((tq, hq, d)).astype(t)
        self.current_key = rng.standard_normal((tq, hkv, d)).astype(t)
        self.current_value = rng.standard_normal((tq, hkv, d)).astype(t)
        if quant_bit == 0:
            self.cache = rng.standard_normal((slots, 1, 2, hkv, d)).astype(t)
            self.scale = None
        else:
            self.cache = rng.integers(-127, 128, (slots, 1, 2, hkv, d)).astype(np.int8)
            self.scale = rng.uniform(0.01, 0.03, (slots, 1, 2, hkv, d // group)).astype(np.float16)

    def index(self):
        return dict(seqstarts=self.seqstarts, kvstarts=self.kvstarts,
                    cachestarts=self.cachestarts, start_pos=self.start_pos)

    def cli_inputs(self, op):
        inputs = dict(current_key=self.current_key, current_value=self.current_value,
                      **self.index(), max_seqlen=np.array(self.max_seqlen),
                      max_kvlen=np.array(self.max_kvlen), cache=self.cache)
        if self.scale is not None:
            inputs["scale"] = self.scale
        if op == "multi_head_cache_attention":
            inputs.update(query=self.query, decoding_batches=np.array(0))
        return inputs


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype,quant_bit", [("float32", 0), ("float16", 8)])
def test_key_value_cache_and_mhca_match_cli(rng, tmp_path, kind, dtype, quant_bit):
    s = PmxStep(rng, dtype, quant_bit)
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    attrs = dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, quant_bit=quant_bit)
    (tmp_path / "kvc").mkdir()
    want = run_cli("key_value_cache", s.cli_inputs("kvc"), dict(quant_bit=quant_bit),
                   tmp_path / "kvc")
    cache = wrap(s.cache.copy())
    scale = None if s.scale is None else wrap(s.scale.copy())
    key, value = dynattn.key_value_cache(wrap(s.current_key), wrap(s.current_value),
                                         *s.index().values(), s.max_seqlen, s.max_kvlen, cache,
                                         scale, quant_bit=quant_bit)
    assert type(key) is type(cache)
    for name, got in (("key", key), ("value", value), ("cache", cache), ("scale", scale)):
        if got is not None:
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                          want[name].view(np.uint8), err_msg=name)

    cache = wrap(s.cache.copy())  # the plan writes into another cache of the same shape
    scale = None if s.scale is None else wrap(s.scale.copy())
    plan = dynattn.plan_key_value_cache(wrap(s.current_key), wrap(s.current_value),
                                        *s.index().values(), s.max_seqlen, s.max_kvlen, cache,
                                        scale, quant_bit=quant_bit)
    assert plan.op == "KeyValueCache"
    key, value = plan.run(wrap(s.current_key), wrap(s.current_value), cache, scale)
    for name, got in (("key", key), ("value", value), ("cache", cache), ("scale", scale)):
        if got is not None:
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                          want[name].view(np.uint8), err_msg="plan " + name)

    (tmp_path / "mhca").mkdir()
    op = "multi_head_cache_attention"
    want = run_cli(op, s.cli_inputs(op), attrs, tmp_path / "mhca")
    for planned in (False, True):
        cache = wrap(s.cache.copy())
        scale = None if s.scale is None else wrap(s.scale.copy())
        args = (wrap(s.query), wrap(s.current_key), wrap(s.current_value), *s.index().values(),
                0, s.max_seqlen, s.max_kvlen, cache, scale)
        if planned:
            plan = dynattn.plan_multi_head_cache_attention(*args, quant_bit=quant_bit)
            assert plan.op == "MultiHeadCacheAttention"
            out = plan.run(wrap(s.query), wrap(s.current_key), wrap(s.current_value), cache,
                           scale, context=dynattn.Context())
        else:
            out = dynattn.multi_head_cache_attention(*args, quant_bit=quant_bit)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8),
                                      want["attn_output"].view(np.uint8))
        np.testing.assert_array_equal(np.asarray(cache).view(np.uint8),
                                      want["cache"].view(np.uint8))


def reference_mha(q, k, v, seqstarts, kvstarts):
    """Float64 MHA with the bottom-right causal mask; vmax per query row."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    out, vmax = np.zeros(q.shape[:2] + v.shape[2:]), np.zeros(len(q))
    group = q.shape[1] // k.shape[1]
    for b in range(len(seqstarts) - 1):
        qs, qe, ks, ke = seqstarts[b], seqstarts[b + 1], kvstarts[b], kvstarts[b + 1]
        for i in range(qe - qs):
            limit = ke - ks - (qe - qs) + i + 1
            vmax[qs + i] = np.abs(v[ks:ke]).max()
            for h in range(q.shape[1]):
                s = k[ks:ks + limit, h // group] @ q[qs + i, h] / np.sqrt(q.shape[2])
                w = np.exp(s - s.max())
                out[qs + i, h] = w @ v[ks:ks + limit, h // group] / w.sum()
    return out, vmax


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_multi_head_attention_matches_reference_and_cli(rng, tmp_path, kind, dtype):
    s = PmxStep(rng, dtype, 0)
    t = FLOAT[dtype]
    key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(t)
    value = rng.standard_normal(key.shape).astype(t)
    want = run_cli("multi_head_attention",
                   dict(query=s.query, key=key, value=value, seqstarts=s.seqstarts,
                        kvstarts=s.kvstarts, decoding_batches=np.array(0),
                        max_seqlen=np.array(s.max_seqlen), max_kvlen=np.array(s.max_kvlen)),
                   dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d), tmp_path)
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    args = (wrap(s.query), wrap(key), wrap(value), s.seqstarts, s.kvstarts, 0, s.max_seqlen,
            s.max_kvlen)
    out = dynattn.multi_head_attention(*args)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8),
                                  want["attn_output"].view(np.uint8))
    plan = dynattn.plan_multi_head_attention(*args)
    again = plan.run(wrap(s.query), wrap(key), wrap(value))
    np.testing.assert_array_equal(np.asarray(again).view(np.uint8),
                                  want["attn_output"].view(np.uint8))
    ref, vmax = reference_mha(s.query, key, value, s.seqstarts, s.kvstarts)
    assert_close(np.asarray(out), ref, vmax, dtype, "attn_output")


@pytest.mark.parametrize("dv", [128, 20])
def test_values_of_another_size_match_reference_and_cli(rng, tmp_path, dv):
    """MLA's non-absorbed prefill shape: keys of D = 192, values and outputs of Dv (from the
    value tensor's shape), through the call, its plan and `dynattn run --head_dim_v`."""
    s = PmxStep(rng, "float32", 0, hq=4, hkv=2, d=192)
    key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(np.float32)
    value = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, dv)).astype(np.float32)
    args = (s.query, key, value, s.seqstarts, s.kvstarts, 0, s.max_seqlen, s.max_kvlen)
    out = dynattn.multi_head_attention(*args)
    assert out.shape == (s.query.shape[0], s.hq, dv)
    ref, vmax = reference_mha(s.query, key, value, s.seqstarts, s.kvstarts)
    assert_close(np.asarray(out), ref, vmax, "float32", "attn_output")
    np.testing.assert_array_equal(dynattn.plan_multi_head_attention(*args).run(s.query, key, value),
                                  out)
    want = run_cli("multi_head_attention",
                   dict(query=s.query, key=key, value=value, seqstarts=s.seqstarts,
                        kvstarts=s.kvstarts, decoding_batches=np.array(0),
                        max_seqlen=np.array(s.max_seqlen), max_kvlen=np.array(s.max_kvlen)),
                   dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, head_dim_v=dv),
                   tmp_path)
    np.testing.assert_array_equal(want["attn_output"], out)


def test_values_from_the_keys_match_reference_and_cli(rng, tmp_path):
    """value=None: the values are the keys' first head_dim_v elements (MLA's absorbed form), in
    the call, its plan and `dynattn run --value_from_key 1` (no value file)."""
    s = PmxStep(rng, "float32", 0, hq=8, hkv=1, d=80)
    key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(np.float32)
    args = (s.query, key, None, s.seqstarts, s.kvstarts, 0, s.max_seqlen, s.max_kvlen)
    out = dynattn.multi_head_attention(*args, head_dim_v=64)
    ref, vmax = reference_mha(s.query, key, np.ascontiguousarray(key[..., :64]), s.seqstarts,
                              s.kvstarts)
    assert_close(np.asarray(out), ref, vmax, "float32", "attn_output")
    plan = dynattn.plan_multi_head_attention(*args, head_dim_v=64)
    np.testing.assert_array_equal(plan.run(s.query, key, None), out)
    want = run_cli("multi_head_attention",
                   dict(query=s.query, key=key, seqstarts=s.seqstarts, kvstarts=s.kvstarts,
                        decoding_batches=np.array(0), max_seqlen=np.array(s.max_seqlen),
                        max_kvlen=np.array(s.max_kvlen)),
                   dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, head_dim_v=64,
                        value_from_key=1), tmp_path)
    np.testing.assert_array_equal(want["attn_output"], out)


def test_precision_fast_is_accepted_and_names_the_tier_that_runs(rng, tmp_path):
    """precision="fast" in the call, its plan and `dynattn run --precision fast`: no fast kernel
    covers groups of 8, so the exact tier runs (the plan says "exact") with the exact call's bits;
    groups of 32 take the fast kernel (the plan says "fast"), the same bits from Python and the
    CLI; a name that is neither tier is refused by name."""
    s = PmxStep(rng, "float16", 8)
    args = (s.query, s.current_key, s.current_value, s.seqstarts, s.kvstarts, s.cachestarts,
            s.start_pos, 0, s.max_seqlen, s.max_kvlen)
    exact = dynattn.multi_head_cache_attention(*args, s.cache.copy(), s.scale, quant_bit=8)
    fast = dynattn.multi_head_cache_attention(*args, s.cache.copy(), s.scale, quant_bit=8,
                                              precision="fast")
    np.testing.assert_array_equal(np.asarray(fast).view(np.uint8),
                                  np.asarray(exact).view(np.uint8))
    plan = dynattn.plan_multi_head_cache_attention(*args, s.cache.copy(), s.scale, quant_bit=8,
                                                   precision="fast")
    assert plan.precision == "exact"
    assert dynattn.plan_multi_head_cache_attention(*args, s.cache.copy(), s.scale,
                                                   quant_bit=8).precision == "exact"
    inputs = s.cli_inputs("multi_head_cache_attention")
    want = run_cli("multi_head_cache_attention", inputs,
                   dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, quant_bit=8,
                        precision="fast"), tmp_path)
    np.testing.assert_array_equal(want["attn_output"].view(np.uint8),
                                  np.asarray(exact).view(np.uint8))
    with pytest.raises(ValueError, match="precision"):
        dynattn.multi_head_cache_attention(*args, s.cache.copy(), s.scale, quant_bit=8,
                                           precision="fastest")
    key = rng.standard_normal((int(s.kvstarts[-1]), s.hkv, s.d)).astype(np.float16)
    mha = (s.query, key, key, s.seqstarts, s.kvstarts, 0, s.max_seqlen, s.max_kvlen)
    np.testing.assert_array_equal(dynattn.multi_head_attention(*mha, precision="fast"),
                                  dynattn.multi_head_attention(*mha))
    assert dynattn.plan_multi_head_attention(*mha, precision="fast").precision == "exact"
    s = PmxStep(rng, "float32", 8, group=32)
    args = (s.query, s.current_key, s.current_value, s.seqstarts, s.kvstarts, s.cachestarts,
            s.start_pos, 0, s.max_seqlen, s.max_kvlen)
    kw = dict(quant_bit=8, quant_group=32, precision="fast")
    fast = dynattn.multi_head_cache_attention(*args, s.cache.copy(), s.scale, **kw)
    assert dynattn.plan_multi_head_cache_attention(*args, s.cache.copy(), s.scale,
                                                   **kw).precision == "fast"
    want = run_cli("multi_head_cache_attention", s.cli_inputs("multi_head_cache_attention"),
                   dict(num_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d, **kw),
                   tmp_path / "groups_of_32")
    np.testing.assert_array_equal(want["attn_output"].view(np.uint8),
                                  np.asarray(fast).view(np.uint8))


def test_merge_states_matches_its_formula(rng):
    k, t, h, d = 3, 5, 2, 8
    out = rng.standard_normal((k, t, h, d)).astype(np.float32)
    lse = rng.standard_normal((k, t, h)).astype(np.float32)
    lse[1, 0, :] = -np.inf  # an empty part
    merged, merged_lse = dynattn.merge_states(out=out, lse=lse, return_lse=True)
    m = lse.max(axis=0).astype(np.float64)
    w = np.exp(lse.astype(np.float64) - m)
    np.testing.assert_allclose(merged, (w[..., None] * out).sum(0) / w.sum(0)[..., None],
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(merged_lse, m + np.log(w.sum(0)), rtol=1e-6, atol=1e-6)
    # any order of the parts gives the same bits
    again = dynattn.merge_states(out=out[::-1].copy(), lse=lse[::-1].copy())
    np.testing.assert_array_equal(again.view(np.uint32), merged.view(np.uint32))
    with pytest.raises(ValueError, match="lse"):
        dynattn.merge_states(out=out, lse=np.full((k, t, h), np.nan, np.float32))


def test_engine_caches_give_the_same_bits(rng):
    step = Step(rng, "float16", 0, 8)
    k, v, _, _ = step.paged(step.cache, None)
    args = (step.query, step.current_key, step.current_value, step.query_start_loc,
            step.context_lens, step.block_table)
    paged = dynattn.unified_attention(*args, dynattn.paged_block_cache(k.copy(), v.copy()))
    caches = {
        "combined": dynattn.combined_block_cache(np.stack([k, v], axis=1)),
        "combined HND": dynattn.combined_block_cache(
            np.stack([k, v], axis=1).transpose(0, 1, 3, 2, 4).copy(), layout="HND"),
        # vLLM's CPU layout: per (block, head), keys [D, block_size] and values [block_size, D].
        "vllm cpu": dynattn.vllm_cpu_block_cache(np.stack([
            k.transpose(0, 2, 3, 1).copy().reshape(v.transpose(0, 2, 1, 3).shape),
            v.transpose(0, 2, 1, 3)])),
        "ksana": dynattn.ksana_block_cache(
            np.stack([k, v], axis=1).reshape(step.num_blocks, -1).copy(),
            attrs=dynattn.KsanaPool(num_blocks=step.num_blocks, block_size=step.block_size,
                                    num_kv_heads=step.hkv, head_dim=step.d, slack_block=False),
            layer=0),
    }
    for name, cache in caches.items():
        got = dynattn.unified_attention(*args, cache)
        np.testing.assert_array_equal(got.view(np.uint16), paged.view(np.uint16), err_msg=name)


def test_metadata_adapters():
    md = dynattn.from_vllm([0, 1, 4], [5, 3], [[3, 5], [7, 0]], block_size=4, num_blocks=10)
    np.testing.assert_array_equal(md.query_start_loc, [0, 1, 4])
    np.testing.assert_array_equal(md.context_lens, [4, 0])
    np.testing.assert_array_equal(md.block_table, [[3, 5], [7, 0]])
    fi = dynattn.from_flashinfer([0, 1, 4], [0, 2, 3], [3, 5, 7], [1, 3], page_size=4,
                                 num_pages=10)
    np.testing.assert_array_equal(fi.context_lens, [4, 0])
    np.testing.assert_array_equal(fi.block_table, [[3, 5], [7, 0]])
    with pytest.raises(ValueError, match="block_table"):
        dynattn.from_vllm([0, 1, 4], [5, 3], [[3, 50], [7, 0]], block_size=4, num_blocks=10)
    pool = dynattn.KsanaPool(num_blocks=4, block_size=2, num_kv_heads=1, head_dim=8,
                             num_layer=2)
    atb = dynattn.ksana_to_atb_block_table(np.array([[1, -1]]), attrs=pool, layer=1)
    np.testing.assert_array_equal(atb, [[2 * 2 * 1 + 1, -1]])
    slots = dynattn.atb_slot_mapping([[1, 2]], [0, 0], [0, 3], attrs=pool, layer=0)
    np.testing.assert_array_equal(slots, [4 * 2 + 0, 8 * 2 + 1])
