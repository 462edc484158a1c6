// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The golden matrix (see the header). Cells rotate several attributes at once (a covering
// design rather than a full product), so every pair of head dim and cache element type appears,
// and every cache element type meets every layout, in about a hundred small cases; the cells of
// the serving features (bf16, fp8 caches, windows, soft-cap, scale, sinks) follow (see the
// header).

#include "reference/golden_matrix.h"

#include <array>
#include <utility>

namespace dynattn_ref {
namespace {

constexpr std::array<int, 9> kHeadDims = {64, 80, 96, 128, 256, 1, 7, 40, 72};
constexpr std::array<const char*, 4> kElemNames = {"f32", "f16", "int8", "int4"};
constexpr std::array<const char*, 3> kStepNames = {"mixed", "decode", "prefill"};
constexpr std::array<int, 4> kRatios = {1, 2, 4, 8};
constexpr std::array<int, 3> kMaskRanks = {0, 2, 3};

// Small steps: the matrix is about coverage, and the writer stores every cache to disk. The
// serving features appear only where a cell pins them (CacheFormatCell, FeatureCell,
// LongFeatureCell), so the classic cells are the cases they always were.
GenOptions SmallStep() {
  GenOptions options;
  options.serving_features = false;
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
  spec.options.serving_features = false;
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

constexpr std::array<const char*, 7> kAllElemNames = {"f32",  "f16",     "int8",   "int4",
                                                      "bf16", "fp8e4m3", "fp8e5m2"};
constexpr std::array<const char*, 3> kT1Names = {"f32", "f16", "bf16"};

// Cell `i` of the new cache formats: bf16, fp8 e4m3fn and fp8 e5m2 caches, each under fp32, fp16
// and bf16 activations, with layouts, offset/paged modes, steps and head dims rotating; fp8 cells
// pass k_scale / v_scale in every other cell (else the default 1).
GoldenSpec CacheFormatCell(const std::string& op, int i, uint64_t seed) {
  GoldenSpec spec{"", op, seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.cache_elem = 4 + i % 3;
  pins.t1 = (i / 3) % 3;
  pins.head_dim = kHeadDims[(i * 2) % kHeadDims.size()];
  pins.cache_layout = i % 4;
  pins.cache_mode = op == "unified_attention" ? -1 : (i / 2) % 2;
  pins.step = i % 3;
  pins.gqa_ratio = kRatios[i % kRatios.size()];
  pins.fp8_scales = pins.cache_elem >= 5 ? (i / 2) % 2 : -1;
  spec.name = ShortName(op) + "_d" + std::to_string(pins.head_dim) + "_" +
              kAllElemNames[pins.cache_elem] + "_t1" + kT1Names[pins.t1] + "_l" +
              std::to_string(pins.cache_layout) +
              (pins.cache_mode == 1 ? "_paged" : (pins.cache_mode == 0 ? "_offset" : "")) + "_" +
              kStepNames[pins.step] + (pins.fp8_scales == 1 ? "_scaled" : "");
  return spec;
}

// One attention feature (window, soft-cap, softmax scale, sinks), pinned on a small step (head
// dims and cache formats vary).
struct FeatureSpec {
  const char* name;
  const char* op;
  int t1, cache_elem, window, soft_cap, softmax_scale, sinks, step, alibi, mask_rank;
};

// window 0, a small window, one past every context; soft-caps; scales; sinks (with masks, so
// some rows see no key and return 0 with LSE = sink); then everything at once.
constexpr FeatureSpec kFeatures[] = {
    {"window0", "multi_head_attention", 0, -1, 0, 0, 0, 0, 2, 0, 0},
    {"window3_noncausal_mask", "multi_head_attention", 2, -1, 3, 0, 0, 0, 0, 0, 2},
    {"window3_alibi", "multi_head_attention", 1, -1, 3, 0, 0, 0, 2, 1, 0},
    {"window200", "multi_head_attention", 0, -1, 200, 0, 0, 0, 0, 0, 0},
    {"window2_decode", "multi_head_cache_attention", 0, 2, 2, 0, 0, 0, 1, 0, 0},
    {"window5_prefill", "multi_head_cache_attention", 2, 5, 5, 0, 0, 0, 2, 0, 3},
    {"window4", "unified_attention", 0, 0, 4, 0, 0, 0, 0, 0, -1},
    {"window1_decode", "unified_attention", 2, 6, 1, 0, 0, 0, 1, 1, -1},
    {"softcap", "multi_head_attention", 2, -1, -1, 1, 0, 0, 0, 1, 2},
    {"softcap", "multi_head_cache_attention", 1, 5, -1, 1, 0, 0, 0, 0, 0},
    {"softcap", "unified_attention", 0, 2, -1, 1, 0, 0, 0, 0, -1},
    {"scale", "multi_head_attention", 0, -1, -1, 0, 1, 0, 2, 0, 0},
    {"scale_softcap", "multi_head_cache_attention", 2, 3, -1, 1, 1, 0, 1, 0, 0},
    {"scale", "unified_attention", 1, 1, -1, 0, 1, 0, 0, 1, -1},
    {"sinks_mask3", "multi_head_attention", 0, -1, -1, 0, 0, 1, 0, 0, 3},
    {"sinks_mask2", "multi_head_attention", 2, -1, -1, 0, 0, 1, 2, 1, 2},
    {"sinks_decode", "multi_head_cache_attention", 1, 4, -1, 0, 0, 1, 1, 0, 0},
    {"sinks", "unified_attention", 0, 5, -1, 0, 0, 1, 0, 0, -1},
    {"all", "multi_head_cache_attention", 2, 6, 6, 1, 1, 1, 0, 1, 2},
    {"all", "unified_attention", 2, 4, 6, 1, 1, 1, 0, 1, -1},
};

// A distributed rank's inputs: ALiBi slopes of its own (alibi 2: drawn, given as alibi_slopes).
// After the long cells, so that the cells before keep their seeds.
constexpr FeatureSpec kRankFeatures[] = {
    {"alibi_slopes", "multi_head_attention", 0, -1, -1, 0, 0, 0, 2, 2, 0},
    {"alibi_slopes_window", "multi_head_cache_attention", 1, 2, 5, 0, 0, 1, 0, 2, 0},
    {"alibi_slopes", "unified_attention", 2, 3, -1, 1, 0, 0, 0, 2, -1},
};

GoldenSpec FeatureCell(const FeatureSpec& f, int i, uint64_t seed) {
  GoldenSpec spec{"", f.op, seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.t1 = f.t1;
  pins.cache_elem = f.cache_elem;
  pins.window = f.window;
  pins.soft_cap = f.soft_cap;
  pins.softmax_scale = f.softmax_scale;
  pins.sinks = f.sinks;
  pins.step = f.step;
  pins.alibi = f.alibi;
  pins.mask_rank = f.mask_rank;
  pins.head_dim = kHeadDims[(i * 5) % kHeadDims.size()];
  pins.gqa_ratio = kRatios[i % kRatios.size()];
  if (pins.cache_elem == 3 && pins.head_dim % 2 != 0) pins.head_dim = 64;
  pins.fp8_scales = pins.cache_elem >= 5 ? i % 2 : -1;
  spec.name = ShortName(f.op) + "_" + f.name + "_d" + std::to_string(pins.head_dim) + "_t1" +
              kT1Names[pins.t1] +
              (f.cache_elem >= 0 ? std::string("_") + kAllElemNames[f.cache_elem] : "");
  return spec;
}

// Long contexts with the serving features: split-context work whose merge must count the sink
// once and skip the blocks outside the window.
GoldenSpec LongFeatureCell(const std::string& op, int step, int window, uint64_t seed) {
  GoldenSpec spec = LongCell(op, step, seed);
  Pins& pins = spec.options.pins;
  pins.t1 = 2;
  pins.cache_elem = op == "multi_head_attention" ? -1 : 5;
  pins.fp8_scales = 1;
  pins.window = window;
  pins.sinks = 1;
  pins.soft_cap = 1;
  spec.name = ShortName(op) + "_long_d128_" + kStepNames[step] + "_bf16_sinks_softcap" +
              (window >= 0 ? "_window" + std::to_string(window) : "");
  return spec;
}

// Keys and values of different sizes (multi_head_attention): MLA's non-absorbed prefill
// (192 / 128), and sizes that are no multiple of the lanes. After every other cell.
constexpr std::pair<int, int> kValueDims[] = {{192, 128}, {72, 40}, {16, 48}};

// MLA's absorbed form (value_from_key): DeepSeek V3's latent head of 576, values its first 512.
constexpr std::pair<int, int> kLatentDims[] = {{576, 512}, {64, 48}};

GoldenSpec ValueDimCell(int dim, int dim_v, uint64_t seed, bool latent = false) {
  GoldenSpec spec{"", "multi_head_attention", seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.head_dim = dim;
  pins.head_dim_v = dim_v;
  pins.value_from_key = latent ? 1 : 0;
  if (latent) pins.gqa_ratio = 4;  // query heads sharing one latent head
  pins.t1 = dim == 192 || dim == 576 ? 2 : 1;
  pins.step = dim == 16 || dim == 576 ? 1 : 2;  // decodes (MLA's latent decode), else prefills
  spec.name = "mha_d" + std::to_string(dim) + "_dv" + std::to_string(dim_v) +
              (latent ? "_latent_" : "_") + kStepNames[pins.step] + "_t1" + kT1Names[pins.t1];
  return spec;
}

// The fast tier (precision=fast) in each attention op: decodes over a bf16 cache with bf16
// activations (the bf16 dot-product kernels' case), over an int8 cache (the int8 dot-product
// kernels'), and a prefill. After every other cell.
GoldenSpec FastCell(const std::string& op, int i, uint64_t seed) {
  GoldenSpec spec{"", op, seed, SmallStep()};
  Pins& pins = spec.options.pins;
  pins.precision = 1;
  pins.head_dim = 64;
  pins.gqa_ratio = 4;
  pins.t1 = i == 1 ? 1 : 2;                                            // fp16 beside the int8 cache
  pins.step = i == 2 ? 2 : 1;                                          // decodes, then a prefill
  if (op != "multi_head_attention") pins.cache_elem = i == 1 ? 2 : 4;  // int8, else bf16
  spec.name = ShortName(op) + "_fast_" + kStepNames[pins.step] + "_t1" + kT1Names[pins.t1] +
              (op == "multi_head_attention" ? "" : (i == 1 ? "_int8" : "_bf16"));
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
  // The serving features: the bf16 and fp8 cache formats in every cache op, then each attention
  // feature.
  for (const char* op : {"key_value_cache", "multi_head_cache_attention", "unified_attention"}) {
    for (int i = 0; i < 9; ++i) specs.push_back(CacheFormatCell(op, i, seed++));
  }
  int i = 0;
  for (const FeatureSpec& f : kFeatures) specs.push_back(FeatureCell(f, i++, seed++));
  specs.push_back(LongFeatureCell("multi_head_cache_attention", 1, 700, seed++));
  specs.push_back(LongFeatureCell("multi_head_attention", 2, -1, seed++));
  specs.push_back(LongFeatureCell("unified_attention", 1, 600, seed++));
  for (const FeatureSpec& f : kRankFeatures) specs.push_back(FeatureCell(f, i++, seed++));
  for (const auto& [dim, dim_v] : kValueDims) specs.push_back(ValueDimCell(dim, dim_v, seed++));
  for (const auto& [dim, dim_v] : kLatentDims) {
    specs.push_back(ValueDimCell(dim, dim_v, seed++, /*latent=*/true));
  }
  for (const char* op :
       {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
    for (int i = 0; i < 3; ++i) specs.push_back(FastCell(op, i, seed++));
  }
  return specs;
}

Case MakeGoldenCase(const GoldenSpec& spec) {
  Case c = spec.op == "unified_attention" ? RandomUnifiedCase(spec.seed, spec.options)
                                          : RandomCase(spec.op, spec.seed, spec.options);
  c.description = spec.name + ": " + c.description;
  return c;
}

}  // namespace dynattn_ref
