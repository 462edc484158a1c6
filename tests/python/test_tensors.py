# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Tensors cross into the library without copies (DLPack, buffer protocol), errors are
ValueErrors naming the input that leave every output untouched, and the GIL is released while
the kernels run."""

import ctypes
import threading
import time

import numpy as np
import pytest
import torch

import dynattn
from conftest import Step


def data_ptr(t):
    return t.data_ptr() if isinstance(t, torch.Tensor) else t.__array_interface__["data"][0]


def test_version_and_target():
    assert isinstance(dynattn.__version__, str) and dynattn.__version__.count(".") == 2
    assert isinstance(dynattn.cpu_target(), str) and dynattn.cpu_target()
    assert dynattn.Context(num_threads=1).num_threads == 1
    assert dynattn.Context().num_threads >= 1


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_outputs_and_cache_written_in_place(rng, kind):
    step = Step(rng, "float16", 0, 8)
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    cache = wrap(step.cache.copy())
    k, v, _, _ = step.paged(cache, None)
    block_cache = dynattn.paged_block_cache(k, v)
    out = wrap(np.full((step.tokens, step.hq, step.d), np.nan, np.float16))
    lse = wrap(np.full((step.tokens, step.hq), np.nan, np.float32))
    pointers = (data_ptr(out), data_ptr(lse), data_ptr(cache))
    got = dynattn.unified_attention(wrap(step.query), wrap(step.current_key),
                                    wrap(step.current_value), step.query_start_loc,
                                    step.context_lens, step.block_table, block_cache, out=out,
                                    lse=lse)
    assert got is out and pointers == (data_ptr(out), data_ptr(lse), data_ptr(cache))
    assert not np.isnan(np.asarray(out)).any() and not np.isnan(np.asarray(lse)).any()
    assert not np.array_equal(np.asarray(cache), step.cache)  # the fresh tokens landed in place
    # a plan's run writes into the caller's tensors too
    plan = dynattn.plan_unified_attention(wrap(step.query), wrap(step.current_key),
                                          wrap(step.current_value), step.query_start_loc,
                                          step.context_lens, step.block_table, block_cache)
    out2 = wrap(np.zeros((step.tokens, step.hq, step.d), np.float16))
    assert plan.run(wrap(step.query), wrap(step.current_key), wrap(step.current_value),
                    block_cache, out=out2) is out2
    np.testing.assert_array_equal(np.asarray(out2).view(np.uint16),
                                  np.asarray(out).view(np.uint16))


def test_block_cache_keeps_its_tensors_alive(rng):
    step = Step(rng, "float32", 0, 8)
    cache = torch.from_numpy(step.cache.copy())
    block_cache = dynattn.paged_block_cache(*step.paged(cache, None)[:2])
    del cache  # only the BlockCache holds the memory now
    out = dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                    step.query_start_loc, step.context_lens, step.block_table,
                                    block_cache)
    assert np.isfinite(out).all()
    assert block_cache.num_blocks == step.num_blocks and block_cache.block_size == 16
    assert block_cache.elem == "float32" and block_cache.device == "CPU"


def test_readonly_numpy_inputs_use_the_buffer_protocol(rng):
    step = Step(rng, "float16", 0, 8)
    for a in (step.query, step.current_key, step.current_value):
        a.flags.writeable = False  # NumPy refuses DLPack export of read-only arrays
    block_cache = dynattn.paged_block_cache(*step.paged(step.cache, None)[:2])
    out = dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                    step.query_start_loc, step.context_lens, step.block_table,
                                    block_cache)
    assert out.shape == step.query.shape
    readonly = np.zeros((step.tokens, step.hq, step.d), np.float16)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="attn_output: must be a writable buffer"):
        dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                  step.query_start_loc, step.context_lens, step.block_table,
                                  block_cache, out=readonly)


def poisoned_call(step, kind, **changes):
    """Calls unified_attention with `changes`, expecting ValueError; returns its message after
    checking that the poisoned outputs and the cache were left byte for byte untouched."""
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    cache = wrap(step.cache.copy())
    block_cache = dynattn.paged_block_cache(*step.paged(cache, None)[:2])
    out = wrap(np.full((step.tokens, step.hq, step.d), np.nan, np.float16))
    lse = wrap(np.full((step.tokens, step.hq), -7.0, np.float32))
    args = dict(query=wrap(step.query), current_key=wrap(step.current_key),
                current_value=wrap(step.current_value), query_start_loc=step.query_start_loc,
                context_lens=step.context_lens, block_table=step.block_table)
    args.update(changes)
    with pytest.raises(ValueError) as error:
        dynattn.unified_attention(*args.values(), block_cache, out=out, lse=lse)
    assert np.isnan(np.asarray(out)).all() and (np.asarray(lse) == -7.0).all()
    np.testing.assert_array_equal(np.asarray(cache), step.cache)
    return str(error.value)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_errors_name_the_input_and_write_nothing(rng, kind):
    step = Step(rng, "float16", 0, 8, requests=3)
    bad_qsl = step.query_start_loc.copy()
    bad_qsl[1], bad_qsl[2] = bad_qsl[2], bad_qsl[1] - 1
    assert poisoned_call(step, kind, query_start_loc=bad_qsl).startswith("query_start_loc")
    bad_table = step.block_table.copy()
    bad_table[0, 0] = step.num_blocks  # out of range
    assert poisoned_call(step, kind, block_table=bad_table).startswith("block_table")
    wrap = torch.from_numpy if kind == "torch" else (lambda a: a)
    strided = wrap(np.repeat(step.query, 2, axis=2))[:, :, ::2]  # not dense
    assert "query: must be dense row-major" in poisoned_call(step, kind, query=strided)
    f64 = wrap(step.current_key.astype(np.float64))
    assert "current_key: dtype float64" in poisoned_call(step, kind, current_key=f64) or \
        "current_key: buffer format" in poisoned_call(step, kind, current_key=f64)
    assert "query: must have rank 3" in poisoned_call(step, kind, query=wrap(step.query[0]))
    with pytest.raises(ValueError, match="block_table: must be a tensor"):
        dynattn.unified_attention(step.query, step.current_key, step.current_value,
                                  step.query_start_loc, step.context_lens, "x",
                                  dynattn.paged_block_cache(*step.paged(step.cache, None)[:2]))


def test_cache_errors_name_the_tensor(rng):
    step = Step(rng, "float16", 8, 8)
    k, v, ks, vs = step.paged(step.cache, step.scale)
    with pytest.raises(ValueError, match="key_scale|scale"):
        dynattn.paged_block_cache(k, v, quant_bit=8)
    with pytest.raises(ValueError, match="layout"):
        dynattn.paged_block_cache(k, v, ks, vs, layout="XYZ", quant_bit=8)
    with pytest.raises(ValueError, match="value"):
        dynattn.paged_block_cache(k, v[:, :, :, :-1], ks, vs, quant_bit=8)
    torch_k = torch.from_numpy(np.ascontiguousarray(k)).float().requires_grad_()
    with pytest.raises(ValueError, match="key"):
        dynattn.paged_block_cache(torch_k, torch_k)


def test_gil_is_released_while_the_kernels_run(rng):
    step = Step(rng, "float32", 0, 8, heads=(8, 8), d=64, requests=2)
    step.context_lens = np.array([4000, 4000])  # two 500-token prompt chunks: about 0.3 s
    step.query_start_loc = np.array([0, 500, 1000])
    step.tokens = 1000
    step.query = rng.standard_normal((step.tokens, 8, 64)).astype(np.float32)
    step.current_key = step.query.copy()
    step.current_value = step.query.copy()
    need = -(-(step.context_lens + 500) // 16)
    step.num_blocks = int(need.sum())
    step.block_table = np.arange(step.num_blocks).reshape(2, -1)
    kc = np.zeros((step.num_blocks, 16, 8, 64), np.float32)
    block_cache = dynattn.paged_block_cache(kc, kc.copy())
    context = dynattn.Context(num_threads=1)  # leaves the other core to the main thread
    plan = dynattn.plan_unified_attention(step.query, step.current_key, step.current_value,
                                          step.query_start_loc, step.context_lens,
                                          step.block_table, block_cache)
    out = np.empty_like(step.query)
    times = {}

    def work():
        times["start"] = time.monotonic()
        plan.run(step.query, step.current_key, step.current_value, block_cache, out=out,
                 context=context)
        times["end"] = time.monotonic()

    thread = threading.Thread(target=work)
    samples = []
    thread.start()
    while thread.is_alive():
        for _ in range(100):
            pass
        samples.append(time.monotonic())
    thread.join()
    duration = times["end"] - times["start"]
    inside = [t for t in samples if times["start"] <= t <= times["end"]]
    gap = max(np.diff([times["start"]] + inside + [times["end"]]))
    print(f"call {duration:.3f} s; the main thread ran {len(inside)} times meanwhile, its "
          f"longest pause {gap:.3f} s")
    assert duration > 0.1, "the call was too short to tell"
    # Holding the GIL would stop the main thread for the whole kernel run.
    assert gap < duration / 4, "the main thread did not run while the kernels ran"


class FakeDlpack:
    """A DLPack producer written with ctypes: any device and dtype over a NumPy array's memory,
    counting the deleter calls (the consumer must call it exactly once)."""

    class Device(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class Tensor(ctypes.Structure):
        pass

    DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    deleted = 0

    def __init__(self, array, device_type=1, code=None, bits=None):
        self.array = array
        self.shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        dt = array.dtype
        code = code if code is not None else {"f": 2, "i": 0, "u": 1}[dt.kind]
        bits = bits if bits is not None else dt.itemsize * 8
        self.managed = FakeDlpack.Tensor(
            array.ctypes.data, FakeDlpack.Device(device_type, 0), array.ndim,
            FakeDlpack.DType(code, bits, 1), self.shape, None, 0, None,
            FakeDlpack.DELETER(FakeDlpack._delete))
        self.deleter = self.managed.deleter

    @staticmethod
    def _delete(_):
        FakeDlpack.deleted += 1

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


FakeDlpack.Tensor._fields_ = [
    ("data", ctypes.c_void_p), ("device", FakeDlpack.Device), ("ndim", ctypes.c_int32),
    ("dtype", FakeDlpack.DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ("manager_ctx", ctypes.c_void_p), ("deleter", FakeDlpack.DELETER)]


def test_dlpack_devices_dtypes_and_deleters(rng):
    step = Step(rng, "float16", 0, 8)
    block_cache = dynattn.paged_block_cache(*step.paged(step.cache, None)[:2])
    index = (step.query_start_loc, step.context_lens, step.block_table)
    before = FakeDlpack.deleted
    out = dynattn.unified_attention(FakeDlpack(step.query), FakeDlpack(step.current_key),
                                    step.current_value, *index, block_cache,
                                    out=FakeDlpack(np.zeros_like(step.query)))
    assert FakeDlpack.deleted == before + 3  # every exported tensor released once
    assert np.asarray(out.array).any()  # written through the DLPack pointer
    # A CUDA tensor (device type 2) goes to the CUDA backend: beside CPU tensors it is refused
    # by name before anything runs, with or without a GPU.
    with pytest.raises(ValueError, match="CUDA|device") as error:
        dynattn.unified_attention(FakeDlpack(step.query, device_type=2), step.current_key,
                                  step.current_value, *index, block_cache,
                                  out=np.empty_like(step.query))
    print(error.value)
    # bfloat16 (code 4) is taken, float64 is not; a bf16 query beside fp16 keys names the key.
    with pytest.raises(ValueError, match="current_key: must be bfloat16 like query"):
        dynattn.unified_attention(FakeDlpack(step.query, code=4, bits=16), step.current_key,
                                  step.current_value, *index, block_cache,
                                  out=np.empty_like(step.query))
    with pytest.raises(ValueError, match="query: dtype float64 is not supported"):
        dynattn.unified_attention(FakeDlpack(step.query, code=2, bits=64), step.current_key,
                                  step.current_value, *index, block_cache,
                                  out=np.empty_like(step.query))
    with pytest.raises(ValueError, match="query: DLPack device type 7"):
        dynattn.unified_attention(FakeDlpack(step.query, device_type=7), step.current_key,
                                  step.current_value, *index, block_cache,
                                  out=np.empty_like(step.query))
    assert FakeDlpack.deleted == before + 7


def test_threads_share_a_context_and_the_default_one(rng):
    """Calls from several threads on one Context (serialized by its lock), on the default
    Context and on the pooled one-shot path give the bits of sequential calls."""
    steps = [Step(np.random.default_rng(int(rng.integers(2**31))), "float16", 8, 8)
             for _ in range(4)]

    def call(step, how, shared):
        cache, scale = step.cache.copy(), step.scale.copy()
        block_cache = dynattn.paged_block_cache(*step.paged(cache, scale), quant_bit=8)
        args = (step.query, step.current_key, step.current_value, step.query_start_loc,
                step.context_lens, step.block_table, block_cache)
        if how == "plan":
            return dynattn.plan_unified_attention(*args).run(*args[:3], block_cache)
        return dynattn.unified_attention(*args, context=shared if how == "shared" else None)

    for how in ("shared", "plan", "pooled"):
        shared = dynattn.Context(num_threads=2)
        want = [call(step, how, shared) for step in steps]
        got = [None] * len(steps)

        def work(i):
            got[i] = call(steps[i], how, shared)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(steps))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g.view(np.uint16), w.view(np.uint16), err_msg=how)


def test_other_tensor_kinds_get_numpy_outputs(rng):
    step = Step(rng, "float16", 0, 8)
    block_cache = dynattn.paged_block_cache(*step.paged(step.cache, None)[:2])
    index = (step.query_start_loc, step.context_lens, step.block_table)
    out = dynattn.unified_attention(memoryview(step.query), step.current_key, step.current_value,
                                    *index, block_cache)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    with pytest.raises(ValueError, match="pass out="):
        dynattn.unified_attention(FakeDlpack(step.query), step.current_key, step.current_value,
                                  *index, block_cache)


def test_fused_qkv_column_slices_are_read_in_place(rng):
    """q, k and v as column slices of one fused projection (x @ W_qkv), and an output that is a
    column slice of a wider buffer: the bits of contiguous copies, no copy made, the output's
    other columns untouched."""
    t, hq, hkv, d = 7, 4, 2, 16
    qkv = torch.from_numpy(rng.standard_normal((t, (hq + 2 * hkv) * d)).astype(np.float32))
    q = qkv[:, :hq * d].view(t, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].view(t, hkv, d)
    v = qkv[:, (hq + hkv) * d:].view(t, hkv, d)
    assert not q.is_contiguous() and q.stride() == ((hq + 2 * hkv) * d, d, 1)
    index = dict(seqstarts=np.array([0, 3, 7]), kvstarts=np.array([0, 3, 7]), decoding_batches=0,
                 max_seqlen=4, max_kvlen=4)
    wide = torch.full((t, hq * d + 5), float("nan"))
    out = wide[:, :hq * d].view(t, hq, d)
    got = dynattn.multi_head_attention(q, k, v, **index, out=out)
    assert got.data_ptr() == wide.data_ptr()
    dense = dynattn.multi_head_attention(q.contiguous(), k.contiguous(), v.contiguous(), **index)
    assert torch.equal(out, dense)
    assert torch.isnan(wide[:, hq * d:]).all()

    # A unified step over a block cache, planned and run on the same kind of slices.
    step = Step(rng, dtype="float16")
    fused = torch.from_numpy(np.concatenate(
        [step.query.reshape(step.tokens, -1), step.current_key.reshape(step.tokens, -1),
         step.current_value.reshape(step.tokens, -1)], axis=1))
    widths = [step.hq * step.d, step.hkv * step.d]
    q = fused[:, :widths[0]].view(step.tokens, step.hq, step.d)
    k = fused[:, widths[0]:widths[0] + widths[1]].view(step.tokens, step.hkv, step.d)
    v = fused[:, widths[0] + widths[1]:].view(step.tokens, step.hkv, step.d)
    index = (step.query_start_loc, step.context_lens, step.block_table)

    def cache():
        return dynattn.pmx_block_cache(torch.from_numpy(step.cache.copy()), num_kv_heads=step.hkv,
                                       head_dim=step.d, block_size=step.block_size,
                                       cache_layout=2)

    plan = dynattn.plan_unified_attention(q, k, v, *index, cache())
    strided = plan.run(q, k, v, cache())
    dense = dynattn.unified_attention(q.contiguous(), k.contiguous(), v.contiguous(), *index,
                                      cache())
    assert torch.equal(strided, dense)
    # A Run's strides are its own: the plan runs contiguous copies too.
    assert torch.equal(plan.run(q.contiguous(), k, v.contiguous(), cache()), dense)
    # A slice whose heads are not dense within a row is refused by name.
    with pytest.raises(ValueError, match="query"):
        dynattn.unified_attention(fused[:, :widths[0]:2].view(step.tokens, step.hq, -1), k, v,
                                  *index, cache())
