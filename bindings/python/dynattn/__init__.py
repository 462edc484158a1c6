# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""libdynattn from Python: attention for LLM serving steps, on tensors used in place.

Tensors are PyTorch tensors, NumPy arrays or any object with ``__dlpack__`` (else the buffer
protocol); they are never copied. They must be dense row-major (C-contiguous); dtypes float32,
float16, bfloat16 (``torch.bfloat16``; NumPy, which has no bfloat16, passes the uint16 arrays of
its bit patterns), int8 (quantized caches), int32 and int64 (index tensors), and uint8 for fp8
caches, whose format is named by ``cache_dtype="fp8_e4m3"`` or ``"fp8_e5m2"`` (a torch float8
tensor names its own). Outputs are written into the
tensors passed as ``out=`` (and the like), or allocated with the framework of the query (torch in,
torch out; NumPy in, NumPy out) and returned. The library validates every input before it writes
anything: a bad input raises ``ValueError`` whose message names the input and the rule, and leaves
every output and the cache untouched. The kernels run without the GIL.

Example (one decode step over a paged fp16 cache)::

    cache = dynattn.paged_block_cache(key_cache, value_cache)       # [blocks, bs, Hkv, D] each
    out = dynattn.unified_attention(q, k, v, query_start_loc, context_lens, block_table, cache)

