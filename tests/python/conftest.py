# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the Python package's tests: the run's seed, random unified steps over PMX
layout-2 caches (whose K and V planes are dense paged [blocks, block_size, Hkv, D] tensors), an
independent float64 NumPy reference, the library's tolerances, and the `dynattn run` CLI."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

FLOAT = {"float32": np.float32, "float16": np.float16}


def base_seed():
    """The run's base seed: DYNATTN_TEST_SEED, else fresh; printed so that a failure replays."""
    if not hasattr(base_seed, "value"):
        env = os.environ.get("DYNATTN_TEST_SEED")
        base_seed.value = int(env) if env else int.from_bytes(os.urandom(4), "little")
        print(f"base seed {base_seed.value} (DYNATTN_TEST_SEED={base_seed.value} replays)",
              file=sys.stderr)
    return base_seed.value


@pytest.fixture
def rng(request):
    """A generator seeded from the base seed and the test's name."""
    seed = (base_seed() + sum(map(ord, request.node.name)) * 7919) % 2**32
    print(f"{request.node.name}: seed {seed} (base seed {base_seed()})", file=sys.stderr)
    return np.random.default_rng(seed)


def cli_path():
    """The dynattn tool of the build tree (meson passes DYNATTN_CLI), or None."""
    path = os.environ.get("DYNATTN_CLI")
    return path if path and os.path.exists(path) else None


