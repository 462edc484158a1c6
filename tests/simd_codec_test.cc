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

#include "tests/support/run_case.h"

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

using dynattn_test::ForEachTarget;

using dynattn::internal::kKeyTile;
constexpr int kBlock = 4;  // kQueryBlock

/// One block of queries against one key tile, padded as the kernel reads them.
struct ScoreInputs {
  int dim, padded, keys;
  std::vector<float> q, kt;
};

/// Calls `body` with random score blocks over a sweep of head dims and key counts.
template <typename Body>
void ForEachScoreBlock(std::mt19937_64& rng, const Body& body) {
  std::normal_distribution<float> normal;
  for (int dim : {1, 15, 16, 17, 80, 128, 256}) {
    for (int keys : {1, 16, 37, 64}) {
      ScoreInputs in{dim, (dim + 15) / 16 * 16, keys, {}, {}};
      in.q.assign(kBlock * in.padded, 0.0f);
      in.kt.assign(dim * kKeyTile, 0.0f);
      for (int v = 0; v < kBlock; ++v) {
        for (int d = 0; d < dim; ++d) in.q[v * in.padded + d] = normal(rng);
      }
      for (int d = 0; d < dim; ++d) {
        for (int j = 0; j < keys; ++j) in.kt[d * kKeyTile + j] = normal(rng);
      }
      body(in);
    }
  }
}

/// The dot products of `in` on the target forced now (NaN past its keys).
std::vector<float> ScoreBlock(const ScoreInputs& in) {
  std::vector<float> dots(kBlock * kKeyTile, NAN);
  HWY_DYNAMIC_DISPATCH(ScoreBlockOnTarget)
  (in.q.data(), in.padded, in.kt.data(), in.dim, in.keys, dots.data());
  return dots;
}

TEST_SUITE("simd") {
  TEST_CASE("vector round-to-fp16 equals the scalar one on every target") {
    ForEachTarget([](const std::string& target) {
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

  TEST_CASE("score blocks and tile sums are accurate on every target") {
    const uint64_t seed = dynattn_test::BaseSeed() + 7;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    ForEachScoreBlock(rng, [](const ScoreInputs& in) {
      ForEachTarget([&](const std::string& target) {
        const std::vector<float> dots = ScoreBlock(in);
        for (int v = 0; v < kBlock; ++v) {
          for (int j = 0; j < in.keys; ++j) {
            double exact = 0, magnitude = 0;
            for (int d = 0; d < in.dim; ++d) {
              const double term = double(in.q[v * in.padded + d]) * in.kt[d * kKeyTile + j];
              exact += term;
              magnitude += std::fabs(term);
            }
            INFO("target " << target << ", dim " << in.dim << ", key " << j);
            CHECK(std::fabs(dots[v * kKeyTile + j] - exact) <= 1.2e-7 * in.dim * magnitude + 1e-30);
          }
        }
      });
    });
    std::normal_distribution<float> normal;
    std::vector<float> p(kKeyTile);
    for (float& x : p) x = std::fabs(normal(rng));
    double exact = 0;
    for (float x : p) exact += x;
    std::map<std::string, float> sums;
    ForEachTarget([&](const std::string& target) {
      sums[target] = HWY_DYNAMIC_DISPATCH(SumOfTileOnTarget)(p.data());
      CHECK(std::fabs(sums[target] - exact) <= 1e-6 * exact);
    });
    for (const auto& [target, sum] : sums) CHECK(sum == sums.begin()->second);  // no FMA in sums
  }
}

// A suite (and meson test) of its own, so that a machine without the pair counts it as skipped.
TEST_SUITE("simd_targets") {
  TEST_CASE("score blocks are identical on AVX2 and AVX-512") {
    if (!dynattn_test::HaveAvx2AndAvx512()) {
      dynattn_test::SkipTest("AVX2 or AVX-512 not available on this machine; check not run");
      return;
    }
    const uint64_t seed = dynattn_test::BaseSeed() + 8;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    ForEachScoreBlock(rng, [](const ScoreInputs& in) {
      std::map<std::string, std::vector<float>> by_target;
      ForEachTarget([&](const std::string& target) { by_target[target] = ScoreBlock(in); });
      INFO("dim " << in.dim << ", keys " << in.keys);
      for (int v = 0; v < kBlock; ++v) {
        for (int j = 0; j < in.keys; ++j) {
          CHECK(by_target["AVX2"][v * kKeyTile + j] == by_target["AVX3"][v * kKeyTile + j]);
        }
      }
    });
  }
}

}  // namespace
}  // namespace dynattn
#endif