Keyword arguments carry the names of the C++ structs' fields (``dynattn/*.h``); attention
outputs are ``out=``. Every attention op and plan takes ``window_left`` (sliding window, -1 off),
``logits_soft_cap`` (0 off), ``softmax_scale`` (0: 1/sqrt(head_dim)) and ``sinks`` (float32
(Hq,) attention sinks); ops over fp8 caches take ``k_scale`` and ``v_scale`` (floats or 0-d
float32 tensors, default the cache's own, 1.0). ``context=None`` runs one-shot calls on the library's pooled contexts and
plans on a module-level default :class:`Context`.
"""

import collections
import dataclasses
import threading

import numpy

from . import _dynattn as _C

__all__ = [
    "__version__", "cpu_target", "Context", "BlockCache", "UnifiedStepSummary", "UnsupportedError",
    "Plan", "key_value_cache", "multi_head_attention", "multi_head_cache_attention",
    "unified_attention", "plan_key_value_cache", "plan_multi_head_attention",
    "plan_multi_head_cache_attention", "plan_unified_attention", "describe_unified_step",
    "merge_states", "paged_block_cache", "latent_block_cache", "combined_block_cache",
    "vllm_cpu_block_cache", "pmx_block_cache", "KsanaPool", "ksana_block_cache", "ksana_to_atb_block_table",
    "atb_slot_mapping", "UnifiedMetadata", "from_vllm", "from_flashinfer",
]

__version__ = _C.__version__
Context = _C.Context
BlockCache = _C.BlockCache
UnifiedStepSummary = _C.UnifiedStepSummary
UnsupportedError = _C.UnsupportedError


def cpu_target():
    """Name of the SIMD target the CPU kernels use on this machine, e.g. ``"AVX2"``."""
    return _C.cpu_target()


_default_context_lock = threading.Lock()
_default_context_instance = None


def _default_context():
    """The module-level Context that runs plans when ``context=None`` (created on first use)."""
    global _default_context_instance
    if _default_context_instance is not None:  # made once; reading it needs no lock
        return _default_context_instance
    with _default_context_lock:
        if _default_context_instance is None:
            _default_context_instance = Context()
        return _default_context_instance


# ---------------------------------------------------------------------------------------------
# Tensor helpers: shapes, index tensors, outputs of the query's framework.

def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _shape(x, name, rank, what):
    """The shape of tensor `x` as a tuple, checked to have `rank` dimensions."""
    try:
        shape = tuple(int(n) for n in x.shape)
    except AttributeError:
        shape = numpy.asarray(x).shape
    if len(shape) != rank:
        raise ValueError(f"{name}: must have rank {rank} {what}, got shape {shape}")
    return shape


_INT64 = numpy.iinfo(numpy.int64)


def _index(x, name):
    """Index tensors and scalars, which the library reads in host memory: Python ints and
    sequences of them become int64 NumPy arrays (anything else in a sequence, 1.9 or 2**70, is a
    ValueError naming `name`), torch tensors on a GPU are copied to the host."""
    if isinstance(x, (int, numpy.integer, list, tuple)):
        try:
            array = numpy.asarray(x)
        except (ValueError, OverflowError) as e:
            raise ValueError(f"{name}: not a list of integers ({e})") from None
        if array.size and array.dtype.kind not in "iu":
            raise ValueError(f"{name}: index values must be integers that fit int64, got "
                             f"{array.dtype} values" + (f" such as {array.flat[0]!r}"
                                                        if array.dtype.kind == "O" else ""))
        if array.dtype.kind == "u" and array.size and array.max() > _INT64.max:
            raise ValueError(f"{name}: index values must fit int64, got {array.max()}")
        return array.astype(numpy.int64)
    if _is_torch(x) and x.device.type != "cpu":
        return x.cpu()
    return x


class _Unallocated:
    """An output not allocated yet: its shape and the tensor whose dtype and device it will have.
    A plan records outputs by shape, so a call is validated with these before its outputs are
    allocated (a bad index then cannot ask for terabytes)."""

    def __init__(self, shape, like):
        self._dynattn_unallocated = (tuple(int(n) for n in shape), like)


def _indexes(**tensors):
    """`_index` of each keyword argument, named by its keyword."""
    return {name: _index(x, name) for name, x in tensors.items()}


def _last(x, name):
    """The last element of 1-D index tensor `x` as an int (the packed length it describes)."""
    try:
        return int(x.reshape(-1)[-1])
    except (AttributeError, IndexError, TypeError, RuntimeError) as e:
        raise ValueError(f"{name}: must be a non-empty 1-D index tensor ({e})") from None


def _empty(like, shape, dtype=None):
    """An uninitialised tensor of `like`'s framework and device; dtype `like`'s or "float32".
    Tensors of other frameworks get a NumPy array (host memory)."""
    if _is_torch(like):
        import torch
        return torch.empty(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype),
                           device=like.device)
    if dtype is None:
        try:
            dtype = getattr(like, "dtype", None)
            dtype = numpy.dtype(dtype if dtype is not None else memoryview(like).format)
        except TypeError:
            raise ValueError(f"out: cannot allocate an output like a {type(like).__name__}; pass "
                             "out= (and lse= etc.)") from None
    return numpy.empty(shape, dtype=dtype)


def _cache_attrs(num_layer, layer_idx, quant_bit, quant_group, cache_mode, cache_layout,
                 page_size, cache_dtype=None):
    return dict(num_layer=num_layer, layer_idx=layer_idx, quant_bit=quant_bit,
                quant_group=quant_group, cache_mode=cache_mode, cache_layout=cache_layout,
                page_size=page_size, cache_dtype=cache_dtype)


def _score_attrs(window_left, logits_soft_cap, softmax_scale, precision="exact"):
    """The score attributes of every attention op (sliding window, soft-cap, softmax scale) and
    its numerics tier (``"exact"`` or ``"fast"``), as given: the extension checks that each fits
    its C type (a ValueError naming it if not)."""
    return dict(window_left=window_left, logits_soft_cap=logits_soft_cap,
                softmax_scale=softmax_scale, precision=precision)


def _f32(x):
    """Sinks and fp8 scales, which the library reads in host memory as float32: Python numbers
    and sequences become float32 NumPy arrays (a number 0-d), torch tensors on a GPU are copied
    to the host."""
    if x is None:
        return None
    if isinstance(x, (int, float, numpy.floating, numpy.integer, list, tuple)):
        return numpy.asarray(x, dtype=numpy.float32)
    if _is_torch(x) and x.device.type != "cpu":
        return x.cpu()
    return x


_TORCH_FP8 = {"torch.float8_e4m3fn": "fp8_e4m3", "torch.float8_e5m2": "fp8_e5m2"}


def _planned_fp8_bytes(cache, planned):
    """`cache` for a plan made for fp8 format `planned` (None: not an fp8 cache): a torch float8
    cache must name that format."""
    given = getattr(cache, "dtype", None)
    cache, named = _fp8_bytes(cache, planned)
    if named != planned:
        raise ValueError(f"cache: a {given} tensor, but the plan was made for a "
                         f"{planned or 'non-fp8'} cache")
    return cache


_DTYPE_FP8_NAMES = {}  # dtype object -> its fp8 format name, or None: str() once per dtype


def _fp8_name(dtype):
    """The fp8 format a torch float8 dtype names (None for every other dtype)."""
    try:
        return _DTYPE_FP8_NAMES[dtype]
    except (KeyError, TypeError):
        name = _TORCH_FP8.get(str(dtype))
        try:
            _DTYPE_FP8_NAMES[dtype] = name
        except TypeError:  # an unhashable dtype: not cached
            pass
        return name


def _fp8_bytes(cache, cache_dtype):
    """A torch float8 cache (newer PyTorch) as its uint8 bytes, with the format it names; any
    other tensor as it is, with `cache_dtype` as given."""
    dtype = getattr(cache, "dtype", None)
    name = _fp8_name(dtype) if dtype is not None else None
    if name is None or not _is_torch(cache):
        return cache, cache_dtype
    if cache_dtype is not None and cache_dtype != name:
        raise ValueError(f"cache_dtype: \"{cache_dtype}\" contradicts the cache's {cache.dtype}")
    import torch
    return cache.view(torch.uint8), name


def _check_tensor_scales(cache_dtype, k_scale, v_scale):
    """Per-tensor scales belong to fp8 caches only."""
    if cache_dtype is None and (k_scale != 1.0 or v_scale != 1.0):
        raise ValueError("k_scale: per-tensor scales are for fp8 caches only (give cache_dtype)")


def _alibi(alibi, is_alibi):
    return bool(alibi if is_alibi is None else is_alibi)


def _lse_out(query, lse, wanted):
    """`lse`, or a new float32 (T, Hq) tensor like `query` when `wanted` and none was given."""
    if lse is None and wanted:
        t, hq = _shape(query, "query", 3, "(T, Hq, D)")[:2]
        lse = _empty(query, (t, hq), "float32")
    return lse


# ---------------------------------------------------------------------------------------------
# Plans.

class Plan:
    """A validated, planned step of one op (``dynattn::Plan``): made once per step by a
    ``plan_*`` function, run once per layer with :meth:`run` on tensors of the same shapes,
    dtypes and device (any data; the plan keeps its own copy of the index tensors)."""

    def __init__(self, impl, cache_dtype=None):
        self._impl = impl
        self._cache_dtype = cache_dtype  # the fp8 format of a PMX cache tensor, if any

    @property
    def op(self):
        """The op it plans: ``"KeyValueCache"``, ``"MultiHeadAttention"``,
        ``"MultiHeadCacheAttention"`` or ``"UnifiedAttention"``."""
        return self._impl.op

    @property
    def backend(self):
        """The dispatch-table row that runs it, e.g. ``"cpu/int8"``."""
        return self._impl.backend

    @property
    def precision(self):
        """The numerics tier its kernels run: ``"fast"`` only where the call asked for it and a
        fast kernel serves it on this machine, else ``"exact"``."""
        return self._impl.precision

    @property
    def workspace_bytes(self):
        """Partial-state bytes a Context needs to run it."""
        return self._impl.workspace_bytes

    @property
    def unified_summary(self):
        """Unified plans: the :class:`UnifiedStepSummary`; None for the other ops."""
        return self._impl.unified_summary

    def _run(self, tensors, cache, context, layer=None):
        """Runs the plan on `tensors`: the op's Run tensors (read, written, cache and scale) in
        the order of its table, dynattn/op_signatures.h."""
        self._impl.run(tensors, cache, context or _default_context(), layer)

    def __repr__(self):
        return f"<dynattn.Plan {self.op} on {self.backend}>"


def _layer(window_left, logits_soft_cap, softmax_scale, sinks):
    """A run's per-layer attributes (None: all the plan's)."""
    if window_left is None and logits_soft_cap is None and softmax_scale is None and sinks is None:
        return None
    return dict(window_left=window_left, logits_soft_cap=logits_soft_cap,
                softmax_scale=softmax_scale, sinks=sinks)


class KeyValueCachePlan(Plan):
    """Plan of :func:`key_value_cache`."""

    def __init__(self, impl, kv_shape, cache_dtype):
        super().__init__(impl, cache_dtype)
        self._kv_shape = kv_shape

    def run(self, current_key, current_value, cache, scale=None, *, key=None, value=None,
            context=None):
        """Writes the new tokens into `cache` (and `scale`) and gathers every request's context
        into `key` and `value` (allocated when None). Returns ``(key, value)``."""
        cache = _planned_fp8_bytes(cache, self._cache_dtype)
        key = _empty(current_key, self._kv_shape) if key is None else key
        value = _empty(current_key, self._kv_shape) if value is None else value
        self._run((current_key, current_value, cache, scale, key, value), None, context)
        return key, value


class MultiHeadAttentionPlan(Plan):
    """Plan of :func:`multi_head_attention`."""

    def run(self, query, key, value, attn_mask=None, *, out=None, lse=None, return_lse=False,
            context=None, window_left=None, logits_soft_cap=None, softmax_scale=None,
            sinks=None):
        """Attention of `query` over `key` and `value` as planned; returns `out`, or
        ``(out, lse)`` with ``return_lse=True`` (a plan made with ``with_lse=True``).
        `window_left`, `logits_soft_cap`, `softmax_scale` and `sinks`, when given, replace the
        plan's for this layer (each left None keeps the plan's): one plan serves models whose
        layers alternate sliding-window and global attention or carry their own sinks."""
        dv = self._value_dim if value is None else _shape(value, "value", 3, "(.., Hkv, Dv)")[2]
        out = _empty(query, tuple(query.shape[:2]) + (dv,)) if out is None else out
        lse = _lse_out(query, lse, return_lse)
        self._run((query, key, value, attn_mask, out, lse), None, context,
                  _layer(window_left, logits_soft_cap, softmax_scale, sinks))
        return (out, lse) if return_lse else out


class MultiHeadCacheAttentionPlan(Plan):
    """Plan of :func:`multi_head_cache_attention`."""

    def run(self, query, current_key, current_value, cache, scale=None, attn_mask=None, *,
            out=None, lse=None, return_lse=False, context=None, window_left=None,
            logits_soft_cap=None, softmax_scale=None, sinks=None):
        """Writes the new K/V into `cache` (and `scale`), then attends as planned; returns
        `out`, or ``(out, lse)`` with ``return_lse=True`` (a plan made with ``with_lse=True``).
        `window_left`, `logits_soft_cap`, `softmax_scale` and `sinks`, when given, replace the
        plan's for this layer (each left None keeps the plan's)."""
        cache = _planned_fp8_bytes(cache, self._cache_dtype)
        dv = _shape(current_value, "current_value", 3, "(Tq, Hkv, Dv)")[2]
        out = _empty(query, tuple(query.shape[:2]) + (dv,)) if out is None else out
        lse = _lse_out(query, lse, return_lse)
        self._run((query, current_key, current_value, cache, scale, attn_mask, out, lse), None,
                  context, _layer(window_left, logits_soft_cap, softmax_scale, sinks))
        return (out, lse) if return_lse else out


class UnifiedAttentionPlan(Plan):
    """Plan of :func:`unified_attention`."""

    def run(self, query, current_key, current_value, cache, *, out=None, lse=None,
            return_lse=False, context=None, window_left=None, logits_soft_cap=None,
            softmax_scale=None, sinks=None):
        """Writes `current_key`/`current_value` into `cache` (a :class:`BlockCache` of the
        planned geometry), then runs the planned step. Returns `out` (T, Hq, D), or
        ``(out, lse)`` with ``return_lse=True``. The log-sum-exp is computed only when asked
        for (``return_lse=True``, allocated then, or ``lse=``) and only by a plan made with
        ``with_lse=True`` (the default; one made with ``with_lse=False`` refuses it). `window_left`, `logits_soft_cap`, `softmax_scale` and
        `sinks`, when given, replace the plan's for this layer (each left None keeps the
        plan's)."""
        if out is None:
            dv = self._value_dim if current_value is None else _shape(
                current_value, "current_value", 3, "(T, Hkv, Dv)")[2]
            out = _empty(query, tuple(_shape(query, "query", 3, "(T, Hq, D)")[:2]) + (dv,))
        if lse is None and return_lse:
            lse = _empty(query, tuple(query.shape[:2]), "float32")
        self._run((query, current_key, current_value, out, lse), cache, context,
                  _layer(window_left, logits_soft_cap, softmax_scale, sinks))
        return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------------------------
