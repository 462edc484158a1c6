// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.MultiHeadCacheAttention (spec pmx-ops §6): all writes first, then attention
// that reads each request's context straight from the (dequantized) cache.

#include "dynattn/dynattn.h"
#include "src/dispatch.h"
#include "src/validate.h"

namespace dynattn {

Status MultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                               const MultiHeadCacheAttentionArgs& args, const RunOptions& options) {
  internal::MultiHeadCacheAttentionCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  DYNATTN_RETURN_IF_ERROR(internal::ValidateMultiHeadCacheAttention(attrs, args, &call));
  const CacheDesc& cache = call.attention.kv.cache;
  const internal::BackendKernels* kernels = internal::KernelsFor(cache.device, cache.elem);
  if (kernels == nullptr) return internal::NoBackend("cache", cache.device);
  kernels->write_new_tokens(call.write, options);
  kernels->run_attention(call.attention, internal::PlanAttention(call.attention), options);
  return Status::Ok();
}

}  // namespace dynattn
