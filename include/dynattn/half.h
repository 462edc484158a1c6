// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Conversions between float and the 16-bit formats of fp16 tensors (IEEE binary16, DType::kF16)
// and bfloat16, for callers that prepare inputs or read outputs. The fp16 pair is the library's
// own rounding rule, the one its kernels use, so data made with it round-trips bit for bit.

#ifndef DYNATTN_HALF_H_
#define DYNATTN_HALF_H_

#include <cstdint>

#include "dynattn/export.h"

namespace dynattn {

/// float -> binary16 bits, round to nearest even; overflow gives infinity; NaN stays NaN.
DYNATTN_EXPORT uint16_t FloatToHalf(float value);

/// binary16 bits -> float (exact for every input; NaN stays NaN).
DYNATTN_EXPORT float HalfToFloat(uint16_t half);

/// float -> bfloat16 bits (the float's upper 16 bits), round to nearest even; overflow gives
/// infinity; NaN stays NaN (quiet, sign kept).
DYNATTN_EXPORT uint16_t FloatToBfloat16(float value);

/// bfloat16 bits -> float (exact for every input).
DYNATTN_EXPORT float Bfloat16ToFloat(uint16_t bfloat16);

}  // namespace dynattn

#endif  // DYNATTN_HALF_H_
