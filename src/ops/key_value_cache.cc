// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.KeyValueCache (spec pmx-ops §4): every write first, then the gather of every
// request's dequantized context.

#include "dynattn/plan.h"
#include "src/ops/plan_run.h"

namespace dynattn::internal {

template <>
struct OpTraits<KeyValueCacheArgs>
    : OpDeclaration<KeyValueCacheAttrs, KeyValueCacheCall, KeyValueCacheWork,
                    OpKind::kKeyValueCache, &ValidateKeyValueCache> {
  static constexpr const char* kPlacedBy = "current_key";
  static constexpr bool kCacheTensors = true;
  static bool Quantized(const Attrs& attrs) { return attrs.cache.quant_bit != 0; }
  static const CacheDesc& CacheOf(const Call& call, const KeyValueCacheArgs&) {
    return call.write.kv.cache;
  }

  static void Plan(const Attrs& attrs, const Call& call, const KeyValueCacheArgs& args, Work* work,
                   PlanState* state) {
    work->write = call.write;
    work->gather = call.gather;
    state->OwnIndexArrays();
    work->gather_pieces = PlanGather(work->gather.batch);
    RecordCache(args.cache, args.scale, Quantized(attrs), args.cache_desc, call.write.kv.cache,
                state);
  }

  static Status Run(const PlanState& s, const Work& planned, const KeyValueCacheArgs& args,
                    const LayerAttrs*, ContextState* context) {
    CacheDesc cache;
    DYNATTN_RETURN_IF_ERROR(s.RunCache(args.cache, args.scale, args.cache_desc, &cache));
    GatherProblem gather = planned.gather;
    gather.key = args.key.data;
    gather.value = args.value.data;
    gather.key_row_stride = RowStride(args.key);
    gather.value_row_stride = RowStride(args.value);
    gather.kv.cache = cache;
    const BackendKernels& row = *s.kernels;
    const WriteProblem write = WriteFor(planned.write, args.current_key, args.current_value, cache);
    // Every allocation of the Run happens here, before its first write.
    DYNATTN_RETURN_IF_ERROR(row.reserve(row, {.write = &write, .gather = &gather}, context));
    DYNATTN_RETURN_IF_ERROR(row.write_new_tokens(row, write, context));
    return row.gather_context(row, gather, planned.gather_pieces, context);
  }
};

}  // namespace dynattn::internal

namespace dynattn {

DYNATTN_DEFINE_PLAN_AND_CALL(KeyValueCache, KeyValueCacheAttrs)

Status RunKeyValueCache(const Plan& plan, const KeyValueCacheArgs& args, Context* context) {
  return internal::RunOp(plan, args, context, nullptr);
}

}  // namespace dynattn
