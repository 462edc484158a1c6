// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The public fp16 and bfloat16 conversions (dynattn/half.h) against float64 arithmetic on the
// formats' definitions: every one of the 65536 halves decoded and re-encoded, and random float
// bit patterns (every exponent, NaNs included) plus exact ties rounded to nearest even.

#include "dynattn/half.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>

namespace dynattn_test {
namespace {

using dynattn::Bfloat16ToFloat;
using dynattn::FloatToBfloat16;
using dynattn::FloatToHalf;
using dynattn::HalfToFloat;

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
