// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The public fp16 and bf16 conversions are core/codec.h's, so that there is one rounding rule for
// callers and kernels alike.

#include "dynattn/half.h"

#include "core/codec.h"

namespace dynattn {

uint16_t FloatToHalf(float value) { return internal::F32ToF16(value); }

float HalfToFloat(uint16_t half) { return internal::F16ToF32(half); }

uint16_t FloatToBfloat16(float value) { return internal::F32ToBf16(value); }

float Bfloat16ToFloat(uint16_t bfloat16) { return internal::Bf16ToF32(bfloat16); }

}  // namespace dynattn
