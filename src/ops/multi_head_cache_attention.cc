// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadCacheAttention (spec pmx-ops §6): validate and plan, then all writes
// first, then attention that reads each request's context straight from the (dequantized) cache.

#include "dynattn/dynattn.h"
#include "src/ops/plan_run.h"

namespace dynattn::internal {

template <>
struct OpTraits<MultiHeadCacheAttentionArgs>
    : OpDeclaration<MultiHeadCacheAttentionAttrs, MultiHeadCacheAttentionCall, CacheAttentionWork,
                    OpKind::kMultiHeadCacheAttention, &ValidateMultiHeadCacheAttention> {
  static constexpr const char* kPlacedBy = "cache";
  static constexpr bool kCacheTensors = true;
  static bool Quantized(const Attrs& attrs) { return attrs.cache.quant_bit != 0; }
  static const CacheDesc& CacheOf(const Call& call, const MultiHeadCacheAttentionArgs&) {
    return call.attention.kv.cache;
  }

  static void Plan(const Attrs& attrs, const Call& call, const MultiHeadCacheAttentionArgs& args,
                   Work* work, PlanState* state) {
    work->write = call.write;
    work->attention = call.attention;
    state->OwnIndexArrays();
    PlanAttentionWork(work, state);
    RecordCache(args.cache, args.scale, Quantized(attrs), args.cache_desc, call.attention.kv.cache,
                state);
    if (attrs.attention.value_from_key) {
      state->cache.values_from_keys = ValueDimOf(attrs.attention);
    }
  }

  static Status Run(const PlanState& s, const Work& planned,
                    const MultiHeadCacheAttentionArgs& args, const LayerAttrs* layer,
                    ContextState* context) {
    CacheDesc cache;
    DYNATTN_RETURN_IF_ERROR(s.RunCache(args.cache, args.scale, args.cache_desc, &cache));
    AttentionProblem attention;
    DYNATTN_RETURN_IF_ERROR(AttentionFor(planned.attention,
                                         {args.query, args.attn_output, args.attn_mask, args.lse},
                                         cache, layer, &attention));
    const AttentionPlan& work = s.AttentionPlanFor(planned, attention.window_left);
    const BackendKernels& row = *s.kernels;
    const WriteProblem write = WriteFor(planned.write, args.current_key, args.current_value, cache);
    // Every allocation of the Run happens here, before its first write.
    DYNATTN_RETURN_IF_ERROR(row.reserve(
        row, {.write = &write, .attention = &attention, .attention_plan = &work}, context));
    DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context));
    return row.run_attention(row, attention, work, context);
  }
};

}  // namespace dynattn::internal

namespace dynattn {

DYNATTN_DEFINE_ATTENTION_ENTRY_POINTS(MultiHeadCacheAttention, MultiHeadCacheAttentionAttrs)

}  // namespace dynattn
