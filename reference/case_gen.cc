// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Random case generator: first draws a Plan (every attribute and per-request length), then builds
// the tensors from it. Randomness comes only from Rng (std::mt19937_64 plus our own transforms),
// so a seed gives the same case on every platform with the same libm.

#include "reference/case_gen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace dynattn_ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t Bits() { return engine_(); }
  // Uniform integer in [lo, hi] (lo when hi < lo).
  int64_t Int(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1p-53; }  // [0, 1)
  bool Chance(double p) { return Uniform() < p; }
  double Normal() {  // Box-Muller
    const double radius = std::sqrt(-2.0 * std::log(1.0 - Uniform()));
    return radius * std::cos(2.0 * kPi * Uniform());
  }
  template <class T>
  T Pick(const std::vector<T>& options) {
    return options[Int(0, static_cast<int64_t>(options.size()) - 1)];
  }
  template <class T>
  void Shuffle(std::vector<T>* items) {  // Fisher-Yates
    for (int64_t i = static_cast<int64_t>(items->size()) - 1; i > 0; --i) {
      std::swap((*items)[i], (*items)[Int(0, i)]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

enum class Op { kKvc, kMha, kMhca };

int64_t MaxOf(const std::vector<int64_t>& values);

Op ParseOp(const std::string& op) {
  if (op == "key_value_cache") return Op::kKvc;
  if (op == "multi_head_attention") return Op::kMha;
  if (op == "multi_head_cache_attention") return Op::kMhca;
  throw std::invalid_argument("RandomCase: unknown op " + op);
}

// Different ops with the same seed should not share their draws.
uint64_t MixSeed(const std::string& op, uint64_t seed) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : op) hash = (hash ^ c) * 1099511628211ull;
  return hash ^ (seed * 0x9E3779B97F4A7C15ull);
}

// Everything drawn for one case before any tensor is built.
struct Plan {
  Op op = Op::kMha;
  Dt t1 = Dt::kF32;
  int64_t d = 1, hq = 1, hkv = 1;
  int64_t dv = 0;  // head_dim_v: 0 = D
  bool value_from_key = false;
  bool fast = false;  // precision=fast
  int num_kv_heads_attr = 0;
  // Cache ops.
  int quant_bit = 0, group = 8, cache_mode = 0, layout = 0, num_layer = 1, layer = 0;
  int page_size = 128;
  Dt cache_dt = Dt::kF32, scale_dt = Dt::kF16;
  int64_t max_t = 0;
  // Requests.
  std::vector<int64_t> seqlen, start_pos, kvlen;
  int64_t decoding_batches = 0;
  // Attention ops.
  int causal = 1, alibi = 0, mask_rank = 0;
  int64_t mask_pad = 0;
  double mask_inf_rate = 0, mask_row_inf_rate = 0;
  double v_magnitude = 1;
  // Serving features.
  int window_left = -1;
  double soft_cap = 0, softmax_scale = 0;
  bool sinks = false;
  double k_scale = 0, v_scale = 0;  // fp8 caches: 0 = input absent (the default 1)

  bool has_cache() const { return op != Op::kMha; }
  int64_t value_dim() const { return dv > 0 ? dv : d; }
  bool has_query() const { return op != Op::kKvc; }
  int64_t batch_count() const { return static_cast<int64_t>(seqlen.size()); }
};

// ----------------------------------------------------------------------------------------------
// Drawing the plan.

int64_t DrawHeadDim(Rng& rng, bool small, bool lane_multiple) {
  static const std::vector<std::pair<int64_t, int>> kWeighted = {
      {1, 3},  {2, 3},  {3, 2},  {4, 4},  {5, 2},  {7, 2},  {8, 4},   {16, 4},
      {24, 2}, {32, 3}, {40, 1}, {64, 2}, {80, 1}, {96, 1}, {128, 2}, {256, 1}};
  std::vector<int64_t> pool;
  for (const auto& [d, weight] : kWeighted) {
    if ((small && d > 16) || (lane_multiple && d % 16 != 0)) continue;
    pool.insert(pool.end(), weight, d);
  }
  return rng.Pick(pool);
}

// GQA ratio R in 1..8 and Hkv with Hq = R * Hkv <= 16; wide heads get fewer of them.
void DrawHeads(Rng& rng, const GenOptions& options, Plan* plan) {
  plan->d = DrawHeadDim(rng, options.small, options.lane_head_dims);
  if (options.pins.head_dim > 0) plan->d = options.pins.head_dim;
  const int64_t max_hq = options.small ? 4 : std::clamp<int64_t>(1024 / plan->d, 4, 16);
  int64_t ratio = rng.Int(1, std::min<int64_t>(8, max_hq));
  if (options.pins.gqa_ratio > 0) ratio = options.pins.gqa_ratio;
  plan->hkv = rng.Int(1, std::max<int64_t>(1, max_hq / ratio));
  plan->hq = ratio * plan->hkv;
  plan->num_kv_heads_attr = plan->hkv == plan->hq && rng.Chance(0.5) ? 0 : plan->hkv;
}

int64_t DrawGroup(Rng& rng, int64_t d, bool even_only) {
  std::vector<int64_t> divisors;
  for (int64_t g = 1; g <= d; ++g) {
    if (d % g == 0 && (!even_only || g % 2 == 0)) divisors.push_back(g);
  }
  return rng.Pick(divisors);
}

void DrawCacheAttrs(Rng& rng, const GenOptions& options, Plan* plan) {
  const std::vector<int> bits =
      plan->d % 2 == 0 ? std::vector<int>{0, 8, 4} : std::vector<int>{0, 8};
  const int elem = options.pins.cache_elem;
  plan->quant_bit = rng.Pick(bits);
  if (elem >= 0) plan->quant_bit = elem == 3 ? 4 : (elem == 2 ? 8 : 0);
  if (plan->quant_bit == 0) {
    plan->cache_dt = rng.Chance(0.5) ? Dt::kF32 : Dt::kF16;
    static const Dt kPlain[] = {Dt::kF32,  Dt::kF16,    Dt::kI8,    Dt::kI8,
                                Dt::kBF16, Dt::kF8E4M3, Dt::kF8E5M2};
    if (elem >= 0) plan->cache_dt = kPlain[elem];
  } else {
    plan->cache_dt = Dt::kI8;
    plan->scale_dt = rng.Chance(0.6) ? Dt::kF16 : Dt::kF32;
    plan->group = static_cast<int>(DrawGroup(rng, plan->d, plan->quant_bit == 4));
    if (options.pins.quant_group > 0) plan->group = options.pins.quant_group;
  }
  plan->cache_mode = static_cast<int>(rng.Int(0, 1));
  if (options.pins.cache_mode >= 0) plan->cache_mode = options.pins.cache_mode;
  plan->page_size = rng.Pick(std::vector<int>{1, 2, 3, 5, 16, 128});
  plan->layout = static_cast<int>(rng.Int(0, 3));
  if (options.pins.cache_layout >= 0) plan->layout = options.pins.cache_layout;
  plan->num_layer = static_cast<int>(rng.Int(1, options.small ? 2 : 3));
  plan->layer = static_cast<int>(rng.Int(0, plan->num_layer - 1));
}

// One request: decoding (seqlen 1), empty, idle (only past context), prefill or chunked prefill.
void DrawRequest(Rng& rng, const GenOptions& options, int64_t context_cap, bool decoding,
                 Plan* plan) {
  int64_t seqlen = 1, past = 0;
  const double kind = rng.Uniform();
  if (decoding) {
    past = rng.Int(0, context_cap - 1);
  } else if (kind < 0.12) {
    seqlen = 0;  // empty
  } else if (kind < 0.17) {
    seqlen = 0;  // idle: nothing new, but a context
    past = rng.Int(1, context_cap);
  } else if (kind < 0.55) {
    seqlen = rng.Int(1, std::min<int64_t>(options.max_seqlen, context_cap));  // prefill
  } else {
    seqlen = rng.Int(1, std::min<int64_t>(options.max_seqlen, context_cap - 1));  // chunked
    past = rng.Int(1, context_cap - seqlen);
  }
  plan->seqlen.push_back(seqlen);
  plan->start_pos.push_back(past);
  plan->kvlen.push_back(past + seqlen);
}

void DrawRequests(Rng& rng, const GenOptions& options, Plan* plan) {
  int64_t batch_count = rng.Chance(0.03) ? 0 : rng.Int(1, options.max_batch);
  if (options.pins.step != 0) batch_count = std::max<int64_t>(1, batch_count);
  const int64_t max_context = options.max_context;
  int64_t context_cap =
      std::max<int64_t>(2, std::min(max_context, rng.Pick(std::vector<int64_t>{16, 64, 200})));
  // Asked for long contexts (beyond the usual 200): mostly use them, so that the library's
  // split-context path (1024-key splits) is exercised.
  if (max_context > 200 && !rng.Chance(0.25)) context_cap = max_context;
  plan->decoding_batches = rng.Chance(0.3) ? 0 : rng.Int(0, batch_count);
  if (options.pins.step == 1) plan->decoding_batches = batch_count;
  if (options.pins.step == 2) plan->decoding_batches = 0;
  for (int64_t b = 0; b < batch_count; ++b) {
    DrawRequest(rng, options, context_cap, b < plan->decoding_batches, plan);
  }
}

void DrawAttentionAttrs(Rng& rng, const Pins& pins, Plan* plan) {
  plan->causal = rng.Chance(0.6) ? 1 : 0;
  plan->alibi = rng.Chance(0.35) ? 1 : 0;
  if (pins.alibi >= 0) plan->alibi = pins.alibi;
  plan->mask_rank = rng.Pick(std::vector<int>{0, 0, 2, 3});
  if (pins.mask_rank >= 0) plan->mask_rank = pins.mask_rank;
  plan->mask_pad = rng.Int(0, 17);
  plan->mask_inf_rate = rng.Pick(std::vector<double>{0, 0.05, 0.3});
  plan->mask_row_inf_rate = rng.Pick(std::vector<double>{0, 0, 0.1});
}

// On or off as pinned (pin 0 / 1), else drawn with probability `p` when the serving features
// are on.
bool ServingFeatureChance(Rng& extra, const GenOptions& options, int pin, double p) {
  if (pin >= 0) return pin != 0;
  return options.serving_features && extra.Chance(p);
}

// The serving features' draws, from their own stream `extra`: activation and cache types first
// (they override the classic draws), then the attention features.
void DrawServingFeatures(Rng& extra, const GenOptions& options, Plan* plan) {
  const Pins& pins = options.pins;
  static const Dt kActivations[] = {Dt::kF32, Dt::kF16, Dt::kBF16};
  if (pins.t1 >= 0) {
    plan->t1 = kActivations[pins.t1];
  } else if (options.serving_features && extra.Chance(1.0 / 3)) {
    plan->t1 = Dt::kBF16;
  }
  if (plan->has_cache() && plan->quant_bit == 0 && pins.cache_elem < 0 &&
      options.serving_features && extra.Chance(0.5)) {
    plan->cache_dt = extra.Pick(std::vector<Dt>{Dt::kBF16, Dt::kF8E4M3, Dt::kF8E5M2});
  }
  if (IsFp8Dt(plan->cache_dt) && ServingFeatureChance(extra, options, pins.fp8_scales, 0.7)) {
    // Non-powers of two make the division round; 1/16 saturates e4m3fn's outliers.
    const std::vector<double> scales = {0.25, 0.0625, 2.5, 0.1, 8.0, 0.7, 1.0};
    plan->k_scale = extra.Pick(scales);
    plan->v_scale = extra.Pick(scales);
  }
  if (!plan->has_query()) return;
  if (pins.window >= -1) {
    plan->window_left = pins.window;
  } else if (options.serving_features && extra.Chance(0.3)) {
    const int64_t context = std::max<int64_t>(1, MaxOf(plan->kvlen));
    plan->window_left = static_cast<int>(extra.Pick(std::vector<int64_t>{
        0, 1, extra.Int(2, 8), extra.Int(0, context), context + extra.Int(0, 8)}));
  }
  if (ServingFeatureChance(extra, options, pins.soft_cap, 0.3)) {
    plan->soft_cap = extra.Pick(std::vector<double>{0.5, 5, 30, 50});
  }
  if (ServingFeatureChance(extra, options, pins.softmax_scale, 0.3)) {
    plan->softmax_scale = extra.Pick(std::vector<double>{0.0625, 0.125, 0.25, 0.75, 1.5});
  }
  plan->sinks = ServingFeatureChance(extra, options, pins.sinks, 0.3);
}

// Dv of an MHA case, from its own stream `dims`: another size than D in half the cases when
// asked, among the head sizes (multiples of 16 when D's are) and the MLA pairs' 128 and 512.
void DrawValueDim(Rng& dims, const GenOptions& options, Plan* plan) {
  const bool drawn = plan->op == Op::kMha && options.value_head_dims;
  if (options.pins.head_dim_v >= 0) {
    plan->dv = options.pins.head_dim_v;
  } else if (drawn && dims.Chance(0.5)) {
    plan->dv = options.small || dims.Chance(0.8)
                   ? DrawHeadDim(dims, options.small, options.lane_head_dims)
                   : dims.Pick(std::vector<int64_t>{128, 512});
  }
  // Values from the keys in a quarter of the drawn cases: Dv at most D.
  plan->value_from_key = options.pins.value_from_key >= 0 ? options.pins.value_from_key == 1
                                                          : drawn && dims.Chance(0.25);
  if (plan->value_from_key && plan->value_dim() > plan->d) {
    plan->dv = options.lane_head_dims ? plan->d : dims.Int(1, plan->d);
  }
}

Plan DrawPlan(Rng& rng, Rng& extra, Op op, const GenOptions& options) {
  Plan plan;
  plan.op = op;
  plan.t1 = rng.Chance(0.5) ? Dt::kF32 : Dt::kF16;
  DrawHeads(rng, options, &plan);
  if (plan.has_cache()) DrawCacheAttrs(rng, options, &plan);
  DrawRequests(rng, options, &plan);
  if (plan.has_query()) DrawAttentionAttrs(rng, options.pins, &plan);
  plan.fast = plan.has_query() && options.pins.precision == 1;
  plan.v_magnitude = rng.Pick(std::vector<double>{1, 1, 4, 30});
  DrawServingFeatures(extra, options, &plan);
  return plan;
}

Attrs MakeAttrs(const Plan& plan) {
  Attrs attrs;
  attrs.num_heads = static_cast<int>(plan.hq);
  attrs.head_dim = static_cast<int>(plan.d);
  attrs.head_dim_v = static_cast<int>(plan.dv);
  attrs.value_from_key = plan.value_from_key ? 1 : 0;
  if (plan.fast) attrs.precision = "fast";
  attrs.num_kv_heads = plan.num_kv_heads_attr;
  if (plan.has_query()) {
    attrs.is_causal = plan.causal;
    attrs.is_alibi = plan.alibi == 1;  // 2: ALiBi through the alibi_slopes input
  }
  if (plan.has_cache()) {
    attrs.num_layer = plan.num_layer;
    attrs.layer_idx = plan.layer;
    attrs.quant_bit = plan.quant_bit;
    attrs.quant_group = plan.group;
    attrs.cache_mode = plan.cache_mode;
    attrs.cache_layout = plan.layout;
    attrs.page_size = plan.page_size;
  }
  if (plan.op == Op::kKvc) attrs.num_repeat = static_cast<int>(plan.hq / plan.hkv);
  if (plan.has_query()) {
    attrs.window_left = plan.window_left;
    attrs.logits_soft_cap = plan.soft_cap;
    attrs.softmax_scale = plan.softmax_scale;
  }
  if (plan.has_cache() && IsFp8Dt(plan.cache_dt)) {
    attrs.cache_dtype = plan.cache_dt == Dt::kF8E4M3 ? "fp8_e4m3" : "fp8_e5m2";
  }
  return attrs;
}

// The optional serving-feature inputs: sinks (f32 (Hq): moderate, and now and then one that
// dominates every score), the fp8 caches' k_scale / v_scale (0-d f32), and with Pins::alibi 2
// a rank's alibi_slopes (f32 (Hq) in [-0.25, 1)).
void AddServingFeatureInputs(Rng& extra, const Plan& plan, Tensors* inputs) {
  if (plan.alibi == 2) {
    Array slopes = MakeArray(Dt::kF32, {plan.hq});
    for (int64_t h = 0; h < plan.hq; ++h) StoreRounded(&slopes, h, extra.Uniform() * 1.25 - 0.25);
    (*inputs)["alibi_slopes"] = std::move(slopes);
  }
  if (plan.sinks) {
    Array sinks = MakeArray(Dt::kF32, {plan.hq});
    for (int64_t h = 0; h < plan.hq; ++h) {
      StoreRounded(&sinks, h, extra.Chance(0.15) ? 12.0 + extra.Normal() : 2 * extra.Normal());
    }
    (*inputs)["sinks"] = std::move(sinks);
  }
  if (plan.k_scale > 0) {
    (*inputs)["k_scale"] = MakeArray(Dt::kF32, {});
    StoreRounded(&(*inputs)["k_scale"], 0, plan.k_scale);
    (*inputs)["v_scale"] = MakeArray(Dt::kF32, {});
    StoreRounded(&(*inputs)["v_scale"], 0, plan.v_scale);
  }
}

// ----------------------------------------------------------------------------------------------
// Building tensors.

std::vector<int64_t> PrefixStarts(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts{0};
  for (int64_t length : lengths) starts.push_back(starts.back() + length);
  return starts;
}

int64_t MaxOf(const std::vector<int64_t>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}

// A hint >= the true maximum, sometimes larger.
Array HintScalar(Rng& rng, int64_t true_max) {
  return ScalarI64(true_max + (rng.Chance(0.3) ? rng.Int(1, 50) : 0));
}

// Random normal-ish T1 values with occasional outliers.
Array RandomValues(Rng& rng, Dt dt, const std::vector<int64_t>& shape, double magnitude) {
  Array array = MakeArray(dt, shape);
  for (int64_t i = 0; i < array.numel(); ++i) {
    const double outlier = rng.Chance(0.02) ? 4.0 : 1.0;
    StoreRounded(&array, i, rng.Normal() * magnitude * outlier);
  }
  return array;
}

// Random bytes; in float arrays also plenty of explicit NaN and +-Inf patterns.
Array GarbageArray(Rng& rng, Dt dt, const std::vector<int64_t>& shape) {
  Array array = MakeArray(dt, shape);
  for (uint8_t& byte : array.bytes) byte = static_cast<uint8_t>(rng.Bits() >> 56);
  if (!IsActivationDt(dt) && !IsFp8Dt(dt)) return array;
  for (int64_t i = 0; i < array.numel(); ++i) {
    if (rng.Chance(0.9)) continue;
    const double special[] = {std::nan(""), kInf, -kInf};
    StoreRounded(&array, i, special[rng.Int(0, 2)]);
  }
  return array;
}

void AddRequestTensors(Rng& rng, const Plan& plan, Tensors* inputs) {
  const int64_t batch_count = plan.batch_count();
  (*inputs)["seqstarts"] = MakeI64({batch_count + 1}, PrefixStarts(plan.seqlen));
  (*inputs)["kvstarts"] = MakeI64({batch_count + 1}, PrefixStarts(plan.kvlen));
  (*inputs)["max_seqlen"] = HintScalar(rng, MaxOf(plan.seqlen));
  (*inputs)["max_kvlen"] = HintScalar(rng, MaxOf(plan.kvlen));
  if (plan.has_query()) (*inputs)["decoding_batches"] = ScalarI64(plan.decoding_batches);
  if (plan.has_cache()) (*inputs)["start_pos"] = MakeI64({batch_count}, plan.start_pos);
}

void AddActivations(Rng& rng, const Plan& plan, Tensors* inputs) {
  const int64_t rows = PrefixStarts(plan.seqlen).back();
  const int64_t context_rows = PrefixStarts(plan.kvlen).back();
  if (plan.has_query()) (*inputs)["query"] = RandomValues(rng, plan.t1, {rows, plan.hq, plan.d}, 1);
  if (plan.has_cache()) {
    (*inputs)["current_key"] = RandomValues(rng, plan.t1, {rows, plan.hkv, plan.d}, 1);
    (*inputs)["current_value"] =
        RandomValues(rng, plan.t1, {rows, plan.hkv, plan.d}, plan.v_magnitude);
  } else {
    (*inputs)["key"] = RandomValues(rng, plan.t1, {context_rows, plan.hkv, plan.d}, 1);
    if (!plan.value_from_key) {
      (*inputs)["value"] =
          RandomValues(rng, plan.t1, {context_rows, plan.hkv, plan.value_dim()}, plan.v_magnitude);
    }
  }
}

// Mode 0: each request owns [cachestarts[b], cachestarts[b] + kvlen_b), in random order with
// random gaps. Returns MaxT.
int64_t PlaceOffsets(Rng& rng, const Plan& plan, Tensors* inputs) {
  std::vector<int64_t> order(plan.batch_count()), starts(plan.batch_count());
  for (int64_t b = 0; b < plan.batch_count(); ++b) order[b] = b;
  rng.Shuffle(&order);
  int64_t cursor = rng.Int(0, 4);
  for (int64_t b : order) {
    starts[b] = plan.kvlen[b] == 0 ? rng.Int(0, cursor) : cursor;
    cursor += plan.kvlen[b] + (plan.kvlen[b] > 0 && rng.Chance(0.5) ? rng.Int(1, 6) : 0);
  }
  (*inputs)["cachestarts"] = MakeI64({plan.batch_count()}, starts);
  return std::max<int64_t>(1, cursor + rng.Int(0, 6));
}

// Mode 1: the used part of every page goes to a random, non-overlapping token offset (not
// necessarily a multiple of P); small pages sometimes take their whole P slots. Returns MaxT.
int64_t PlacePages(Rng& rng, const Plan& plan, Tensors* inputs) {
  const int64_t page = plan.page_size;
  std::vector<std::pair<int64_t, int64_t>> pages;  // (request, page index)
  int64_t max_pages = 0;
  for (int64_t b = 0; b < plan.batch_count(); ++b) {
    const int64_t count = (plan.kvlen[b] + page - 1) / page;
    for (int64_t k = 0; k < count; ++k) pages.emplace_back(b, k);
    max_pages = std::max(max_pages, count);
  }
  max_pages = std::max<int64_t>(1, max_pages + rng.Int(0, 2));
  std::vector<int64_t> table(plan.batch_count() * max_pages, -1);
  rng.Shuffle(&pages);
  int64_t cursor = rng.Int(0, 4);
  for (const auto& [b, k] : pages) {
    table[b * max_pages + k] = cursor;
    const int64_t used = std::min(page, plan.kvlen[b] - k * page);
    cursor += (page <= 16 && rng.Chance(0.5) ? page : used) + (rng.Chance(0.5) ? rng.Int(1, 5) : 0);
  }
  (*inputs)["cachestarts"] = MakeI64({plan.batch_count(), max_pages}, table);
  return std::max<int64_t>(1, cursor + rng.Int(0, 6));
}

// Past context (positions < start_pos) is what an earlier step wrote: run the reference
// KeyValueCache on a random "history" step that writes exactly those positions.
void WritePastContext(Rng& rng, const Plan& plan, Attrs attrs, Tensors* inputs) {
  const std::vector<int64_t> starts = PrefixStarts(plan.start_pos);
  if (starts.back() == 0) return;
  Tensors history;
  for (const char* name : {"cachestarts", "cache", "scale", "k_scale", "v_scale"}) {
    if (inputs->count(name)) history[name] = (*inputs)[name];
  }
  history["seqstarts"] = MakeI64({plan.batch_count() + 1}, starts);
  history["kvstarts"] = history["seqstarts"];
  history["start_pos"] = MakeI64({plan.batch_count()}, std::vector<int64_t>(plan.batch_count(), 0));
  history["max_seqlen"] = ScalarI64(MaxOf(plan.start_pos));
  history["max_kvlen"] = ScalarI64(MaxOf(plan.start_pos));
  history["current_key"] = RandomValues(rng, plan.t1, {starts.back(), plan.hkv, plan.d}, 1);
  history["current_value"] =
      RandomValues(rng, plan.t1, {starts.back(), plan.hkv, plan.d}, plan.v_magnitude);
  attrs.num_repeat = 1;
  KvcResult written = KeyValueCache(attrs, history);
  (*inputs)["cache"] = std::move(written.cache);
  if (plan.quant_bit != 0) (*inputs)["scale"] = std::move(written.scale);
}

void AddCache(Rng& rng, Plan* plan, const Attrs& attrs, Tensors* inputs) {
  plan->max_t =
      plan->cache_mode == 0 ? PlaceOffsets(rng, *plan, inputs) : PlacePages(rng, *plan, inputs);
  const int64_t stored_dim = plan->quant_bit == 4 ? plan->d / 2 : plan->d;
  (*inputs)["cache"] = GarbageArray(
      rng, plan->cache_dt,
      detail::CacheShape(plan->layout, plan->num_layer, plan->max_t, plan->hkv, stored_dim));
  if (plan->quant_bit != 0) {
    (*inputs)["scale"] = GarbageArray(rng, plan->scale_dt,
                                      detail::CacheShape(plan->layout, plan->num_layer, plan->max_t,
                                                         plan->hkv, plan->d / plan->group));
  }
  WritePastContext(rng, *plan, attrs, inputs);
}

// Where a sliding window leaves context unread (detail::UnreadContextPrefix): NaN in MHA's key and
// value rows, and in a cache the slots no request reads get NaN elements (a NaN scale when
// quantized), so a path that reads them anyway shows NaN. `cachestarts` in `mode` / `page_size`.
struct UnreadPoison {
  std::vector<int64_t> seqlen, kvlen;
  int window_left = -1;
};

void PoisonUnreadRows(const UnreadPoison& u, Tensors* inputs) {
  const std::vector<int64_t> kvstarts = PrefixStarts(u.kvlen);
  for (const char* name : {"key", "value"}) {
    if (inputs->count(name) == 0) continue;  // value_from_key: no value tensor
    Array& tensor = inputs->at(name);
    const int64_t row_size = tensor.shape[1] * tensor.shape[2];
    for (size_t b = 0; b < u.kvlen.size(); ++b) {
      const int64_t unread = detail::UnreadContextPrefix(u.window_left, u.kvlen[b], u.seqlen[b]);
      for (int64_t i = kvstarts[b] * row_size; i < (kvstarts[b] + unread) * row_size; ++i) {
        StoreRounded(&tensor, i, std::nan(""));
      }
    }
  }
}

void PoisonUnreadSlots(const UnreadPoison& u, const Attrs& attrs, const Array& cachestarts,
                       int mode, int64_t page_size, Tensors* inputs) {
  std::set<int64_t> read, unread_slots;
  for (size_t b = 0; b < u.kvlen.size(); ++b) {
    const int64_t unread = detail::UnreadContextPrefix(u.window_left, u.kvlen[b], u.seqlen[b]);
    for (int64_t p = 0; p < u.kvlen[b]; ++p) {
      const int64_t slot = detail::SlotOf(cachestarts, mode, page_size, static_cast<int64_t>(b), p);
      (p < unread ? unread_slots : read).insert(slot);
    }
  }
  Array& cache = inputs->at("cache");
  Array* scale = inputs->count("scale") ? &inputs->at("scale") : nullptr;
  const int64_t max_t = cache.shape[attrs.cache_layout];
  const int64_t hkv = cache.shape[attrs.cache_layout == 3 ? 2 : 3];  // (L, 2, Hkv, MaxT, D)
  const int64_t last = cache.shape[4];
  for (int64_t slot : unread_slots) {
    if (read.count(slot)) continue;
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t h = 0; h < hkv; ++h) {
        Array& target = scale != nullptr ? *scale : cache;
        const int64_t extent = target.shape[4];
        for (int64_t i = 0; i < (scale != nullptr ? extent : last); ++i) {
          StoreRounded(&target,
                       detail::CacheOffset(attrs.cache_layout, slot, attrs.layer_idx, kv, h, i,
                                           attrs.num_layer, max_t, hkv, extent),
                       std::nan(""));
        }
      }
    }
  }
}

