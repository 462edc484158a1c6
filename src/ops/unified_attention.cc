// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention (spec unified-and-ksana §6): validate everything, write the fresh K/V, plan
// the three paths, run them, merge every token's parts.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cache_rows.h"
#include "core/plan_unified.h"
#include "core/softmax_state.h"
#include "dynattn/plan.h"
#include "dynattn/unified.h"
#include "src/ops/plan_run.h"
#include "src/unified/unified_call.h"

namespace dynattn {
namespace {

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
  const internal::RowBytes bytes = internal::RowBytesOf(cache);
  s.cache_bytes_read = 2 * rows * static_cast<int64_t>(bytes.row + bytes.scales);
  return s;
}

}  // namespace
}  // namespace dynattn

namespace dynattn::internal {

template <>
struct OpTraits<UnifiedAttentionArgs>
    : OpDeclaration<UnifiedAttentionAttrs, UnifiedCall, UnifiedWork, OpKind::kUnifiedAttention,
                    &ValidateUnifiedAttention> {
  static constexpr const char* kPlacedBy = "cache";
  static constexpr bool kCacheTensors = false;  // a BlockCache, not PMX tensors
  static bool Quantized(const Attrs&) { return false; }
  static const CacheDesc& CacheOf(const Call&, const UnifiedAttentionArgs& args) {
    return args.cache->cache;
  }

  static void Plan(const Attrs&, const Call& call, const UnifiedAttentionArgs& args, Work* work,
                   PlanState* s) {
    work->write = call.write;
    work->attention = call.attention;
    work->step = call.step;
    s->OwnIndexArrays();
    work->plan = PlanUnified(work->step);
#ifndef NDEBUG
    // Debug builds prove on every plan that each (query, key) pair has exactly one path.
    const std::string coverage = CheckCoverage(work->step, work->plan);
    if (!coverage.empty()) {
      std::fprintf(stderr, "libdynattn: unified plan coverage: %s\n", coverage.c_str());
      std::abort();
    }
#endif
    s->workspace_floats =
        static_cast<size_t>(work->plan.num_states * StateFloats(work->attention.padded_dim));
    work->summary = Summarize(work->step, work->plan, args.cache->cache);
    RecordCache({}, {}, false, &args.cache->cache, call.attention.kv.cache, s);
    work->block_cache = *args.cache;
  }

  static Status Run(const PlanState& s, const Work& planned, const UnifiedAttentionArgs& args,
                    const LayerAttrs* layer, ContextState* context) {
    if (args.cache == nullptr) return Status::Invalid("cache", "is required but null");
    const BlockCache& blocks = planned.block_cache;
    if (args.cache->block_size != blocks.block_size || args.cache->Stride() != blocks.Stride() ||
        args.cache->num_blocks != blocks.num_blocks) {
      return Status::Invalid("cache",
                             "block_size, block_stride and num_blocks must match the plan's");
    }
    CacheDesc cache;
    DYNATTN_RETURN_IF_ERROR(s.RunCache({}, {}, &args.cache->cache, &cache));
    AttentionProblem attention;
    DYNATTN_RETURN_IF_ERROR(AttentionFor(
        planned.attention, {args.query, args.attn_output, {}, args.lse}, cache, layer, &attention));
    const UnifiedPlan& work = s.UnifiedPlanFor(planned, attention.window_left);
    const BackendKernels& row = *s.kernels;
    const WriteProblem write = WriteFor(planned.write, args.current_key, args.current_value, cache);
    // Every allocation of the Run happens here, before its first write.
    DYNATTN_RETURN_IF_ERROR(row.reserve(
        row, {.write = &write, .attention = &attention, .unified_plan = &work}, context));
    DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context));
    return row.run_unified(row, attention, work, context);
  }
};

}  // namespace dynattn::internal

namespace dynattn {

DYNATTN_DEFINE_ATTENTION_ENTRY_POINTS(UnifiedAttention, UnifiedAttentionAttrs)

Status DescribeUnifiedStep(const UnifiedAttentionAttrs& attrs, const UnifiedAttentionArgs& args,
                           UnifiedStepSummary* summary) {
  if (summary == nullptr) return Status::Invalid("summary", "must not be null");
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(PlanUnifiedAttention(attrs, args, &plan));
  *summary = *plan.unified_summary();
  return Status::Ok();
}

}  // namespace dynattn
