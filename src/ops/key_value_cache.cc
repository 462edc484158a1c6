// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.KeyValueCache (spec pmx-ops §4): every write first, then the gather of every
// request's dequantized context.

#include "dynattn/plan.h"
#include "src/context.h"
#include "src/ops/op_plans.h"
#include "src/validate.h"

namespace dynattn {

using internal::OpKind;

Status PlanKeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& caller_args,
                         Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  KeyValueCacheArgs args = caller_args;
  for (TensorView* index : {&args.seqstarts, &args.kvstarts, &args.cachestarts, &args.start_pos,
                            &args.max_seqlen, &args.max_kvlen}) {
    *index = widen(*index);
  }
  internal::KeyValueCacheCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateKeyValueCache(attrs, args, &call));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(
      internal::StartPlan(OpKind::kKeyValueCache, call.write.kv.cache, "current_key", &s));
  s->write = call.write;
  s->gather = call.gather;
  s->OwnIndexArrays();
  s->gather_pieces = internal::PlanGather(s->gather.batch);
  internal::RecordTensors({{"current_key", args.current_key},
                           {"current_value", args.current_value},
                           {"key", args.key},
                           {"value", args.value}},
                          s.get());
  internal::RecordCache(args.cache, args.scale, attrs.cache.quant_bit != 0, args.cache_desc,
                        call.write.kv.cache, s.get());
  plan->Reset(std::move(s));
  return Status::Ok();
}

Status RunKeyValueCache(const Plan& plan, const KeyValueCacheArgs& args, Context* context) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::CheckRun(plan, OpKind::kKeyValueCache, context, &s));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("current_key", args.current_key));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("current_value", args.current_value));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("key", args.key));
  DYNATTN_RETURN_IF_ERROR(s->CheckTensor("value", args.value));
  CacheDesc cache;
  DYNATTN_RETURN_IF_ERROR(s->RunCache(args.cache, args.scale, args.cache_desc, &cache));
  internal::WriteProblem write = s->write;
  write.current_key = args.current_key.data;
  write.current_value = args.current_value.data;
  write.kv.cache = cache;
  internal::GatherProblem gather = s->gather;
  gather.key = args.key.data;
  gather.value = args.value.data;
  gather.kv.cache = cache;
  const internal::BackendKernels& row = *s->kernels;
  DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context->state()));
  return row.gather_context(row, gather, s->gather_pieces, context->state());
}

Status KeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                     const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(PlanKeyValueCache(attrs, args, &plan));
  internal::PooledContext context(options.num_threads);
  return RunKeyValueCache(plan, args, context.get());
}

}  // namespace dynattn
