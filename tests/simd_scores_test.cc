// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel-level checks of the attention's score path on every compiled target: the virtual-lane
// dot products of a score block against a float64 sum (and the same bits on AVX2 and AVX-512),
// the key-tile transpose, a tile's sum and the softmax's exponential against Highway's Exp, and
// the fused kernel's fixed fold of its partial sums.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/support/run_case.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd_scores_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target.
#include "cpu/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// A plain transposed tile (keys_t[d * kKeyTile + j]) in the kernel's panels (PanelIndex).
std::vector<float> ToPanels(const float* keys_t, int head_dim) {
  std::vector<float> panels(static_cast<size_t>(head_dim) * kKeyTile);
  for (int d = 0; d < head_dim; ++d) {
    for (int j = 0; j < kKeyTile; ++j) {
      panels[PanelIndex(head_dim, d, j)] = keys_t[d * kKeyTile + j];
    }
  }
  return panels;
}

/// Query vectors of the tested block: AVX2's kQueryBlock, the largest any target uses.
constexpr int kTestedBlock = 12;

/// The kernel's block of dot products: kTestedBlock queries against a transposed key tile (in
/// passes of fewer where the target's registers hold fewer: AVX2, SSE4). `keys_t` is the plain
/// transposed tile, laid out here in the kernel's panels.
void ScoreBlockOnTarget(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                        int num_keys, float* dots) {
  static_assert(kQueryBlock <= kTestedBlock, "the test's buffers hold kTestedBlock rows");
  const std::vector<float> panels = ToPanels(keys_t, head_dim);
  ScoreBlock<kTestedBlock>(queries, padded_dim, panels.data(), head_dim, num_keys, dots);
}

float SumOfTileOnTarget(const float* p, int span) { return SumOfTile(p, span); }

float ExpAndSumOfTileOnTarget(float max, int span, float* scores) {
  return ExpAndSumOfTile(max, span, scores);
}

/// The kernel's transposed tile, read back from its panels (PanelIndex) into the plain layout
/// keys_t[d * kKeyTile + j]; elements the kernel left unwritten keep what `keys_t` held.
void TransposeTileOnTarget(const float* keys, int count, int head_dim, int padded_dim,
                           float* keys_t) {
  std::vector<float> panels = ToPanels(keys_t, head_dim);
  TransposeTile(keys, count, head_dim, padded_dim, panels.data());
  for (int d = 0; d < head_dim; ++d) {
    for (int j = 0; j < kKeyTile; ++j) {
      keys_t[d * kKeyTile + j] = panels[PanelIndex(head_dim, d, j)];
    }
  }
}

/// Float bit patterns u = begin, begin + step, ... below `end` (x = BitsFloat(u), with -inf and a
/// NaN added) for which the softmax's ExpOfNonPositive breaks its rule against Highway's `Exp`:
/// the same bits where x > -87.6, the same bits or +0 where `Exp` is under 2^-126, +0 for -inf
/// and NaN for NaN (where `Exp` gives 0).
int64_t CountExpMismatches(uint64_t begin, uint64_t end, uint64_t step) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  HWY_ALIGN float x[kN], mine[kN], highway[kN];
  int64_t mismatches = 0;
  bool specials = true;
  for (uint64_t u = begin; u < end || specials;) {
    for (int i = 0; i < kN; ++i, u += step) x[i] = internal::BitsFloat(static_cast<uint32_t>(u));
    if (u >= end && specials) {
      x[0] = -std::numeric_limits<float>::infinity();
      x[kN - 1] = std::numeric_limits<float>::quiet_NaN();
      specials = false;
    }
    hn::Store(ExpOfNonPositive(df, hn::Load(df, x)), df, mine);
    hn::Store(hn::Exp(df, hn::Load(df, x)), df, highway);
    for (int i = 0; i < kN; ++i) {
      const bool same = internal::FloatBits(mine[i]) == internal::FloatBits(highway[i]);
      const bool zero = internal::FloatBits(mine[i]) == 0;
      if (std::isnan(x[i])) {
        mismatches += !std::isnan(mine[i]);
      } else if (std::isinf(x[i])) {
        mismatches += !zero;
      } else if (x[i] > -87.6f) {
        mismatches += !same;
      } else {
        mismatches += !(same || (zero && highway[i] < std::numeric_limits<float>::min()));
      }
    }
  }
  return mismatches;
}