// Garbage everywhere, then each request's block (rows of its queries, columns of its context)
// gets finite values, some -inf entries and some fully -inf rows.
Array BuildMask(Rng& rng, const Plan& plan) {
  const std::vector<int64_t> seqstarts = PrefixStarts(plan.seqlen);
  const std::vector<int64_t> kvstarts = PrefixStarts(plan.kvlen);
  const int64_t rows = seqstarts.back(), cols = kvstarts.back() + plan.mask_pad;
  const int64_t planes = plan.mask_rank == 3 ? plan.hq : 1;
  Array mask = GarbageArray(rng, plan.t1,
                            plan.mask_rank == 3 ? std::vector<int64_t>{planes, rows, cols}
                                                : std::vector<int64_t>{rows, cols});
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t b = 0; b < plan.batch_count(); ++b) {
      for (int64_t row = seqstarts[b]; row < seqstarts[b + 1]; ++row) {
        const bool hidden_row = rng.Chance(plan.mask_row_inf_rate);
        for (int64_t col = kvstarts[b]; col < kvstarts[b + 1]; ++col) {
          const bool hidden = hidden_row || rng.Chance(plan.mask_inf_rate);
          StoreRounded(&mask, (plane * rows + row) * cols + col, hidden ? -kInf : 2 * rng.Normal());
        }
      }
    }
  }
  return mask;
}