# KeyValueCache.

def _kvc_call(current_key, current_value, seqstarts, kvstarts, cachestarts, start_pos,
              max_seqlen, max_kvlen, cache, scale, *, num_layer, layer_idx, quant_bit,
              quant_group, cache_mode, cache_layout, page_size, num_repeat, cache_dtype, k_scale,
              v_scale, key=None, value=None, **_run_only):
    """The attrs, tensors and (key, value) shape of a key_value_cache call, or of its plan (no
    `key`, `value`): both public functions pass their arguments as they are (`**locals()`)."""
    attrs = _cache_attrs(num_layer, layer_idx, quant_bit, quant_group, cache_mode, cache_layout,
                         page_size, cache_dtype)
    attrs["num_repeat"] = num_repeat
    _, hkv, d = _shape(current_key, "current_key", 3, "(Tq, Hkv, D)")
    kvstarts = _index(kvstarts, "kvstarts")
    kv_shape = (_last(kvstarts, "kvstarts"), hkv * num_repeat, d)
    cache, attrs["cache_dtype"] = _fp8_bytes(cache, attrs["cache_dtype"])
    tensors = dict(current_key=current_key, current_value=current_value,
                   **_indexes(seqstarts=seqstarts, kvstarts=kvstarts, cachestarts=cachestarts,
                              start_pos=start_pos, max_seqlen=max_seqlen, max_kvlen=max_kvlen),
                   cache=cache, scale=scale, k_scale=_f32(k_scale), v_scale=_f32(v_scale),
                   key=_Unallocated(kv_shape, current_key) if key is None else key,
                   value=_Unallocated(kv_shape, current_key) if value is None else value)
    return attrs, tensors, kv_shape


