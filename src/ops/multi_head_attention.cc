// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadAttention (spec pmx-ops §5): packed queries over packed keys and
// values, which the kernels see as an unquantized cache addressed by kvstarts.

#include "dynattn/plan.h"
#include "src/ops/plan_run.h"

namespace dynattn::internal {

template <>
struct OpTraits<MultiHeadAttentionArgs>
    : OpDeclaration<AttentionAttrs, MultiHeadAttentionCall, AttentionWork,
                    OpKind::kMultiHeadAttention, &ValidateMultiHeadAttention> {
  static constexpr const char* kPlacedBy = "query";
  static constexpr bool kCacheTensors = false;
  static bool Quantized(const Attrs&) { return false; }
  static const CacheDesc& CacheOf(const Call& call, const MultiHeadAttentionArgs&) {
    return call.attention.kv.cache;
  }

  static void Plan(const Attrs&, const Call& call, const MultiHeadAttentionArgs&, Work* work,
                   PlanState* state) {
    work->attention = call.attention;
    state->OwnIndexArrays();
    PlanAttentionWork(work, state);
  }

  static Status Run(const PlanState& s, const Work& planned, const MultiHeadAttentionArgs& args,
                    const LayerAttrs* layer, ContextState* context) {
    // The packed K/V are the problem's cache: its planes move to this call's tensors (their row
    // strides are its slot strides).
    CacheDesc cache = planned.attention.kv.cache;
    cache.key.data = args.key.data;
    cache.key.slot_stride = RowStride(args.key);
    // Without a value tensor (value_from_key, which the plan checked) the values are the keys.
    const TensorView& values = args.value.present() ? args.value : args.key;
    cache.value.data = values.data;
    cache.value.slot_stride = RowStride(values);
    AttentionProblem attention;
    DYNATTN_RETURN_IF_ERROR(AttentionFor(planned.attention,
                                         {args.query, args.attn_output, args.attn_mask, args.lse},
                                         cache, layer, &attention));
    const AttentionPlan& work = s.AttentionPlanFor(planned, attention.window_left);
    const BackendKernels& row = *s.kernels;
    // Every allocation of the Run happens here, before its first write.
    DYNATTN_RETURN_IF_ERROR(
        row.reserve(row, {.attention = &attention, .attention_plan = &work}, context));
    return row.run_attention(row, attention, work, context);
  }
};

}  // namespace dynattn::internal

namespace dynattn {

DYNATTN_DEFINE_ATTENTION_ENTRY_POINTS(MultiHeadAttention, AttentionAttrs)

}  // namespace dynattn