// ----------------------------------------------------------------------------------------------
// Description.

std::string Join(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text + "]";
}

// The serving features that are on, e.g. " window=3 cap=30 scale=0.125 sinks k_scale=0.1".
void DescribeServingFeatures(const Plan& plan, std::ostringstream& text) {
  if (plan.window_left >= 0) text << " window=" << plan.window_left;
  if (plan.soft_cap > 0) text << " cap=" << plan.soft_cap;
  if (plan.softmax_scale > 0) text << " softmax_scale=" << plan.softmax_scale;
  if (plan.sinks) text << " sinks";
  if (plan.k_scale > 0) text << " k_scale=" << plan.k_scale << " v_scale=" << plan.v_scale;
}

std::string Describe(const std::string& op, uint64_t seed, const Plan& plan) {
  std::ostringstream text;
  text << op << " seed=" << seed << " T1=" << DtName(plan.t1) << " B=" << plan.batch_count()
       << " seqlen=" << Join(plan.seqlen) << " kvlen=" << Join(plan.kvlen) << " Hq=" << plan.hq
       << " Hkv=" << plan.hkv << " D=" << plan.d;
  if (plan.dv > 0) text << " Dv=" << plan.dv;
  if (plan.value_from_key) text << " value_from_key";
  if (plan.fast) text << " precision=fast";
  if (plan.op == Op::kKvc) text << " num_repeat=" << plan.hq / plan.hkv;
  if (plan.has_cache()) {
    text << " | start_pos=" << Join(plan.start_pos) << " quant_bit=" << plan.quant_bit;
    if (plan.quant_bit == 0) text << " cache=" << DtName(plan.cache_dt);
    if (plan.quant_bit != 0) text << " G=" << plan.group << " scale=" << DtName(plan.scale_dt);
    text << " mode=" << plan.cache_mode << " P=" << plan.page_size << " layout=" << plan.layout
         << " L=" << plan.num_layer << " l=" << plan.layer << " MaxT=" << plan.max_t;
  }
  if (plan.has_query()) {
    text << " | dec=" << plan.decoding_batches << " num_kv_heads=" << plan.num_kv_heads_attr
         << " causal=" << plan.causal << " alibi=" << plan.alibi << " mask=";
    if (plan.mask_rank == 0) text << "none";
    if (plan.mask_rank != 0) text << "rank" << plan.mask_rank << "+pad" << plan.mask_pad;
  }
  DescribeServingFeatures(plan, text);
  return text.str();
}