def key_value_cache(current_key, current_value, seqstarts, kvstarts, cachestarts, start_pos,
                    max_seqlen, max_kvlen, cache, scale=None, *, num_layer=1, layer_idx=0,
                    quant_bit=0, quant_group=8, cache_mode=0, cache_layout=0, page_size=128,
                    num_repeat=1, cache_dtype=None, k_scale=None, v_scale=None, key=None,
                    value=None, context=None, num_threads=0):
    """PMX ``KeyValueCache``: writes the new tokens (Tq, Hkv, D) into the PMX `cache` tensor
    (rank 5, quantized with `scale` when ``quant_bit`` is 8 or 4; bf16; or uint8 fp8 bytes with
    ``cache_dtype`` and the per-tensor ``k_scale``/``v_scale``), in place, then gathers every
    request's whole context, dequantized, into `key` and `value` (kvstarts[B], Hkv * num_repeat,
    D). Index tensors are int32/int64 tensors (or Python ints/lists). Returns ``(key, value)``."""
    attrs, tensors, kv_shape = _kvc_call(**locals())
    if key is None or value is None:
        # Validate everything before allocating outputs whose size comes from kvstarts.
        _C._plan("key_value_cache", attrs, tensors, None)
        for name in ("key", "value"):
            if isinstance(tensors[name], _Unallocated):
                tensors[name] = _empty(current_key, kv_shape)
    _C._run("key_value_cache", attrs, tensors, None, context, num_threads)
    return tensors["key"], tensors["value"]


def plan_key_value_cache(current_key, current_value, seqstarts, kvstarts, cachestarts, start_pos,
                         max_seqlen, max_kvlen, cache, scale=None, *, num_layer=1, layer_idx=0,
                         quant_bit=0, quant_group=8, cache_mode=0, cache_layout=0,
                         page_size=128, num_repeat=1, cache_dtype=None, k_scale=None,
                         v_scale=None):
    """Validates and plans a :func:`key_value_cache` step (writes nothing); returns a
    :class:`Plan` whose ``run(current_key, current_value, cache, scale=None, *, key=None,
    value=None, context=None)`` runs it."""
    attrs, tensors, kv_shape = _kvc_call(**locals())
    return KeyValueCachePlan(_C._plan("key_value_cache", attrs, tensors, None), kv_shape,
                             attrs["cache_dtype"])


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention.

def _value_dim(values, name, shape, head_dim_v, head_dim):
    """Dv: the values' last dim, or without values (value_from_key) head_dim_v (0: head_dim)."""
    if values is None:
        return head_dim_v or head_dim
    return _shape(values, name, 3, shape)[2]


def _mha_call(query, key, value, seqstarts, kvstarts, decoding_batches, max_seqlen, max_kvlen,
              attn_mask, out, lse, is_causal, is_alibi, score, planned, head_dim_v=0):
    tq, hq, d = _shape(query, "query", 3, "(Tq, Hq, D)")
    hkv = _shape(key, "key", 3, "(kvstarts[B], Hkv, D)")[1]
    dv = _value_dim(value, "value", "(kvstarts[B], Hkv, Dv)", head_dim_v, d)
    attrs = dict(num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=dv,
                 value_from_key=int(value is None), is_causal=is_causal, is_alibi=is_alibi,
                 **score)
    tensors = dict(query=query, key=key, value=value,
                   **_indexes(seqstarts=seqstarts, kvstarts=kvstarts,
                              decoding_batches=decoding_batches, max_seqlen=max_seqlen,
                              max_kvlen=max_kvlen),
                   attn_mask=attn_mask, **planned,
                   attn_output=_empty(query, (tq, hq, dv)) if out is None else out, lse=lse)
    return attrs, tensors


def multi_head_attention(query, key, value, seqstarts, kvstarts, decoding_batches, max_seqlen,
                         max_kvlen, attn_mask=None, *, is_causal=True, is_alibi=False,
                         window_left=-1, logits_soft_cap=0.0, softmax_scale=0.0, sinks=None,
                         alibi_slopes=None, out=None, lse=None, return_lse=False, context=None,
                         num_threads=0, head_dim_v=0, precision="exact"):
    """PMX ``MultiHeadAttention`` of packed queries (Tq, Hq, D) over packed keys and values
    (kvstarts[B], Hkv, D), with an optional additive `attn_mask`, sliding window, logit soft-cap,
    softmax scale, attention sinks and ALiBi slopes (float32 (Hq,), e.g. a tensor-parallel
    rank's share of the model's; they turn ALiBi on). Heads, head_dim and head_dim_v come from
    the shapes: values may have another size Dv than queries and keys (MLA's non-absorbed
    prefill: D = 192, Dv = 128); the output takes the values' size. ``value=None`` reads the
    values from the keys: their first ``head_dim_v`` elements (0: all; MLA's absorbed form, a
    latent head of 576 whose first 512 are the values). Returns `out` (Tq, Hq, Dv), or
    ``(out, lse)`` with ``return_lse=True`` (`lse`: (Tq, Hq) float32 natural-log log-sum-exp,
    for merge_states). ``precision`` (``"exact"``, the default, or ``"fast"``) picks the numerics
    tier (docs/numerics.md, "Precision tiers")."""
    lse = _lse_out(query, lse, return_lse)
    attrs, tensors = _mha_call(query, key, value, seqstarts, kvstarts, decoding_batches,
                               max_seqlen, max_kvlen, attn_mask, out, lse, is_causal, is_alibi,
                               _score_attrs(window_left, logits_soft_cap, softmax_scale,
                                            precision),
                               dict(sinks=_f32(sinks), alibi_slopes=_f32(alibi_slopes)),
                               head_dim_v)
    _C._run("multi_head_attention", attrs, tensors, None, context, num_threads)
    return (tensors["attn_output"], lse) if return_lse else tensors["attn_output"]


