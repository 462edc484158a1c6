// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadCacheAttention (spec pmx-ops §6): validate and plan, then all writes
// first, then attention that reads each request's context straight from the (dequantized) cache.

#include "dynattn/dynattn.h"
#include "src/context.h"
#include "src/ops/op_plans.h"
#include "src/validate.h"

namespace dynattn {

using internal::OpKind;

Status PlanMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                   const MultiHeadCacheAttentionArgs& caller_args, Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  MultiHeadCacheAttentionArgs args = caller_args;
  for (TensorView* index : {&args.seqstarts, &args.kvstarts, &args.cachestarts, &args.start_pos,
                            &args.decoding_batches, &args.max_seqlen, &args.max_kvlen}) {
    *index = widen(*index);
  }
  internal::MultiHeadCacheAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadCacheAttention(attrs, args, &call));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(
      internal::StartPlan(OpKind::kMultiHeadCacheAttention, call.attention.kv.cache, "cache", &s));
  s->write = call.write;
  s->attention = call.attention;
  s->OwnIndexArrays();
  internal::PlanAttentionWork(s.get());
  internal::RecordTensors({{"query", args.query},
                           {"current_key", args.current_key},
                           {"current_value", args.current_value},
                           {"attn_mask", args.attn_mask},
                           {"attn_output", args.attn_output}},
                          s.get());
  internal::RecordCache(args.cache, args.scale, attrs.cache.quant_bit != 0, args.cache_desc,
                        call.attention.kv.cache, s.get());
  plan->Reset(std::move(s));
  return Status::Ok();
}

Status RunMultiHeadCacheAttention(const Plan& plan, const MultiHeadCacheAttentionArgs& args,
                                  Context* context) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::CheckRun(plan, OpKind::kMultiHeadCacheAttention, context, &s));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("query", args.query));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("current_key", args.current_key));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("current_value", args.current_value));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("attn_mask", args.attn_mask));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("attn_output", args.attn_output));
  CacheDesc cache;
  DYNATTN_RETURN_IF_ERROR(s->RunCache(args.cache, args.scale, args.cache_desc, &cache));
  internal::WriteProblem write = s->write;
  write.current_key = args.current_key.data;
  write.current_value = args.current_value.data;
  write.kv.cache = cache;
  internal::AttentionProblem attention = s->attention;
  attention.query = args.query.data;
  attention.output = args.attn_output.data;
  attention.mask = args.attn_mask.present() ? args.attn_mask.data : nullptr;
  attention.kv.cache = cache;
  const internal::BackendKernels& row = *s->kernels;
  DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context->state()));
  return row.run_attention(row, attention, s->attention_plan, context->state());
}

Status MultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                               const MultiHeadCacheAttentionArgs& args, const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(PlanMultiHeadCacheAttention(attrs, args, &plan));
  internal::PooledContext context(options.num_threads);
  return RunMultiHeadCacheAttention(plan, args, context.get());
}

}  // namespace dynattn
