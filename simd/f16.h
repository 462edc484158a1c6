// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Exact scalar IEEE binary16 conversions. Highway 1.0.3 truncates in its software f32->f16
// demotion (SSE4, EMU128), and the numerics contract needs round-to-nearest-even everywhere, so
// the library rounds with these (and with their vector twin in codec-inl.h) on every target.

#ifndef DYNATTN_SIMD_F16_H_
#define DYNATTN_SIMD_F16_H_

#include <cstdint>
#include <cstring>

namespace dynattn::internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// binary16 bits -> float (exact for every input, NaN stays NaN).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000 | (mant << 13));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal or zero: mant * 2^-24 is exact in float.
  const float magnitude = static_cast<float>(mant) * BitsFloat(0x33800000);  // 2^-24
  return sign ? -magnitude : magnitude;
}

/// float -> binary16 bits, round to nearest even; overflow to infinity; NaN stays NaN.
inline uint16_t F32ToF16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;  // NaN
  if (abs < 0x38800000) {
    // Below 2^-14: the result is a multiple of 2^-24. Adding 0.5 (ulp 2^-24) rounds it
    // to nearest even in hardware; the difference is then exact.
    const float rounded = (BitsFloat(abs) + 0.5f) - 0.5f;
    return sign | static_cast<uint16_t>(rounded * 16777216.0f);
  }
  // Normal range: round the 23-bit mantissa to 10 bits, carrying into the exponent.
  const uint32_t lsb = (abs >> 13) & 1;
  const uint32_t rounded = (abs + 0xFFF + lsb) & ~0x1FFFu;
  if (rounded >= 0x47800000) return sign | 0x7C00;  // >= 65520 rounds to infinity
  return sign | static_cast<uint16_t>((rounded - 0x38000000) >> 13);
}

/// Rounds a float to the nearest binary16 value (kept as a float).
inline float RoundToF16(float f) { return F16ToF32(F32ToF16(f)); }

}  // namespace dynattn::internal

#endif  // DYNATTN_SIMD_F16_H_