def plan_multi_head_attention(query, key, value, seqstarts, kvstarts, decoding_batches,
                              max_seqlen, max_kvlen, attn_mask=None, *, is_causal=True,
                              is_alibi=False, window_left=-1, logits_soft_cap=0.0,
                              softmax_scale=0.0, sinks=None, alibi_slopes=None, with_lse=True,
                              head_dim_v=0, precision="exact"):
    """Plans a :func:`multi_head_attention` step; ``run(query, key, value, attn_mask=None, *,
    out=None, lse=None, return_lse=False, context=None)`` runs it (with the log-sum-exp only
    from a plan made ``with_lse=True``, the default)."""
    planned = dict(sinks=_f32(sinks), alibi_slopes=_f32(alibi_slopes))
    attrs, tensors = _mha_call(query, key, value, seqstarts, kvstarts, decoding_batches,
                               max_seqlen, max_kvlen, attn_mask, None,
                               _lse_out(query, None, with_lse), is_causal, is_alibi,
                               _score_attrs(window_left, logits_soft_cap, softmax_scale,
                                            precision),
                               planned, head_dim_v)
    plan = MultiHeadAttentionPlan(_C._plan("multi_head_attention", attrs, tensors, None))
    plan._value_dim = attrs["head_dim_v"]
    return plan


# ---------------------------------------------------------------------------------------------
# MultiHeadCacheAttention.

def _mhca_call(query, current_key, current_value, seqstarts, kvstarts, cachestarts, start_pos,
               decoding_batches, max_seqlen, max_kvlen, cache, scale, attn_mask, *, is_causal,
               is_alibi, num_layer, layer_idx, quant_bit, quant_group, cache_mode, cache_layout,
               page_size, window_left, logits_soft_cap, softmax_scale, sinks, cache_dtype,
               k_scale, v_scale, key_offsets, alibi_slopes, precision="exact", out=None,
               lse=None, return_lse=False, with_lse=False, **_run_only):
    """The attrs and tensors of a multi_head_cache_attention call, or of its plan (no `out`):
    both public functions pass their arguments as they are (`**locals()`)."""
    attrs = _cache_attrs(num_layer, layer_idx, quant_bit, quant_group, cache_mode, cache_layout,
                         page_size, cache_dtype)
    attrs.update(is_causal=is_causal, is_alibi=is_alibi,
                 **_score_attrs(window_left, logits_soft_cap, softmax_scale, precision))
    _, hq, d = _shape(query, "query", 3, "(Tq, Hq, D)")
    hkv = _shape(current_key, "current_key", 3, "(Tq, Hkv, D)")[1]
    dv = _shape(current_value, "current_value", 3, "(Tq, Hkv, Dv)")[2]
    attrs.update(num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=dv)
    cache, attrs["cache_dtype"] = _fp8_bytes(cache, attrs["cache_dtype"])
    return attrs, dict(
        query=query, current_key=current_key, current_value=current_value,
        **_indexes(seqstarts=seqstarts, kvstarts=kvstarts, cachestarts=cachestarts,
                   start_pos=start_pos, decoding_batches=decoding_batches, max_seqlen=max_seqlen,
                   max_kvlen=max_kvlen),
        key_offsets=None if key_offsets is None else _index(key_offsets, "key_offsets"),
        cache=cache, scale=scale, attn_mask=attn_mask, sinks=_f32(sinks),
        k_scale=_f32(k_scale), v_scale=_f32(v_scale), alibi_slopes=_f32(alibi_slopes),
        attn_output=_empty(query, tuple(query.shape[:2]) + (dv,)) if out is None else out,
        lse=_lse_out(query, lse, return_lse or with_lse))


def multi_head_cache_attention(query, current_key, current_value, seqstarts, kvstarts,
                               cachestarts, start_pos, decoding_batches, max_seqlen, max_kvlen,
                               cache, scale=None, attn_mask=None, *, is_causal=True,
                               is_alibi=False, num_layer=1, layer_idx=0, quant_bit=0,
                               quant_group=8, cache_mode=0, cache_layout=0, page_size=128,
                               window_left=-1, logits_soft_cap=0.0, softmax_scale=0.0,
                               sinks=None, cache_dtype=None, k_scale=None, v_scale=None,
                               key_offsets=None, alibi_slopes=None, out=None, lse=None,
                               return_lse=False, context=None, num_threads=0, precision="exact"):
    """PMX ``MultiHeadCacheAttention``: writes the new K/V into the PMX `cache` (and `scale`)
    in place, then attends over each request's dequantized context. Returns `out` (Tq, Hq, D),
    or ``(out, lse)`` with ``return_lse=True``. On a context shard, `key_offsets` (B) gives the
    position of each request's first context key in the whole request (`start_pos` is then the
    new tokens' position in the whole request; only new tokens inside the shard are written);
    `alibi_slopes` (float32 (Hq,)) turns ALiBi on with a rank's own slopes; ``precision``
    (``"exact"`` or ``"fast"``) picks the numerics tier."""
    attrs, tensors = _mhca_call(**locals())
    _C._run("multi_head_cache_attention", attrs, tensors, None, context, num_threads)
    if return_lse:
        return tensors["attn_output"], tensors["lse"]
    return tensors["attn_output"]