/// The fused decode kernel's fold (FoldVirtualLanes) of `count` dot products, 8 or 16 (its
/// blocks' counts), each given as kVirtualLanes partial sums in `partials` (count rows of 16).
void FoldOnTarget(const float* partials, int count, float* out) {
  const DF df;
  hn::Vec<DF> acc[16 * kVectorsPerRow];
  for (int i = 0; i < count * kVectorsPerRow; ++i) acc[i] = hn::LoadU(df, partials + i * kLanes);
  if (count == 16) return FoldVirtualLanes<16>(acc, out);
  FoldVirtualLanes<8>(acc, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(ScoreBlockOnTarget);
HWY_EXPORT(SumOfTileOnTarget);
HWY_EXPORT(ExpAndSumOfTileOnTarget);
HWY_EXPORT(TransposeTileOnTarget);
HWY_EXPORT(CountExpMismatches);
HWY_EXPORT(FoldOnTarget);

namespace {

using dynattn_test::ForEachTarget;

using dynattn::internal::kKeyTile;
using dynattn::internal::kVirtualLanes;
constexpr int kBlock = 12;  // kTestedBlock

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
    for (int keys : {1, 16, 24, 37, 48, 64}) {
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
  TEST_CASE("the softmax's exp has the bits of Highway's Exp on x <= 0, every target") {
    // Negative floats from -0 (0x80000000) to -inf (0xFF800000): every 11th bit pattern, with
    // each target's vector width and lane order; the last one also sees -inf and a NaN.
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      CHECK(HWY_DYNAMIC_DISPATCH(CountExpMismatches)(0x80000000ull, 0xFF800000ull, 11) == 0);
    });
  }

  TEST_CASE("key tiles transpose exactly on every target, whole 8 x 8 blocks or not") {
    const uint64_t seed = dynattn_test::BaseSeed() + 31;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (const int dim : {5, 8, 13, 64, 72, 128}) {
      const int padded = (dim + kVirtualLanes - 1) / kVirtualLanes * kVirtualLanes;
      std::vector<float> keys(static_cast<size_t>(kKeyTile) * padded);
      for (float& x : keys) x = normal(rng);
      ForEachTarget([&](const std::string& target) {
        for (int count = 1; count <= kKeyTile; ++count) {
          INFO("target " << target << ", dim " << dim << ", keys " << count);
          std::vector<float> keys_t(static_cast<size_t>(dim) * kKeyTile, NAN);  // poison
          HWY_DYNAMIC_DISPATCH(TransposeTileOnTarget)
          (keys.data(), count, dim, padded, keys_t.data());
          // Keys past `count` read as zeros up to the next 16 keys at least (the score blocks'
          // padding, 16 or 32 keys by target).
          const int zeros_to = std::min(kKeyTile, (count + 15) / 16 * 16);
          int wrong = 0;
          for (int d = 0; d < dim; ++d) {
            for (int j = 0; j < zeros_to; ++j) {
              const float want = j < count ? keys[j * padded + d] : 0.0f;
              wrong += internal::FloatBits(keys_t[d * kKeyTile + j]) != internal::FloatBits(want);
            }
          }
          CHECK(wrong == 0);
        }
      });
    }
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
    // A tile's sum: the same bits on every target (the register tree of AVX2/AVX-512 against the
    // memory tree of narrower targets), and with a live span, the bits of the whole tile when the
    // rest holds the +0 probabilities of keys past the tile.
    std::normal_distribution<float> normal;
    for (int span = kVirtualLanes; span <= kKeyTile; span += kVirtualLanes) {
      std::vector<float> p(kKeyTile, 0.0f);
      for (int j = 0; j < span; ++j) p[j] = std::fabs(normal(rng));
      double exact = 0;
      for (float x : p) exact += x;
      std::map<std::string, float> sums;
      ForEachTarget([&](const std::string& target) {
        INFO("target " << target << ", span " << span);
        sums[target] = HWY_DYNAMIC_DISPATCH(SumOfTileOnTarget)(p.data(), span);
        CHECK(sums[target] == HWY_DYNAMIC_DISPATCH(SumOfTileOnTarget)(p.data(), kKeyTile));
        CHECK(std::fabs(sums[target] - exact) <= 1e-6 * exact);
      });
      for (const auto& [target, sum] : sums) CHECK(sum == sums.begin()->second);  // no FMA
    }
    // The softmax's fused pass: exp(s - max) in place and the sum of what it wrote, made as the
    // exponentials are, with the bits of SumOfTile over them; the same bits on the FMA targets
    // (AVX2, AVX-512). Highway's exp polynomial uses MulAdd, which SSE4 and the scalar fallback
    // round twice: there the last bit of some exponentials differs.
    for (int span = kVirtualLanes; span <= kKeyTile; span += kVirtualLanes) {
      std::vector<float> scores(kKeyTile);
      for (float& x : scores) x = 4.0f * normal(rng);
      const float max = *std::max_element(scores.begin(), scores.begin() + span);
      std::map<std::string, std::vector<float>> exps;
      std::map<std::string, float> sums;
      ForEachTarget([&](const std::string& target) {
        INFO("target " << target << ", span " << span);
        std::vector<float> p = scores;
        const float sum = HWY_DYNAMIC_DISPATCH(ExpAndSumOfTileOnTarget)(max, span, p.data());
        CHECK(std::equal(p.begin() + span, p.end(), scores.begin() + span));  // past the span
        for (int j = 0; j < span; ++j) {
          const float shifted = scores[j] - max;  // the kernel's fp32 difference
          const double want = std::exp(static_cast<double>(shifted));
          CHECK(std::fabs(p[j] - want) <= 4e-7 * want);
        }
        std::fill(p.begin() + span, p.end(), 0.0f);
        CHECK(sum == HWY_DYNAMIC_DISPATCH(SumOfTileOnTarget)(p.data(), kKeyTile));
        if (target == "AVX2" || target.rfind("AVX3", 0) == 0) {
          sums[target] = sum;
          exps[target] = p;
        }
      });
      for (const auto& [target, sum] : sums) {
        CHECK(sum == sums.begin()->second);
        CHECK(exps[target] == exps.begin()->second);
      }
    }
  }

  TEST_CASE("the fused kernel folds its dot products in the fixed tree on every target") {
    // 8 and 16 dot products at a time (AVX-512 folds 16 in whole 512-bit vectors, other targets
    // 8 in 256-bit halves or through memory); each must be the sum of its 16 partial sums
    // in the tree of FoldPartialSums (lane i + lane i + width, width 8, 4, 2, 1), bit for bit.
    const uint64_t seed = dynattn_test::BaseSeed() + 32;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> exponent(-20, 20);  // magnitudes where the order shows
    for (int count : {8, 16}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<float> partials(count * kVirtualLanes);
        for (float& x : partials) x = std::ldexp(normal(rng), exponent(rng));
        std::vector<float> want(count);
        for (int x = 0; x < count; ++x) {
          float lanes[kVirtualLanes];
          std::copy_n(partials.begin() + x * kVirtualLanes, kVirtualLanes, lanes);
          for (int width = kVirtualLanes / 2; width >= 1; width /= 2) {
            for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
          }
          want[x] = lanes[0];
        }
        ForEachTarget([&](const std::string& target) {
          INFO("target " << target << ", count " << count << ", round " << round);
          std::vector<float> out(count, std::numeric_limits<float>::quiet_NaN());
          HWY_DYNAMIC_DISPATCH(FoldOnTarget)(partials.data(), count, out.data());
          for (int x = 0; x < count; ++x) {
            CHECK(internal::FloatBits(out[x]) == internal::FloatBits(want[x]));
          }
        });
      }
    }
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
