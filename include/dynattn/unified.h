// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention (spec: the Unified Attention spec §1, §6; docs/api.md, "Unified attention"):
// one call for a serving step that mixes prompts, prompt chunks, decodes and multi-token decodes
// over a block-table cache.
//
// Token t of request b sits at position p = context_lens[b] + (t - query_start_loc[b]) and attends
// to positions 0..p of its own request: causal, GQA, optional ALiBi, no additive mask. That is
// exactly what MultiHeadCacheAttention gives for the same step. Internally every (query, key) pair
// is computed by exactly one of three paths and their partial softmax states are merged exactly:
// * causal: the step's fresh keys (positions >= context_lens[b]), as per-request causal tiles;
// * shared: cached blocks read by more than one query token, loaded once for all their readers;
// * unique: cached blocks read by one query token (decode-only blocks), gathered by id.

#ifndef DYNATTN_UNIFIED_H_
#define DYNATTN_UNIFIED_H_

#include <cstdint>
#include <string>

#include "dynattn/cache.h"
#include "dynattn/export.h"
#include "dynattn/ops.h"
#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn {

/// A cache whose token slots are grouped in blocks, addressed through per-request block tables:
/// position p of a request whose table row is `ids` lives in slot
/// `ids[p / block_size] * block_stride + p % block_size` of `cache`.
///
/// `block_stride` is `block_size` for a plain paged cache. Engines whose blocks hold more than one
/// layer (KsanaLLM pools) or whose pages are head-major (FlashInfer HND) use a larger stride, so
/// that their own block ids address their memory as it is (see dynattn/adapters.h).
///
/// Like a CacheDesc, a BlockCache is trusted by design: its memory is neither bounds-checked
/// beyond `num_slots` nor checked for overlap with the call's tensors.
struct BlockCache {
  CacheDesc cache;           ///< Element format and planes; valid slots are [0, cache.num_slots).
  int block_size = 0;        ///< Tokens per block, >= 1.
  int64_t block_stride = 0;  ///< Slots between block ids i and i + 1; 0 means `block_size`.
  int64_t num_blocks = 0;    ///< Valid block ids are [0, num_blocks).

  /// Slots between consecutive block ids.
  int64_t Stride() const { return block_stride > 0 ? block_stride : block_size; }
};

/// Builds the block cache of a PMX cache tensor (any of layouts 0-3, MaxT = num_blocks *
/// block_size) and its optional scale tensor. `attrs.cache_mode` and `attrs.page_size` are
/// ignored: the block table replaces them.
DYNATTN_EXPORT Status MakePmxBlockCache(const TensorView& cache, const TensorView& scale,
                                        const CacheAttrs& attrs, int num_kv_heads, int head_dim,
                                        int block_size, BlockCache* out);

/// Unified attention attributes (the fields of AttentionAttrs, in the same order; always causal).
struct UnifiedAttentionAttrs {
  int num_heads = 0;     ///< Query heads Hq.
  int num_kv_heads = 0;  ///< Hkv; 0 means Hq. Hq must be a multiple of Hkv (GQA).
  int head_dim = 0;      ///< Dk: queries and keys, any value >= 1.
  /// Adds slope_h * (key position - query position), spec pmx-ops §5.5, with the standard slopes;
  /// an `alibi_slopes` input turns it on with its own slopes instead.
  bool is_alibi = false;
  int window_left = -1;          ///< Sliding window, as AttentionAttrs::window_left.
  float logits_soft_cap = 0.0f;  ///< Logit soft-cap, as AttentionAttrs::logits_soft_cap.
  float softmax_scale = 0.0f;    ///< Score scale, as AttentionAttrs::softmax_scale.
  int head_dim_v = 0;            ///< Dv, as AttentionAttrs::head_dim_v.
  bool value_from_key = false;   ///< Values are the keys' first Dv elements, as in AttentionAttrs.
  Precision precision = Precision::kExact;  ///< Numerics tier, as AttentionAttrs::precision.
};