// The options with the `small` caps applied.
GenOptions EffectiveOptions(GenOptions options) {
  if (options.small) {
    options.max_batch = std::min(options.max_batch, 3);
    options.max_seqlen = std::min(options.max_seqlen, 8);
    options.max_context = std::min(options.max_context, 24);
  }
  options.max_seqlen = std::max(options.max_seqlen, 1);
  return options;
}

// ----------------------------------------------------------------------------------------------
// Unified attention steps.

// One request of a unified step, and the prefix group whose first `shared_blocks` blocks it
// shares (-1: none).
struct UnifiedRequest {
  int64_t context = 0, queries = 0;
  int64_t group = -1;
};

UnifiedRequest DrawUnifiedRequest(Rng& rng, const GenOptions& o, int64_t context_cap) {
  UnifiedRequest r;
  const double kind = rng.Uniform();
  if (kind < 0.2) {  // prompt
    r.queries = rng.Int(1, int64_t{o.max_seqlen});
  } else if (kind < 0.4) {  // prompt chunk after a cached prefix
    r.queries = rng.Int(2, std::max<int64_t>(2, int64_t{o.max_seqlen}));
    r.context = rng.Int(1, context_cap);
  } else if (kind < 0.8) {  // decode
    r.queries = 1;
    r.context = rng.Int(0, context_cap);
  } else if (kind < 0.92) {  // multi-token decode (speculative verification)
    r.queries = rng.Int(2, 5);
    r.context = rng.Int(1, context_cap);
  } else {  // idle: in the batch, nothing to compute
    r.context = rng.Int(0, context_cap);
  }
  if (o.pins.step == 1) r.queries = 1;  // decode
  if (o.pins.step == 2 && r.queries < 2) r.queries = rng.Int(2, std::max<int64_t>(2, o.max_seqlen));
  return r;
}

