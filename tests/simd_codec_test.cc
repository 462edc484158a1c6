// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel-level checks of the codecs on every compiled target: the vector round-to-fp16 (used to
// dequantize) against the scalar one over a dense sweep of all float bit patterns, fp16 and bf16
// activations against the scalar conversions, the widening and checking of group scales, and the
// bf16 / fp8 row codecs (vector decode and encode) against core's scalar codec, bit for bit.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/support/run_case.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd_codec_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target.
#include "cpu/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// Float bit patterns in [begin, end) with `step` whose vector rounding differs from the scalar
/// one: RoundToF16, or RoundNormalToF16 when `split` (the caller keeps the range in fp16's
/// normal range, where the split must agree).
int64_t CountRoundingMismatches(uint64_t begin, uint64_t end, uint64_t step, bool split) {
  const DF df;
  const size_t n = hn::Lanes(df);
  std::vector<float> in(n), out(n);
  int64_t mismatches = 0;
  for (uint64_t u = begin; u < end; u += step * n) {
    for (size_t i = 0; i < n; ++i) {
      in[i] = internal::BitsFloat(static_cast<uint32_t>(std::min(u + i * step, end - 1)));
    }
    const auto v = hn::LoadU(df, in.data());
    hn::StoreU(split ? RoundNormalToF16(v) : RoundToF16(v), df, out.data());
    for (size_t i = 0; i < n; ++i) {
      const float want = internal::RoundToF16(in[i]);
      const bool both_nan = std::isnan(want) && std::isnan(out[i]);
      if (!both_nan && internal::FloatBits(want) != internal::FloatBits(out[i])) ++mismatches;
    }
  }
  return mismatches;
}

/// The fused kernel's tile check of group scales, both ways: rows of `groups` fp16 scales
/// widened and checked in one pass (WidenWholeScaleRows, groups a multiple of the lanes), and
/// NormalProducts over the widened rows. Each returns whether int8 (`bits` 8) or int4 products
/// stay in fp16's normal range; `widened` receives the first way's floats.
void NormalScalesOnTarget(const uint16_t* scales, int rows, int groups, int bits, bool* widen_says,
                          bool* check_says, float* widened) {
  ScaleLanes lanes;
  lanes.mode = ScaleLanes::Mode::kLookup;
  lanes.groups = lanes.stored = groups;
  lanes.row_floats = groups + kLanes;
  std::vector<const void*> row_pointers(rows);
  for (int j = 0; j < rows; ++j) row_pointers[j] = scales + j * groups;
  if (bits == 8) {
    *widen_says =
        WidenWholeScaleRows<CacheElem::kInt8, true>(row_pointers.data(), rows, lanes, widened);
    *check_says = NormalProducts<CacheElem::kInt8>(widened, rows, lanes);
  } else {
    *widen_says =
        WidenWholeScaleRows<CacheElem::kInt4, true>(row_pointers.data(), rows, lanes, widened);
    *check_says = NormalProducts<CacheElem::kInt4>(widened, rows, lanes);
  }
}

int LanesOnTarget() { return kLanes; }

/// Decodes a row of `dim` elements of `elem` (bf16 or fp8) twice: through the row decoder of the
/// tiled path (`rows`) and through the in-register lanes of the fused path (`lanes`, whole
/// vectors only: dim a multiple of 16).
template <CacheElem kElem>
void DecodeBothWays(const void* row, float tensor_scale, bool io_f16, int dim, float* rows,
                    float* lanes) {
  RowCodec codec;
  codec.head_dim = dim;
  codec.io_is_f16 = io_f16;
  DecodeRowWidened<kElem>(codec, row, tensor_scale, rows);
  const ScaleLanes none;
  for (int e = 0; e + kLanes <= dim; e += kLanes) {
    const auto v = io_f16 ? DecodeLanes<kElem, true>(row, &tensor_scale, none, e)
                          : DecodeLanes<kElem, false>(row, &tensor_scale, none, e);
    hn::StoreU(v, DF(), lanes + e);
  }
}

void DecodeWidenedOnTarget(CacheElem elem, const void* row, float tensor_scale, bool io_f16,
                           int dim, float* rows, float* lanes) {
  if (elem == CacheElem::kBF16) {
    DecodeBothWays<CacheElem::kBF16>(row, tensor_scale, io_f16, dim, rows, lanes);
  } else if (elem == CacheElem::kF8E4M3) {
    DecodeBothWays<CacheElem::kF8E4M3>(row, tensor_scale, io_f16, dim, rows, lanes);
  } else {
    DecodeBothWays<CacheElem::kF8E5M2>(row, tensor_scale, io_f16, dim, rows, lanes);
  }
}

