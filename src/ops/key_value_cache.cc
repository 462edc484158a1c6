// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynamic_batching.KeyValueCache (spec pmx-ops §4): validate, write all new tokens, then gather.

#include "dynattn/ops.h"
#include "src/dispatch.h"
#include "src/validate.h"

namespace dynattn {

Status KeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                     const RunOptions& options) {
  internal::KeyValueCacheCall call;
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  DYNATTN_RETURN_IF_ERROR(internal::ValidateKeyValueCache(attrs, args, &call));
  const CacheDesc& cache = call.write.kv.cache;
  const internal::BackendKernels* kernels = internal::KernelsFor(cache.device, cache.elem);
  if (kernels == nullptr) return internal::NoBackend("current_key", cache.device);
  kernels->write_new_tokens(call.write, options);
  kernels->gather_context(call.gather, options);
  return Status::Ok();
}

}  // namespace dynattn
