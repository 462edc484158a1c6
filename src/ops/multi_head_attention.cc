// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadAttention (spec pmx-ops §5): packed queries over packed keys and
// values, which the kernels see as an unquantized cache addressed by kvstarts.

#include "dynattn/plan.h"
#include "src/context.h"
#include "src/ops/op_plans.h"
#include "src/validate.h"

namespace dynattn {

using internal::OpKind;

Status PlanMultiHeadAttention(const AttentionAttrs& attrs,
                              const MultiHeadAttentionArgs& caller_args, Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  MultiHeadAttentionArgs args = caller_args;
  for (TensorView* index : {&args.seqstarts, &args.kvstarts, &args.decoding_batches,
                            &args.max_seqlen, &args.max_kvlen}) {
    *index = widen(*index);
  }
  internal::MultiHeadAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadAttention(attrs, args, &call));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(
      internal::StartPlan(OpKind::kMultiHeadAttention, call.attention.kv.cache, "query", &s));
  s->attention = call.attention;
  s->OwnIndexArrays();
  internal::PlanAttentionWork(s.get());
  internal::RecordTensors({{"query", args.query},
                           {"key", args.key},
                           {"value", args.value},
                           {"attn_mask", args.attn_mask},
                           {"attn_output", args.attn_output}},
                          s.get());
  plan->Reset(std::move(s));
  return Status::Ok();
}

Status RunMultiHeadAttention(const Plan& plan, const MultiHeadAttentionArgs& args,
                             Context* context) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::CheckRun(plan, OpKind::kMultiHeadAttention, context, &s));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("query", args.query));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("key", args.key));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("value", args.value));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("attn_mask", args.attn_mask));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("attn_output", args.attn_output));
  internal::AttentionProblem attention = s->attention;
  attention.query = args.query.data;
  attention.output = args.attn_output.data;
  attention.mask = args.attn_mask.present() ? args.attn_mask.data : nullptr;
  attention.kv.cache.key.data = args.key.data;
  attention.kv.cache.value.data = args.value.data;
  const internal::BackendKernels& row = *s->kernels;
  return row.run_attention(row, attention, s->attention_plan, context->state());
}

Status MultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                          const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(PlanMultiHeadAttention(attrs, args, &plan));
  internal::PooledContext context(options.num_threads);
  return RunMultiHeadAttention(plan, args, context.get());
}

}  // namespace dynattn
