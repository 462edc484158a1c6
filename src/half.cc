// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The public fp16, bf16 and fp8 conversions are core/codec.h's, so that there is one rounding rule
// for callers and kernels alike.

#include "dynattn/half.h"

#include "core/codec.h"

namespace dynattn {

uint16_t FloatToHalf(float value) { return internal::F32ToF16(value); }

float HalfToFloat(uint16_t half) { return internal::F16ToF32(half); }

uint16_t FloatToBfloat16(float value) { return internal::F32ToBf16(value); }

float Bfloat16ToFloat(uint16_t bfloat16) { return internal::Bf16ToF32(bfloat16); }

static_assert(kFp8E4M3Max == 448.0f && kFp8E5M2Max == 57344.0f, "core/codec.h's Fp8Max");

uint8_t FloatToFp8E4M3(float value) {
  return internal::F32ToFp8(value, internal::Fp8Format::kE4M3);
}

float Fp8E4M3ToFloat(uint8_t byte) { return internal::Fp8ToF32(byte, internal::Fp8Format::kE4M3); }

uint8_t FloatToFp8E5M2(float value) {
  return internal::F32ToFp8(value, internal::Fp8Format::kE5M2);
}

float Fp8E5M2ToFloat(uint8_t byte) { return internal::Fp8ToF32(byte, internal::Fp8Format::kE5M2); }

}  // namespace dynattn