def run_cli(op, inputs, attrs, tmp_path):
    """Runs `dynattn run OP` on `inputs` (name -> array, saved as .npy) and returns its outputs
    (name -> array)."""
    cli = cli_path()
    if cli is None:
        pytest.skip("the dynattn tool was not built (DYNATTN_CLI unset)")
    in_dir, out_dir = tmp_path / "inputs", tmp_path / "outputs"
    in_dir.mkdir(parents=True)
    out_dir.mkdir(parents=True)
    for name, array in inputs.items():
        array = np.asarray(array)  # 0-d stays 0-d (np.ascontiguousarray would make it 1-d)
        np.save(in_dir / f"{name}.npy", array if array.flags.c_contiguous
                else np.ascontiguousarray(array))
    # (bf16 arrays are NumPy uint16 bit patterns, fp8 caches uint8 bytes: .npy carries both.)
    cmd = [cli, "run", op, "--inputs", str(in_dir), "--outputs", str(out_dir)]
    # Attributes: ints, floats (logits_soft_cap, softmax_scale) and names (cache_dtype).
    for name, value in attrs.items():
        text = value if isinstance(value, str) else (
            repr(float(value)) if isinstance(value, float) else str(int(value)))
        cmd += [f"--{name}={text}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)}: {result.stderr}"
    return {p.stem: np.load(p) for p in pathlib.Path(out_dir).glob("*.npy")}


class Step:
    """A random unified step: requests mixing decodes, multi-token decodes and prompt chunks over
    a PMX layout-2 cache (1, 2, MaxT, Hkv, Dc) with scales (1, 2, MaxT, Hkv, D / G)."""

    def __init__(self, rng, dtype="float16", quant_bit=0, quant_group=8, heads=(8, 2), d=64,
                 block_size=16, requests=5, max_context=70, max_query=9):
        self.dtype, self.quant_bit, self.quant_group = dtype, quant_bit, quant_group
        self.hq, self.hkv = heads
        self.d, self.block_size = d, block_size
        ctx = rng.integers(0, max_context, requests)
        qlen = np.where(rng.random(requests) < 0.5, 1, rng.integers(1, max_query + 1, requests))
        self.context_lens = ctx.astype(np.int64)
        self.query_start_loc = np.concatenate([[0], np.cumsum(qlen)]).astype(np.int64)
        self.tokens = int(self.query_start_loc[-1])
        blocks = [-(-int(c + q) // block_size) for c, q in zip(ctx, qlen)]
        self.num_blocks = sum(blocks) + 3
        ids = rng.permutation(self.num_blocks)
        self.block_table = np.zeros((requests, max(blocks)), np.int64)
        used = 0
        for b, n in enumerate(blocks):
            self.block_table[b, :n] = ids[used:used + n]
            used += n
        t = FLOAT[dtype]
        self.query = rng.standard_normal((self.tokens, self.hq, d)).astype(t)
        self.current_key = rng.standard_normal((self.tokens, self.hkv, d)).astype(t)
        self.current_value = (2 * rng.standard_normal((self.tokens, self.hkv, d))).astype(t)
        slots = self.num_blocks * block_size
        if quant_bit == 0:
            self.cache = rng.standard_normal((1, 2, slots, self.hkv, d)).astype(t)
            self.scale = None
        else:
            dc = d if quant_bit == 8 else d // 2
            # int8 codes in [-127, 127]; for int4 any such byte is two valid nibbles
            self.cache = rng.integers(-127, 128, (1, 2, slots, self.hkv, dc)).astype(np.int8)
            self.scale = rng.uniform(0.005, 0.03, (1, 2, slots, self.hkv, d // quant_group))
            self.scale = self.scale.astype(np.float16)

    def slots(self, b, pos):
        """Cache slots of positions `pos` of request `b`."""
        table = self.block_table[b, pos // self.block_size]
        return table * self.block_size + pos % self.block_size

    def cli_inputs(self):
        inputs = dict(query=self.query, current_key=self.current_key,
                      current_value=self.current_value, query_start_loc=self.query_start_loc,
                      context_lens=self.context_lens, block_table=self.block_table,
                      cache=self.cache)
        if self.scale is not None:
            inputs["scale"] = self.scale
        return inputs

    def cli_attrs(self, alibi=False):
        return dict(num_heads=self.hq, num_kv_heads=self.hkv, head_dim=self.d,
                    quant_bit=self.quant_bit, quant_group=self.quant_group, cache_layout=2,
                    block_size=self.block_size, is_alibi=alibi, return_lse=1)

    def paged(self, cache, scale):
        """The paged [blocks, block_size, Hkv, Dc] K and V views of a layout-2 cache (no copy)."""
        def view(t, plane):
            return t[0, plane].reshape(self.num_blocks, self.block_size, self.hkv, -1)
        if scale is None:
            return view(cache, 0), view(cache, 1), None, None
        return view(cache, 0), view(cache, 1), view(scale, 0), view(scale, 1)


def dequantize(cache, scale, quant_bit, quant_group, dtype):
    """Cache contents (..., Dc) as float64 values: T1(T3(q * s)), T1 = `dtype`, T3 the scale's
    dtype (the product q * s is exact in float32)."""
    if quant_bit == 0:
        return cache.astype(np.float64)
    if quant_bit == 4:
        low = (cache.astype(np.int16) << 12 >> 12).astype(np.int8)
        high = (cache.astype(np.int16) >> 4).astype(np.int8)
        cache = np.stack([low, high], axis=-1).reshape(*cache.shape[:-1], -1)
    s = np.repeat(scale.astype(np.float32), quant_group, axis=-1)
    product = (cache.astype(np.float32) * s).astype(scale.dtype)
    return product.astype(FLOAT[dtype]).astype(np.float64)


def reference_unified(step, keys, values):
    """Float64 unified attention: token i of request b attends to positions 0..ctx+i of its
    request, keys/values from the (dequantized) slot-major planes (slots, Hkv, D)."""
    out = np.zeros((step.tokens, step.hq, step.d))
    lse = np.zeros((step.tokens, step.hq))
    vmax = np.zeros(step.tokens)
    group = step.hq // step.hkv
    q = step.query.astype(np.float64)
    for b in range(len(step.context_lens)):
        begin, end = step.query_start_loc[b], step.query_start_loc[b + 1]
        n = step.context_lens[b] + end - begin
        pos = np.arange(n)
        slots = step.slots(b, pos)
        k, v = keys[slots], values[slots]  # (n, Hkv, D)
        for t in range(begin, end):
            p = step.context_lens[b] + t - begin
            vmax[t] = np.abs(v).max() if n else 0
            for h in range(step.hq):
                s = k[:p + 1, h // group] @ q[t, h] / np.sqrt(step.d)
                m = s.max()
                w = np.exp(s - m)
                out[t, h] = w @ v[:p + 1, h // group] / w.sum()
                lse[t, h] = m + np.log(w.sum())
    return out, lse, vmax


def assert_close(out, ref, vmax, dtype, what):
    """The numerics contract (docs/numerics.md): fp32 |out - ref| <= 1e-5 max(1, vmax); fp16 <=
    1e-2 |ref| + 5e-4 max(4, vmax) (vmax per query row, broadcast over heads and elements)."""
    out = np.asarray(out, dtype=np.float64)
    vm = vmax.reshape(-1, *([1] * (ref.ndim - 1)))
    if dtype == "float32":
        tol = 1e-5 * np.maximum(1, vm)
    else:
        tol = 1e-2 * np.abs(ref) + 5e-4 * np.maximum(4, vm)
    err = np.abs(out - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    limit = np.broadcast_to(tol, err.shape)[worst]
    assert np.all(err <= tol), f"{what}: |out - ref| = {err[worst]} > {limit} at {worst}"