// Requests, then prefix groups: members of a group share their first blocks (full ones only, all
// inside every member's context, so no fresh token ever writes into a shared block).
std::vector<UnifiedRequest> DrawUnifiedRequests(Rng& rng, const GenOptions& o, int64_t block,
                                                std::vector<int64_t>* group_blocks) {
  const int64_t count = rng.Int(1, o.max_batch);
  const int64_t max_context = o.max_context;
  int64_t context_cap = rng.Pick(std::vector<int64_t>{8, 40, max_context});
  context_cap = std::max<int64_t>(1, std::min(context_cap, max_context));
  std::vector<UnifiedRequest> requests;
  for (int64_t b = 0; b < count; ++b) requests.push_back(DrawUnifiedRequest(rng, o, context_cap));
  const int64_t groups = rng.Int(0, 2);
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<int64_t> members;
    for (int64_t b = 0; b < count; ++b) {
      if (requests[b].group == -1 && requests[b].context >= block && rng.Chance(0.6)) {
        members.push_back(b);
      }
    }
    if (members.size() < 2 && !(members.size() == 1 && requests[members[0]].queries > 1)) continue;
    int64_t full = std::numeric_limits<int64_t>::max();
    for (int64_t b : members) full = std::min(full, requests[b].context / block);
    for (int64_t b : members) requests[b].group = static_cast<int64_t>(group_blocks->size());
    group_blocks->push_back(rng.Int(1, full));
  }
  return requests;
}

