// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The serving features' validation: window, soft-cap, softmax scale, sinks and fp8 scales (the
// call's and a raw descriptor's) are checked before anything is written, each refusal naming its
// input and rule; their valid forms pass.

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/run_case.h"
#include "tests/support/validation_case.h"

namespace dynattn_test {
namespace {

TEST_SUITE("validation") {
  TEST_CASE("window, soft-cap, softmax scale, sinks and fp8 scales are checked before writes") {
    Case c = BaseCase(kMhca, 0);
    Array out = MakeArray(Dt::kF16, {4, 4, 8});
    const dynattn::MultiHeadCacheAttentionAttrs good = MhcaAttrs(c);
    std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    float k_scale = 0.25f;
    Array fp8_cache = MakeArray(Dt::kI8, {16, 2, 2, 2, 8});
    const auto sinks_view = [&] {
      return dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF32, {4});
    };
    const auto scalar = [](float* value) {
      return dynattn::TensorView::Dense(value, dynattn::DType::kF32, {});
    };
    // fp8 cache of the same geometry: quant_bit 0, no scale tensor.
    const auto fp8_args = [&](dynattn::MultiHeadCacheAttentionArgs* a) {
      a->cache = ViewOf(fp8_cache);
      a->cache.dtype = dynattn::DType::kF8E4M3;
      a->scale = dynattn::TensorView{};
    };
    dynattn::MultiHeadCacheAttentionAttrs fp8_attrs = good;
    fp8_attrs.cache.quant_bit = 0;
    const auto expect = [&](const dynattn::MultiHeadCacheAttentionAttrs& attrs,
                            const std::function<void(dynattn::MultiHeadCacheAttentionArgs*)>& bad,
                            const std::string& input, const std::string& rule) {
      std::memset(out.bytes.data(), 0xFF, out.bytes.size());
      dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
      bad(&args);
      const Array cache_before = c.inputs["cache"], fp8_before = fp8_cache;
      const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
      INFO("expected " << input << ": " << rule << ", got: " << status.message());
      REQUIRE_FALSE(status.ok());
      CHECK(status.message().rfind(input + ":", 0) == 0);
      CHECK(status.message().find(rule) != std::string::npos);
      for (uint8_t byte : out.bytes) REQUIRE_MESSAGE(byte == 0xFF, "attn_output was written");
      std::string why;
      CHECK_MESSAGE(SameBytes(c.inputs["cache"], cache_before, &why), why);
      CHECK_MESSAGE(SameBytes(fp8_cache, fp8_before, &why), why);
    };
    const auto with = [&](const std::function<void(dynattn::AttentionAttrs*)>& change) {
      dynattn::MultiHeadCacheAttentionAttrs attrs = good;
      change(&attrs.attention);
      return attrs;
    };
    const auto none = [](dynattn::MultiHeadCacheAttentionArgs*) {};
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    expect(with([](auto* a) { a->window_left = -2; }), none, "window_left", "-1 (off) or >= 0");
    expect(with([](auto* a) { a->logits_soft_cap = -1.0f; }), none, "logits_soft_cap", "> 0");
    expect(with([&](auto* a) { a->logits_soft_cap = inf; }), none, "logits_soft_cap", "finite");
    expect(with([&](auto* a) { a->softmax_scale = nan; }), none, "softmax_scale", "finite");
    expect(with([](auto* a) { a->softmax_scale = -0.5f; }), none, "softmax_scale", "> 0");
    expect(
        good,
        [&](auto* a) {
          a->sinks = dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF32, {3});
        },
        "sinks", "shape (num_heads = 4,)");
    expect(
        good,
        [&](auto* a) {
          a->sinks = dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF16, {4});
        },
        "sinks", "float32");
    sinks[2] = nan;
    expect(
        good, [&](auto* a) { a->sinks = sinks_view(); }, "sinks", "entry 2 is not finite");
    sinks[2] = 2.0f;
    expect(
        good, [&](auto* a) { a->k_scale = scalar(&k_scale); }, "k_scale",
        "only taken by an fp8 cache");
    expect(
        fp8_attrs,
        [&](auto* a) {
          fp8_args(a);
          a->scale = ViewOf(c.inputs["scale"]);
        },
        "scale", "must be absent for an fp8 cache");
    for (float bad : {0.0f, -1.0f, inf, nan}) {
      k_scale = bad;
      expect(
          fp8_attrs,
          [&](auto* a) {
            fp8_args(a);
            a->k_scale = scalar(&k_scale);
          },
          "k_scale", "finite and > 0");
      expect(
          fp8_attrs,
          [&](auto* a) {
            fp8_args(a);
            a->v_scale = scalar(&k_scale);
          },
          "v_scale", "finite and > 0");
    }
    k_scale = 0.25f;
    expect(
        fp8_attrs,
        [&](auto* a) {
          fp8_args(a);
          a->k_scale = dynattn::TensorView::Dense(&k_scale, dynattn::DType::kF16, {});
        },
        "k_scale", "float32 scalar");
    // A raw descriptor's own fp8 scale is checked too.
    dynattn::CacheDesc raw;
    REQUIRE(dynattn::MakePmxCacheDesc(
                [&] {
                  dynattn::TensorView v = ViewOf(fp8_cache);
                  v.dtype = dynattn::DType::kF8E5M2;
                  return v;
                }(),
                {}, fp8_attrs.cache, 2, 8, &raw)
                .ok());
    raw.value.tensor_scale = -2.0f;
    expect(
        fp8_attrs,
        [&](auto* a) {
          a->cache = dynattn::TensorView{};
          a->scale = dynattn::TensorView{};
          a->cache_desc = &raw;
        },
        "v_scale", "finite and > 0");
    // The valid forms pass: sinks, a window, a cap, a scale; an fp8 cache with its scales.
    dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
    args.sinks = sinks_view();
    CHECK(dynattn::MultiHeadCacheAttention(with([](auto* a) {
                                             a->window_left = 0;
                                             a->logits_soft_cap = 30.0f;
                                             a->softmax_scale = 0.125f;
                                           }),
                                           args)
              .ok());
    args = MhcaArgs(c, &out);
    fp8_args(&args);
    args.k_scale = scalar(&k_scale);
    CHECK(dynattn::MultiHeadCacheAttention(fp8_attrs, args).ok());
  }
}

}  // namespace
}  // namespace dynattn_test