/// Encodes one row of `dim` floats into `row` (slot 0, head 0 of a one-row plane).
void EncodeWidenedOnTarget(CacheElem elem, const float* x, float tensor_scale, bool io_f16, int dim,
                           void* row) {
  CacheDesc cache;
  cache.elem = elem;
  cache.head_dim = dim;
  cache.num_kv_heads = 1;
  CachePlane plane;
  plane.data = row;
  plane.tensor_scale = tensor_scale;
  std::vector<float> scratch(2 * static_cast<size_t>(dim) + 16);
  int8_t* codes = reinterpret_cast<int8_t*>(scratch.data() + dim);
  if (elem == CacheElem::kBF16) {
    EncodeRow<CacheElem::kBF16>(cache, io_f16, plane, 0, 0, x, codes, scratch.data());
  } else if (elem == CacheElem::kF8E4M3) {
    EncodeRow<CacheElem::kF8E4M3>(cache, io_f16, plane, 0, 0, x, codes, scratch.data());
  } else {
    EncodeRow<CacheElem::kF8E5M2>(cache, io_f16, plane, 0, 0, x, codes, scratch.data());
  }
}

/// bf16 activations: loaded as floats and stored back.
void Bf16ActivationsOnTarget(const uint16_t* in, int count, float* loaded, uint16_t* stored) {
  LoadActivations(in, DType::kBF16, count, loaded);
  StoreActivations(loaded, DType::kBF16, count, stored);
}

void StoreBf16OnTarget(const float* in, int count, uint16_t* out) {
  StoreActivations(in, DType::kBF16, count, out);
}

/// Float bit patterns in [begin, end) with `step` (stored through fp16 activations, with a
/// scalar tail) whose fp16 bits differ from internal::F32ToF16.
int64_t CountF16StoreMismatches(uint64_t begin, uint64_t end, uint64_t step) {
  constexpr int kCount = 4096 + 5;
  std::vector<float> in(kCount);
  std::vector<uint16_t> out(kCount);
  int64_t mismatches = 0;
  for (uint64_t u = begin; u < end; u += step * kCount) {
    for (int i = 0; i < kCount; ++i)
      in[i] = internal::BitsFloat(static_cast<uint32_t>(u + i * step));
    std::fill(out.begin(), out.end(), uint16_t{0x5555});  // poison
    StoreActivations(in.data(), DType::kF16, kCount, out.data());
    for (int i = 0; i < kCount; ++i) mismatches += out[i] != internal::F32ToF16(in[i]);
  }
  return mismatches;
}

