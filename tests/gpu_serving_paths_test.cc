// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's serving paths through the public API on the device: vLLM's CPU cache layout
// (dimension-major keys), row-strided activations (fused-QKV slices), NaN and infinities in the
// inputs (float64 IEEE rows, as on the CPU) and one plan running layers with their own window,
// soft-cap, softmax scale and sinks.

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/gpu_device.h"
#include "tests/support/gpu_features.h"
#include "tests/support/non_finite.h"
#include "tests/support/plan_layers.h"
#include "tests/support/row_padding.h"
#include "tests/support/run_case.h"

namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_test::DevicePlacement;
using dynattn_test::LibResult;
using dynattn_test::Reduced;
using dynattn_test::Reference;
using dynattn_test::RunOnDevice;

namespace feature = dynattn_test::feature;

TEST_SUITE("gpu") {
  TEST_CASE("vLLM's CPU layout (dimension-major keys) on the device: the CPU's cache bytes") {
    // 3 requests (a decode, a 2-token decode, a 5-token chunk) over 6 blocks of 4 slots, Hq 4,
    // Hkv 2, D 16, an fp16 cache [2, nb, Hkv, bs, D] with keys [D, bs] per (block, head).
    const int64_t nb = 6, bs = 4, hkv = 2, hq = 4, d = 16, tokens = 8;
    std::mt19937_64 rng(dynattn_test::BaseSeed() + 6300);
    std::normal_distribution<float> normal;
    std::vector<uint8_t> cache(size_t{2} * nb * hkv * bs * d * 2);
    for (size_t i = 0; i < cache.size(); i += 2) {
      const uint16_t h = dynattn::FloatToHalf(normal(rng));
      std::memcpy(&cache[i], &h, 2);
    }
    std::vector<uint8_t> query(size_t{tokens} * hq * d * 4), key(size_t{tokens} * hkv * d * 4),
        value(key.size());
    for (std::vector<uint8_t>* v : {&query, &key, &value}) {
      for (size_t i = 0; i < v->size(); i += 4) {
        const float x = normal(rng);
        std::memcpy(v->data() + i, &x, 4);
      }
    }
    const int64_t qsl[4] = {0, 1, 3, 8}, ctx[3] = {6, 3, 2}, table[3 * 2] = {4, 1, 0, 3, 5, 2};
    const auto run = [&](bool device, std::vector<uint8_t>* kv, std::vector<float>* out) {
      std::vector<uint8_t> out_bytes(query.size(), 0xFF);
      const feature::DeviceBytes kv_d(*kv), q_d(query), k_d(key), v_d(value), out_d(out_bytes);
      const auto place = [&](std::vector<uint8_t>& host, const feature::DeviceBytes& dev,
                             std::vector<int64_t> shape, dynattn::DType dtype) {
        dynattn::TensorView t = dynattn::TensorView::Dense(
            device ? dev.get() : host.data(), dtype, static_cast<int>(shape.size()), shape.data());
        if (device) t.device = dynattn::Device::kCuda;
        return t;
      };
      dynattn::BlockCache bc;
      REQUIRE(dynattn::MakeVllmCpuBlockCache(
                  place(*kv, kv_d, {2, nb, hkv, bs, d}, dynattn::DType::kF16), {},
                  dynattn::CacheFormat{}, &bc)
                  .ok());
      dynattn::UnifiedAttentionAttrs a;
      a.num_heads = hq;
      a.num_kv_heads = hkv;
      a.head_dim = d;
      dynattn::UnifiedAttentionArgs args;
      args.query = place(query, q_d, {tokens, hq, d}, dynattn::DType::kF32);
      args.current_key = place(key, k_d, {tokens, hkv, d}, dynattn::DType::kF32);
      args.current_value = place(value, v_d, {tokens, hkv, d}, dynattn::DType::kF32);
      args.query_start_loc = dynattn::TensorView::Dense(qsl, dynattn::DType::kI64, {4});
      args.context_lens = dynattn::TensorView::Dense(ctx, dynattn::DType::kI64, {3});
      args.block_table = dynattn::TensorView::Dense(table, dynattn::DType::kI64, {3, 2});
      args.cache = &bc;
      args.attn_output = place(out_bytes, out_d, {tokens, hq, d}, dynattn::DType::kF32);
      const dynattn::Status status = dynattn::UnifiedAttention(a, args);
      REQUIRE_MESSAGE(status.ok(), status.message());
      if (device) {
        REQUIRE_CUDA(cudaDeviceSynchronize());
        *kv = kv_d.Fetch();
        out_bytes = out_d.Fetch();
      }
      out->resize(out_bytes.size() / 4);
      std::memcpy(out->data(), out_bytes.data(), out_bytes.size());
    };
    std::vector<uint8_t> cpu_cache = cache, gpu_cache = cache;
    std::vector<float> cpu_out, gpu_out;
    run(false, &cpu_cache, &cpu_out);
    run(true, &gpu_cache, &gpu_out);
    CHECK(cpu_cache == gpu_cache);  // the new tokens' keys landed dimension-major on both
    CHECK(cpu_cache != cache);
    for (size_t i = 0; i < cpu_out.size(); ++i) {
      CAPTURE(i);
      REQUIRE(std::isfinite(cpu_out[i]));
      CHECK(std::fabs(gpu_out[i] - cpu_out[i]) <= 1e-5f * (1.0f + std::fabs(cpu_out[i])));
    }
  }
  TEST_CASE("row-strided activations on the device give the dense call's bits") {
    const char* const ops[] = {"key_value_cache", "multi_head_attention",
                               "multi_head_cache_attention", "unified_attention"};
    for (int i = 0; i < 2; ++i) {
      for (const char* op : ops) {
        const uint64_t seed = dynattn_test::BaseSeed() + 5000 + 17 * i;
        dynattn_ref::GenOptions small;  // the plumbing of strides, not the kernels' matrix
        small.small = true;
        const Case c = std::string(op) == "unified_attention"
                           ? dynattn_ref::RandomUnifiedCase(seed, small)
                           : dynattn_ref::RandomCase(op, seed, small);
        CAPTURE(c.description);
        DevicePlacement dense_placement;
        const LibResult dense = dynattn_test::RunLibrary(c, {}, &dense_placement);
        REQUIRE_MESSAGE(dense.status.ok(), dense.status.message());
        DevicePlacement device;
        dynattn_test::RowPadding padding(8 * i + 3, &device);
        const LibResult strided = dynattn_test::RunLibrary(c, {}, &padding);
        REQUIRE_MESSAGE(strided.status.ok(), strided.status.message());
        CHECK(padding.gaps_written().empty());
        const std::pair<const char*, std::pair<const Array*, const Array*>> outputs[] = {
            {"attn_output", {&dense.attn_output, &strided.attn_output}},
            {"lse", {&dense.lse, &strided.lse}},
            {"key", {&dense.key, &strided.key}},
            {"value", {&dense.value, &strided.value}},
            {"cache", {&dense.cache, &strided.cache}}};
        for (const auto& output : outputs) {  // not a structured binding: doctest captures it
          std::string why;
          CHECK_MESSAGE(dynattn_test::SameBytes(*output.second.first, *output.second.second, &why),
                        output.first, ": ", why);
        }
      }
    }
  }
  TEST_CASE("values of another size (head_dim_v) on the device match the reference") {
    // Decodes (one row per request: the split-KV merges at 700 keys) and prefills, Dv != D drawn
    // in half the cases, the MLA sizes among them.
    for (int i = 0; i < (Reduced() ? 4 : 12); ++i) {
      dynattn_ref::GenOptions options;
      options.value_head_dims = true;
      options.max_batch = 3;
      options.max_seqlen = i % 2 == 0 ? 1 : 20;
      options.max_context = i % 3 == 0 ? 700 : 90;
      const Case c = dynattn_ref::RandomCase("multi_head_attention",
                                             dynattn_test::BaseSeed() + 7300 + i, options);
      INFO(c.description);
      const dynattn_ref::AttnResult ref = Reference(c);
      const LibResult gpu = RunOnDevice(c);
      REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.message());
      CHECK(dynattn_ref::CheckAttention(ref, gpu.attn_output) == "");
      CHECK(dynattn_ref::CheckLse(ref, gpu.lse) == "");
    }
  }
  TEST_CASE("NaN and infinities on the device give float64 IEEE rows, as on the CPU") {
    // The first step of each op is drawn until its planted values reach a row (a -inf key, say,
    // may make no row NaN), so that even the reduced matrix proves NaN reaches the outputs.
    const auto planted_case = [](const char* op, int i, int draw, std::string* planted) {
      const uint64_t seed = dynattn_test::BaseSeed() + 6100 + 31 * i + 1009 * draw;
      dynattn_ref::GenOptions options;
      options.max_batch = 3;
      options.max_seqlen = 6;
      options.max_context = i % 2 == 0 ? 90 : 700;  // 700: decode splits and their merges
      Case c = std::string(op) == "unified_attention"
                   ? dynattn_ref::RandomUnifiedCase(seed, options)
                   : dynattn_ref::RandomCase(op, seed, options);
      *planted = dynattn_test::PlantNonFinite(seed, &c);
      return c;
    };
    const auto nan_rows = [](const dynattn_ref::AttnResult& ref) {
      int count = 0;
      for (double x : ref.out) count += std::isnan(x);
      return count;
    };
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      int nan_outputs = 0;
      for (int i = 0; i < (Reduced() ? 1 : 4); ++i) {
        std::string planted;
        Case c = planted_case(op, i, 0, &planted);
        dynattn_ref::AttnResult ref = Reference(c);
        for (int draw = 1; i == 0 && nan_rows(ref) == 0 && draw < 32; ++draw) {
          c = planted_case(op, i, draw, &planted);
          ref = Reference(c);
        }
        INFO(c.description, " ", planted);
        const LibResult gpu = RunOnDevice(c);
        REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.message());
        CHECK(dynattn_ref::CheckAttention(ref, gpu.attn_output) == "");
        if (c.op == "unified_attention") CHECK(dynattn_ref::CheckLse(ref, gpu.lse) == "");
        nan_outputs += nan_rows(ref);
      }
      CHECK_MESSAGE(nan_outputs > 0, op, ": the planted values reached no row");
    }
  }
  TEST_CASE("one device plan runs layers with their own window, soft-cap, scale and sinks") {
    // The step planned without them; its layers pin them (same seed: same step, same history).
    const auto layer_case = [](const char* op, int window, int cap, int scale, int sinks) {
      dynattn_ref::GenOptions options;
      options.max_batch = 3;
      options.max_seqlen = 6;
      options.max_context = 120;
      options.pins.window = window;
      options.pins.soft_cap = cap;
      options.pins.softmax_scale = scale;
      options.pins.sinks = sinks;
      const uint64_t seed = dynattn_test::BaseSeed() + 4242;
      return std::string(op) == "unified_attention" ? dynattn_ref::RandomUnifiedCase(seed, options)
                                                    : dynattn_ref::RandomCase(op, seed, options);
    };
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      const Case planned = layer_case(op, -1, 0, 0, 0);
      dynattn_test::Layer planning(planned);
      DevicePlacement planning_placement;
      planning.PlaceOn(&planning_placement, planned);
      dynattn::Plan plan;
      const dynattn::Status s = dynattn_test::PlanLayer(planned, &planning, &plan);
      REQUIRE_MESSAGE(s.ok(), s.message());
      dynattn::Context context;
      const int windows[] = {3, -1, 40, -1};
      for (int l = 0; l < 4; ++l) {
        const Case c = layer_case(op, windows[l], l == 1, l == 2, l != 1);
        CAPTURE(c.description);
        dynattn_test::Layer layer(c);
        DevicePlacement placement;
        layer.PlaceOn(&placement, c);
        dynattn::LayerAttrs attrs;
        attrs.window_left = c.attrs.window_left;
        attrs.logits_soft_cap = static_cast<float>(c.attrs.logits_soft_cap);
        attrs.softmax_scale = static_cast<float>(c.attrs.softmax_scale);
        if (c.inputs.count("sinks")) attrs.sinks = dynattn_test::ViewOf(layer.tensors.at("sinks"));
        const dynattn::Status run = dynattn_test::BoundArgs(c, &layer).Run(plan, &context, &attrs);
        REQUIRE_MESSAGE(run.ok(), run.message());
        placement.Fetch();
        const dynattn_ref::AttnResult ref =
            c.op == "multi_head_attention" ? dynattn_ref::MultiHeadAttention(c.attrs, c.inputs)
            : c.op == "unified_attention"  ? dynattn_ref::UnifiedAttention(c.attrs, c.inputs)
                                          : dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
        const std::string error = dynattn_ref::CheckAttention(ref, layer.tensors.at("attn_output"));
        CHECK_MESSAGE(error.empty(), "CUDA attn_output: ", error);
      }
    }
  }
}

}  // namespace
