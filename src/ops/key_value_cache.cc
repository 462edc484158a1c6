// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.KeyValueCache (spec pmx-ops §4): every write first, then the gather of every
// request's dequantized context.

#include "dynattn/plan.h"
#include "src/aliasing.h"
#include "src/context.h"
#include "src/op_fields.h"
#include "src/ops/op_pipeline.h"

namespace dynattn {
namespace {

/// The aliasing rule (src/aliasing.h) over the call's tensors.
Status CheckAliasing(const KeyValueCacheArgs& a, bool quantized, internal::CallPhase phase) {
  return internal::CheckOpAliasing(a, a.cache_desc == nullptr, quantized, phase);
}

}  // namespace

Status PlanKeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& caller_args,
                         Plan* plan) {
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  internal::WidenedIndex widen;
  KeyValueCacheArgs args = caller_args;
  internal::WidenIndexTensors(&widen, &args);
  internal::KeyValueCacheCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateKeyValueCache(attrs, args, &call));
  DYNATTN_RETURN_IF_ERROR(
      CheckAliasing(caller_args, attrs.cache.quant_bit != 0, internal::CallPhase::kPlan));
  std::unique_ptr<internal::PlanState> s;
  DYNATTN_RETURN_IF_ERROR(internal::StartPlan(internal::OpKind::kKeyValueCache, call.write.kv.cache,
                                              "current_key", &s));
  s->write = call.write;
  s->gather = call.gather;
  s->OwnIndexArrays();
  s->gather_pieces = internal::PlanGather(s->gather.batch);
  internal::RecordTensors(internal::DataTensorsOf(args), s.get());
  internal::RecordCache(args.cache, args.scale, attrs.cache.quant_bit != 0, args.cache_desc,
                        call.write.kv.cache, s.get());
  internal::StateAccess::Reset(plan, std::move(s));
  return Status::Ok();
}

Status RunKeyValueCache(const Plan& plan, const KeyValueCacheArgs& args, Context* context) {
  const internal::PlanState* s = nullptr;
  DYNATTN_RETURN_IF_ERROR(internal::CheckRun(plan, internal::OpKind::kKeyValueCache, context, &s));
  internal::ContextLease lease(internal::StateOf(*context));
  DYNATTN_RETURN_IF_ERROR(lease.status());
  DYNATTN_RETURN_IF_ERROR(internal::CheckTensors(*s, internal::DataTensorsOf(args)));
  CacheDesc cache;
  DYNATTN_RETURN_IF_ERROR(s->RunCache(args.cache, args.scale, args.cache_desc, &cache));
  DYNATTN_RETURN_IF_ERROR(CheckAliasing(args, s->cache.scale.present(), internal::CallPhase::kRun));
  internal::GatherProblem gather = s->gather;
  gather.key = args.key.data;
  gather.value = args.value.data;
  gather.key_row_stride = internal::RowStride(args.key);
  gather.value_row_stride = internal::RowStride(args.value);
  gather.kv.cache = cache;
  const internal::BackendKernels& row = *s->kernels;
  const internal::WriteProblem write =
      internal::WriteFor(*s, args.current_key, args.current_value, cache);
  // Every allocation of the Run happens here, before its first write.
  DYNATTN_RETURN_IF_ERROR(
      row.reserve(row, {.write = &write, .gather = &gather}, internal::StateOf(*context)));
  DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, internal::StateOf(*context)));
  return row.gather_context(row, gather, s->gather_pieces, internal::StateOf(*context));
}

Status KeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                     const RunOptions& options) {
  return internal::PlanAndRun(attrs, args, options, &PlanKeyValueCache, &RunKeyValueCache);
}

}  // namespace dynattn