/// `count` fp16 group scales widened as the attention kernels widen them.
void WidenScalesOnTarget(const uint16_t* scales, int count, float* out) {
  WidenScales(scales, true, count, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(CountRoundingMismatches);
HWY_EXPORT(DecodeWidenedOnTarget);
HWY_EXPORT(EncodeWidenedOnTarget);
HWY_EXPORT(Bf16ActivationsOnTarget);
HWY_EXPORT(StoreBf16OnTarget);
HWY_EXPORT(CountF16StoreMismatches);
HWY_EXPORT(WidenScalesOnTarget);
HWY_EXPORT(NormalScalesOnTarget);
HWY_EXPORT(LanesOnTarget);

namespace {

using dynattn_test::ForEachTarget;

/// The bf16 / fp8 formats of a cache row, and the byte width of one element.
struct WidenedFormat {
  CacheElem elem;
  const char* name;
  int bytes;
};
constexpr WidenedFormat kWidened[] = {{CacheElem::kBF16, "bf16", 2},
                                      {CacheElem::kF8E4M3, "fp8_e4m3", 1},
                                      {CacheElem::kF8E5M2, "fp8_e5m2", 1}};

/// Tensor scales: 1, powers of two, and values whose products round (also to subnormals and
/// past the fp8 range).
std::vector<float> TensorScales(std::mt19937_64& rng) {
  std::vector<float> scales = {1.0f, 0.5f, 0.0137f, 3.7f, 1e-30f, 6e4f};
  std::uniform_real_distribution<float> log_scale(-8.0f, 8.0f);
  for (int i = 0; i < 4; ++i) scales.push_back(std::exp2(log_scale(rng)));
  return scales;
}

/// Counts elements of `got` whose bits differ from core::DecodeElement's.
int CountDecodeMismatches(const WidenedFormat& f, const std::vector<uint8_t>& row, int dim,
                          float scale, bool io_f16, const std::vector<float>& got,
                          std::string* first) {
  int mismatches = 0;
  for (int d = 0; d < dim; ++d) {
    const float want = internal::DecodeElement(row.data(), nullptr, d, f.elem, 1, false,
                                               io_f16 ? DType::kF16 : DType::kF32, scale);
    // With fp16 activations a NaN goes through the vector fp16 rounding, which (as the existing
    // RoundToF16 twin) keeps a NaN a NaN but not its payload bits; every other value is exact.
    const bool both_nan = io_f16 && std::isnan(want) && std::isnan(got[d]);
    if (!both_nan && internal::FloatBits(want) != internal::FloatBits(got[d])) {
      if (mismatches++ == 0) {
        *first = "element " + std::to_string(d) + ": want bits " +
                 std::to_string(internal::FloatBits(want)) + ", got " +
                 std::to_string(internal::FloatBits(got[d]));
      }
    }
  }
  return mismatches;
}

/// Random floats of every magnitude, with zeros, infinities, NaNs and fp8 boundary values.
std::vector<float> EncodeInputs(std::mt19937_64& rng, int count) {
  std::vector<float> x(count);
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal;
  const float specials[] = {0.0f,    -0.0f,    INFINITY, -INFINITY, NAN,          448.0f,
                            464.0f,  480.0f,   -500.0f,  57344.0f,  61440.0f,     1e9f,
                            0.0019f, 0.00097f, 1e-7f,    -1e-38f,   0.0009765625f};
  for (int i = 0; i < count; ++i) {
    const int kind = i % 4;
    if (i < static_cast<int>(std::size(specials))) {
      x[i] = specials[i];
    } else if (kind == 0) {
      x[i] = internal::BitsFloat(bits(rng));
    } else if (kind == 1) {
      x[i] = normal(rng) * std::exp2(static_cast<float>(static_cast<int>(bits(rng) % 40) - 20));
    } else {
      x[i] = normal(rng);
    }
  }
  return x;
}

TEST_SUITE("simd") {
  TEST_CASE("bf16 and fp8 rows decode as core's codec on every target, every code point") {
    const uint64_t seed = dynattn_test::BaseSeed() + 21;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const std::vector<float> scales = TensorScales(rng);
    ForEachTarget([&](const std::string& target) {
      for (const WidenedFormat& f : kWidened) {
        // Every code: 256 fp8 bytes, or all 65536 bf16 patterns in rows of 256.
        const int codes = f.bytes == 1 ? 256 : 65536;
        const int dim = 256;
        for (int first_code = 0; first_code < codes; first_code += dim) {
          std::vector<uint8_t> row(static_cast<size_t>(dim) * f.bytes);
          for (int d = 0; d < dim; ++d) {
            const uint32_t code = static_cast<uint32_t>(first_code + d);
            std::memcpy(row.data() + d * f.bytes, &code, f.bytes);  // little-endian low bytes
          }
          for (float scale : scales) {
            if (f.elem == CacheElem::kBF16 && scale != 1.0f) continue;  // no tensor scale
            for (bool io_f16 : {false, true}) {
              std::vector<float> rows(dim, NAN), lanes(dim, NAN);
              HWY_DYNAMIC_DISPATCH(DecodeWidenedOnTarget)
              (f.elem, row.data(), scale, io_f16, dim, rows.data(), lanes.data());
              std::string first;
              INFO("target " << target << ", " << f.name << ", codes from " << first_code
                             << ", scale " << scale << ", io_f16 " << io_f16);
              CHECK_MESSAGE(CountDecodeMismatches(f, row, dim, scale, io_f16, rows, &first) == 0,
                            "row decoder: " << first);
              CHECK_MESSAGE(CountDecodeMismatches(f, row, dim, scale, io_f16, lanes, &first) == 0,
                            "register lanes: " << first);
            }
          }
        }
        // A row whose length is no multiple of the lanes: the scalar tail.
        std::vector<uint8_t> row(37 * f.bytes);
        for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
        std::vector<float> rows(37, NAN), lanes(37, NAN);
        HWY_DYNAMIC_DISPATCH(DecodeWidenedOnTarget)
        (f.elem, row.data(), scales.back(), false, 37, rows.data(), lanes.data());
        std::string first;
        CHECK_MESSAGE(CountDecodeMismatches(f, row, 37, scales.back(), false, rows, &first) == 0,
                      target << " " << f.name << " tail: " << first);
      }
    });
  }

  TEST_CASE("bf16 and fp8 rows encode as core's codec on every target") {
    const uint64_t seed = dynattn_test::BaseSeed() + 22;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const std::vector<float> scales = TensorScales(rng);
    ForEachTarget([&](const std::string& target) {
      for (const WidenedFormat& f : kWidened) {
        for (int dim : {16, 40, 128}) {
          for (float scale : scales) {
            const std::vector<float> x = EncodeInputs(rng, dim);
            std::vector<uint8_t> got(static_cast<size_t>(dim) * f.bytes, 0xA5);
            std::vector<uint8_t> want(got.size(), 0x5A);
            HWY_DYNAMIC_DISPATCH(EncodeWidenedOnTarget)
            (f.elem, x.data(), scale, false, dim, got.data());
            internal::EncodeRow([&](int i) { return x[i]; }, f.elem, dim, 1, false, false,
                                want.data(), nullptr, scale);
            INFO("target " << target << ", " << f.name << ", dim " << dim << ", scale " << scale);
            CHECK(got == want);
          }
        }
      }
    });
  }

  TEST_CASE("bf16 activations load exactly and store rounded to nearest even on every target") {
    const uint64_t seed = dynattn_test::BaseSeed() + 23;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const int count = 65536 + 7;  // every pattern, and a scalar tail
    std::vector<uint16_t> in(count);
    for (int i = 0; i < count; ++i) in[i] = static_cast<uint16_t>(i < 65536 ? i : rng());
    const std::vector<float> wide = EncodeInputs(rng, 4099);
    ForEachTarget([&](const std::string& target) {
      INFO("target " << target);
      std::vector<float> loaded(count, NAN);
      std::vector<uint16_t> stored(count, 0xFFFF);
      HWY_DYNAMIC_DISPATCH(Bf16ActivationsOnTarget)(in.data(), count, loaded.data(), stored.data());
      int load_mismatches = 0, store_mismatches = 0;
      for (int i = 0; i < count; ++i) {
        load_mismatches +=
            internal::FloatBits(loaded[i]) != internal::FloatBits(internal::Bf16ToF32(in[i]));
        store_mismatches += stored[i] != internal::F32ToBf16(loaded[i]);
      }
      CHECK(load_mismatches == 0);
      CHECK(store_mismatches == 0);
      std::vector<uint16_t> rounded(wide.size(), 0);
      HWY_DYNAMIC_DISPATCH(StoreBf16OnTarget)
      (wide.data(), static_cast<int>(wide.size()), rounded.data());
      int round_mismatches = 0;
      for (size_t i = 0; i < wide.size(); ++i) {
        round_mismatches += rounded[i] != internal::F32ToBf16(wide[i]);
      }
      CHECK(round_mismatches == 0);
    });
  }

  TEST_CASE("fp16 activations store as the scalar F32ToF16 on every target, NaN payloads too") {
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      // Every 65537th pattern over all 2^32 (NaNs with payloads included), and every pattern
      // around the subnormal/normal boundary, the overflow threshold and the NaN range's start.
      CHECK(HWY_DYNAMIC_DISPATCH(CountF16StoreMismatches)(0, 1ull << 32, 65537) == 0);
      for (uint64_t sign : {0ull, 0x80000000ull}) {
        for (uint64_t begin : {0x33000000ull, 0x38700000ull, 0x477F0000ull, 0x7F7F0000ull}) {
          CHECK(HWY_DYNAMIC_DISPATCH(CountF16StoreMismatches)(sign + begin, sign + begin + 0x40000,
                                                              1) == 0);
        }
      }
    });
  }

  TEST_CASE("group scales widen exactly on every target, for every count of groups") {
    const uint64_t seed = dynattn_test::BaseSeed() + 29;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<uint16_t> scales(72);
    for (uint16_t& h : scales) h = static_cast<uint16_t>(rng());
    scales[0] = 0x7C00;  // inf, a NaN and a subnormal among the random ones
    scales[3] = 0xFE01;
    scales[5] = 0x0003;
    ForEachTarget([&](const std::string& target) {
      INFO("target " << target);
      for (int count = 1; count <= 64; ++count) {
        INFO("groups " << count);
        std::vector<float> out(count + 8, 1234.5f);  // poison: the floats past count stay
        HWY_DYNAMIC_DISPATCH(WidenScalesOnTarget)(scales.data(), count, out.data());
        int mismatches = 0;
        for (int g = 0; g < count; ++g) {  // F16C quiets a signaling NaN: NaN is NaN
          const float want = internal::F16ToF32(scales[g]);
          mismatches += !(std::isnan(want) && std::isnan(out[g])) &&
                        internal::FloatBits(out[g]) != internal::FloatBits(want);
        }
        CHECK(mismatches == 0);
        for (int g = count; g < count + 8; ++g) CHECK(out[g] == 1234.5f);
      }
    });
  }

  TEST_CASE("vector round-to-fp16 equals the scalar one on every target") {
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      // Every 257th pattern over all 2^32, plus every pattern near the fp16 subnormal/normal
      // boundary and the overflow threshold, in both signs.
      CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(0, 1ull << 32, 257, false) == 0);
      for (uint64_t sign : {0ull, 0x80000000ull}) {
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(sign + 0x33000000, sign + 0x38900000, 1,
                                                            false) == 0);
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(sign + 0x477F0000, sign + 0x47810000, 1,
                                                            false) == 0);
      }
    });
  }

  TEST_CASE("the split rounding equals round-to-fp16 on fp16's normal range on every target") {
    // Exhaustive over every float of [2^-14, 65504] in both signs on this machine's AVX-512
    // (checked when RoundNormalToF16 was written); here every 61st pattern, plus every pattern
    // at the bottom and the top of the range and around 1.0 and 2^-8, where the rounding's carry
    // bumps the exponent. +0 stays +0.
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      for (uint64_t sign : {0ull, 0x80000000ull}) {
        const uint64_t low = sign + 0x38800000, high = sign + 0x477FE000;  // 2^-14, 65504
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(low, high + 1, 61, true) == 0);
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(low, low + 0x40000, 1, true) == 0);
        CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(high - 0x40000, high + 1, 1, true) ==
              0);
        for (uint64_t middle : {0x3F800000ull, 0x3B800000ull}) {
          CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(
                    sign + middle - 0x20000, sign + middle + 0x20000, 1, true) == 0);
        }
      }
      CHECK(HWY_DYNAMIC_DISPATCH(CountRoundingMismatches)(0, 1, 1, true) == 0);
    });
  }

  TEST_CASE("a tile's group scales prove fp16-normal products only inside the bounds") {
    const uint64_t seed = dynattn_test::BaseSeed() + 31;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    constexpr int kRows = 5, kGroups = 16;
    ForEachTarget([&](const std::string& target) {
      INFO("target " << target);
      const int lanes = HWY_DYNAMIC_DISPATCH(LanesOnTarget)();
      for (int bits : {8, 4}) {
        INFO("bits " << bits);
        // Bounds: 2^-14 (0x0400) up to 65504 / 128 = 511.75 (0x5FFF) for int8, 65504 / 8 = 8188
        // (0x6FFF) for int4; outside them a code times the scale leaves fp16's normal range.
        const uint16_t top = bits == 8 ? 0x5FFF : 0x6FFF;
        const std::vector<uint16_t> inside = {0x0400, top, 0x3C00, 0x2000};
        const std::vector<uint16_t> outside = {0x03FF, 0x0000, 0x8000, 0xBC00, uint16_t(top + 1),
                                               0x7C00, 0x7E00};
        for (int trial = 0; trial < 40; ++trial) {
          std::vector<uint16_t> scales(kRows * kGroups);
          for (uint16_t& h : scales) {  // random scales in [2^-11, 2^3)
            h = static_cast<uint16_t>(0x1000 + rng() % (0x4800 - 0x1000));
          }
          const bool plant_outside = trial % 2 == 1;
          const size_t at = rng() % scales.size();
          scales[at] = plant_outside ? outside[trial / 2 % outside.size()]
                                     : inside[trial / 2 % inside.size()];
          INFO("scale " << std::hex << scales[at] << " at " << std::dec << at);
          for (int groups = lanes; groups <= kGroups; groups += lanes) {
            if (kGroups % groups != 0) continue;
            std::vector<float> widened(kRows * (groups + lanes), 0.0f);
            std::vector<uint16_t> rows_of(kRows * groups);  // the first `groups` of each row
            for (int j = 0; j < kRows; ++j) {
              std::copy_n(scales.begin() + j * kGroups, groups, rows_of.begin() + j * groups);
            }
            const bool planted_seen = static_cast<int>(at % kGroups) < groups;
            bool widen_says = false, check_says = false;
            HWY_DYNAMIC_DISPATCH(NormalScalesOnTarget)
            (rows_of.data(), kRows, groups, bits, &widen_says, &check_says, widened.data());
            CHECK(widen_says == !(plant_outside && planted_seen));
            CHECK(check_says == widen_says);
            int wrong = 0;
            for (int j = 0; j < kRows; ++j) {
              for (int g = 0; g < groups; ++g) {
                const float want = internal::F16ToF32(rows_of[j * groups + g]);
                const float got = widened[j * (groups + lanes) + g];
                wrong += !(std::isnan(want) && std::isnan(got)) && got != want;
              }
            }
            CHECK(wrong == 0);
          }
        }
      }
    });
  }
}

}  // namespace
}  // namespace dynattn
#endif