def plan_multi_head_cache_attention(query, current_key, current_value, seqstarts, kvstarts,
                                    cachestarts, start_pos, decoding_batches, max_seqlen,
                                    max_kvlen, cache, scale=None, attn_mask=None, *,
                                    is_causal=True, is_alibi=False, num_layer=1, layer_idx=0,
                                    quant_bit=0, quant_group=8, cache_mode=0, cache_layout=0,
                                    page_size=128, window_left=-1, logits_soft_cap=0.0,
                                    softmax_scale=0.0, sinks=None, cache_dtype=None,
                                    k_scale=None, v_scale=None, key_offsets=None,
                                    alibi_slopes=None, with_lse=True, precision="exact"):
    """Plans a :func:`multi_head_cache_attention` step (writes nothing); ``run(query,
    current_key, current_value, cache, scale=None, attn_mask=None, *, out=None, lse=None,
    return_lse=False, context=None)`` runs it (with the log-sum-exp only from a plan made
    ``with_lse=True``, the default)."""
    attrs, tensors = _mhca_call(**locals())
    return MultiHeadCacheAttentionPlan(
        _C._plan("multi_head_cache_attention", attrs, tensors, None), attrs["cache_dtype"])


# ---------------------------------------------------------------------------------------------
# Unified attention.

def _unified_call(query, current_key, current_value, query_start_loc, context_lens, block_table,
                  alibi, out, lse, score, planned, head_dim_v=0):
    t, hq, d = _shape(query, "query", 3, "(T, Hq, D)")
    hkv = _shape(current_key, "current_key", 3, "(T, Hkv, D)")[1]
    dv = _value_dim(current_value, "current_value", "(T, Hkv, Dv)", head_dim_v, d)
    attrs = dict(num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=dv,
                 value_from_key=int(current_value is None), is_alibi=int(alibi), **score)
    tensors = dict(query=query, current_key=current_key, current_value=current_value,
                   **_indexes(query_start_loc=query_start_loc, context_lens=context_lens,
                              block_table=block_table),
                   **planned,
                   attn_output=_empty(query, (t, hq, dv)) if out is None else out, lse=lse)
    return attrs, tensors


def _unified_planned(sinks, k_scale, v_scale, alibi_slopes, key_offsets, key_counts):
    shard = {name: None if x is None else _index(x, name)
             for name, x in (("key_offsets", key_offsets), ("key_counts", key_counts))}
    return dict(sinks=_f32(sinks), k_scale=_f32(k_scale), v_scale=_f32(v_scale),
                alibi_slopes=_f32(alibi_slopes), **shard)


def unified_attention(query, current_key, current_value, query_start_loc, context_lens,
                      block_table, cache, *, alibi=False, is_alibi=None, window_left=-1,
                      logits_soft_cap=0.0, softmax_scale=0.0, sinks=None, k_scale=None,
                      v_scale=None, alibi_slopes=None, key_offsets=None, key_counts=None,
                      out=None, lse=None, return_lse=False, context=None, num_threads=0,
                      head_dim_v=0, precision="exact"):
    """One serving step of unified attention (``dynattn::UnifiedAttention``).

    Writes `current_key` and `current_value` (T, Hkv, D) into `cache` (a :class:`BlockCache`,
    e.g. from :func:`paged_block_cache`) in place, then computes attention of every query token
    (T, Hq, D): token i of request b attends causally to positions ``0 .. context_lens[b] + i``
    of its request. `query_start_loc` (B+1), `context_lens` (B) and `block_table`
    (B, max_blocks) are int32 or int64. num_heads, num_kv_heads, head_dim and head_dim_v come
    from ``query.shape[1]``, ``current_key.shape[1]``, ``query.shape[2]`` and
    ``current_value.shape[2]`` (values may have their own size Dv, in a cache whose value rows
    have it: :func:`paged_block_cache` with a value tensor of last dim Dv). With
    ``current_value=None`` the values are the keys' first ``head_dim_v`` elements (MLA's latent
    cache, :func:`latent_block_cache`; only keys are written).

    Returns `out` (T, Hq, Dv), of the query's framework and dtype, or ``(out, lse)`` with
    ``return_lse=True`` (`lse`: (T, Hq) float32 natural-log log-sum-exp; pass ``lse=`` to have it
    written into your tensor). ``alibi`` (alias ``is_alibi``) adds ALiBi biases with the
    standard slopes, ``alibi_slopes`` (float32 (Hq,)) with its own;
    ``window_left``, ``logits_soft_cap``, ``softmax_scale`` and ``sinks`` shape the scores;
    ``k_scale``/``v_scale`` replace an fp8 cache's per-tensor scales for the call. On a
    context shard, ``key_offsets`` and ``key_counts`` (B) say which positions of each request
    its blocks hold (``context_lens`` stays the first query token's position in the whole
    request); merge the shards' ``(out, lse)`` with :func:`merge_states`. ``precision``
    (``"exact"``, the default, or ``"fast"``) picks the numerics tier: the plan's ``precision``
    says which one runs.
    """
    if lse is None and return_lse:
        lse = _empty(query, (_shape(query, "query", 3, "(T, Hq, D)")[0], query.shape[1]),
                     "float32")
    attrs, tensors = _unified_call(query, current_key, current_value, query_start_loc,
                                   context_lens, block_table, _alibi(alibi, is_alibi), out, lse,
                                   _score_attrs(window_left, logits_soft_cap, softmax_scale,
                                                precision),
                                   _unified_planned(sinks, k_scale, v_scale, alibi_slopes,
                                                    key_offsets, key_counts), head_dim_v)
    _C._run("unified_attention", attrs, tensors, cache, context, num_threads)
    return (tensors["attn_output"], lse) if return_lse else tensors["attn_output"]


