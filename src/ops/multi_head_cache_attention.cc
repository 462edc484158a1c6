// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadCacheAttention (spec pmx-ops §6): all writes first, then attention
// that reads each request's context straight from the (dequantized) cache.

#include "dynattn/dynattn.h"
#include "hwy/targets.h"
#include "src/execute.h"
#include "src/validate.h"

namespace dynattn {

Status MultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                               const MultiHeadCacheAttentionArgs& args, const RunOptions& options) {
  internal::MultiHeadCacheAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadCacheAttention(attrs, args, &call));
  internal::WriteNewTokens(call.write, options);
  internal::RunAttention(call.attention, options);
  return Status::Ok();
}

const char* CpuTargetName() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(usable & -usable);  // the best one: lowest bit
}

}  // namespace dynattn
