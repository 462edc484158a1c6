// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The scalar cache codec: fp16, bf16 and fp8 rounding and one group's quantize/dequantize rules
// (spec pmx-ops §2; fp8 as vLLM's per-tensor-scaled fp8 KV cache), the single definition that the
// CPU's vector codec (cpu/codec-inl.h), the CUDA kernels (cuda/) and the public fp16 helpers all
// follow.
//
// Why it looks like this: the numerics contract fixes every cache byte and scale, so every backend
// must quantize identically. Every function here is DYNATTN_HD and uses only integer operations,
// correctly rounded fp32 arithmetic (__fdiv_rn / __fmul_rn on the device, which never contract or
// approximate) and rintf (ties to even), so the very code the CUDA kernels run is the code the CPU
// library runs for its scalar tails, and the two can be compared bit for bit on the host
// (tests/gpu_codec_test.cc). The fp16 rounding is an integer round-to-nearest-even rather than
// __float2half_rn or F16C: all three round to nearest even, but this one also fixes the NaN bits
// (sign | 0x7E00) and is the same code everywhere; Highway 1.0.3's software f32->f16 demotion
// truncates, so the CPU's vector twin (RoundToF16 in cpu/codec-inl.h) follows this one instead.

#ifndef DYNATTN_CORE_CODEC_H_
#define DYNATTN_CORE_CODEC_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"
#include "dynattn/cache.h"

namespace dynattn::internal {

/// The bits of a float.
DYNATTN_HD uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

/// The float of some bits.
DYNATTN_HD float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// Correctly rounded a / b (never an approximate reciprocal).
DYNATTN_HD float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Correctly rounded a * b, never contracted into a fused multiply-add.
DYNATTN_HD float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Correctly rounded a + b, never contracted.
DYNATTN_HD float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// Nearest integer, ties to even (the default rounding mode on the host).
DYNATTN_HD float RoundHalfEven(float x) {
#ifdef __CUDA_ARCH__
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

/// binary16 bits -> float (exact for every input, NaN stays NaN).
DYNATTN_HD float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal or zero: mant * 2^-24 is exact in float.
  const float magnitude = MulRn(static_cast<float>(mant), BitsFloat(0x33800000u));
  return sign ? -magnitude : magnitude;
}

/// float -> binary16 bits, round to nearest even; overflow to infinity; NaN -> sign | 0x7E00.
DYNATTN_HD uint16_t F32ToF16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00);
  if (abs < 0x38800000u) {
    // Below 2^-14 the result is a multiple of 2^-24: adding 0.5 (ulp 2^-24) rounds to nearest
    // even in hardware, and the subtraction is exact.
    const float rounded = AddRn(AddRn(BitsFloat(abs), 0.5f), -0.5f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(MulRn(rounded, 16777216.0f)));
  }
  const uint32_t lsb = (abs >> 13) & 1;
  const uint32_t rounded = (abs + 0xFFF + lsb) & ~0x1FFFu;
  if (rounded >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13));
}

