// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The unified-attention benchmark: a decode step whose requests share a long prompt prefix, as a
// server sees after a common system prompt. UnifiedAttention reads the shared blocks once for
// all their readers; the same step as independent decodes (MultiHeadCacheAttention, paged, one
// page per block) reads the prefix once per request. Both run over the very same cache memory,
// so the comparison isolates what the unified plan saves.

#ifndef DYNATTN_BENCH_SHARED_PREFIX_H_
#define DYNATTN_BENCH_SHARED_PREFIX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "dynattn/unified.h"
#include "reference/reference.h"

namespace dynattn::bench {

/// The shape of a shared-prefix decode step.
struct SharedPrefixShape {
  int requests = 64;      ///< Decoding requests, one new token each.
  int64_t prefix = 2048;  ///< Tokens of the shared prefix, a multiple of `block_size`.
  int64_t own = 256;      ///< Cached tokens of each request after the prefix (its own blocks).
  int num_heads = 32;     ///< Query heads Hq.
  int num_kv_heads = 8;   ///< KV heads Hkv.
  int head_dim = 128;     ///< D.
  int block_size = 16;    ///< Tokens per block (and per page of the decodes).
  int quant_bit = 0;      ///< 0 (fp16 cache) or 8 (int8, fp16 scales).
  int quant_group = 8;    ///< Elements per scale group (int8 only).
  int cache_layout = 3;   ///< PMX layout of the one-layer cache tensor.
};

/// A step's tensors, named as the specs name them: the unified inputs (query, current_key,
/// current_value, query_start_loc, context_lens, block_table, cache, scale) and its twin's
/// (seqstarts, kvstarts, cachestarts = block id x block_size, start_pos, decoding_batches,
/// max_seqlen, max_kvlen). Both read and write the same `cache` and `scale`; they write the same
/// values to the same slots, so either may run any number of times, in any order.
struct SharedPrefixStep {
  SharedPrefixShape shape;
  dynattn_ref::Tensors inputs;
};

/// The benchmark's steps: fp16 and int8 (group 8) caches, 64 requests, prefix 2048, 256 own.
std::vector<SharedPrefixShape> SharedPrefixSteps();

/// A stable name, e.g. "shared_prefix_64x2048+256_f16".
std::string SharedPrefixName(const SharedPrefixShape& shape);

/// Builds a step: fp16 activations; every block holds valid random history; block ids are
/// shuffled. Request b reads the prefix blocks, then `own / block_size` blocks of its own, and
/// writes its new token at position prefix + own.
SharedPrefixStep BuildSharedPrefixStep(const SharedPrefixShape& shape, uint64_t seed);

/// UnifiedAttention on the step into `out` (fp16 (T, Hq, D), allocated on first use).
Status RunUnified(SharedPrefixStep* step, dynattn_ref::Array* out, const RunOptions& options = {});

/// The same step as independent decodes: MultiHeadCacheAttention, paged, page_size = block_size.
Status RunDecodes(SharedPrefixStep* step, dynattn_ref::Array* out, const RunOptions& options = {});

/// The unified plan of the step (DescribeUnifiedStep).
Status DescribeUnified(SharedPrefixStep* step, UnifiedStepSummary* summary);

/// The unified call's attributes for a step of this shape.
UnifiedAttentionAttrs MakeUnifiedAttrs(const SharedPrefixShape& shape);

/// The unified call's arguments over the step's tensors, writing into `out` (allocated on first
/// use); `cache` must outlive them.
Status UnifiedArgs(SharedPrefixStep* step, dynattn_ref::Array* out, BlockCache* cache,
                   UnifiedAttentionArgs* args);

/// K, V and scale bytes the independent decodes read: every context row of every request (the
/// prefix once per request), every KV head.
double DecodesCacheBytes(const SharedPrefixShape& shape);

/// Floating-point operations of the step's attention: 4 x (query, key) pairs x D x Hq.
double SharedPrefixFlops(const SharedPrefixShape& shape);

/// The float64 reference's attributes for the step (dynattn_ref::UnifiedAttention).
dynattn_ref::Attrs SharedPrefixReferenceAttrs(const SharedPrefixShape& shape);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_SHARED_PREFIX_H_
