// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention (spec unified-and-ksana §6): validate everything, write the fresh K/V, plan
// the three paths, run them, merge every token's parts.

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dynattn/unified.h"
#include "src/dispatch.h"
#include "src/unified/plan_unified.h"
#include "src/unified/unified_call.h"
#include "src/validate.h"

namespace dynattn {
namespace {

/// Bytes of one cached row of K or V, with its scales.
int64_t RowBytes(const CacheDesc& c) {
  const int64_t elements = c.elem == CacheElem::kF32    ? 4 * c.head_dim
                           : c.elem == CacheElem::kF16  ? 2 * c.head_dim
                           : c.elem == CacheElem::kInt8 ? c.head_dim
                                                        : c.head_dim / 2;
  if (c.elem != CacheElem::kInt8 && c.elem != CacheElem::kInt4) return elements;
  return elements + c.head_dim / c.quant_group * (c.scale_type == ScaleType::kF16 ? 2 : 4);
}

UnifiedStepSummary Summarize(const internal::UnifiedStep& step, const internal::UnifiedPlan& plan,
                             const CacheDesc& cache) {
  UnifiedStepSummary s;
  s.query_len = step.Tokens();
  s.num_shared_blocks = plan.num_shared_blocks;
  s.num_unique_blocks = plan.num_unique_blocks;
  for (int64_t b = 0; b < step.num_requests; ++b) s.num_logits += step.QueryLen(b) > 0;
  bool causal = false, unique = false;
  for (internal::UnifiedPath path : plan.request_paths) {
    causal |= path == internal::UnifiedPath::kCausal;
    unique |= path == internal::UnifiedPath::kUnique;
  }
  s.phase = std::string(causal ? "c" : "-") + (plan.shared_items.empty() ? "-" : "s") +
            (unique ? "u" : "-");
  s.num_work_items = static_cast<int64_t>(plan.request_items.size() + plan.shared_items.size());
  int64_t rows = 0;
  for (const internal::WorkItem& w : plan.request_items) rows += w.key_end - w.key_begin;
  for (const internal::SharedItem& w : plan.shared_items) rows += w.key_end - w.key_begin;
  s.cache_bytes_read = 2 * rows * RowBytes(cache);
  return s;
}

}  // namespace

Status UnifiedAttention(const UnifiedAttentionAttrs& attrs, const UnifiedAttentionArgs& args,
                        const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  internal::UnifiedCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateUnifiedAttention(attrs, args, &call));
  const CacheDesc& cache = args.cache->cache;
  const internal::BackendKernels* kernels = internal::KernelsFor(cache.device, cache.elem);
  if (kernels == nullptr) return internal::NoBackend("cache", cache.device);
  kernels->write_new_tokens(call.write, options);
  const internal::UnifiedPlan plan = internal::PlanUnified(call.step);
#ifndef NDEBUG
  // Debug builds prove on every call that each (query, key) pair has exactly one path.
  const std::string coverage = internal::CheckCoverage(call.step, plan);
  if (!coverage.empty()) {
    std::fprintf(stderr, "libdynattn: unified plan coverage: %s\n", coverage.c_str());
    std::abort();
  }
#endif
  kernels->run_unified(call.attention, plan, options);
  return Status::Ok();
}

Status DescribeUnifiedStep(const UnifiedAttentionAttrs& attrs, const UnifiedAttentionArgs& args,
                           UnifiedStepSummary* summary) {
  internal::UnifiedCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateUnifiedAttention(attrs, args, &call));
  *summary = Summarize(call.step, internal::PlanUnified(call.step), args.cache->cache);
  return Status::Ok();
}

}  // namespace dynattn