// Block tables: shared prefix blocks first (one physical block per group block), then every
// request's own blocks, all at random ids among num_blocks (some of them large); unused entries
// hold garbage ids that must never be read.
Array BuildBlockTable(Rng& rng, const std::vector<UnifiedRequest>& requests,
                      const std::vector<int64_t>& group_blocks, int64_t block,
                      int64_t* num_blocks) {
  int64_t max_blocks = 1, needed = 0;
  for (const UnifiedRequest& r : requests) {
    const int64_t blocks = (r.context + r.queries + block - 1) / block;
    max_blocks = std::max(max_blocks, blocks);
    needed += blocks;
  }
  max_blocks += rng.Int(0, 2);
  *num_blocks = needed + rng.Int(0, 3) + (rng.Chance(0.3) ? rng.Int(10, 300) : 0);
  std::vector<int64_t> ids(*num_blocks);
  for (int64_t i = 0; i < *num_blocks; ++i) ids[i] = i;
  rng.Shuffle(&ids);
  size_t next = 0;
  std::vector<std::vector<int64_t>> group_ids;
  for (int64_t shared : group_blocks) {
    group_ids.emplace_back(ids.begin() + next, ids.begin() + next + shared);
    next += shared;
  }
  std::vector<int64_t> table;
  for (const UnifiedRequest& r : requests) {
    const int64_t blocks = (r.context + r.queries + block - 1) / block;
    for (int64_t j = 0; j < max_blocks; ++j) {
      if (j >= blocks) {
        table.push_back(rng.Chance(0.5) ? -1 : rng.Int(-5, *num_blocks + 5));
      } else if (r.group >= 0 && j < group_blocks[r.group]) {
        table.push_back(group_ids[r.group][j]);
      } else {
        table.push_back(ids[next++]);
      }
    }
  }
  return MakeI64({static_cast<int64_t>(requests.size()), max_blocks}, table);
}

