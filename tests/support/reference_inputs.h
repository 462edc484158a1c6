// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Inputs for the float64 reference's tests (tests/reference_*_test.cc): arrays from lists of
// values, one-request KeyValueCache and MultiHeadAttention steps, attention attributes.

#ifndef DYNATTN_TESTS_SUPPORT_REFERENCE_INPUTS_H_
#define DYNATTN_TESTS_SUPPORT_REFERENCE_INPUTS_H_

#include <cstdint>
#include <vector>

#include "reference/reference.h"

// In the reference's namespace: its tests (namespace dynattn_ref) call these as they call it.
namespace dynattn_ref {

/// An array of `dt` and `shape` holding `values`, each rounded to `dt`.
Array FloatArray(Dt dt, const std::vector<int64_t>& shape, const std::vector<double>& values);

/// Inputs of a one-request KeyValueCache step in cache_mode 0.
Tensors OneRequestKvc(const Array& key, const Array& value, int64_t start_pos, int64_t cache_start,
                      const Array& cache);

/// Inputs of a one-request MultiHeadAttention call.
Tensors OneRequestMha(const Array& query, const Array& key, const Array& value,
                      int64_t decoding_batches);

/// Attributes of an attention call: the heads and the head dimension, everything else default.
Attrs AttentionAttrs(int num_heads, int head_dim, int num_kv_heads);

}  // namespace dynattn_ref

#endif  // DYNATTN_TESTS_SUPPORT_REFERENCE_INPUTS_H_
