// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Inputs at the edges of what the API accepts, each refused with an error naming it (or computed
// without wrapping): a Context's thread count, a scale tensor nobody reads, ATB ids of pools with
// very many layers.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dynattn/c_api.h"
#include "dynattn/dynattn.h"

namespace {

using namespace dynattn;  // NOLINT: a test of the whole public API

TEST_SUITE("edges") {
  TEST_CASE("a Context refuses a thread count outside [0, 1024] and runs nothing") {
    for (int threads : {-3, -1, 1025, 5000, 65537, 100000}) {
      CAPTURE(threads);
      const ContextOptions options{.num_threads = threads};
      const Status expected = ValidateContextOptions(options);
      CHECK(expected.code() == StatusCode::kInvalidArgument);
      CHECK(expected.message() ==
            "num_threads: must be 0 (all cores) or in [1, 1024], got " + std::to_string(threads));
      // C++: the Context holds the error (one thread, no oneTBB arena of that size) and every Run
      // on it returns it; destroying it is safe.
      Context context(options);
      CHECK(context.status().message() == expected.message());
      CHECK(context.options().num_threads == 1);
      std::vector<float> a(4, 1.0f), b(4, 2.0f), out(4, 0.0f), lse(2, 0.0f);
      int64_t seqstarts[] = {0, 1}, kvstarts[] = {0, 1}, zero = 0, one = 1;
      MultiHeadAttentionArgs args;
      args.query = TensorView::Dense(a.data(), DType::kF32, {1, 1, 4});
      args.key = TensorView::Dense(b.data(), DType::kF32, {1, 1, 4});
      args.value = TensorView::Dense(b.data(), DType::kF32, {1, 1, 4});
      args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
      args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
      args.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
      args.max_seqlen = TensorView::Dense(&one, DType::kI64, {});
      args.max_kvlen = TensorView::Dense(&one, DType::kI64, {});
      args.attn_output = TensorView::Dense(out.data(), DType::kF32, {1, 1, 4});
      const AttentionAttrs attrs{.num_heads = 1, .num_kv_heads = 1, .head_dim = 4};
      Plan plan;
      REQUIRE(PlanMultiHeadAttention(attrs, args, &plan).ok());
      CHECK(RunMultiHeadAttention(plan, args, &context).message() == expected.message());
      CHECK(out == std::vector<float>(4, 0.0f));
      // C: no context is created.
      dynattn_context_options_t c_options;
      REQUIRE(dynattn_context_options_init(&c_options) == DYNATTN_STATUS_OK);
      c_options.num_threads = threads;
      dynattn_context_t* c_context = nullptr;
      CHECK(dynattn_context_create(&c_options, &c_context) == DYNATTN_STATUS_INVALID_ARGUMENT);
      CHECK(c_context == nullptr);
      CHECK(std::string(dynattn_last_error_message()) == expected.message());
    }
    for (int threads : {0, 1, 2, 1024}) {
      CHECK(ValidateContextOptions(ContextOptions{.num_threads = threads}).ok());
    }
  }

  TEST_CASE("a scale tensor with quant_bit 0 is refused, by the call and by a Run") {
    std::vector<uint16_t> q(2 * 8, 0x3C00), out(2 * 8);
    std::vector<uint16_t> cache(4 * 1 * 2 * 1 * 8, 0), scale(4 * 2, 0x3C00);
    int64_t seqstarts[] = {0, 2}, kvstarts[] = {0, 2}, cachestarts[] = {0}, start_pos[] = {0};
    int64_t zero = 0, two = 2;
    MultiHeadCacheAttentionArgs a;
    a.query = TensorView::Dense(q.data(), DType::kF16, {2, 1, 8});
    a.current_key = TensorView::Dense(q.data(), DType::kF16, {2, 1, 8});
    a.current_value = TensorView::Dense(q.data(), DType::kF16, {2, 1, 8});
    a.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    a.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    a.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
    a.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    a.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
    a.max_seqlen = TensorView::Dense(&two, DType::kI64, {});
    a.max_kvlen = TensorView::Dense(&two, DType::kI64, {});
    a.cache = TensorView::Dense(cache.data(), DType::kF16, {4, 1, 2, 1, 8});
    a.attn_output = TensorView::Dense(out.data(), DType::kF16, {2, 1, 8});
    MultiHeadCacheAttentionAttrs attrs;
    attrs.attention = {.num_heads = 1, .num_kv_heads = 1, .head_dim = 8};
    Plan plan;
    REQUIRE(PlanMultiHeadCacheAttention(attrs, a, &plan).ok());
    MultiHeadCacheAttentionArgs with_scale = a;
    with_scale.scale = TensorView::Dense(scale.data(), DType::kF16, {4, 1, 2, 1, 1});
    const Status call = MultiHeadCacheAttention(attrs, with_scale);
    CHECK(call.message() ==
          "scale: must be absent when quant_bit is 0 (only int8 and int4 caches have group "
          "scales)");
    Context context;
    const Status run = RunMultiHeadCacheAttention(plan, with_scale, &context);
    CHECK(run.message() ==
          "scale: must be absent: the step was planned without one (only int8 and int4 caches "
          "have group scales)");
    CHECK(cache == std::vector<uint16_t>(cache.size(), 0));  // nothing written
    CHECK(RunMultiHeadCacheAttention(plan, a, &context).ok());
  }

  TEST_CASE("bf16 activations over an int8 cache with fp16 scales read exact fp32 products") {
    // Keys and values near 1e5: their fp16 products q * s would overflow to infinity (65504 is
    // fp16's largest), which made every output NaN; read exactly, the output is that of float64
    // attention over the cache's dequantized contents, within bf16's tolerance.
    constexpr int kTokens = 6, kDim = 16;
    std::mt19937_64 rng(0xB16);
    std::uniform_real_distribution<float> big(-1.2e5f, 1.2e5f), small(-4e-5f, 4e-5f);
    std::vector<uint16_t> q(kTokens * kDim), k(kTokens * kDim), v(kTokens * kDim);
    std::vector<uint16_t> out(kTokens * kDim, 0xFFFF), scale(kTokens * 2 * (kDim / 8));
    std::vector<int8_t> cache(kTokens * 2 * kDim);
    for (uint16_t& x : q) x = FloatToBfloat16(small(rng));
    for (uint16_t& x : k) x = FloatToBfloat16(big(rng));
    for (uint16_t& x : v) x = FloatToBfloat16(big(rng));
    int64_t seqstarts[] = {0, kTokens}, kvstarts[] = {0, kTokens}, cachestarts[] = {0};
    int64_t start_pos[] = {0}, zero = 0, tokens = kTokens;
    MultiHeadCacheAttentionArgs a;
    a.query = TensorView::Dense(q.data(), DType::kBF16, {kTokens, 1, kDim});
    a.current_key = TensorView::Dense(k.data(), DType::kBF16, {kTokens, 1, kDim});
    a.current_value = TensorView::Dense(v.data(), DType::kBF16, {kTokens, 1, kDim});
    a.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    a.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    a.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
    a.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    a.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
    a.max_seqlen = TensorView::Dense(&tokens, DType::kI64, {});
    a.max_kvlen = TensorView::Dense(&tokens, DType::kI64, {});
    a.cache = TensorView::Dense(cache.data(), DType::kI8, {kTokens, 1, 2, 1, kDim});
    a.scale = TensorView::Dense(scale.data(), DType::kF16, {kTokens, 1, 2, 1, kDim / 8});
    a.attn_output = TensorView::Dense(out.data(), DType::kBF16, {kTokens, 1, kDim});
    MultiHeadCacheAttentionAttrs attrs;
    attrs.attention = {.num_heads = 1, .num_kv_heads = 1, .head_dim = kDim, .is_causal = true};
    attrs.cache.quant_bit = 8;
    const Status s = MultiHeadCacheAttention(attrs, a);
    REQUIRE_MESSAGE(s.ok(), s.message());
    // float64 over the dequantized cache: x = q * s (layout 0: [slot][layer][kv][head][D]).
    auto dequantized = [&](int slot, int kv, int d) {
      const double group_scale = HalfToFloat(scale[(slot * 2 + kv) * (kDim / 8) + d / 8]);
      return cache[(slot * 2 + kv) * kDim + d] * group_scale;
    };
    double vmax = 0;
    for (int t = 0; t < kTokens; ++t) {
      for (int d = 0; d < kDim; ++d) vmax = std::max(vmax, std::abs(dequantized(t, 1, d)));
    }
    for (int t = 0; t < kTokens; ++t) {
      std::vector<double> w(t + 1);
      double m = -1e300, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int d = 0; d < kDim; ++d)
          dot += Bfloat16ToFloat(q[t * kDim + d]) * dequantized(j, 0, d);
        w[j] = dot / std::sqrt(double{kDim});
        m = std::max(m, w[j]);
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      for (int d = 0; d < kDim; ++d) {
        double ref = 0;
        for (int j = 0; j <= t; ++j) ref += w[j] / sum * dequantized(j, 1, d);
        const double got = Bfloat16ToFloat(out[t * kDim + d]);
        CAPTURE(t);
        CAPTURE(d);
        REQUIRE(std::isfinite(got));
        CHECK(std::abs(got - ref) <= std::ldexp(std::abs(ref), -8) + 1e-4 * std::max(1.0, vmax));
      }
    }
  }