// The cached context of every request, written by an earlier (reference) step; a shared prefix
// is written once, by the first member of its group.
void WriteUnifiedHistory(Rng& rng, const Plan& plan, const std::vector<UnifiedRequest>& requests,
                         const std::vector<int64_t>& group_blocks, int64_t block, Attrs attrs,
                         Tensors* inputs) {
  std::vector<int64_t> skip, length, pages;
  std::vector<bool> group_written(group_blocks.size(), false);
  for (const UnifiedRequest& r : requests) {
    int64_t from = 0;
    if (r.group >= 0 && group_written[r.group]) from = group_blocks[r.group] * block;
    if (r.group >= 0) group_written[r.group] = true;
    skip.push_back(from);
    length.push_back(r.context - from);
  }
  const Array& table = inputs->at("block_table");
  for (int64_t i = 0; i < table.numel(); ++i) {
    pages.push_back(std::max<int64_t>(0, table.data<int64_t>()[i]) * block);
  }
  const int64_t count = static_cast<int64_t>(requests.size());
  std::vector<int64_t> kvlen;
  for (const UnifiedRequest& r : requests) kvlen.push_back(r.context);
  Tensors history;
  history["cache"] = inputs->at("cache");
  if (inputs->count("scale")) history["scale"] = inputs->at("scale");
  for (const char* name : {"k_scale", "v_scale"}) {
    if (inputs->count(name)) history[name] = inputs->at(name);
  }
  history["cachestarts"] = MakeI64(table.shape, pages);
  history["seqstarts"] = MakeI64({count + 1}, PrefixStarts(length));
  history["kvstarts"] = MakeI64({count + 1}, PrefixStarts(kvlen));
  history["start_pos"] = MakeI64({count}, skip);
  history["max_seqlen"] = ScalarI64(MaxOf(length));
  history["max_kvlen"] = ScalarI64(MaxOf(kvlen));
  const int64_t rows = PrefixStarts(length).back();
  history["current_key"] = RandomValues(rng, plan.t1, {rows, plan.hkv, plan.d}, 1);
  history["current_value"] = RandomValues(rng, plan.t1, {rows, plan.hkv, plan.d}, plan.v_magnitude);
  attrs.num_repeat = 1;
  attrs.cache_mode = 1;
  attrs.page_size = static_cast<int>(block);
  KvcResult written = KeyValueCache(attrs, history);
  (*inputs)["cache"] = std::move(written.cache);
  if (plan.quant_bit != 0) (*inputs)["scale"] = std::move(written.scale);
}

}  // namespace

