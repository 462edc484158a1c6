// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadCacheAttention (spec pmx-ops §6): validate and plan, then all writes
// first, then attention that reads each request's context straight from the (dequantized) cache.

#include "dynattn/dynattn.h"
#include "src/aliasing.h"
#include "src/context.h"
#include "src/op_fields.h"
#include "src/ops/op_pipeline.h"

namespace dynattn {
namespace {

/// The aliasing rule (src/aliasing.h) over the call's tensors.
Status CheckAliasing(const MultiHeadCacheAttentionArgs& a, bool quantized,
                     internal::CallPhase phase, const LayerAttrs* layer = nullptr) {
  return internal::CheckOpAliasing(a, a.cache_desc == nullptr, quantized, phase, layer);
}

}  // namespace

Status PlanMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                   const MultiHeadCacheAttentionArgs& caller_args, Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  MultiHeadCacheAttentionArgs args = caller_args;
  internal::WidenIndexTensors(&widen, &args);
  internal::MultiHeadCacheAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadCacheAttention(attrs, args, &call));
  DYNATTN_RETURN_IF_ERROR(
      CheckAliasing(caller_args, attrs.cache.quant_bit != 0, internal::CallPhase::kPlan));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(internal::StartPlan(internal::OpKind::kMultiHeadCacheAttention,
                                              call.attention.kv.cache, "cache", &s));
  s->write = call.write;
  s->attention = call.attention;
  s->OwnIndexArrays();
  internal::PlanAttentionWork(s.get());
  internal::RecordTensors(internal::DataTensorsOf(args), s.get());
  internal::RecordCache(args.cache, args.scale, attrs.cache.quant_bit != 0, args.cache_desc,
                        call.attention.kv.cache, s.get());
  internal::StateAccess::Reset(plan, std::move(s));
  return Status::Ok();
}

Status RunMultiHeadCacheAttention(const Plan& plan, const MultiHeadCacheAttentionArgs& args,
                                  Context* context, const LayerAttrs* layer) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(
      internal::CheckRun(plan, internal::OpKind::kMultiHeadCacheAttention, context, &s));
  internal::ContextLease lease(internal::StateOf(*context));
  DYNATTN_RETURN_IF_ERROR(lease.status());
  DYNATTN_RETURN_IF_ERROR(internal::CheckTensors(*s, internal::DataTensorsOf(args)));
  CacheDesc cache;
  DYNATTN_RETURN_IF_ERROR(s->RunCache(args.cache, args.scale, args.cache_desc, &cache));
  DYNATTN_RETURN_IF_ERROR(
      CheckAliasing(args, s->cache.scale.present(), internal::CallPhase::kRun, layer));
  internal::AttentionProblem attention =
      internal::AttentionFor(*s, args.query, args.attn_output, cache);
  // The plan decides whether there is a mask: an empty one (no elements) counts as none.
  attention.mask = s->attention.mask != nullptr ? args.attn_mask.data : nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::ApplyLayer(layer, &attention));
  const internal::AttentionPlan& work = s->AttentionPlanFor(attention.window_left);
  const internal::BackendKernels& row = *s->kernels;
  const internal::WriteProblem write =
      internal::WriteFor(*s, args.current_key, args.current_value, cache);
  // Every allocation of the Run happens here, before its first write.
  DYNATTN_RETURN_IF_ERROR(
      row.reserve(row, {.write = &write, .attention = &attention, .attention_plan = &work},
                  internal::StateOf(*context)));
  DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, internal::StateOf(*context)));
  return row.run_attention(row, attention, work, internal::StateOf(*context));
}

Status MultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                               const MultiHeadCacheAttentionArgs& args, const RunOptions& options) {
  return internal::PlanAndRun(attrs, args, options, &PlanMultiHeadCacheAttention,
                              &RunMultiHeadCacheAttention);
}

}  // namespace dynattn
