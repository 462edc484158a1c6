// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The name map: each op's tensors by their spec names, from the op tables
// (dynattn/op_signatures.h).

#include "dynattn/named_args.h"

#include "src/op_fields.h"

namespace dynattn {

KeyValueCacheArgs KeyValueCacheArgsByName(const TensorLookup& tensor) {
  return internal::ArgsByName<KeyValueCacheArgs>(tensor);
}

MultiHeadAttentionArgs MultiHeadAttentionArgsByName(const TensorLookup& tensor) {
  return internal::ArgsByName<MultiHeadAttentionArgs>(tensor);
}

MultiHeadCacheAttentionArgs MultiHeadCacheAttentionArgsByName(const TensorLookup& tensor) {
  return internal::ArgsByName<MultiHeadCacheAttentionArgs>(tensor);
}

UnifiedAttentionArgs UnifiedAttentionArgsByName(const TensorLookup& tensor,
                                                const BlockCache* cache) {
  UnifiedAttentionArgs args = internal::ArgsByName<UnifiedAttentionArgs>(tensor);
  args.cache = cache;
  return args;
}

}  // namespace dynattn
