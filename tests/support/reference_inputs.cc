// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Inputs of the reference's worked examples (reference_inputs.h).

#include "tests/support/reference_inputs.h"

#include <doctest/doctest.h>

namespace dynattn_ref {

Array FloatArray(Dt dt, const std::vector<int64_t>& shape, const std::vector<double>& values) {
  Array array = MakeArray(dt, shape);
  REQUIRE(static_cast<int64_t>(values.size()) == array.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    StoreRounded(&array, static_cast<int64_t>(i), values[i]);
  }
  return array;
}

Tensors OneRequestKvc(const Array& key, const Array& value, int64_t start_pos, int64_t cache_start,
                      const Array& cache) {
  const int64_t seqlen = key.shape[0];
  Tensors in;
  in["current_key"] = key;
  in["current_value"] = value;
  in["seqstarts"] = MakeI64({2}, {0, seqlen});
  in["kvstarts"] = MakeI64({2}, {0, start_pos + seqlen});
  in["start_pos"] = MakeI64({1}, {start_pos});
  in["cachestarts"] = MakeI64({1}, {cache_start});
  in["max_seqlen"] = ScalarI64(seqlen);
  in["max_kvlen"] = ScalarI64(start_pos + seqlen);
  in["cache"] = cache;
  return in;
}

Tensors OneRequestMha(const Array& query, const Array& key, const Array& value,
                      int64_t decoding_batches) {
  Tensors in;
  in["query"] = query;
  in["key"] = key;
  in["value"] = value;
  in["seqstarts"] = MakeI64({2}, {0, query.shape[0]});
  in["kvstarts"] = MakeI64({2}, {0, key.shape[0]});
  in["decoding_batches"] = ScalarI64(decoding_batches);
  in["max_seqlen"] = ScalarI64(query.shape[0]);
  in["max_kvlen"] = ScalarI64(key.shape[0]);
  return in;
}

Attrs AttentionAttrs(int num_heads, int head_dim, int num_kv_heads) {
  Attrs attrs;
  attrs.num_heads = num_heads;
  attrs.head_dim = head_dim;
  attrs.num_kv_heads = num_kv_heads;
  return attrs;
}

}  // namespace dynattn_ref
