# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Hostile inputs at the Python edges: each is refused with a ValueError or TypeError whose
message starts with the argument's name, and leaves every cache as it was; plus a property test
of random argument mutations over the ops."""

import re

import numpy as np
import pytest
import torch

import dynattn
from conftest import Step
from test_ops import PmxStep


def mhca(s, cache, scale=None, **kw):
    """multi_head_cache_attention of PmxStep `s` over `cache`, with keyword overrides."""
    args = dict(query=s.query, current_key=s.current_key, current_value=s.current_value,
                **s.index(), decoding_batches=0, max_seqlen=s.max_seqlen,
                max_kvlen=s.max_kvlen, cache=cache, scale=scale, quant_bit=s.quant_bit)
    args.update(kw)
    return dynattn.multi_head_cache_attention(**args)


def test_context_threads_are_checked():
    for n in (-3, -1, 1025, 5000, 65537):
        with pytest.raises(ValueError, match=re.escape(
                f"num_threads: must be 0 (all cores) or in [1, 1024], got {n}")):
            dynattn.Context(num_threads=n)
    with pytest.raises(ValueError, match=re.escape(
            "num_threads: 2147483648 does not fit a 32-bit int")):
        dynattn.Context(num_threads=2**31)
    with pytest.raises(TypeError, match="^num_threads: must be an integer"):
        dynattn.Context(num_threads=1.5)
    context = dynattn.Context(num_threads=2, pin_threads=True)
    assert context.num_threads == 2 and context.pin_threads


@pytest.mark.parametrize("kw,message", [
    (dict(window_left=2**40), "window_left: 1099511627776 does not fit a 32-bit int"),
    (dict(quant_bit=2**40), "quant_bit: 1099511627776 does not fit a 32-bit int"),
    (dict(softmax_scale=1e-50), "softmax_scale: 1e-50 is outside float32's range (it would "
                                "become 0)"),
    (dict(logits_soft_cap=1e-50), "logits_soft_cap: 1e-50 is outside float32's range"),
    (dict(softmax_scale=1e300), "softmax_scale: 1e+300 is outside float32's range (it would "
                                "become infinity)"),
    (dict(window_left="7"), "window_left: must be an integer, got str '7'"),
    (dict(cachestarts=[0, 1.9, 4, 9]), "cachestarts: index values must be integers that fit "
                                       "int64, got float64 values"),
    (dict(cachestarts=[0, 2**70, 4, 9]), "cachestarts: index values must be integers that fit "
                                         "int64, got object values such as 0"),
])
def test_values_that_do_not_fit_name_their_argument(rng, kw, message):
    s = PmxStep(rng, "float16", 0)
    cache = s.cache.copy()
    error = TypeError if "must be an integer" in message else ValueError
    with pytest.raises(error, match="^" + re.escape(message)):
        mhca(s, cache, **kw)
    np.testing.assert_array_equal(cache, s.cache)


def test_key_value_cache_takes_lists_and_validates_before_allocating(rng):
    s = PmxStep(rng, "float32", 0)
    index = [list(map(int, s.seqstarts)), list(map(int, s.kvstarts)),
             list(map(int, s.cachestarts)), list(map(int, s.start_pos))]
    cache = s.cache.copy()
    key, _ = dynattn.key_value_cache(s.current_key, s.current_value, *index, s.max_seqlen,
                                     s.max_kvlen, cache)
    assert key.shape == (int(s.kvstarts[-1]), s.hkv, s.d)
    plan = dynattn.plan_key_value_cache(s.current_key, s.current_value, *index, s.max_seqlen,
                                        s.max_kvlen, s.cache.copy())
    assert plan.op == "KeyValueCache"
    for last in (2**40, -5):
        bad = [list(i) for i in index]
        bad[1][-1] = last
        cache = s.cache.copy()
        # Validated before the outputs (kvstarts[-1] rows each) are allocated: the error names
        # kvstarts, not NumPy's allocator.
        with pytest.raises(ValueError, match="^(kvstarts|max_kvlen): "):
            dynattn.key_value_cache(s.current_key, s.current_value, *bad, s.max_seqlen,
                                    s.max_kvlen, cache)
        np.testing.assert_array_equal(cache, s.cache)


def test_a_scale_without_quantization_is_refused(rng):
    s = PmxStep(rng, "float16", 0)
    scale = np.ones(s.cache.shape[:-1] + (s.d // 8,), np.float16)
    cache = s.cache.copy()
    with pytest.raises(ValueError, match=r"^scale: must be absent when quant_bit is 0"):
        mhca(s, cache, scale)
    plan = dynattn.plan_multi_head_cache_attention(
        s.query, s.current_key, s.current_value, *s.index().values(), 0, s.max_seqlen,
        s.max_kvlen, cache)
    with pytest.raises(ValueError, match=r"^scale: must be absent: the step was planned"):
        plan.run(s.query, s.current_key, s.current_value, cache, scale)
    np.testing.assert_array_equal(cache, s.cache)


@pytest.mark.skipif(not hasattr(torch, "float8_e5m2"), reason="this PyTorch has no float8")
def test_a_plan_run_keeps_its_fp8_format(rng):
    s = PmxStep(rng, "float16", 0)
    cache = torch.zeros(s.cache.shape, dtype=torch.float8_e4m3fn)
    plan = dynattn.plan_multi_head_cache_attention(
        torch.from_numpy(s.query), torch.from_numpy(s.current_key),
        torch.from_numpy(s.current_value), *s.index().values(), 0, s.max_seqlen, s.max_kvlen,
        cache)
    other = torch.zeros(s.cache.shape, dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match="^cache: "):
        plan.run(torch.from_numpy(s.query), torch.from_numpy(s.current_key),
                 torch.from_numpy(s.current_value), other)
    assert not other.view(torch.uint8).any()


def test_block_cache_tensors_must_not_overlap_the_call():
    rng = np.random.default_rng(7)
    s = Step(rng, "float16", heads=(2, 2))  # Hq = Hkv: the key plane holds an output's worth
    cache = s.cache.copy()
    k, v, _, _ = s.paged(cache, None)
    with pytest.raises(ValueError, match="^value: overlaps key"):
        dynattn.paged_block_cache(k, k)
    blocks = dynattn.paged_block_cache(k, v)
    inside_k = k.reshape(-1)[:s.query.size].reshape(s.query.shape)
    with pytest.raises(ValueError, match="^attn_output: overlaps the block cache's key tensor"):
        dynattn.unified_attention(s.query, s.current_key, s.current_value, s.query_start_loc,
                                  s.context_lens, s.block_table, blocks, out=inside_k)
    inside_v = v.reshape(-1)[:s.query.size].reshape(s.query.shape)
    with pytest.raises(ValueError, match="^query: overlaps the block cache's value tensor"):
        dynattn.unified_attention(inside_v, s.current_key, s.current_value, s.query_start_loc,
                                  s.context_lens, s.block_table, blocks)
    plan = dynattn.plan_unified_attention(s.query, s.current_key, s.current_value,
                                          s.query_start_loc, s.context_lens, s.block_table,
                                          blocks)
    with pytest.raises(ValueError, match="^attn_output: overlaps the block cache's key tensor"):
        plan.run(s.query, s.current_key, s.current_value, blocks, out=inside_k)
    np.testing.assert_array_equal(cache, s.cache)


def test_export_failures_and_dtypes_name_the_input_without_a_traceback(rng):
    s = PmxStep(rng, "float32", 0)
    cache = s.cache.copy()
    grad = torch.from_numpy(s.query).requires_grad_(True)
    with pytest.raises(ValueError) as e:
        mhca(s, cache, query=grad)
    assert str(e.value).startswith("query: cannot be exported through DLPack: ")
    assert "Traceback" not in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=re.escape(
            "seqstarts: dtype int16 is not supported (an index tensor is int32 or int64)")):
        mhca(s, cache, seqstarts=s.seqstarts.astype(np.int16))
    with pytest.raises(ValueError, match=r"^sinks: .* is not supported \(it is float32\)"):
        mhca(s, cache, sinks=np.ones(s.hq, bool))
    np.testing.assert_array_equal(cache, s.cache)


# Mutations of one argument: each call must succeed, or raise ValueError/TypeError naming an
# input, and leave the cache as it was.
MUTATIONS = [
    ("value", None), ("value", -1), ("value", 0), ("value", 2**31), ("value", 2**63),
    ("value", 2**70), ("value", 1e-50), ("value", 1e300), ("value", float("nan")),
    ("value", 1.5), ("value", "x"), ("value", True), ("value", [1.5]), ("value", [2**70]),
    ("value", []), ("dtype", np.float64), ("dtype", np.int16), ("dtype", np.int32),
    ("shape", "transpose"), ("shape", "extra_dim"), ("shape", "empty"), ("shape", "view_of_cache"),
]
ARGUMENTS = ["query", "current_key", "current_value", "seqstarts", "kvstarts", "cachestarts",
             "start_pos", "decoding_batches", "max_seqlen", "max_kvlen", "scale", "window_left",
             "logits_soft_cap", "softmax_scale", "quant_bit", "quant_group", "cache_layout",
             "is_causal", "sinks", "num_layer", "layer_idx", "num_threads", "out"]
NAMES = set(ARGUMENTS) | {"attn_output", "cache", "num_heads", "num_kv_heads", "head_dim",
                          "attn_mask", "k_scale", "v_scale", "cache_mode", "page_size"}


def mutate(value, kind, how, cache):
    if kind == "value":
        return how
    array = np.asarray(value if value is not None else np.ones(3, np.float32))
    if array.ndim == 0:
        array = array.reshape(1)
    if kind == "dtype":
        return array.astype(how)
    if how == "transpose":
        return array.T if array.ndim > 1 else array[::-1][::2]
    if how == "extra_dim":
        return array[None]
    if how == "empty":
        return array.reshape(-1)[:0]
    return cache.reshape(-1)[:array.size].reshape(array.shape)  # memory shared with the cache


def test_random_argument_mutations_raise_named_errors(rng):
    s = PmxStep(rng, "float16", 8)
    for trial in range(300):
        name = ARGUMENTS[rng.integers(len(ARGUMENTS))]
        kind, how = MUTATIONS[rng.integers(len(MUTATIONS))]
        cache, scale = s.cache.copy(), s.scale.copy()
        base = dict(query=s.query, current_key=s.current_key, current_value=s.current_value,
                    **s.index(), decoding_batches=0, max_seqlen=s.max_seqlen,
                    max_kvlen=s.max_kvlen, scale=scale)
        kw = {name: mutate(base.get(name), kind, how, cache)}
        if kind == "shape" and how == "view_of_cache" and name == "scale":
            kw[name] = cache  # a cache tensor as its own scale
        try:
            mhca(s, cache, **{"scale": scale, **kw})
        except (ValueError, TypeError) as e:
            message = str(e)
            assert "\n" not in message, message
            head = re.match(r"^([a-z_]+)(\[[0-9]+\])*: ", message)
            assert head and head.group(1) in NAMES, f"trial {trial}: {name} {how!r}: {message}"
            np.testing.assert_array_equal(cache, s.cache, err_msg=f"{name} {how!r}: {message}")
            np.testing.assert_array_equal(scale, s.scale, err_msg=f"{name} {how!r}: {message}")
