// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Validation: every rule of spec pmx-ops §7.3 and §12, checked before anything is written.
// Each function either fills the kernels' view of the call or returns a Status that names the
// offending input and the rule; nothing is written in either case.

#ifndef DYNATTN_SRC_VALIDATE_H_
#define DYNATTN_SRC_VALIDATE_H_

#include <vector>

#include "dynattn/ops.h"
#include "simd/kernel_abi.h"

namespace dynattn::internal {

/// A validated KeyValueCache call.
struct KeyValueCacheCall {
  WriteProblem write;
  GatherProblem gather;
};

/// A validated MultiHeadAttention call.
struct MultiHeadAttentionCall {
  AttentionProblem attention;
  std::vector<float> alibi_slopes;  ///< Owned storage behind attention.alibi_slopes.
};

/// A validated MultiHeadCacheAttention call.
struct MultiHeadCacheAttentionCall {
  WriteProblem write;
  AttentionProblem attention;
  std::vector<float> alibi_slopes;
};

Status ValidateKeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                             KeyValueCacheCall* call);
Status ValidateMultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                                  MultiHeadAttentionCall* call);
Status ValidateMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                       const MultiHeadCacheAttentionArgs& args,
                                       MultiHeadCacheAttentionCall* call);

/// RunOptions: 0 (all cores) or a thread count up to kMaxThreads.
Status ValidateRunOptions(const RunOptions& options);
inline constexpr int kMaxThreads = 1024;

/// ALiBi slopes of spec pmx-ops §5.5 for `num_heads` heads.
std::vector<float> AlibiSlopes(int num_heads);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_VALIDATE_H_
