// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// docs/api.md's engine example, compiled and run by the test suite so that it stays true: one
// plan per step runs every layer of a model whose layers differ (a sliding window and sinks on
// every other layer, as gpt-oss has), reading q, k and v as column slices of one fused QKV
// projection, and each layer gets the bits of the one-shot call made with its attributes.

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dynattn/dynattn.h"

using namespace dynattn;

namespace {

constexpr int kHeads = 8, kKvHeads = 2, kDim = 64, kLayers = 4, kSlots = 256;
constexpr int kWidth = (kHeads + 2 * kKvHeads) * kDim;  // a row of the fused projection

/// One layer's tensors: its fused QKV rows, its own fp16 cache (layout 0) and its output.
struct LayerTensors {
  std::vector<uint16_t> qkv, cache, out;
  std::vector<float> sinks;
};

LayerTensors MakeLayer(std::mt19937& rng, int64_t tokens) {
  std::normal_distribution<float> normal;
  LayerTensors t;
  for (int64_t i = 0; i < tokens * kWidth; ++i) t.qkv.push_back(FloatToHalf(normal(rng)));
  for (int64_t i = 0; i < int64_t{kSlots} * 2 * kKvHeads * kDim; ++i) {
    t.cache.push_back(FloatToHalf(normal(rng)));
  }
  t.out.assign(tokens * kHeads * kDim, 0);
  for (int h = 0; h < kHeads; ++h) t.sinks.push_back(normal(rng));
  return t;
}

/// A dense copy of rows [column, column + heads * kDim) of the fused projection.
std::vector<uint16_t> DenseColumns(const LayerTensors& t, int64_t tokens, int column, int heads) {
  std::vector<uint16_t> dense;
  for (int64_t r = 0; r < tokens; ++r) {
    const uint16_t* row = t.qkv.data() + r * kWidth + column;
    dense.insert(dense.end(), row, row + heads * kDim);
  }
  return dense;
}

}  // namespace

int main() {
  // One step: request 0 decodes after 40 cached tokens, request 1 is a 6-token prompt.
  int64_t seqstarts[] = {0, 1, 7}, kvstarts[] = {0, 41, 47}, start_pos[] = {40, 0};
  int64_t cachestarts[] = {0, 128}, decoding = 1, max_seqlen = 6, max_kvlen = 41;
  const int64_t tokens = seqstarts[2];
  std::mt19937 rng(7);
  std::vector<LayerTensors> layers;
  for (int l = 0; l < kLayers; ++l) layers.push_back(MakeLayer(rng, tokens));
  std::vector<LayerTensors> one_shot = layers;  // the same caches, for the one-shot calls

  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = {.num_heads = kHeads, .num_kv_heads = kKvHeads, .head_dim = kDim};
  auto index = [&](MultiHeadCacheAttentionArgs* a) {
    a->seqstarts = TensorView::Dense(seqstarts, DType::kI64, {3});
    a->kvstarts = TensorView::Dense(kvstarts, DType::kI64, {3});
    a->cachestarts = TensorView::Dense(cachestarts, DType::kI64, {2});
    a->start_pos = TensorView::Dense(start_pos, DType::kI64, {2});
    a->decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
    a->max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    a->max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
  };
  auto args_of = [&](LayerTensors& t) {
    // --- docs example begins ---
    // q, k and v are column slices of the fused projection qkv = x @ W_qkv: rows kWidth apart.
    auto slice = [&](int column, int heads) {
      TensorView v = TensorView::Dense(t.qkv.data() + column, DType::kF16, {tokens, heads, kDim});
      v.strides[0] = kWidth;
      return v;
    };
    MultiHeadCacheAttentionArgs a;
    a.query = slice(0, kHeads);
    a.current_key = slice(kHeads * kDim, kKvHeads);
    a.current_value = slice((kHeads + kKvHeads) * kDim, kKvHeads);
    // --- docs example ends ---
    index(&a);
    a.cache = TensorView::Dense(t.cache.data(), DType::kF16, {kSlots, 1, 2, kKvHeads, kDim});
    a.attn_output = TensorView::Dense(t.out.data(), DType::kF16, {tokens, kHeads, kDim});
    return a;
  };

  Context context;
  Plan plan;
  Status s = PlanMultiHeadCacheAttention(attrs, args_of(layers[0]), &plan);  // once per step
  for (int l = 0; s.ok() && l < kLayers; ++l) {
    // --- docs layers begins ---
    LayerAttrs layer = plan.layer_attrs();  // the attributes the plan was made with
    if (l % 2 == 0) {                       // a local layer: its window and its own sinks
      layer.window_left = 15;
      layer.sinks = TensorView::Dense(layers[l].sinks.data(), DType::kF32, {kHeads});
    }
    s = RunMultiHeadCacheAttention(plan, args_of(layers[l]), &context, &layer);
    // --- docs layers ends ---
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  // The one-shot call per layer, with its attributes and dense copies of q, k and v.
  for (int l = 0; l < kLayers; ++l) {
    LayerTensors& t = one_shot[l];
    std::vector<uint16_t> q = DenseColumns(t, tokens, 0, kHeads);
    std::vector<uint16_t> k = DenseColumns(t, tokens, kHeads * kDim, kKvHeads);
    std::vector<uint16_t> v = DenseColumns(t, tokens, (kHeads + kKvHeads) * kDim, kKvHeads);
    MultiHeadCacheAttentionArgs a = args_of(t);
    a.query = TensorView::Dense(q.data(), DType::kF16, {tokens, kHeads, kDim});
    a.current_key = TensorView::Dense(k.data(), DType::kF16, {tokens, kKvHeads, kDim});
    a.current_value = TensorView::Dense(v.data(), DType::kF16, {tokens, kKvHeads, kDim});
    MultiHeadCacheAttentionAttrs layer_attrs = attrs;
    if (l % 2 == 0) {
      layer_attrs.attention.window_left = 15;
      a.sinks = TensorView::Dense(t.sinks.data(), DType::kF32, {kHeads});
    }
    s = MultiHeadCacheAttention(layer_attrs, a);
    if (!s.ok() || t.out != layers[l].out || t.cache != layers[l].cache) {
      std::fprintf(stderr, "layer %d differs from its one-shot call: %s\n", l, s.message().c_str());
      return 1;
    }
  }
  std::printf(
      "%d layers (windows and sinks on every other one) on one plan, q/k/v read from the "
      "fused QKV: the one-shot bits\n",
      kLayers);
  return 0;
}