  TEST_CASE("ATB block ids and slots of pools with 2^30 layers are exact or refused") {
    KsanaPoolAttrs a;
    a.num_layer = 1 << 30;
    a.num_blocks = 4;
    a.block_size = 1;
    a.num_kv_heads = 1;
    a.head_dim = 1;
    a.slack_block = false;
    // 2 * num_layer * block overflowed int before the arithmetic moved to int64.
    CHECK(a.AtbBlockId(3, (1 << 30) - 1) == int64_t{6} * (1 << 30) + (1 << 30) - 1);
    CHECK(a.AtbViewBlocks() == int64_t{8} * (1 << 30) - (1 << 30));
    int64_t table[] = {3, 1};
    std::vector<int64_t> ids;
    const Status s =
        KsanaToAtbBlockTable(TensorView::Dense(table, DType::kI64, {1, 2}), a, (1 << 30) - 1, &ids);
    REQUIRE_MESSAGE(s.ok(), s.message());
    CHECK(ids == std::vector<int64_t>{int64_t{7} * (1 << 30) - 1, int64_t{3} * (1 << 30) - 1});
    int64_t requests[] = {0}, positions[] = {0};
    std::vector<int64_t> slots;
    REQUIRE(AtbSlotMapping(TensorView::Dense(table, DType::kI64, {1, 2}),
                           TensorView::Dense(requests, DType::kI64, {1}),
                           TensorView::Dense(positions, DType::kI64, {1}), a, 5, &slots)
                .ok());
    CHECK(slots == std::vector<int64_t>{int64_t{6} * (1 << 30) + 5});
    // Ids times block_size past int64: refused, not wrapped.
    a.num_blocks = int64_t{1} << 33;  // 2^31 * (2^33 + 1) ATB slots
    const Status too_big =
        KsanaToAtbBlockTable(TensorView::Dense(table, DType::kI64, {1, 2}), a, 0, &ids);
    CHECK(too_big.code() == StatusCode::kInvalidArgument);
    CHECK(too_big.message().rfind("num_blocks: 2 * num_layer * (num_blocks + 1) * block_size", 0) ==
          0);
  }
}

}  // namespace
