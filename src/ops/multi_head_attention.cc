// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadAttention (spec pmx-ops §5): packed queries over packed keys and
// values, which the kernels see as an unquantized cache addressed by kvstarts.

#include "dynattn/plan.h"
#include "src/aliasing.h"
#include "src/context.h"
#include "src/op_fields.h"
#include "src/ops/op_pipeline.h"

namespace dynattn {
namespace {

/// The aliasing rule (src/aliasing.h) over the call's tensors.
Status CheckAliasing(const MultiHeadAttentionArgs& a, internal::CallPhase phase,
                     const LayerAttrs* layer = nullptr) {
  return internal::CheckOpAliasing(a, false, false, phase, layer);
}

}  // namespace

Status PlanMultiHeadAttention(const AttentionAttrs& attrs,
                              const MultiHeadAttentionArgs& caller_args, Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  MultiHeadAttentionArgs args = caller_args;
  internal::WidenIndexTensors(&widen, &args);
  internal::MultiHeadAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadAttention(attrs, args, &call));
  DYNATTN_RETURN_IF_ERROR(CheckAliasing(caller_args, internal::CallPhase::kPlan));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(internal::StartPlan(internal::OpKind::kMultiHeadAttention,
                                              call.attention.kv.cache, "query", &s));
  s->attention = call.attention;
  s->OwnIndexArrays();
  internal::PlanAttentionWork(s.get());
  internal::RecordTensors(internal::DataTensorsOf(args), s.get());
  internal::StateAccess::Reset(plan, std::move(s));
  return Status::Ok();
}

Status RunMultiHeadAttention(const Plan& plan, const MultiHeadAttentionArgs& args, Context* context,
                             const LayerAttrs* layer) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(
      internal::CheckRun(plan, internal::OpKind::kMultiHeadAttention, context, &s));
  internal::ContextLease lease(internal::StateOf(*context));
  DYNATTN_RETURN_IF_ERROR(lease.status());
  DYNATTN_RETURN_IF_ERROR(internal::CheckTensors(*s, internal::DataTensorsOf(args)));
  DYNATTN_RETURN_IF_ERROR(CheckAliasing(args, internal::CallPhase::kRun, layer));
  // The packed K/V are the problem's cache: its planes move to this call's tensors (their row
  // strides are its slot strides).
  CacheDesc cache = s->attention.kv.cache;
  cache.key.data = args.key.data;
  cache.value.data = args.value.data;
  cache.key.slot_stride = internal::RowStride(args.key);
  cache.value.slot_stride = internal::RowStride(args.value);
  internal::AttentionProblem attention =
      internal::AttentionFor(*s, args.query, args.attn_output, cache);
  // The plan decides whether there is a mask: an empty one (no elements) counts as none.
  attention.mask = s->attention.mask != nullptr ? args.attn_mask.data : nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::ApplyLayer(layer, &attention));
  const internal::AttentionPlan& work = s->AttentionPlanFor(attention.window_left);
  const internal::BackendKernels& row = *s->kernels;
  // Every allocation of the Run happens here, before its first write.
  DYNATTN_RETURN_IF_ERROR(row.reserve(row, {.attention = &attention, .attention_plan = &work},
                                      internal::StateOf(*context)));
  return row.run_attention(row, attention, work, internal::StateOf(*context));
}

Status MultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                          const RunOptions& options) {
  return internal::PlanAndRun(attrs, args, options, &PlanMultiHeadAttention,
                              &RunMultiHeadAttention);
}

}  // namespace dynattn
