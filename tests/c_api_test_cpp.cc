// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The C API test's calls through the C++ API (public headers and the shared library only).

#include "c_api_test_cpp.h"

#include <cstdio>

#include "dynattn/dynattn.h"

using namespace dynattn;

namespace {

TensorView F16(const void* data, std::initializer_list<int64_t> shape) {
  return TensorView::Dense(data, DType::kF16, shape);
}

TensorView I64(const void* data, std::initializer_list<int64_t> shape) {
  return TensorView::Dense(data, DType::kI64, shape);
}

// The activations' dtype, the cache's and whether the cache is quantized, as `v` says.
DType Activations(const capi_variant& v) { return v.bf16 ? DType::kBF16 : DType::kF16; }
DType CacheDType(const capi_variant& v) {
  return v.fp8 == 1 ? DType::kF8E4M3 : v.fp8 == 2 ? DType::kF8E5M2 : DType::kI8;
}

TensorView Act(const capi_variant& v, const void* data, std::initializer_list<int64_t> shape) {
  return TensorView::Dense(data, Activations(v), shape);
}

// The score attributes of `v` (defaults unless v.score).
template <typename AttentionLikeAttrs>
void SetScore(const capi_variant& v, AttentionLikeAttrs* attrs) {
  if (!v.score) return;
  attrs->window_left = v.window_left;
  attrs->logits_soft_cap = v.logits_soft_cap;
  attrs->softmax_scale = v.softmax_scale;
}

// The sinks (when v.score) and fp8 scales (when v.fp8) of `v` into `args`.
template <typename Args>
void SetExtraInputs(const capi_variant& v, int num_heads, Args* args) {
  if (v.score) args->sinks = TensorView::Dense(v.sinks, DType::kF32, {num_heads});
  if (v.fp8) {
    args->k_scale = TensorView::Dense(&v.k_scale, DType::kF32, {});
    args->v_scale = TensorView::Dense(&v.v_scale, DType::kF32, {});
  }
}

int Report(const Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "C++ side: %s\n", status.message().c_str());
  return 1;
}

}  // namespace

int capi_cpp_mhca(const capi_mhca_case* c) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const capi_variant& v = c->v;
  MultiHeadCacheAttentionArgs a;
  a.query = Act(v, c->query, {t, hq, d});
  a.current_key = Act(v, c->current_key, {t, hkv, d});
  a.current_value = Act(v, c->current_value, {t, hkv, d});
  a.seqstarts = I64(c->seqstarts, {c->batch + 1});
  a.kvstarts = I64(c->kvstarts, {c->batch + 1});
  a.cachestarts = I64(c->cachestarts, {c->batch});
  a.start_pos = I64(c->start_pos, {c->batch});
  a.decoding_batches = I64(&c->decoding_batches, {});
  a.max_seqlen = I64(&c->max_seqlen, {});
  a.max_kvlen = I64(&c->max_kvlen, {});
  a.cache = TensorView::Dense(c->cache, CacheDType(v), {c->num_slots, 1, 2, hkv, d});
  if (!v.fp8) a.scale = F16(c->scale, {c->num_slots, 1, 2, hkv, d / c->quant_group});
  a.attn_output = Act(v, c->out, {t, hq, d});
  SetExtraInputs(v, c->num_heads, &a);
  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = {.num_heads = c->num_heads,
                     .num_kv_heads = c->num_kv_heads,
                     .head_dim = c->head_dim,
                     .is_causal = true,
                     .is_alibi = false};
  SetScore(v, &attrs.attention);
  attrs.cache.quant_bit = v.fp8 ? 0 : 8;
  attrs.cache.quant_group = c->quant_group;
  return Report(MultiHeadCacheAttention(attrs, a));
}