Case RandomCase(const std::string& op, uint64_t seed, const GenOptions& options) {
  // The serving features' stream. Its label is part of every drawn case: changing it changes the
  // golden matrix.
  Rng rng(MixSeed(op, seed)), extra(MixSeed(op + "/issue13", seed));
  Rng dims(MixSeed(op + "/head_dim_v", seed));
  const GenOptions effective = EffectiveOptions(options);
  Plan plan = DrawPlan(rng, extra, ParseOp(op), effective);
  DrawValueDim(dims, effective, &plan);
  Case result;
  result.op = op;
  result.attrs = MakeAttrs(plan);
  AddRequestTensors(rng, plan, &result.inputs);
  AddActivations(rng, plan, &result.inputs);
  AddServingFeatureInputs(extra, plan, &result.inputs);
  if (plan.has_cache()) AddCache(rng, &plan, result.attrs, &result.inputs);
  if (plan.has_query() && plan.window_left >= 0) {
    const UnreadPoison poison{plan.seqlen, plan.kvlen, plan.window_left};
    if (plan.op == Op::kMha) PoisonUnreadRows(poison, &result.inputs);
    if (plan.op == Op::kMhca) {
      PoisonUnreadSlots(poison, result.attrs, result.inputs.at("cachestarts"), plan.cache_mode,
                        plan.page_size, &result.inputs);
    }
  }
  if (plan.has_query() && plan.mask_rank != 0) result.inputs["attn_mask"] = BuildMask(rng, plan);
  result.description = Describe(op, seed, plan);
  return result;
}

}  // namespace dynattn_ref

namespace dynattn_ref {

Case RandomUnifiedCase(uint64_t seed, const GenOptions& options) {
  // The serving features' stream. Its label is part of every drawn case: changing it changes the
  // golden matrix.
  Rng rng(MixSeed("unified_attention", seed)), extra(MixSeed("unified_attention/issue13", seed));
  const GenOptions o = EffectiveOptions(options);
  Plan plan;
  plan.op = Op::kMhca;
  plan.t1 = rng.Chance(0.5) ? Dt::kF32 : Dt::kF16;
  DrawHeads(rng, o, &plan);
  DrawCacheAttrs(rng, o, &plan);
  plan.alibi = rng.Chance(0.3) ? 1 : 0;
  if (o.pins.alibi >= 0) plan.alibi = o.pins.alibi;
  plan.v_magnitude = rng.Pick(std::vector<double>{1, 1, 4, 30});
  const int64_t block = rng.Pick(std::vector<int64_t>{1, 2, 3, 4, 16, 16, 32});
  std::vector<int64_t> group_blocks;
  const std::vector<UnifiedRequest> requests = DrawUnifiedRequests(rng, o, block, &group_blocks);
  for (const UnifiedRequest& r : requests) plan.kvlen.push_back(r.context + r.queries);
  DrawServingFeatures(extra, o, &plan);
  plan.fast = o.pins.precision == 1;
  Case result;
  result.op = "unified_attention";
  result.attrs = MakeAttrs(plan);
  result.attrs.is_causal = 1;
  result.attrs.is_alibi = plan.alibi == 1;
  result.attrs.cache_mode = 0;
  result.attrs.block_size = static_cast<int>(block);
  int64_t num_blocks = 0;
  Tensors& in = result.inputs;
  in["block_table"] = BuildBlockTable(rng, requests, group_blocks, block, &num_blocks);
  // A step whose requests hold no block still has a cache of one (unused) block: a quantized cache
  // of zero slots would have an empty scale tensor, which counts as absent (spec §5.4).
  num_blocks = std::max<int64_t>(num_blocks, 1);
  std::vector<int64_t> queries, context;
  for (const UnifiedRequest& r : requests) {
    queries.push_back(r.queries);
    context.push_back(r.context);
  }
  const int64_t count = static_cast<int64_t>(requests.size());
  const int64_t tokens = PrefixStarts(queries).back();
  in["query_start_loc"] = MakeI64({count + 1}, PrefixStarts(queries));
  in["context_lens"] = MakeI64({count}, context);
  in["query"] = RandomValues(rng, plan.t1, {tokens, plan.hq, plan.d}, 1);
  in["current_key"] = RandomValues(rng, plan.t1, {tokens, plan.hkv, plan.d}, 1);
  in["current_value"] = RandomValues(rng, plan.t1, {tokens, plan.hkv, plan.d}, plan.v_magnitude);
  AddServingFeatureInputs(extra, plan, &in);
  plan.max_t = num_blocks * block;
  const int64_t stored_dim = plan.quant_bit == 4 ? plan.d / 2 : plan.d;
  in["cache"] = GarbageArray(
      rng, plan.cache_dt,
      detail::CacheShape(plan.layout, plan.num_layer, plan.max_t, plan.hkv, stored_dim));
  if (plan.quant_bit != 0) {
    in["scale"] = GarbageArray(
        rng, plan.scale_dt,
        detail::CacheShape(plan.layout, plan.num_layer, plan.max_t, plan.hkv, plan.d / plan.group));
  }
  WriteUnifiedHistory(rng, plan, requests, group_blocks, block, result.attrs, &in);
  if (plan.window_left >= 0) {
    const UnreadPoison poison{queries, plan.kvlen, plan.window_left};
    std::vector<int64_t> pages;
    const Array& table = in.at("block_table");
    for (int64_t i = 0; i < table.numel(); ++i) pages.push_back(table.data<int64_t>()[i] * block);
    PoisonUnreadSlots(poison, result.attrs, MakeI64(table.shape, pages), 1, block, &in);
  }
  std::ostringstream text;
  text << "unified_attention seed=" << seed << " T1=" << DtName(plan.t1) << " B=" << count
       << " queries=" << Join(queries) << " context=" << Join(context) << " Hq=" << plan.hq
       << " Hkv=" << plan.hkv << " D=" << plan.d << " bs=" << block << " blocks=" << num_blocks
       << " groups=" << Join(group_blocks) << " quant_bit=" << plan.quant_bit << " G=" << plan.group
       << " layout=" << plan.layout << " L=" << plan.num_layer << " l=" << plan.layer
       << " alibi=" << plan.alibi;
  if (plan.quant_bit == 0) text << " cache=" << DtName(plan.cache_dt);
  DescribeServingFeatures(plan, text);
  result.description = text.str();
  return result;
}

}  // namespace dynattn_ref
