// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The public fp16, bfloat16 and fp8 conversions (dynattn/half.h) against float64 arithmetic on the
// formats' definitions: every half and fp8 byte decoded and re-encoded, and random float bit
// patterns (every exponent, NaNs included) plus exact ties rounded to nearest even, fp8 saturating.

#include "dynattn/half.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <random>

namespace dynattn_test {
namespace {

using dynattn::Bfloat16ToFloat;
using dynattn::FloatToBfloat16;
using dynattn::FloatToHalf;
using dynattn::HalfToFloat;

/// One OCP fp8 format, from its definition, and the library's conversions for it.
struct Fp8Spec {
  const char* name;
  int mant_bits;
  int bias;
  bool e4m3;  // e4m3fn: no infinities, only S.1111.111 is NaN
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
};

const Fp8Spec kFp8Specs[] = {
    {"e4m3fn", 3, 7, true, dynattn::FloatToFp8E4M3, dynattn::Fp8E4M3ToFloat},
    {"e5m2", 2, 15, false, dynattn::FloatToFp8E5M2, dynattn::Fp8E5M2ToFloat}};

/// fp8 byte -> value, from the format's definition (NaN: reported through `nan`).
double Fp8Value(const Fp8Spec& spec, uint8_t byte, bool* nan) {
  const int exp = (byte & 0x7F) >> spec.mant_bits;
  const int mant = byte & ((1 << spec.mant_bits) - 1);
  const int max_exp = spec.e4m3 ? 15 : 31;
  const double sign = (byte & 0x80) ? -1.0 : 1.0;
  *nan = spec.e4m3 ? (exp == max_exp && mant == 7) : (exp == max_exp && mant != 0);
  if (!spec.e4m3 && exp == max_exp) return sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, 1 - spec.bias - spec.mant_bits);
  return sign * std::ldexp((1 << spec.mant_bits) + mant, exp - spec.bias - spec.mant_bits);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

/// binary16 bits -> value, from the format's definition (NaN: reported through `nan`).
double HalfValue(uint16_t h, bool* nan) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  *nan = exp == 0x1F && mant != 0;
  if (exp == 0x1F) return sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

/// `x` rounded to nearest even with `mant_bits` stored mantissa bits and minimum normal exponent
/// `min_exp` (subnormals below), in float64: exact for every float input.
double RoundToFormat(double x, int mant_bits, int min_exp) {
  if (x == 0) return x;
  int k;
  std::frexp(x, &k);  // |x| in [2^(k-1), 2^k)
  const int e = std::max(k - 1, min_exp);
  const double ulp = std::ldexp(1.0, e - mant_bits);
  return std::nearbyint(x / ulp) * ulp;  // the default rounding mode is to nearest even
}

TEST_SUITE("half") {
  TEST_CASE("every half decodes exactly and re-encodes to itself") {
    for (uint32_t h = 0; h < 65536; ++h) {
      bool nan = false;
      const double want = HalfValue(static_cast<uint16_t>(h), &nan);
      const float got = HalfToFloat(static_cast<uint16_t>(h));
      if (nan) {
        CHECK(std::isnan(got));
        CHECK(std::isnan(HalfToFloat(FloatToHalf(got))));
        continue;
      }
      CHECK(static_cast<double>(got) == want);
      CHECK(FloatToHalf(got) == h);  // -0 keeps its sign
    }
  }

  TEST_CASE("random floats round to the nearest half, ties to even") {
    // Value -> bits of every finite half, to name the float64 result's encoding.
    std::map<double, uint16_t> half_of;
    for (uint32_t h = 0; h < 65536; ++h) {
      bool nan = false;
      const double v = HalfValue(static_cast<uint16_t>(h), &nan);
      if (!nan && std::isfinite(v) && !(v == 0 && (h & 0x8000))) half_of[v] = h;
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> any_bits;
    std::uniform_int_distribution<int> any_half(0, 0x7BFE);
    for (int i = 0; i < 400000; ++i) {
      float f;
      if (i % 2 == 0) {
        f = FromBits(any_bits(rng));
      } else {  // a tie: halfway between two adjacent finite halves
        const uint16_t h = static_cast<uint16_t>(any_half(rng));
        f = static_cast<float>((static_cast<double>(HalfToFloat(h)) + HalfToFloat(h + 1)) / 2);
        if (rng() & 1) f = -f;
      }
      const uint16_t got = FloatToHalf(f);
      if (std::isnan(f)) {
        CHECK(std::isnan(HalfToFloat(got)));
        continue;
      }
      const double rounded = RoundToFormat(f, 10, -14);
      const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
      uint16_t want;
      if (std::fabs(rounded) >= 65536.0) {
        want = sign | 0x7C00;  // beyond the largest half (65504) after rounding: infinity
      } else if (rounded == 0) {
        want = sign;
      } else {
        want = half_of.at(rounded);
      }
      CHECK_MESSAGE(got == want, "f = " << f);
    }
  }

  TEST_CASE("fp8 e4m3fn and e5m2: exact decode, nearest-even saturating encode, NaN kept") {
    for (const Fp8Spec& spec : kFp8Specs) {
      CAPTURE(spec.name);
      std::map<double, uint8_t> byte_of;  // value -> byte of every finite code but -0
      for (int b = 0; b < 256; ++b) {
        bool nan = false;
        const double want = Fp8Value(spec, static_cast<uint8_t>(b), &nan);
        const float got = spec.decode(static_cast<uint8_t>(b));
        if (nan) {
          CHECK(std::isnan(got));
          CHECK(spec.encode(got) == (b & 0x80 ? 0x80 : 0) + (spec.e4m3 ? 0x7F : 0x7E));
          continue;
        }
        CHECK(static_cast<double>(got) == want);
        CHECK(spec.encode(got) == b);  // -0 and e5m2's infinities included
        if (std::isfinite(want) && !(want == 0 && (b & 0x80))) byte_of[want] = b;
      }
      const double largest = spec.e4m3 ? dynattn::kFp8E4M3Max : dynattn::kFp8E5M2Max;
      CHECK(byte_of.rbegin()->first == largest);
      std::mt19937 rng(spec.mant_bits);
      std::uniform_int_distribution<uint32_t> any_bits;
      for (int i = 0; i < 200000; ++i) {
        float f;
        if (i % 2 == 0) {  // any float near the format's range, or any float at all
          const uint32_t bits = any_bits(rng);
          f = i % 8 == 0 ? FromBits(bits)
                         : FromBits((bits & 0x807FFFFFu) | ((110u + bits % 40) << 23));
        } else {  // a tie: halfway between two adjacent finite codes
          const auto it = std::next(byte_of.begin(), rng() % (byte_of.size() - 1));
          f = static_cast<float>((it->first + std::next(it)->first) / 2);
        }
        const uint8_t got = spec.encode(f);
        if (std::isnan(f)) {
          CHECK(got == ((Bits(f) >> 24) & 0x80) + (spec.e4m3 ? 0x7F : 0x7E));
          continue;
        }
        const double rounded = RoundToFormat(f, spec.mant_bits, 1 - spec.bias);
        const bool infinite = std::isinf(f) && !spec.e4m3;
        const double want = infinite ? f : std::clamp(rounded, -largest, largest);
        bool nan = false;
        CHECK_MESSAGE(Fp8Value(spec, got, &nan) == want, "f = " << f);
        if (want == 0) CHECK((got & 0x80) == ((Bits(f) >> 24) & 0x80));  // -0 stays -0
      }
    }
  }

  TEST_CASE("bfloat16: exact decode, nearest-even encode, NaN kept") {
    for (uint32_t b = 0; b < 65536; ++b) {
      const float f = Bfloat16ToFloat(static_cast<uint16_t>(b));
      CHECK(Bits(f) == b << 16);
      if (!std::isnan(f)) CHECK(FloatToBfloat16(f) == b);
    }
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> any_bits;
    for (int i = 0; i < 400000; ++i) {
      uint32_t bits = any_bits(rng);
      if (i % 4 == 0) bits = (bits & 0xFFFF0000u) | 0x8000u;  // an exact tie
      const float f = FromBits(bits);
      const uint16_t got = FloatToBfloat16(f);
      if (std::isnan(f)) {
        CHECK(std::isnan(Bfloat16ToFloat(got)));
        CHECK((got & 0x8000) == ((bits >> 16) & 0x8000));
        continue;
      }
      const double rounded = RoundToFormat(f, 7, -126);
      const uint16_t want = std::fabs(rounded) >= std::ldexp(1.0, 128)
                                ? static_cast<uint16_t>(((bits >> 16) & 0x8000) | 0x7F80)
                                : static_cast<uint16_t>(Bits(static_cast<float>(rounded)) >> 16);
      CHECK_MESSAGE(got == want, "bits = " << bits);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
