// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel-level checks on every compiled target: the vector round-to-fp16 (used to dequantize)
// against the scalar one over a dense sweep of all float bit patterns, and the virtual-lane dot
// product against a float64 sum.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd_codec_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "simd/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// Float bit patterns in [begin, end) with `step` whose vector rounding differs from the scalar.
int64_t CountRoundingMismatches(uint64_t begin, uint64_t end, uint64_t step) {
  const DF df;
  const size_t n = hn::Lanes(df);
  std::vector<float> in(n), out(n);
  int64_t mismatches = 0;
  for (uint64_t u = begin; u < end; u += step * n) {
    for (size_t i = 0; i < n; ++i) in[i] = internal::BitsFloat(static_cast<uint32_t>(u + i * step));
    hn::StoreU(RoundToF16(hn::LoadU(df, in.data())), df, out.data());
    for (size_t i = 0; i < n; ++i) {
      const float want = internal::RoundToF16(in[i]);
      const bool both_nan = std::isnan(want) && std::isnan(out[i]);
      if (!both_nan && internal::FloatBits(want) != internal::FloatBits(out[i])) ++mismatches;
    }
  }
  return mismatches;
}

double DotOnTarget(const float* a, const float* b, int padded) { return DotVirtual(a, b, padded); }

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(CountRoundingMismatches);
HWY_EXPORT(DotOnTarget);

namespace {

template <typename Body>
void ForEachCompiledTarget(const Body& body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    body(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST_SUITE("simd") {
  TEST_CASE("vector round-to-fp16 equals the scalar one on every target") {
    ForEachCompiledTarget([](const std::string& target) {
      INFO("target " << target);
      // Every 257th pattern over all 2^32, plus every pattern near the fp16 subnormal/normal
      // boundary and the overflow threshold, in both signs.
      CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(0, 1ull << 32, 257) == 0);
      for (uint64_t sign : {0ull, 0x80000000ull}) {
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(sign + 0x33000000, sign + 0x38900000,
                                                            1) == 0);
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(sign + 0x477F0000, sign + 0x47810000,
                                                            1) == 0);
      }
    });
  }

  TEST_CASE("virtual-lane dot product is accurate and identical on FMA targets") {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (int dim : {1, 15, 16, 17, 80, 128, 256}) {
      const int padded = (dim + 15) / 16 * 16;
      std::vector<float> a(padded, 0.0f), b(padded, 0.0f);
      double exact = 0;
      for (int d = 0; d < dim; ++d) {
        a[d] = normal(rng);
        b[d] = normal(rng);
        exact += double(a[d]) * b[d];
      }
      std::vector<std::pair<std::string, double>> results;
      ForEachCompiledTarget([&](const std::string& target) {
        results.emplace_back(target, HWY_DYNAMIC_DISPATCH(DotOnTarget)(a.data(), b.data(), padded));
      });
      double avx2 = NAN, avx3 = NAN;
      for (const auto& [target, value] : results) {
        INFO("target " << target << ", dim " << dim);
        CHECK(std::fabs(value - exact) <= 1e-5 * (1 + std::fabs(exact)) * std::sqrt(dim));
        if (target == "AVX2") avx2 = value;
        if (target == "AVX3") avx3 = value;
      }
      if (!std::isnan(avx2) && !std::isnan(avx3)) CHECK(avx2 == avx3);
    }
  }
}

}  // namespace
}  // namespace dynattn
#endif
