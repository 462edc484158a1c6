// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The public fp16 conversions are simd/f16.h's, so that there is one rounding rule for callers
// and kernels alike.

#include "dynattn/half.h"

#include "simd/f16.h"

namespace dynattn {

uint16_t FloatToHalf(float value) { return internal::F32ToF16(value); }

float HalfToFloat(uint16_t half) { return internal::F16ToF32(half); }

uint16_t FloatToBfloat16(float value) {
  const uint32_t bits = internal::FloatBits(value);
  // Truncating a NaN whose payload sits in the low half only would give infinity: keep it quiet.
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Adding 0x7FFF plus the kept part's lowest bit rounds to nearest even; a carry into the
  // exponent is the right result (up to infinity).
  const uint32_t lsb = (bits >> 16) & 1;
  return static_cast<uint16_t>((bits + 0x7FFF + lsb) >> 16);
}

float Bfloat16ToFloat(uint16_t bfloat16) {
  return internal::BitsFloat(static_cast<uint32_t>(bfloat16) << 16);
}

}  // namespace dynattn
