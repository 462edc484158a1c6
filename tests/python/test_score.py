# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Sliding windows, logit soft-caps, softmax scales, attention sinks, bf16 activations and fp8
caches through the Python package: against a float64 torch reference written here (with the
tolerances of docs/numerics.md), bit for bit against the C++ path (`dynattn run`), and the errors
that name the new inputs."""

import numpy as np
import pytest
import torch

import dynattn
from conftest import Step, assert_close, run_cli

FP8 = {"fp8_e4m3": (4, 3, 7), "fp8_e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias


def fp8_to_float(bytes_, fmt):
    """float64 values of fp8 bytes (NaN for NaN codes, +-inf for e5m2's infinities)."""
    e_bits, m_bits, bias = FP8[fmt]
    b = bytes_.astype(np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    exp = (b >> m_bits) & ((1 << e_bits) - 1)
    man = (b & ((1 << m_bits) - 1)).astype(np.float64)
    value = np.where(exp == 0, man / 2**m_bits * 2.0**(1 - bias),
                     (1 + man / 2**m_bits) * 2.0**(exp - bias))
    if fmt == "fp8_e4m3":
        value = np.where((b & 0x7F) == 0x7F, np.nan, value)
    else:
        top = exp == (1 << e_bits) - 1
        value = np.where(top & (man == 0), np.inf, np.where(top, np.nan, value))
    return sign * value


def random_fp8(rng, shape, fmt):
    """Random fp8 bytes that are finite numbers of magnitude <= 8."""
    e_bits, m_bits, bias = FP8[fmt]
    exp = rng.integers(bias - 4, bias + 4, shape)
    man = rng.integers(0, 1 << m_bits, shape)
    sign = rng.integers(0, 2, shape)
    return (sign << 7 | exp << m_bits | man).astype(np.uint8)


def bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_float(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def reference_rows(q, k, v, positions, kvlen, causal, window, cap, scale, sink):
    """Float64 attention of query rows at `positions` over keys 0..kvlen-1 of one head:
    s = scale q.k, soft-capped, window and causal limits, one exp(sink) in the denominator.
    Returns (out, lse)."""
    q, k, v = (torch.as_tensor(np.asarray(a, np.float64)) for a in (q, k, v))
    s = scale * (q @ k.T)
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    j = torch.arange(kvlen)[None, :]
    i = torch.as_tensor(positions)[:, None]
    visible = torch.ones_like(s, dtype=torch.bool)
    if causal or window >= 0:
        visible &= j <= i
    if window >= 0:
        visible &= j >= i - window
    s = torch.where(visible, s, torch.tensor(-np.inf, dtype=torch.float64))
    if sink is not None:
        s = torch.cat([s, torch.full((s.shape[0], 1), float(sink), dtype=torch.float64)], 1)
        v = torch.cat([v, torch.zeros(1, v.shape[1], dtype=torch.float64)], 0)
    lse = torch.logsumexp(s, 1)
    w = torch.exp(s - lse[:, None])
    w = torch.nan_to_num(w, nan=0.0)  # rows with no visible key and no sink
    return (w @ v).numpy(), lse.numpy()


def reference_mha(query, key, value, seqstarts, kvstarts, decoding, window, cap, scale, sinks):
    """Float64 MultiHeadAttention over packed (float) arrays; rows sit bottom-right."""
    t, hq, d = query.shape
    group = hq // key.shape[1]
    scale = scale if scale > 0 else 1 / np.sqrt(d)
    out = np.zeros((t, hq, d))
    vmax = np.zeros(t)
    for b in range(len(seqstarts) - 1):
        q0, q1, k0, k1 = seqstarts[b], seqstarts[b + 1], kvstarts[b], kvstarts[b + 1]
        kvlen, seqlen = k1 - k0, q1 - q0
        positions = np.arange(kvlen - seqlen, kvlen)
        vmax[q0:q1] = np.abs(value[k0:k1]).max() if kvlen else 0
        for h in range(hq):
            out[q0:q1, h], _ = reference_rows(
                query[q0:q1, h], key[k0:k1, h // group], value[k0:k1, h // group], positions,
                kvlen, b >= decoding, window, cap, scale,
                None if sinks is None else sinks[h])
    return out, vmax


def packed_batch(rng, heads=(4, 2), d=32):
    """A decode, then two prompts after cached contexts: seqstarts, kvstarts, q, k, v (fp32)."""
    seqlen = np.array([1, 5, 3])
    kvlen = seqlen + np.array([9, 4, 0])
    seqstarts = np.concatenate([[0], np.cumsum(seqlen)]).astype(np.int64)
    kvstarts = np.concatenate([[0], np.cumsum(kvlen)]).astype(np.int64)
    hq, hkv = heads
    q = rng.standard_normal((seqstarts[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((kvstarts[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((kvstarts[-1], hkv, d)).astype(np.float32)
    return seqstarts, kvstarts, q, k, v


def mha_index(seqstarts, kvstarts):
    return dict(seqstarts=seqstarts, kvstarts=kvstarts, decoding_batches=1,
                max_seqlen=int(np.diff(seqstarts).max()), max_kvlen=int(np.diff(kvstarts).max()))


SCORES = [  # (window_left, logits_soft_cap, softmax_scale, sinks)
    (-1, 0.0, 0.0, False),
    (3, 0.0, 0.0, False),
    (-1, 4.0, 0.0, False),
    (-1, 0.0, 0.3, True),
    (2, 10.0, 0.25, True),
    (0, 1.5, 0.0, True),  # window 0: each row sees its own key only
]


@pytest.mark.parametrize("window,cap,scale,with_sinks", SCORES)
def test_mha_score_attributes_match_float64_torch_and_cli(rng, tmp_path, window, cap, scale,
                                                          with_sinks):
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    sinks = rng.uniform(-1, 3, q.shape[1]).astype(np.float32) if with_sinks else None
    index = mha_index(seqstarts, kvstarts)
    out = dynattn.multi_head_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), **index,
        window_left=window, logits_soft_cap=cap, softmax_scale=scale,
        sinks=None if sinks is None else torch.from_numpy(sinks))
    ref, vmax = reference_mha(q, k, v, seqstarts, kvstarts, 1, window, cap, scale, sinks)
    assert_close(out.numpy(), ref, vmax, "float32", "attn_output")

    # The same call through the tool: the same bits.
    inputs = dict(query=q, key=k, value=v, **{n: np.asarray(x, np.int64)
                                             for n, x in index.items()})
    if sinks is not None:
        inputs["sinks"] = sinks
    expected = run_cli("multi_head_attention", inputs,
                       dict(num_heads=4, num_kv_heads=2, head_dim=32, window_left=window,
                            logits_soft_cap=cap, softmax_scale=scale), tmp_path)
    np.testing.assert_array_equal(out.numpy().view(np.uint32),
                                  expected["attn_output"].view(np.uint32))

    # A plan made with the same keywords runs the same bits.
    plan = dynattn.plan_multi_head_attention(
        q, k, v, **index, window_left=window, logits_soft_cap=cap, softmax_scale=scale,
        sinks=sinks)
    np.testing.assert_array_equal(plan.run(q, k, v).view(np.uint32), out.numpy().view(np.uint32))


def test_one_plan_runs_layers_with_their_own_score_attributes(rng):
    """A plan made without window, cap, scale or sinks runs six layers that each have their own
    (Plan.run keywords): the bits of the one-shot call with those attributes, float64-close; a
    keyword left None keeps the plan's."""
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    index = mha_index(seqstarts, kvstarts)
    plan = dynattn.plan_multi_head_attention(q, k, v, **index)
    for layer, (window, cap, scale, with_sinks) in enumerate(SCORES):
        sinks = rng.uniform(-1, 3, q.shape[1]).astype(np.float32) if with_sinks else None
        q = -q if layer % 2 else q  # each layer its own activations
        score = dict(window_left=window, logits_soft_cap=cap, softmax_scale=scale)
        got = plan.run(q, k, v, **score, sinks=sinks)
        one_shot = dynattn.multi_head_attention(q, k, v, **index, **score, sinks=sinks)
        np.testing.assert_array_equal(got.view(np.uint32), one_shot.view(np.uint32))
        ref, vmax = reference_mha(q, k, v, seqstarts, kvstarts, 1, window, cap, scale, sinks)
        assert_close(got, ref, vmax, "float32", f"layer {layer}")
    # Only the window given: cap and scale stay the plan's (off, 1/sqrt(D)).
    np.testing.assert_array_equal(
        plan.run(q, k, v, window_left=2).view(np.uint32),
        dynattn.multi_head_attention(q, k, v, **index, window_left=2).view(np.uint32))
    with pytest.raises(ValueError, match="window_left"):
        plan.run(q, k, v, window_left=-5)
    with pytest.raises(ValueError, match="sinks"):
        plan.run(q, k, v, sinks=np.zeros(3, np.float32))


def test_unified_plan_runs_layers_with_their_own_windows_and_sinks(rng):
    """gpt-oss's pattern on one unified plan: windowed layers with sinks between full ones."""
    step = fp8_step(rng, "fp8_e5m2")
    index = (step.query_start_loc, step.context_lens, step.block_table)

    def blocks():
        return dynattn.pmx_block_cache(step.cache.copy(), num_kv_heads=step.hkv,
                                       head_dim=step.d, block_size=step.block_size,
                                       cache_layout=2, cache_dtype="fp8_e5m2")

    plan = dynattn.plan_unified_attention(step.query, step.current_key, step.current_value,
                                          *index, blocks())
    for layer in range(6):
        score = dict(window_left=(3 if layer % 2 == 0 else -1),
                     sinks=rng.uniform(-1, 2, step.hq).astype(np.float32))
        got = plan.run(step.query, step.current_key, step.current_value, blocks(), **score)
        one_shot = dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                             *index, blocks(), **score)
        np.testing.assert_array_equal(got.view(np.uint32), one_shot.view(np.uint32))


def test_sinks_only_scale_the_denominator(rng):
    """With a sink s_h, each output is the sinkless one times Z / (Z + e^s_h), Z = sum_j e^s_j."""
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    index = mha_index(seqstarts, kvstarts)
    sinks = np.full(q.shape[1], 0.5, np.float32)
    plain = dynattn.multi_head_attention(q, k, v, **index).astype(np.float64)
    sunk = dynattn.multi_head_attention(q, k, v, **index, sinks=sinks).astype(np.float64)
    ratio = sunk / np.where(plain == 0, 1, plain)
    per_row = ratio[..., :1]
    assert np.all((per_row > 0) & (per_row < 1))
    np.testing.assert_allclose(ratio, np.broadcast_to(per_row, ratio.shape), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("kind", ["torch", "numpy", "buffer"])
def test_bf16_activations(rng, tmp_path, kind):
    """torch.bfloat16 through DLPack, NumPy uint16 bit patterns (DLPack) and uint16 buffers
    (the buffer protocol, format 'H') give the tool's bits, and attention within bf16 rounding
    of the float64 reference."""
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    qb, kb, vb = bf16_bits(q), bf16_bits(k), bf16_bits(v)
    index = mha_index(seqstarts, kvstarts)
    if kind == "torch":
        args = [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (qb, kb, vb)]
    elif kind == "numpy":
        args = [qb, kb, vb]
    else:
        args = [memoryview(x) for x in (qb, kb, vb)]
    out = dynattn.multi_head_attention(*args, **index, window_left=4, logits_soft_cap=8.0)
    if kind == "torch":
        assert out.dtype == torch.bfloat16
        out_bits = out.view(torch.int16).numpy().view(np.uint16)
    else:
        assert out.dtype == np.uint16
        out_bits = out
    ref, vmax = reference_mha(bf16_to_float(qb), bf16_to_float(kb), bf16_to_float(vb),
                              seqstarts, kvstarts, 1, 4, 8.0, 0.0, None)
    # bf16 keeps 8 significant bits: the output's own rounding is 2^-9 relative.
    err = np.abs(bf16_to_float(out_bits) - ref)
    assert np.all(err <= 2**-8 * np.abs(ref) + 1e-3 * np.maximum(1, vmax)[:, None, None])
    inputs = dict(query=qb, key=kb, value=vb,
                  **{n: np.asarray(x, np.int64) for n, x in index.items()})
    expected = run_cli("multi_head_attention", inputs,
                       dict(num_heads=4, num_kv_heads=2, head_dim=32, window_left=4,
                            logits_soft_cap=8.0), tmp_path)
    assert expected["attn_output"].dtype == np.uint16
    np.testing.assert_array_equal(out_bits, expected["attn_output"])


def fp8_step(rng, fmt):
    """A unified step (fp32 activations) over a PMX layout-2 fp8 cache of random finite bytes."""
    step = Step(rng, "float32", heads=(4, 2), d=32, block_size=8)
    step.cache = random_fp8(rng, step.cache.shape, fmt)
    return step


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_unified_fp8_cache_with_every_new_input(rng, tmp_path, fmt):
    step = fp8_step(rng, fmt)
    k_scale, v_scale = 0.125, 0.5
    sinks = rng.uniform(-1, 2, step.hq).astype(np.float32)
    score = dict(window_left=6, logits_soft_cap=12.0, softmax_scale=0.2)
    cache = torch.from_numpy(step.cache.copy())
    block_cache = dynattn.pmx_block_cache(cache, num_kv_heads=step.hkv, head_dim=step.d,
                                          block_size=step.block_size, cache_layout=2,
                                          cache_dtype=fmt)
    assert block_cache.elem == {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}[fmt]
    out, lse = dynattn.unified_attention(
        torch.from_numpy(step.query), torch.from_numpy(step.current_key),
        torch.from_numpy(step.current_value), step.query_start_loc, step.context_lens,
        step.block_table, block_cache, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
        return_lse=True, **score)

    # The tool: same output, lse and cache bytes.
    inputs = step.cli_inputs()
    inputs.update(sinks=sinks, k_scale=np.float32(k_scale), v_scale=np.float32(v_scale))
    attrs = step.cli_attrs()
    attrs.update(quant_bit=0, cache_dtype=fmt, **score)
    expected = run_cli("unified_attention", inputs, attrs, tmp_path)
    np.testing.assert_array_equal(cache.numpy(), expected["cache"])
    np.testing.assert_array_equal(out.numpy().view(np.uint32),
                                  expected["attn_output"].view(np.uint32))
    np.testing.assert_array_equal(lse.numpy().view(np.uint32), expected["lse"].view(np.uint32))

    # The fresh tokens were stored as fp8_satfinite_rne(x / scale).
    c = cache.numpy()
    t = np.arange(step.tokens)
    b = np.searchsorted(step.query_start_loc, t, side="right") - 1
    pos = step.context_lens[b] + t - step.query_start_loc[b]
    slots = np.array([step.slots(bb, pp) for bb, pp in zip(b, pos)])
    stored = fp8_to_float(c[0, 0][slots], fmt)
    wanted = step.current_key.astype(np.float64) / k_scale
    top = 448.0 if fmt == "fp8_e4m3" else 57344.0
    ulp = 2.0**(np.floor(np.log2(np.maximum(np.abs(wanted), 2.0**-6))) -
                (3 if fmt == "fp8_e4m3" else 2))
    assert np.all(np.abs(stored - np.clip(wanted, -top, top)) <= ulp / 2 + 1e-12)

    # Attention over the decoded cache, against float64 torch.
    keys = fp8_to_float(c[0, 0], fmt) * k_scale
    values = fp8_to_float(c[0, 1], fmt) * v_scale
    ref = np.zeros((step.tokens, step.hq, step.d))
    ref_lse = np.zeros((step.tokens, step.hq))
    vmax = np.zeros(step.tokens)
    group = step.hq // step.hkv
    for bb in range(len(step.context_lens)):
        q0, q1 = step.query_start_loc[bb], step.query_start_loc[bb + 1]
        kvlen = step.context_lens[bb] + q1 - q0
        kv_slots = step.slots(bb, np.arange(kvlen))
        vmax[q0:q1] = np.abs(values[kv_slots]).max()
        positions = np.arange(step.context_lens[bb], kvlen)
        for h in range(step.hq):
            ref[q0:q1, h], ref_lse[q0:q1, h] = reference_rows(
                step.query[q0:q1, h], keys[kv_slots, h // group], values[kv_slots, h // group],
                positions, kvlen, True, 6, 12.0, 0.2, sinks[h])
    assert_close(out.numpy(), ref, vmax, "float32", "attn_output")
    np.testing.assert_allclose(lse.numpy(), ref_lse, rtol=1e-5, atol=1e-4)


def test_unified_plan_keeps_its_sinks_and_scales(rng):
    """A plan made with sinks, k_scale and v_scale runs every layer with them, as the one-shot
    call does, bit for bit."""
    step = fp8_step(rng, "fp8_e4m3")
    extra = dict(sinks=rng.uniform(-1, 2, step.hq).astype(np.float32), k_scale=0.25,
                 v_scale=0.75, window_left=5, logits_soft_cap=20.0)
    caches = [step.cache.copy(), step.cache.copy()]
    blocks = [dynattn.pmx_block_cache(c, num_kv_heads=step.hkv, head_dim=step.d,
                                      block_size=step.block_size, cache_layout=2,
                                      cache_dtype="fp8_e4m3") for c in caches]
    index = (step.query_start_loc, step.context_lens, step.block_table)
    one_shot = dynattn.unified_attention(step.query, step.current_key, step.current_value, *index,
                                         blocks[0], **extra)
    plan = dynattn.plan_unified_attention(step.query, step.current_key, step.current_value,
                                          *index, blocks[1], **extra)
    planned = plan.run(step.query, step.current_key, step.current_value, blocks[1])
    np.testing.assert_array_equal(planned.view(np.uint32), one_shot.view(np.uint32))
    np.testing.assert_array_equal(caches[0], caches[1])
    # Without the sinks the result differs: they were not dropped on the way.
    plain = dynattn.unified_attention(step.query, step.current_key, step.current_value, *index,
                                      dynattn.pmx_block_cache(
                                          step.cache.copy(), num_kv_heads=step.hkv,
                                          head_dim=step.d, block_size=step.block_size,
                                          cache_layout=2, cache_dtype="fp8_e4m3"),
                                      **dict(extra, sinks=None))
    assert not np.array_equal(plain, one_shot)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_mhca_and_kvc_over_fp8_pmx_caches_match_cli(rng, tmp_path, fmt):
    seqstarts, kvstarts, q, _, _ = packed_batch(rng)
    hkv, d = 2, 32
    kvlen = np.diff(kvstarts)
    seqlen = np.diff(seqstarts)
    start_pos = (kvlen - seqlen).astype(np.int64)
    cachestarts = np.array([0, 32, 64], np.int64)
    ck = rng.standard_normal((seqstarts[-1], hkv, d)).astype(np.float32)
    cv = rng.standard_normal((seqstarts[-1], hkv, d)).astype(np.float32)
    cache0 = random_fp8(rng, (96, 1, 2, hkv, d), fmt)
    sinks = rng.uniform(-1, 2, 4).astype(np.float32)
    index = dict(seqstarts=seqstarts, kvstarts=kvstarts, cachestarts=cachestarts,
                 start_pos=start_pos, decoding_batches=1, max_seqlen=int(seqlen.max()),
                 max_kvlen=int(kvlen.max()))
    cache = cache0.copy()
    out = dynattn.multi_head_cache_attention(q, ck, cv, cache=cache, **index, cache_dtype=fmt,
                                             k_scale=0.5, v_scale=0.25, sinks=sinks,
                                             window_left=4, logits_soft_cap=6.0)
    inputs = dict(query=q, current_key=ck, current_value=cv, cache=cache0, sinks=sinks,
                  k_scale=np.float32(0.5), v_scale=np.float32(0.25),
                  **{n: np.asarray(x, np.int64) for n, x in index.items()})
    expected = run_cli("multi_head_cache_attention", inputs,
                       dict(num_heads=4, num_kv_heads=hkv, head_dim=d, cache_dtype=fmt,
                            window_left=4, logits_soft_cap=6.0), tmp_path / "mhca")
    np.testing.assert_array_equal(out.view(np.uint32), expected["attn_output"].view(np.uint32))
    np.testing.assert_array_equal(cache, expected["cache"])

    # key_value_cache (one-shot and planned) over the same fp8 cache: the tool's bytes.
    kvc_index = {n: index[n] for n in ("seqstarts", "kvstarts", "cachestarts", "start_pos",
                                        "max_seqlen", "max_kvlen")}
    cache = cache0.copy()
    key, value = dynattn.key_value_cache(ck, cv, cache=cache, **kvc_index, cache_dtype=fmt,
                                         k_scale=0.5, v_scale=0.25)
    kvc_inputs = dict(current_key=ck, current_value=cv, cache=cache0, k_scale=np.float32(0.5),
                      v_scale=np.float32(0.25),
                      **{n: np.asarray(x, np.int64) for n, x in kvc_index.items()})
    expected = run_cli("key_value_cache", kvc_inputs, dict(cache_dtype=fmt), tmp_path / "kvc")
    np.testing.assert_array_equal(key, expected["key"])
    np.testing.assert_array_equal(value, expected["value"])
    np.testing.assert_array_equal(cache, expected["cache"])
    planned_cache = cache0.copy()
    plan = dynattn.plan_key_value_cache(ck, cv, cache=planned_cache, **kvc_index,
                                        cache_dtype=fmt, k_scale=0.5, v_scale=0.25)
    pkey, pvalue = plan.run(ck, cv, planned_cache)
    np.testing.assert_array_equal(pkey, key)
    np.testing.assert_array_equal(planned_cache, cache)


def test_paged_fp8_and_bf16_block_caches(rng):
    """paged_block_cache over uint8 (with cache_dtype) and bfloat16 pages: the same bits as the
    PMX view of the same memory."""
    for fmt in ("fp8_e4m3", "bf16"):
        step = Step(rng, "float32", heads=(4, 2), d=32, block_size=8)
        if fmt == "bf16":
            step.cache = bf16_bits(step.cache)
            step.query, step.current_key, step.current_value = (
                bf16_bits(x) for x in (step.query, step.current_key, step.current_value))
            kw = {}
        else:
            step.cache = random_fp8(rng, step.cache.shape, fmt)
            kw = dict(cache_dtype=fmt, k_scale=0.5, v_scale=2.0)
        index = (step.query_start_loc, step.context_lens, step.block_table)
        outs = []
        for maker in ("paged", "pmx"):
            cache = step.cache.copy()
            if maker == "paged":
                k, v, _, _ = step.paged(cache, None)
                block_cache = dynattn.paged_block_cache(k, v, **kw)
            else:
                block_cache = dynattn.pmx_block_cache(
                    cache, num_kv_heads=step.hkv, head_dim=step.d, block_size=step.block_size,
                    cache_layout=2, **kw)
            if fmt != "bf16":
                assert (block_cache.k_scale, block_cache.v_scale) == (0.5, 2.0)
            outs.append(dynattn.unified_attention(step.query, step.current_key,
                                                  step.current_value, *index, block_cache,
                                                  window_left=7))
        np.testing.assert_array_equal(outs[0], outs[1])


def test_new_inputs_errors_name_them(rng):
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    index = mha_index(seqstarts, kvstarts)
    out = np.full_like(q, 7.0)
    for kwargs, name in [(dict(window_left=-2), "window_left"),
                         (dict(logits_soft_cap=-1.0), "logits_soft_cap"),
                         (dict(softmax_scale=float("nan")), "softmax_scale"),
                         (dict(sinks=np.zeros(3, np.float32)), "sinks"),
                         (dict(sinks=np.array([0, np.inf, 0, 0], np.float32)), "sinks")]:
        with pytest.raises(ValueError, match=name):
            dynattn.multi_head_attention(q, k, v, **index, out=out, **kwargs)
        assert np.all(out == 7.0)  # nothing written
    step = fp8_step(rng, "fp8_e5m2")
    with pytest.raises(ValueError, match="cache_dtype"):
        dynattn.pmx_block_cache(step.cache, num_kv_heads=2, head_dim=32, block_size=8,
                                cache_layout=2, cache_dtype="fp8_e3m4")
    with pytest.raises(ValueError, match="uint8"):
        dynattn.pmx_block_cache(step.cache, num_kv_heads=2, head_dim=32, block_size=8,
                                cache_layout=2)
    with pytest.raises(ValueError, match="k_scale"):
        dynattn.pmx_block_cache(step.cache.view(np.int8), num_kv_heads=2, head_dim=32,
                                block_size=8, cache_layout=2, k_scale=2.0)
    block_cache = dynattn.pmx_block_cache(step.cache, num_kv_heads=2, head_dim=32, block_size=8,
                                          cache_layout=2, cache_dtype="fp8_e5m2")
    with pytest.raises(ValueError, match="k_scale"):
        dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                  step.query_start_loc, step.context_lens, step.block_table,
                                  block_cache, k_scale=0.0)
    with pytest.raises(ValueError, match="query"):  # uint8 is for fp8 caches only
        dynattn.multi_head_attention(q.view(np.uint8), k, v, **index)


def test_nan_and_inf_reach_the_rows_that_see_them_as_in_torch():
    """A NaN key, an infinite query element and a NaN value give NaN exactly in the rows whose
    float64 torch softmax is NaN; rows that do not see them (causality) stay finite."""
    rng = np.random.default_rng(29)
    seqstarts, kvstarts, q, k, v = packed_batch(rng)
    k[kvstarts[1] + 6, 0, 5] = np.nan  # request 1's key 6: its last 3 rows see it (head 0 and 1)
    q[0, 3, 2] = np.inf                # the decode row, head 3: scores +-inf, inf - inf
    v[kvstarts[2] + 1, 1, 0] = np.nan  # request 2's value 1: rows 1 and 2 of heads 2, 3
    out = dynattn.multi_head_attention(torch.from_numpy(q), torch.from_numpy(k),
                                       torch.from_numpy(v), **mha_index(seqstarts, kvstarts))
    want = np.zeros(out.shape, bool)
    group = q.shape[1] // k.shape[1]
    for b in range(3):
        q0, q1, k0, k1 = seqstarts[b], seqstarts[b + 1], kvstarts[b], kvstarts[b + 1]
        i = torch.arange(k1 - k0 - (q1 - q0), k1 - k0)[:, None]
        j = torch.arange(k1 - k0)[None, :]
        hidden = (j > i) if b >= 1 else torch.zeros(1, k1 - k0, dtype=torch.bool)
        for h in range(q.shape[1]):
            kk = torch.from_numpy(k[k0:k1, h // group].astype(np.float64))
            vv = torch.from_numpy(v[k0:k1, h // group].astype(np.float64))
            s = torch.from_numpy(q[q0:q1, h].astype(np.float64)) @ kk.T / np.sqrt(q.shape[2])
            w = torch.softmax(s.masked_fill(hidden, -np.inf), 1)
            # A hidden key's value is never read (torch would form 0 * NaN there).
            rows = torch.stack([(w[r, ~hidden[r]] @ vv[~hidden[r]]) for r in range(q1 - q0)])
            want[q0:q1, h] = torch.isnan(rows).numpy()
    assert want.any() and not want.all()
    np.testing.assert_array_equal(np.isnan(out), want)