int capi_cpp_kvc(const capi_mhca_case* c, uint16_t* key, uint16_t* value) {
  const int64_t hkv = c->num_kv_heads, d = c->head_dim, rows = c->kvstarts[c->batch];
  KeyValueCacheArgs a;
  a.current_key = F16(c->current_key, {c->num_tokens, hkv, d});
  a.current_value = F16(c->current_value, {c->num_tokens, hkv, d});
  a.seqstarts = I64(c->seqstarts, {c->batch + 1});
  a.kvstarts = I64(c->kvstarts, {c->batch + 1});
  a.cachestarts = I64(c->cachestarts, {c->batch});
  a.start_pos = I64(c->start_pos, {c->batch});
  a.max_seqlen = I64(&c->max_seqlen, {});
  a.max_kvlen = I64(&c->max_kvlen, {});
  a.cache = TensorView::Dense(c->cache, DType::kI8, {c->num_slots, 1, 2, hkv, d});
  a.scale = F16(c->scale, {c->num_slots, 1, 2, hkv, d / c->quant_group});
  a.key = F16(key, {rows, hkv, d});
  a.value = F16(value, {rows, hkv, d});
  KeyValueCacheAttrs attrs;
  attrs.cache.quant_bit = 8;
  attrs.cache.quant_group = c->quant_group;
  return Report(KeyValueCache(attrs, a));
}

int capi_cpp_mha(const capi_mhca_case* c, const uint16_t* key, const uint16_t* value) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const int64_t rows = c->kvstarts[c->batch];
  MultiHeadAttentionArgs a;
  a.query = F16(c->query, {t, hq, d});
  a.key = F16(key, {rows, hkv, d});
  a.value = F16(value, {rows, hkv, d});
  a.seqstarts = I64(c->seqstarts, {c->batch + 1});
  a.kvstarts = I64(c->kvstarts, {c->batch + 1});
  a.decoding_batches = I64(&c->decoding_batches, {});
  a.max_seqlen = I64(&c->max_seqlen, {});
  a.max_kvlen = I64(&c->max_kvlen, {});
  a.attn_output = F16(c->out, {t, hq, d});
  return Report(MultiHeadAttention({c->num_heads, c->num_kv_heads, c->head_dim, true, false}, a));
}

int capi_cpp_unified(const capi_unified_case* c) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const int64_t slots = c->num_blocks * c->block_size;
  const capi_variant& v = c->v;
  CacheAttrs cache_attrs;
  cache_attrs.quant_bit = v.fp8 ? 0 : 8;
  cache_attrs.quant_group = c->quant_group;
  BlockCache cache;
  const Status made = MakePmxBlockCache(
      TensorView::Dense(c->cache, CacheDType(v), {slots, 1, 2, hkv, d}),
      v.fp8 ? TensorView() : F16(c->scale, {slots, 1, 2, hkv, d / c->quant_group}), cache_attrs,
      c->num_kv_heads, c->head_dim, c->block_size, &cache);
  if (Report(made) != 0) return 1;
  UnifiedAttentionArgs u;
  u.query = Act(v, c->query, {t, hq, d});
  u.current_key = Act(v, c->current_key, {t, hkv, d});
  u.current_value = Act(v, c->current_value, {t, hkv, d});
  u.query_start_loc = I64(c->query_start_loc, {c->batch + 1});
  u.context_lens = I64(c->context_lens, {c->batch});
  u.block_table = I64(c->block_table, {c->batch, c->max_blocks});
  u.cache = &cache;
  u.attn_output = Act(v, c->out, {t, hq, d});
  u.lse = TensorView::Dense(c->lse, DType::kF32, {t, hq});
  SetExtraInputs(v, c->num_heads, &u);
  UnifiedAttentionAttrs attrs;
  attrs.num_heads = c->num_heads;
  attrs.num_kv_heads = c->num_kv_heads;
  attrs.head_dim = c->head_dim;
  SetScore(v, &attrs);
  return Report(UnifiedAttention(attrs, u));
}

int capi_cpp_merge(int k, int t, int h, int d, const float* out, const float* lse,
                   float* merged_out, float* merged_lse) {
  MergeStatesArgs m;
  m.out = TensorView::Dense(out, DType::kF32, {k, t, h, d});
  m.lse = TensorView::Dense(lse, DType::kF32, {k, t, h});
  m.merged_out = TensorView::Dense(merged_out, DType::kF32, {t, h, d});
  m.merged_lse = TensorView::Dense(merged_lse, DType::kF32, {t, h});
  return Report(MergeStates(m));
}
