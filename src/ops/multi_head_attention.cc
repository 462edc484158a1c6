// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadAttention (spec pmx-ops §5): the packed key/value tensors are read
// as an unquantized cache addressed by kvstarts, through the same kernels as the cached op.

#include "dynattn/ops.h"
#include "src/dispatch.h"
#include "src/validate.h"

namespace dynattn {

Status MultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                          const RunOptions& options) {
  internal::MultiHeadAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadAttention(attrs, args, &call));
  const CacheDesc& kv = call.attention.kv.cache;
  const internal::BackendKernels* kernels = internal::KernelsFor(kv.device, kv.elem);
  if (kernels == nullptr) return internal::NoBackend("query", kv.device);
  kernels->run_attention(call.attention, internal::PlanAttention(call.attention), options);
  return Status::Ok();
}

}  // namespace dynattn