/// float -> bfloat16 bits, round to nearest even; overflow to infinity; a NaN stays a (quiet) NaN.
DYNATTN_HD uint16_t F32ToBf16(float f) {
  const uint32_t bits = FloatBits(f);
  // Truncating a NaN whose payload sits in the low half only would give infinity: keep it quiet.
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Adding 0x7FFF plus the kept part's lowest bit rounds to nearest even; a carry into the
  // exponent is the right result (up to infinity).
  const uint32_t lsb = (bits >> 16) & 1;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

/// bfloat16 bits -> float (exact).
DYNATTN_HD float Bf16ToF32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

/// The two OCP fp8 formats of an fp8 cache.
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

/// Largest finite value of an fp8 format: 448 (e4m3fn) or 57344 (e5m2).
DYNATTN_HD float Fp8Max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

/// fp8 byte -> float (exact for every byte). e4m3fn: bias 7, no infinities, S.1111.111 is NaN.
/// e5m2: bias 15, IEEE-like (S.11111.00 infinity, S.11111.xx NaN).
DYNATTN_HD float Fp8ToF32(uint8_t byte, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mant_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(byte & 0x80) << 24;
  const uint32_t exp = (byte & 0x7F) >> mant_bits;
  const uint32_t mant = byte & ((1u << mant_bits) - 1);
  const uint32_t max_exp = e4m3 ? 15u : 31u;
  if (e4m3 && exp == max_exp && mant == 7) return BitsFloat(sign | 0x7FC00000u);
  if (!e4m3 && exp == max_exp) return BitsFloat(sign | 0x7F800000u | (mant ? 0x400000u : 0u));
  if (exp != 0) {
    return BitsFloat(sign | ((exp - bias + 127) << 23) | (mant << (23 - mant_bits)));
  }
  // Subnormal or zero: mant * 2^(1 - bias - mant_bits), exact in float.
  const float unit = BitsFloat(static_cast<uint32_t>(127 + 1 - bias - mant_bits) << 23);
  const float magnitude = MulRn(static_cast<float>(mant), unit);
  return sign ? -magnitude : magnitude;
}

/// float -> fp8 byte: round to nearest even, saturating every finite value (and, for e4m3fn,
/// infinities, which it cannot hold; e5m2 keeps them) to the format's largest finite value; a NaN
/// gives the format's quiet NaN with the input's sign (e4m3fn S.1111.111, e5m2 S.11111.10).
DYNATTN_HD uint8_t F32ToFp8(float f, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::kE4M3;
  const int mant_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint32_t bits = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint8_t>(sign | (e4m3 ? 0x7F : 0x7E));
  const uint8_t max_code = e4m3 ? 0x7E : 0x7B;
  if (abs == 0x7F800000u) return static_cast<uint8_t>(sign | (e4m3 ? max_code : 0x7C));
  // Below the smallest normal 2^(1 - bias) the result is a multiple of the subnormal unit
  // 2^(1 - bias - mant_bits): scale it to an integer count of units and round that (ties to even,
  // exact in float); a count of 2^mant_bits is the smallest normal, which the code also encodes.
  const uint32_t min_normal = static_cast<uint32_t>(127 + 1 - bias) << 23;
  if (abs < min_normal) {
    const float units_per_one =
        BitsFloat(static_cast<uint32_t>(127 - (1 - bias - mant_bits)) << 23);
    const float units = RoundHalfEven(MulRn(BitsFloat(abs), units_per_one));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
  }
  // Normal: round the float's mantissa to mant_bits (ties to even); a carry into the exponent is
  // the right result. Past the largest finite value the result saturates.
  const int drop = 23 - mant_bits;
  const uint32_t lsb = (abs >> drop) & 1;
  const uint32_t rounded = (abs + ((1u << (drop - 1)) - 1) + lsb) >> drop;
  const uint32_t rebased = rounded - (static_cast<uint32_t>(127 - bias) << mant_bits);
  if (rebased > max_code) return static_cast<uint8_t>(sign | max_code);
  return static_cast<uint8_t>(sign | rebased);
}

/// A value as an fp8 cache stores it: fp8_satfinite_rne(x / scale), the division correctly
/// rounded in fp32. A NaN skips the division: NVIDIA hardware turns any NaN result into the
/// canonical NaN (sign +), x86 keeps the operand's sign, and the byte must be the same on both.
DYNATTN_HD uint8_t EncodeFp8(float x, float tensor_scale, Fp8Format format) {
  const bool nan = (FloatBits(x) & 0x7FFFFFFFu) > 0x7F800000u;
  return F32ToFp8(nan ? x : DivRn(x, tensor_scale), format);
}

/// A stored fp8 byte as read back: float(byte) * scale in fp32.
DYNATTN_HD float DecodeFp8(uint8_t byte, float tensor_scale, Fp8Format format) {
  return MulRn(Fp8ToF32(byte, format), tensor_scale);
}

/// The fp8 format of an fp8 cache element (kE4M3 for any other element).
DYNATTN_HD Fp8Format Fp8FormatOf(CacheElem elem) {
  return elem == CacheElem::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

/// True for the two fp8 cache elements.
DYNATTN_HD bool IsFp8(CacheElem elem) {
  return elem == CacheElem::kF8E4M3 || elem == CacheElem::kF8E5M2;
}

/// Rounds a float to the nearest binary16 value, kept as a float.
DYNATTN_HD float RoundToF16(float f) { return F16ToF32(F32ToF16(f)); }

/// The largest code of a quantized cache: 127 (int8) or 7 (int4).
DYNATTN_HD int QMax(bool int4) { return int4 ? 7 : 127; }

/// The code of x / s: rounded to T1, to the nearest integer (ties to even), clamped to
/// [-qmax, qmax]; NaN gives 0.
DYNATTN_HD int8_t QuantizeCode(float x, float s, int qmax, bool io_is_f16) {
  float quotient = DivRn(x, s);
  if (io_is_f16) quotient = RoundToF16(quotient);
  const float r = RoundHalfEven(quotient);
  if (r != r) return 0;
  const float high = static_cast<float>(qmax);
  const float clamped = r < -high ? -high : (r > high ? high : r);
  return static_cast<int8_t>(clamped);
}

/// The scale as stored in T3: fp16 bits or the fp32 value.
DYNATTN_HD uint16_t StoredScaleF16(float s) { return F32ToF16(s); }

/// One byte of a packed int4 row: element 2k in the low nibble, 2k + 1 in the high one.
DYNATTN_HD uint8_t PackNibbles(int8_t low, int8_t high) {
  return static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
}

/// Sign-extends element k of a packed int4 row.
DYNATTN_HD int Int4At(const uint8_t* packed, int k) {
  const uint8_t byte = packed[k >> 1];
  const int nibble = (k & 1) ? (byte >> 4) : (byte & 0xF);
  return nibble >= 8 ? nibble - 16 : nibble;
}

/// Loads group scale g of a row whose scales start at `scale` (fp16 bits or fp32).
DYNATTN_HD float LoadScale(const void* scale, int g, bool scale_is_f16) {
  return scale_is_f16 ? F16ToF32(static_cast<const uint16_t*>(scale)[g])
                      : static_cast<const float*>(scale)[g];
}

/// Whether a dequantized product q * s is rounded to fp16: T1(T3(q * s)) with fp16 activations
/// (T1) or fp16 scales (T3). bf16 activations read the exact fp32 product whatever the scale type
/// (then rounded to bf16 only where the KeyValueCache op stores an output): through an fp16
/// product they would lose 3.7x their tolerance, and values past 65504 would become infinities.
DYNATTN_HD bool ProductsRoundToF16(bool scale_is_f16, DType io) {
  return io == DType::kF16 || (scale_is_f16 && io != DType::kBF16);
}

/// A dequantized element: the fp32 product q * s, rounded to fp16 when `round_to_f16`
/// (ProductsRoundToF16; at most one fp16 rounding is ever needed).
DYNATTN_HD float Dequantize(int q, float s, bool round_to_f16) {
  const float product = MulRn(static_cast<float>(q), s);
  return round_to_f16 ? RoundToF16(product) : product;
}

/// An element of an fp32 cache as T1 sees it.
DYNATTN_HD float DecodeF32(float x, bool io_is_f16) { return io_is_f16 ? RoundToF16(x) : x; }

/// Loads activation i of type fp32 (io_is_f16 false) or fp16 as a float.
DYNATTN_HD float LoadActivation(const void* src, int64_t i, bool io_is_f16) {
  return io_is_f16 ? F16ToF32(static_cast<const uint16_t*>(src)[i])
                   : static_cast<const float*>(src)[i];
}

/// Stores a float as activation i, rounding to nearest even for fp16.
DYNATTN_HD void StoreActivation(float x, void* dst, int64_t i, bool io_is_f16) {
  if (io_is_f16) {
    static_cast<uint16_t*>(dst)[i] = F32ToF16(x);
  } else {
    static_cast<float*>(dst)[i] = x;
  }
}

/// Loads activation i of type `io` (fp32, fp16 or bf16) as a float (exact).
DYNATTN_HD float LoadActivationOf(const void* src, int64_t i, DType io) {
  if (io == DType::kBF16) return Bf16ToF32(static_cast<const uint16_t*>(src)[i]);
  return LoadActivation(src, i, io == DType::kF16);
}

/// Stores a float as activation i of type `io`, rounding to nearest even for fp16 and bf16.
DYNATTN_HD void StoreActivationOf(float x, void* dst, int64_t i, DType io) {
  if (io == DType::kBF16) {
    static_cast<uint16_t*>(dst)[i] = F32ToBf16(x);
  } else {
    StoreActivation(x, dst, i, io == DType::kF16);
  }
}

/// The scale s (in T1) of the group of `count` values load(first), load(first + 1), ...
template <class Load>
DYNATTN_HD float GroupScaleOf(const Load& load, int first, int count, int qmax, bool io_is_f16) {
  float m = 0.0f;
  for (int i = 0; i < count; ++i) {
    const float a = fabsf(load(first + i));
    m = (m < a) ? a : m;  // std::max(m, a): a NaN never replaces m
  }
  float s = DivRn(m, static_cast<float>(qmax));
  if (io_is_f16) s = RoundToF16(s);
  const float eps = io_is_f16 ? RoundToF16(1e-5f) : 1e-5f;
  if (!(s >= eps)) s = eps;  // also maps a NaN scale to eps
  return s;
}

/// Stores one new row of `dim` values (load(i) gives element i, already in T1) as cache row
/// `row` (its first byte; for int4 element 0 is the low nibble of that byte) with its group
/// scales at `scale` (quantized caches only): the bytes cpu/codec-inl.h EncodeRow writes with its
/// vector code.
///
/// bf16 activations quantize with the fp32 rules (io_is_f16 false): the values are exact fp32.
/// An fp8 plane stores EncodeFp8(x, tensor_scale) and has no group scales.
template <class Load>
DYNATTN_HD void EncodeRow(const Load& load, CacheElem elem, int dim, int group, bool scale_is_f16,
                          bool io_is_f16, void* row, void* scale, float tensor_scale = 1.0f) {
  if (elem == CacheElem::kF32) {
    for (int d = 0; d < dim; ++d) static_cast<float*>(row)[d] = load(d);
    return;
  }
  if (elem == CacheElem::kF16) {
    for (int d = 0; d < dim; ++d) static_cast<uint16_t*>(row)[d] = F32ToF16(load(d));
    return;
  }
  if (elem == CacheElem::kBF16) {
    for (int d = 0; d < dim; ++d) static_cast<uint16_t*>(row)[d] = F32ToBf16(load(d));
    return;
  }
  if (IsFp8(elem)) {
    const Fp8Format format = Fp8FormatOf(elem);
    for (int d = 0; d < dim; ++d) {
      static_cast<uint8_t*>(row)[d] = EncodeFp8(load(d), tensor_scale, format);
    }
    return;
  }
  const bool int4 = elem == CacheElem::kInt4;
  const int qmax = QMax(int4);
  for (int g = 0; g < dim / group; ++g) {
    const float s = GroupScaleOf(load, g * group, group, qmax, io_is_f16);
    if (scale_is_f16) {
      static_cast<uint16_t*>(scale)[g] = F32ToF16(s);
    } else {
      static_cast<float*>(scale)[g] = s;
    }
    const int first = g * group;
    if (!int4) {
      for (int i = first; i < first + group; ++i) {
        static_cast<int8_t*>(row)[i] = QuantizeCode(load(i), s, qmax, io_is_f16);
      }
    } else {  // int4 groups are even, so both nibbles of a byte share the group's scale
      for (int i = first; i < first + group; i += 2) {
        static_cast<uint8_t*>(row)[i >> 1] =
            PackNibbles(QuantizeCode(load(i), s, qmax, io_is_f16),
                        QuantizeCode(load(i + 1), s, qmax, io_is_f16));
      }
    }
  }
}

/// True when attention reads the values (V, not K) of this cache as the exact fp32 products
/// code x scale, without the fp16 rounding the cache rule applies (T3, T1): int8, int4 and fp8
/// caches under fp16 activations. Why: that rounding costs two conversions per element, and an
/// output moves by at most 2^-11 of the context's largest value without it, inside the fp16
/// tolerance (5e-4 of it). Keys keep the rounding: a score amplifies a key's error by the softmax
/// scale times |q|.|k|, which a sharp softmax turns into weights the tolerance cannot absorb.
/// fp32 and bf16 activations keep it too (their tolerances can tell it). Cache bytes, scales and
/// the KeyValueCache op's dequantized outputs always keep it. Every target and both attention
/// paths use this one rule.
DYNATTN_HD bool ReadsExactValues(CacheElem elem, DType io_type) {
  const bool quantized = elem == CacheElem::kInt8 || elem == CacheElem::kInt4 ||
                         elem == CacheElem::kF8E4M3 || elem == CacheElem::kF8E5M2;
  return quantized && io_type == DType::kF16;
}

/// Element d of cache row `row` (with its group scales at `scale`) as T1 sees it: the value
/// cpu/codec-inl.h DecodeRow gives.
///
/// Every format decodes to an fp32 value first (an fp8 byte to fp8(b) * tensor_scale); with fp16
/// activations that value is rounded to fp16 (T1), with fp32 or bf16 activations it is kept.
DYNATTN_HD float DecodeElement(const void* row, const void* scale, int d, CacheElem elem, int group,
                               bool scale_is_f16, DType io, float tensor_scale = 1.0f) {
  const bool io_is_f16 = io == DType::kF16;
  const bool products_round = ProductsRoundToF16(scale_is_f16, io);
  switch (elem) {
    case CacheElem::kBF16:
      return DecodeF32(Bf16ToF32(static_cast<const uint16_t*>(row)[d]), io_is_f16);
    case CacheElem::kF8E4M3:
    case CacheElem::kF8E5M2:
      return DecodeF32(
          DecodeFp8(static_cast<const uint8_t*>(row)[d], tensor_scale, Fp8FormatOf(elem)),
          io_is_f16);
    case CacheElem::kF32:
      return DecodeF32(static_cast<const float*>(row)[d], io_is_f16);
    case CacheElem::kF16:
      return F16ToF32(static_cast<const uint16_t*>(row)[d]);
    case CacheElem::kInt8:
      return Dequantize(static_cast<const int8_t*>(row)[d],
                        LoadScale(scale, d / group, scale_is_f16), products_round);
    case CacheElem::kInt4:
      return Dequantize(Int4At(static_cast<const uint8_t*>(row), d),
                        LoadScale(scale, d / group, scale_is_f16), products_round);
  }
  return 0.0f;
}

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_CODEC_H_