def plan_unified_attention(query, current_key, current_value, query_start_loc, context_lens,
                           block_table, cache, *, alibi=False, is_alibi=None, window_left=-1,
                           logits_soft_cap=0.0, softmax_scale=0.0, sinks=None, k_scale=None,
                           v_scale=None, alibi_slopes=None, key_offsets=None, key_counts=None,
                           with_lse=True, head_dim_v=0, precision="exact"):
    """Validates and plans a unified-attention step (writes nothing) and copies its index
    tensors. Returns a :class:`Plan` whose ``run(query, current_key, current_value, cache, *,
    out=None, lse=None, return_lse=False, context=None)`` runs it per layer on tensors of the same
    shapes. ``with_lse`` (default True) plans the step with the log-sum-exp output, so that
    ``run`` may compute it (``return_lse=True`` or ``lse=``); runs that ask for none skip it."""
    lse = None
    if with_lse:
        lse = _empty(query, (_shape(query, "query", 3, "(T, Hq, D)")[0], query.shape[1]),
                     "float32")
    planned = _unified_planned(sinks, k_scale, v_scale, alibi_slopes, key_offsets,
                                                    key_counts)
    attrs, tensors = _unified_call(query, current_key, current_value, query_start_loc,
                                   context_lens, block_table, _alibi(alibi, is_alibi), None, lse,
                                   _score_attrs(window_left, logits_soft_cap, softmax_scale,
                                                precision),
                                   planned, head_dim_v)
    plan = UnifiedAttentionPlan(_C._plan("unified_attention", attrs, tensors, cache))
    plan._value_dim = attrs["head_dim_v"]
    return plan


def describe_unified_step(query, current_key, current_value, query_start_loc, context_lens,
                          block_table, cache, *, alibi=False, is_alibi=None, window_left=-1,
                          logits_soft_cap=0.0, softmax_scale=0.0, sinks=None, k_scale=None,
                          v_scale=None, alibi_slopes=None, key_offsets=None, key_counts=None,
                          precision="exact"):
    """Validates a unified step and returns its :class:`UnifiedStepSummary` (phase such as
    ``"csu"``, query_len, num_shared_blocks, num_unique_blocks, num_logits, num_work_items,
    cache_bytes_read) without writing anything."""
    attrs, tensors = _unified_call(query, current_key, current_value, query_start_loc,
                                   context_lens, block_table, _alibi(alibi, is_alibi), None, None,
                                   _score_attrs(window_left, logits_soft_cap, softmax_scale,
                                                precision),
                                   _unified_planned(sinks, k_scale, v_scale, alibi_slopes,
                                                    key_offsets, key_counts))
    return _C._describe_unified_step(attrs, tensors, cache)


# ---------------------------------------------------------------------------------------------
# Merging partial states.

def merge_states(*, out=None, lse=None, acc=None, max=None, sum=None, merged_out=None,
                 merged_lse=None, return_lse=False, num_threads=0):
    """Merges K partial attention results of T rows of H heads (``dynattn::MergeStates``), all
    float32: either normalised (`out` (K, T, H, D) and natural-log `lse` (K, T, H)) or
    unnormalised (`acc` (K, T, H, D), `max` and `sum` (K, T, H)). Returns `merged_out`
    (T, H, D), or ``(merged_out, merged_lse)`` with ``return_lse=True``."""
    parts = out if out is not None else acc
    if parts is None:
        raise ValueError("out: give out and lse, or acc, max and sum")
    _, t, h, d = _shape(parts, "out" if out is not None else "acc", 4, "(K, T, H, D)")
    if merged_out is None:
        merged_out = _empty(parts, (t, h, d), "float32")
    if merged_lse is None and return_lse:
        merged_lse = _empty(parts, (t, h), "float32")
    _C._merge_states(dict(out=out, lse=lse, acc=acc, max=max, sum=sum, merged_out=merged_out,
                          merged_lse=merged_lse), num_threads)
    return (merged_out, merged_lse) if return_lse else merged_out


# ---------------------------------------------------------------------------------------------
# Block caches over engines' tensors (used in place) and their metadata.

def paged_block_cache(key, value, key_scale=None, value_scale=None, layout="NHD", quant_bit=0,
                      quant_group=8, *, cache_dtype=None, k_scale=1.0, v_scale=1.0):
    """A :class:`BlockCache` over separate paged key and value tensors (vLLM, FlashInfer, ATB
    views; ``dynattn::MakePagedBlockCache``), used in place.

    `key`, `value`: [num_blocks, block_size, Hkv, D] (``layout="NHD"``) or
    [num_blocks, Hkv, block_size, D] (``"HND"``); float16/float32 when ``quant_bit == 0``, int8
    when ``quant_bit`` is 8 (last dim D) or 4 (last dim D // 2). `key_scale`, `value_scale`:
    the same layout with last dim ``D // quant_group``, float16 or float32, required iff
    quantized. bfloat16 tensors make a bf16 cache; uint8 tensors an fp8 one, with
    ``cache_dtype="fp8_e4m3"`` or ``"fp8_e5m2"`` and its per-tensor scales ``k_scale`` and
    ``v_scale`` (an op's own k_scale/v_scale replace them for a call). The cache keeps
    references to the tensors. `value` may have another last dim than `key` (Dv); an MLA latent
    cache [num_blocks, block_size, 1, Dk] is passed as both `key` and `value` and used with
    ``current_value=None`` (a call with values would write them over the keys)."""
    key, cache_dtype = _fp8_bytes(key, cache_dtype)
    value, cache_dtype = _fp8_bytes(value, cache_dtype)
    _check_tensor_scales(cache_dtype, k_scale, v_scale)
    return _C._paged_block_cache(key, value, key_scale, value_scale, layout, quant_bit,
                                 quant_group, cache_dtype, k_scale, v_scale)


