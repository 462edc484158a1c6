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

/// What every summary gives: the step's tokens and logits, its work items and the cache bytes
/// of the keys they read (`rows` keys per KV head item, K and V).
UnifiedStepSummary BaseSummary(const internal::UnifiedStep& step, size_t items, int64_t rows,
                               const CacheDesc& cache) {
  UnifiedStepSummary s;
  s.query_len = step.Tokens();
  for (int64_t b = 0; b < step.num_requests; ++b) s.num_logits += step.QueryLen(b) > 0;
  s.num_work_items = static_cast<int64_t>(items);
  const internal::RowBytes bytes = internal::RowBytesOf(cache);
  s.cache_bytes_read = 2 * rows * static_cast<int64_t>(bytes.row + bytes.scales);
  return s;
}

template <class Item>
int64_t KeysRead(const std::vector<Item>& items) {
  int64_t rows = 0;
  for (const Item& w : items) rows += w.key_end - w.key_begin;
  return rows;
}

UnifiedStepSummary Summarize(const internal::UnifiedStep& step, const internal::UnifiedPlan& plan,
                             const CacheDesc& cache) {
  UnifiedStepSummary s =
      BaseSummary(step, plan.request_items.size() + plan.shared_items.size(),
                  KeysRead(plan.request_items) + KeysRead(plan.shared_items), cache);
  s.num_shared_blocks = plan.num_shared_blocks;
  s.num_unique_blocks = plan.num_unique_blocks;
  bool causal = false, unique = false;
  for (internal::UnifiedPath path : plan.request_paths) {
    causal |= path == internal::UnifiedPath::kCausal;
    unique |= path == internal::UnifiedPath::kUnique;
  }
  s.phase = std::string(causal ? "c" : "-") + (plan.shared_items.empty() ? "-" : "s") +
            (unique ? "u" : "-");
  return s;
}

/// A context shard's summary: phase "shard", its request tiles' items and the keys they read.
UnifiedStepSummary SummarizeShard(const internal::UnifiedStep& step,
                                  const internal::AttentionPlan& plan, const CacheDesc& cache) {
  UnifiedStepSummary s = BaseSummary(step, plan.items.size(), KeysRead(plan.items), cache);
  s.phase = "shard";
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

  static void Plan(const Attrs& attrs, const Call& call, const UnifiedAttentionArgs& args,
                   Work* work, PlanState* s) {
    work->write = call.write;
    work->attention = call.attention;
    work->step = call.step;
    s->OwnIndexArrays();
    work->block_cache = *args.cache;
    RecordCache({}, {}, false, &args.cache->cache, call.attention.kv.cache, s);
    if (attrs.value_from_key) s->cache.values_from_keys = ValueDimOf(attrs);
    if (call.sharded) return PlanShard(work, s, args.cache->cache);
    work->plan = PlanUnified(work->step);
    // A token must not merge parts of both tiers: a step with shared prefixes runs the exact tier
    // where the fast row has no shared-path kernel (int8 and int4 caches: their fast kernel is
    // the decode's, and shared items are many query vectors).
    if (!work->plan.shared_items.empty() && s->kernels->precision == Precision::kFast &&
        s->kernels->cpu.attend_shared_fast == nullptr) {
      s->kernels = KernelsFor(s->kernels->device, s->kernels->elem);
    }
#ifndef NDEBUG
    // Debug builds prove on every plan that each (query, key) pair has exactly one path.
    const std::string coverage = CheckCoverage(work->step, work->plan);
    if (!coverage.empty()) {
      std::fprintf(stderr, "libdynattn: unified plan coverage: %s\n", coverage.c_str());
      std::abort();
    }
#endif
    s->workspace_floats =
        static_cast<size_t>(work->plan.num_states * StateFloats(work->attention.padded_value_dim));
    work->summary = Summarize(work->step, work->plan, args.cache->cache);
  }

  /// A context shard's step: request tiles over its blocks (the three-path planner assumes the
  /// whole context), as MultiHeadCacheAttention plans them.
  static void PlanShard(Work* work, PlanState* s, const CacheDesc& cache) {
    work->sharded = true;
    work->shard_plan = PlanAttention(work->attention);
    s->workspace_floats = static_cast<size_t>(work->shard_plan.num_states *
                                              StateFloats(work->attention.padded_value_dim));
    work->summary = SummarizeShard(work->step, work->shard_plan, cache);
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
    const BackendKernels& row = *s.kernels;
    const WriteProblem write = WriteFor(planned.write, args.current_key, args.current_value, cache);
    if (planned.sharded) {
      const AttentionPlan& work = s.ShardPlanFor(planned, attention.window_left);
      // Every allocation of the Run happens here, before its first write.
      DYNATTN_RETURN_IF_ERROR(row.reserve(
          row, {.write = &write, .attention = &attention, .attention_plan = &work}, context));
      DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context));
      return row.run_attention(row, attention, work, context);
    }
    const UnifiedPlan& work = s.UnifiedPlanFor(planned, attention.window_left);
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
