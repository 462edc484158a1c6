// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Validation of a unified-attention call: every rule checked before anything is written, the
// kernels' view of the call filled in on success.

#ifndef DYNATTN_SRC_UNIFIED_UNIFIED_CALL_H_
#define DYNATTN_SRC_UNIFIED_UNIFIED_CALL_H_

#include <vector>

#include "core/plan_unified.h"
#include "cpu/kernel_table.h"
#include "dynattn/unified.h"

namespace dynattn::internal {

/// A validated unified-attention call. Holds pointers into its own vectors: never copied.
struct UnifiedCall {
  WriteProblem write;          ///< The fresh K/V into the cache.
  AttentionProblem attention;  ///< Requests with kvlen = context + query tokens, block slots.
  UnifiedStep step;            ///< What the planner needs.
  std::vector<int64_t> kvstarts;
  std::vector<float> alibi_slopes;
  std::vector<float> sinks;  ///< Owned storage behind attention.sinks.
  CacheDesc cache;           ///< The block cache's descriptor with the call's fp8 scales.
  bool sharded = false;      ///< A context shard (key_offsets): planned as request tiles.

  UnifiedCall() = default;
  UnifiedCall(const UnifiedCall&) = delete;
  UnifiedCall& operator=(const UnifiedCall&) = delete;
};

Status ValidateUnifiedAttention(const UnifiedAttentionAttrs& attrs,
                                const UnifiedAttentionArgs& args, UnifiedCall* call);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_UNIFIED_UNIFIED_CALL_H_