def latent_block_cache(latent, scale=None, layout="NHD", quant_bit=0, quant_group=8, *,
                       cache_dtype=None, k_scale=1.0):
    """A :class:`BlockCache` over an MLA latent cache (DeepSeek V2/V3, Kimi K2): one paged tensor
    [num_blocks, block_size, 1, kv_lora_rank + rope_dim] (``layout="NHD"``; fp8 and int8 with
    group scales as in :func:`paged_block_cache`), used in place. Calls over it pass
    ``current_value=None`` and ``head_dim_v=kv_lora_rank``: the values are the first
    kv_lora_rank elements of each latent row, read from the same bytes, and only the latent rows
    are written. ``k_scale`` scales an fp8 latent cache's keys and values alike."""
    latent, cache_dtype = _fp8_bytes(latent, cache_dtype)
    _check_tensor_scales(cache_dtype, k_scale, k_scale)
    return _C._latent_block_cache(latent, scale, layout, quant_bit, quant_group, cache_dtype,
                                  k_scale)


def combined_block_cache(kv, kv_scale=None, layout="NHD", quant_bit=0, quant_group=8, *,
                         cache_dtype=None, k_scale=1.0, v_scale=1.0):
    """A :class:`BlockCache` over one combined FlashInfer tensor [num_pages, 2, page_size, Hkv,
    D] (NHD) or [num_pages, 2, Hkv, page_size, D] (HND), K at index 0 of dim 1. fp8 caches as
    in :func:`paged_block_cache`."""
    kv, cache_dtype = _fp8_bytes(kv, cache_dtype)
    _check_tensor_scales(cache_dtype, k_scale, v_scale)
    return _C._combined_block_cache(kv, kv_scale, layout, quant_bit, quant_group, cache_dtype,
                                    k_scale, v_scale)


def vllm_cpu_block_cache(kv, kv_scale=None, quant_bit=0, quant_group=8, *, cache_dtype=None,
                         k_scale=1.0, v_scale=1.0):
    """A :class:`BlockCache` over vLLM's CPU-backend cache [2, num_blocks, Hkv, block_size, D]
    as its ``cpu_attn`` backend lays it out: per (block, head) the values are [block_size, D] and
    the keys [D, block_size] (dimension-major). Unquantized only; fp8 caches as in
    :func:`paged_block_cache`."""
    kv, cache_dtype = _fp8_bytes(kv, cache_dtype)
    _check_tensor_scales(cache_dtype, k_scale, v_scale)
    return _C._vllm_cpu_block_cache(kv, kv_scale, quant_bit, quant_group, cache_dtype, k_scale,
                                    v_scale)


def pmx_block_cache(cache, scale=None, *, num_kv_heads, head_dim, block_size, num_layer=1,
                    layer_idx=0, quant_bit=0, quant_group=8, cache_layout=0, cache_dtype=None,
                    k_scale=1.0, v_scale=1.0):
    """A :class:`BlockCache` over a PMX cache tensor (rank 5, layouts 0-3, MaxT = num_blocks *
    block_size) and its optional scale tensor (``dynattn::MakePmxBlockCache``). A bfloat16
    tensor makes a bf16 cache; a uint8 one an fp8 cache, with ``cache_dtype`` and its
    per-tensor scales ``k_scale`` and ``v_scale``."""
    cache, cache_dtype = _fp8_bytes(cache, cache_dtype)
    _check_tensor_scales(cache_dtype, k_scale, v_scale)
    return _C._pmx_block_cache(cache, scale, num_kv_heads, head_dim, block_size, num_layer,
                               layer_idx, quant_bit, quant_group, cache_layout, cache_dtype,
                               k_scale, v_scale)


@dataclasses.dataclass
class KsanaPool:
    """Geometry of a KsanaLLM block pool (``dynattn::KsanaPoolAttrs``)."""
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    num_layer: int = 1
    order: str = "kv_layer"  # "kv_layer": [2][L] sub-blocks (Ascend); "layer_kv": [L][2] (CUDA)
    slack_block: bool = True
    quant_bit: int = 0
    quant_group: int = 8


def ksana_block_cache(pool, scale_pool=None, *, attrs, layer):
    """A :class:`BlockCache` of layer `layer` of a Ksana block pool (`attrs`: :class:`KsanaPool`),
    addressed by Ksana block ids as they are."""
    return _C._ksana_block_cache(pool, scale_pool, dataclasses.asdict(attrs), layer)


def ksana_to_atb_block_table(ksana_table, *, attrs, layer):
    """Ksana block table (B, max_blocks) -> ATB block ids of layer `layer` (int64 NumPy array of
    the same shape; -1 padding stays -1)."""
    return _C._ksana_to_atb_block_table(_index(ksana_table, "ksana_table"),
                                        dataclasses.asdict(attrs), layer)


def atb_slot_mapping(ksana_table, requests, positions, *, attrs, layer):
    """ATB slot of each (request, position) pair of layer `layer` (int64 NumPy array)."""
    index = _indexes(ksana_table=ksana_table, requests=requests, positions=positions)
    return _C._atb_slot_mapping(*index.values(), dataclasses.asdict(attrs), layer)


UnifiedMetadata = collections.namedtuple("UnifiedMetadata",
                                         ["query_start_loc", "context_lens", "block_table"])
UnifiedMetadata.__doc__ = "Unified-attention index tensors converted from an engine's (int64)."


def from_vllm(query_start_loc, seq_lens, block_table, slot_mapping=None, *, block_size,
              num_blocks):
    """vLLM attention metadata -> :class:`UnifiedMetadata` (``dynattn::FromVllm``)."""
    index = _indexes(query_start_loc=query_start_loc, seq_lens=seq_lens,
                     block_table=block_table, slot_mapping=slot_mapping)
    return UnifiedMetadata(*_C._from_vllm(*index.values(), block_size, num_blocks))


def from_flashinfer(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *, page_size,
                    num_pages):
    """FlashInfer paged-KV metadata -> :class:`UnifiedMetadata` (``dynattn::FromFlashInfer``)."""
    index = _indexes(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                     kv_last_page_len=kv_last_page_len)
    return UnifiedMetadata(*_C._from_flashinfer(*index.values(), page_size, num_pages))