/// Unified attention tensors. Index tensors are int64 or int32 (widened once, at plan time).
struct UnifiedAttentionArgs {
  TensorView query;          ///< (T, Hq, D), fp32, fp16 or bf16: the step's flattened query tokens.
  TensorView current_key;    ///< (T, Hkv, D), dtype of query: the fresh keys, written first.
  TensorView current_value;  ///< (T, Hkv, D), dtype of query.
  TensorView query_start_loc;  ///< (B+1): request b owns tokens [qsl[b], qsl[b+1]); qsl[B] = T.
  TensorView context_lens;     ///< (B): tokens of request b already in the cache.
  TensorView block_table;      ///< (B, max_blocks): physical block ids; entries past a request's
                               ///< last block (context + query tokens) are never read.
  /// Optional (B), with `key_counts`: a context shard. Request b's blocks hold positions
  /// [key_offsets[b], key_offsets[b] + key_counts[b]) of the whole request (block_table entry j
  /// holds positions key_offsets[b] + j * block_size onward); context_lens[b] stays the position
  /// of its first query token in the whole request; only the fresh tokens inside the shard are
  /// written (docs/numerics.md, "Context shards").
  TensorView key_offsets;
  TensorView key_counts;  ///< Optional (B), with `key_offsets`: the keys the shard holds.
  const BlockCache* cache = nullptr;  ///< In/out cache; the fresh K/V are written into it.
  TensorView k_scale;  ///< fp8 caches: optional 0-d fp32, replaces cache->cache.key.tensor_scale.
  TensorView v_scale;  ///< fp8 caches: optional 0-d fp32, replaces cache->cache.value.tensor_scale.
  TensorView sinks;    ///< Optional fp32 (Hq): per-head attention sinks (CPU memory).
  TensorView alibi_slopes;  ///< Optional fp32 (Hq) ALiBi slopes (CPU memory); turns ALiBi on.
  TensorView attn_output;   ///< Out (T, Hq, D), dtype of query.
  TensorView lse;  ///< Optional out (T, Hq) fp32: natural-log log-sum-exp of each row's scores.
                   ///< A Run may leave out the lse its plan was made with (then none is made).
};

/// Writes the fresh keys and values into the cache (quantizing them as the cache's format says),
/// then computes attention for every token of the step. Validates every input before it writes
/// anything, including that no two fresh tokens share a slot and that no fresh token overwrites a
/// slot another request reads as context in this step.
DYNATTN_EXPORT Status UnifiedAttention(const UnifiedAttentionAttrs& attrs,
                                       const UnifiedAttentionArgs& args,
                                       const RunOptions& options = {});

/// What the planner made of a step, for logging and for bucketing captured graphs (the tuple of
/// upstream's `_get_unified_config`).
struct UnifiedStepSummary {
  /// "c", "s", "u" for each path present, "-" for each absent, e.g. "csu", "c-u", "cs-"; a
  /// context shard's step (key_offsets) runs on one request-tiled path: "shard".
  std::string phase;
  int64_t query_len = 0;          ///< T, the step's query tokens.
  int64_t num_shared_blocks = 0;  ///< Distinct cached blocks read by more than one query token.
  int64_t num_unique_blocks = 0;  ///< Distinct cached blocks read by exactly one query token.
  int64_t num_logits = 0;         ///< Requests with at least one query token (last token each).
  int64_t num_work_items = 0;     ///< Parallel work items of the plan (all paths).
  int64_t cache_bytes_read = 0;   ///< K, V and scale bytes the plan loads from the cache.
};

/// Validates a step and describes its plan without writing anything.
DYNATTN_EXPORT Status DescribeUnifiedStep(const UnifiedAttentionAttrs& attrs,
                                          const UnifiedAttentionArgs& args,
                                          UnifiedStepSummary* summary);

}  // namespace dynattn

#endif  // DYNATTN_UNIFIED_H_
