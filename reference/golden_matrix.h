// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fixed matrix of golden cases: `dynattn golden` writes it to files and the GPU suite runs it
// on the device, so both must draw exactly the same cases. Each case is a RandomCase (or
// RandomUnifiedCase) with some attributes pinned, so that a short list still covers every op,
// every cache element type, layouts 0-3, offset and paged caches, GQA, ALiBi, masks, decode and
// prefill steps and the head dims that serving uses (64, 80, 96, 128, 256) plus odd ones; then
// the serving features' cells: bf16 and fp8 (e4m3fn, e5m2, with and without k_scale/v_scale)
// caches under fp32, fp16 and bf16 activations in every cache op, and sliding windows, logit
// soft-caps, softmax scales and sinks in every attention op, with long-context cells for split
// work. Their files use the `run` attributes window_left, logits_soft_cap, softmax_scale and
// cache_dtype and the inputs sinks, k_scale and v_scale (bf16 tensors as uint16 .npy, fp8 caches
// as uint8).

#ifndef DYNATTN_REFERENCE_GOLDEN_MATRIX_H_
#define DYNATTN_REFERENCE_GOLDEN_MATRIX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "reference/case_gen.h"

namespace dynattn_ref {

// One cell of the matrix: cheap to list, MakeGoldenCase builds its tensors.
struct GoldenSpec {
  std::string name;  // unique, usable as a directory name ("mhca_d128_int8_l2_paged_decode_r4")
  std::string op;    // as Case::op, "unified_attention" included
  uint64_t seed = 0;
  GenOptions options;
};

// The seed the golden writer and the GPU suite use unless told otherwise.
inline constexpr uint64_t kGoldenSeed = 2026;

// Every cell, in a fixed order; identical for identical base seeds.
std::vector<GoldenSpec> GoldenMatrix(uint64_t base_seed = kGoldenSeed);

// The case of one cell (deterministic).
Case MakeGoldenCase(const GoldenSpec& spec);

}  // namespace dynattn_ref

#endif  // DYNATTN_REFERENCE_GOLDEN_MATRIX_H_
