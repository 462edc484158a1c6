// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Conversions between float and the narrow formats of tensors and caches: IEEE binary16
// (DType::kF16), bfloat16, and the two OCP fp8 formats of fp8 caches (e4m3fn, e5m2), for callers
// that prepare inputs or caches or read them back. They are the library's own rounding rules, the
// ones its kernels use, so data made with them round-trips bit for bit.

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

/// Largest finite value of fp8 e4m3fn (448) and of fp8 e5m2 (57344).
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

/// float -> fp8 e4m3fn byte (bias 7, no infinities), round to nearest even; every finite value
/// past 448 and both infinities saturate to +-448; NaN gives S.1111.111 with the input's sign.
/// An fp8 cache stores FloatToFp8E4M3(x / scale), the division rounded in fp32.
DYNATTN_EXPORT uint8_t FloatToFp8E4M3(float value);

/// fp8 e4m3fn byte -> float (exact for every byte; S.1111.111 is NaN).
DYNATTN_EXPORT float Fp8E4M3ToFloat(uint8_t byte);

/// float -> fp8 e5m2 byte (bias 15, IEEE-like), round to nearest even; finite values past 57344
/// saturate to +-57344, infinities stay infinite; NaN gives S.11111.10 with the input's sign.
DYNATTN_EXPORT uint8_t FloatToFp8E5M2(float value);

/// fp8 e5m2 byte -> float (exact for every byte).
DYNATTN_EXPORT float Fp8E5M2ToFloat(uint8_t byte);

}  // namespace dynattn

#endif  // DYNATTN_HALF_H_
