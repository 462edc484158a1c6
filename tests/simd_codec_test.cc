// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel-level checks on every compiled target: the vector round-to-fp16 (used to dequantize)
// against the scalar one over a dense sweep of all float bit patterns, and the virtual-lane dot
// product against a float64 sum.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
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

/// The kernel's block of dot products: kQueryBlock queries against a transposed key tile.
void ScoreBlockOnTarget(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                        int num_keys, float* dots) {
  ScoreBlock<4>(queries, padded_dim, keys_t, head_dim, num_keys, dots);
}

float SumOfTileOnTarget(const float* p) { return SumOfTile(p); }

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(CountRoundingMismatches);
HWY_EXPORT(ScoreBlockOnTarget);
HWY_EXPORT(SumOfTileOnTarget);

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

  TEST_CASE("score blocks and tile sums are accurate, and identical on AVX2 and AVX-512") {
    using dynattn::internal::kKeyTile;
    constexpr int kBlock = 4;  // kQueryBlock
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (int dim : {1, 15, 16, 17, 80, 128, 256}) {
      const int padded = (dim + 15) / 16 * 16;
      for (int keys : {1, 16, 37, 64}) {
        std::vector<float> q(kBlock * padded, 0.0f), kt(dim * kKeyTile, 0.0f);
        for (int v = 0; v < kBlock; ++v) {
          for (int d = 0; d < dim; ++d) q[v * padded + d] = normal(rng);
        }
        for (int d = 0; d < dim; ++d) {
          for (int j = 0; j < keys; ++j) kt[d * kKeyTile + j] = normal(rng);
        }
        std::map<std::string, std::vector<float>> by_target;
        ForEachCompiledTarget([&](const std::string& target) {
          std::vector<float> dots(kBlock * kKeyTile, NAN);
          HWY_DYNAMIC_DISPATCH(ScoreBlockOnTarget)
          (q.data(), padded, kt.data(), dim, keys, dots.data());
          by_target[target] = dots;
          for (int v = 0; v < kBlock; ++v) {
            for (int j = 0; j < keys; ++j) {
              double exact = 0, magnitude = 0;
              for (int d = 0; d < dim; ++d) {
                exact += double(q[v * padded + d]) * kt[d * kKeyTile + j];
                magnitude += std::fabs(double(q[v * padded + d]) * kt[d * kKeyTile + j]);
              }
              INFO("target " << target << ", dim " << dim << ", key " << j);
              CHECK(std::fabs(dots[v * kKeyTile + j] - exact) <= 1.2e-7 * dim * magnitude + 1e-30);
            }
          }
        });
        if (by_target.count("AVX2") && by_target.count("AVX3")) {
          for (int v = 0; v < kBlock; ++v) {
            for (int j = 0; j < keys; ++j) {
              CHECK(by_target["AVX2"][v * kKeyTile + j] == by_target["AVX3"][v * kKeyTile + j]);
            }
          }
        }
      }
    }
    std::vector<float> p(kKeyTile);
    for (float& x : p) x = std::fabs(normal(rng));
    double exact = 0;
    for (float x : p) exact += x;
    std::map<std::string, float> sums;
    ForEachCompiledTarget([&](const std::string& target) {
      sums[target] = HWY_DYNAMIC_DISPATCH(SumOfTileOnTarget)(p.data());
      CHECK(std::fabs(sums[target] - exact) <= 1e-6 * exact);
    });
    for (const auto& [target, sum] : sums) CHECK(sum == sums.begin()->second);  // no FMA in sums
  }
}

}  // namespace
}  // namespace dynattn
#endif
