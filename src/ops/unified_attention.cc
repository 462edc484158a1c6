// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention (spec unified-and-ksana §6): validate everything, write the fresh K/V, plan
// the three paths, run them, merge every token's parts.

#include "dynattn/unified.h"

namespace dynattn {

Status MakePmxBlockCache(const TensorView& cache, const TensorView& scale, const CacheAttrs& attrs,
                         int num_kv_heads, int head_dim, int block_size, BlockCache* out) {
  if (block_size < 1) {
    return Status::Invalid("block_size", "must be >= 1, got " + std::to_string(block_size));
  }
  CacheAttrs offset_attrs = attrs;
  offset_attrs.cache_mode = 0;
  BlockCache result;
  DYNATTN_RETURN_IF_ERROR(
      MakePmxCacheDesc(cache, scale, offset_attrs, num_kv_heads, head_dim, &result.cache));
  if (result.cache.num_slots % block_size != 0) {
    return Status::Invalid("cache", "MaxT = " + std::to_string(result.cache.num_slots) +
                                        " must be a multiple of block_size " +
                                        std::to_string(block_size) +
                                        " (MaxT = num_blocks * block_size)");
  }
  result.block_size = block_size;
  result.block_stride = block_size;
  result.num_blocks = result.cache.num_slots / block_size;
  *out = result;
  return Status::Ok();
}

Status UnifiedAttention(const UnifiedAttentionAttrs&, const UnifiedAttentionArgs&,
                        const RunOptions&) {
  return Status::Unsupported("unified_attention", "not implemented yet");
}

Status DescribeUnifiedStep(const UnifiedAttentionAttrs&, const UnifiedAttentionArgs&,
                           UnifiedStepSummary*) {
  return Status::Unsupported("unified_attention", "not implemented yet");
}

}  // namespace dynattn
