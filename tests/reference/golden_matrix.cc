// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The golden matrix (see the header). Cells rotate several attributes at once (a covering
// design rather than a full product), so every pair of head dim and cache element type appears,
// and every cache element type meets every layout, in about a hundred small cases.

#include "tests/reference/golden_matrix.h"

#include <array>

namespace dynattn_ref {
namespace {

constexpr std::array<int, 9> kHeadDims = {64, 80, 96, 128, 256, 1, 7, 40, 72};
constexpr std::array<const char*, 4> kElemNames = {"f32", "f16", "int8", "int4"};
constexpr std::array<const char*, 3> kStepNames = {"mixed", "decode", "prefill"};
constexpr std::array<int, 4> kRatios = {1, 2, 4, 8};
constexpr std::array<int, 3> kMaskRanks = {0, 2, 3};

// Small steps: the matrix is about coverage, and the writer stores every cache to disk.
GenOptions SmallStep() {
  GenOptions options;
  options.max_batch = 4;
  options.max_seqlen = 12;
  options.max_context = 48;
  return options;
}

// "mhca" for "multi_head_cache_attention".
std::string ShortName(const std::string& op) {
  if (op == "key_value_cache") return "kvc";
  if (op == "multi_head_attention") return "mha";
  if (op == "multi_head_cache_attention") return "mhca";
  return "unified";
}

// Cell `i` of a cache op: head dim i / 4, element i % 4 (int8 for odd D, which int4 cannot
// take), layout rotated against the element so each element meets every layout.
GoldenSpec CacheCell(const std::string& op, int i, uint64_t seed) {
  GoldenSpec spec{"", op, seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.head_dim = kHeadDims[(i / 4) % kHeadDims.size()];
  pins.cache_elem = i % 4 == 3 && pins.head_dim % 2 != 0 ? 2 : i % 4;
  pins.cache_layout = (i + i / 4) % 4;
  pins.cache_mode = op == "unified_attention" ? -1 : (i / 2) % 2;
  pins.step = i % 3;
  pins.gqa_ratio = kRatios[(i / 3) % kRatios.size()];
  pins.alibi = op == "key_value_cache" ? -1 : (i / 5) % 2;
  pins.mask_rank = op == "multi_head_cache_attention" ? kMaskRanks[(i / 2) % 3] : -1;
  spec.name = ShortName(op) + "_d" + std::to_string(pins.head_dim) + "_" +
              kElemNames[pins.cache_elem] + "_l" + std::to_string(pins.cache_layout) +
              (pins.cache_mode == 1 ? "_paged" : (pins.cache_mode == 0 ? "_offset" : "")) + "_" +
              kStepNames[pins.step] + "_r" + std::to_string(pins.gqa_ratio);
  if (pins.alibi == 1) spec.name += "_alibi";
  if (pins.mask_rank > 0) spec.name += "_mask" + std::to_string(pins.mask_rank);
  return spec;
}

// Cell `i` of multi_head_attention (no cache): head dim, step, ratio, ALiBi and mask rotate.
GoldenSpec AttentionCell(int i, uint64_t seed) {
  GoldenSpec spec{"", "multi_head_attention", seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.head_dim = kHeadDims[(i / 3) % kHeadDims.size()];
  pins.step = i % 3;
  pins.gqa_ratio = kRatios[(i / 2) % kRatios.size()];
  pins.alibi = (i / 4) % 2;
  pins.mask_rank = kMaskRanks[i % 3];
  spec.name = "mha_d" + std::to_string(pins.head_dim) + "_" + kStepNames[pins.step] + "_r" +
              std::to_string(pins.gqa_ratio) + (pins.alibi == 1 ? "_alibi" : "") +
              (pins.mask_rank > 0 ? "_mask" + std::to_string(pins.mask_rank) : "");
  return spec;
}

// Long contexts, so that split-context work and its merge run too (1024-key splits).
GoldenSpec LongCell(const std::string& op, int step, uint64_t seed) {
  GoldenSpec spec{"", op, seed, {}};
  spec.options.max_batch = 2;
  spec.options.max_seqlen = 16;
  spec.options.max_context = 2100;
  Pins& pins = spec.options.pins;
  pins.head_dim = 128;
  pins.cache_elem = op == "multi_head_attention" ? -1 : 2;
  pins.gqa_ratio = 4;
  pins.step = step;
  spec.name = ShortName(op) + "_long_d128_" + kStepNames[step] + "_r4";
  return spec;
}

}  // namespace

std::vector<GoldenSpec> GoldenMatrix(uint64_t base_seed) {
  std::vector<GoldenSpec> specs;
  uint64_t seed = base_seed;
  const int cache_cells = static_cast<int>(kHeadDims.size()) * 4;
  for (const char* op : {"key_value_cache", "multi_head_cache_attention", "unified_attention"}) {
    for (int i = 0; i < cache_cells; ++i) specs.push_back(CacheCell(op, i, seed++));
  }
  for (int i = 0; i < static_cast<int>(kHeadDims.size()) * 3; ++i) {
    specs.push_back(AttentionCell(i, seed++));
  }
  specs.push_back(LongCell("multi_head_cache_attention", 1, seed++));
  specs.push_back(LongCell("multi_head_attention", 2, seed++));
  specs.push_back(LongCell("unified_attention", 1, seed++));
  return specs;
}

Case MakeGoldenCase(const GoldenSpec& spec) {
  Case c = spec.op == "unified_attention" ? RandomUnifiedCase(spec.seed, spec.options)
                                          : RandomCase(spec.op, spec.seed, spec.options);
  c.description = spec.name + ": " + c.description;
  return c;
}

}  // namespace dynattn_ref
