// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the cache codec. Turns cached rows (fp32, fp16, bf16, fp8 e4m3fn / e5m2 with a
// per-tensor scale, int8, packed int4 with group scales) into the exact fp32 values the spec
// defines, and new tokens into cache bytes; loads and stores fp32, fp16 and bf16 activations.
//
// Why it looks like this: the numerics contract fixes these bits. A dequantized element is
// T1(T3(q) * s): the product rounded to the scale type T3, then to the activation type T1.
// q * s is exact in fp32 whenever s is fp16 (8 + 11 significant bits), so each rounding is one
// "round to fp16" step applied (or not) to an fp32 product; that step is done with integer
// operations, identical on every target, because Highway 1.0.3 truncates when it converts to
// fp16 without F16C. Quantization runs once per new token and follows the spec's double rounding
// literally, in scalar code, so there is exactly one definition of the cache format.
// bf16 and fp8 rows widen with integer operations only (a shift; an exponent rebase with the
// specials selected), then one correctly rounded multiply by the tensor scale: the bits of core's
// scalar decoder on every target. Their encoder is core's scalar one, element by element.

// Per-target include guard (the file is re-included once per Highway target).
#if defined(DYNATTN_CPU_CODEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_CODEC_INL_H_
#undef DYNATTN_CPU_CODEC_INL_H_
#else
#define DYNATTN_CPU_CODEC_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cache_rows.h"
#include "core/codec.h"
#include "cpu/kernel_table.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Float vectors of at most kVirtualLanes lanes: 16 on AVX-512, 8 on AVX2, 4 on SSE4, 1 scalar.
using DF = hn::CappedTag<float, internal::kVirtualLanes>;

/// A step run once per tile or per work item (scoring a tile, its P.V, its softmax), not per
/// vector: compiled once per target and called, instead of inlined into every (format, scale
/// mode, rounding, block) instantiation of the kernels that use it. A call per tile costs nothing
/// measurable; inlining them all made the quantized formats' translation units take minutes.
#define DYNATTN_TILE_STEP inline HWY_NOINLINE

/// Targets of machines without AVX2 (SSE4) and the portable emulation (EMU128, SCALAR). They
/// compile one copy of the fused decode (blocks of 8 query vectors, the scale mode read at run
/// time, the fp16 rounding by conversions) instead of one per block size, scale mode and rounding
/// trick: those copies change no bit and are there for speed on the targets serving machines run,
/// and for these targets they cost every build minutes of compile time.
constexpr bool kPortableTarget = HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3 ||
                                 HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR;

/// Rounds each lane to the nearest binary16 value (ties to even), kept as float. Bit-identical to
/// internal::RoundToF16 on every target: F16C where the target has it, integer operations
/// elsewhere (Highway 1.0.3's software demotion truncates, so it is not used).
template <class V>
HWY_INLINE V RoundToF16(V v) {
  const DF df;
#if HWY_TARGET < HWY_SSE4  // AVX2 and AVX-512 have F16C: vcvtps2ph rounds to nearest even.
  return hn::PromoteTo(df, hn::DemoteTo(hn::Rebind<hwy::float16_t, DF>(), v));
#else
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(bits, hn::Set(du, 0x80000000u));
  const auto abs = hn::AndNot(sign, bits);
  // Normal range: round the mantissa to 10 bits (carry may bump the exponent).
  const auto lsb = hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1));
  auto normal = hn::And(hn::Add(abs, hn::Add(hn::Set(du, 0xFFF), lsb)), hn::Set(du, ~0x1FFFu));
  const hn::RebindToSigned<DF> di;
  const auto overflow = hn::Gt(hn::BitCast(di, normal), hn::Set(di, 0x477FFFFF));
  normal = hn::IfThenElse(hn::RebindMask(du, overflow), hn::Set(du, 0x7F800000u), normal);
  // Subnormal range: adding 0.5 rounds to a multiple of 2^-24; the subtraction is exact.
  const auto half = hn::Set(df, 0.5f);
  const auto tiny = hn::BitCast(du, hn::Sub(hn::Add(hn::BitCast(df, abs), half), half));
  const auto is_tiny = hn::Lt(hn::BitCast(di, abs), hn::Set(di, 0x38800000));
  const auto is_special = hn::Gt(hn::BitCast(di, abs), hn::Set(di, 0x7F7FFFFF));
  auto magnitude = hn::IfThenElse(hn::RebindMask(du, is_tiny), tiny, normal);
  magnitude = hn::IfThenElse(hn::RebindMask(du, is_special), abs, magnitude);
  return hn::BitCast(df, hn::Or(sign, magnitude));
#endif
}

/// RoundToF16 for lanes known to be +0 or of a magnitude in [2^-14, 65504], fp16's normal range:
/// Veltkamp's split with the constant 2^13 + 1 keeps the top 11 significant bits, rounded to
/// nearest even. One multiply and two additions, where vcvtps2ph + vcvtph2ps cost Zen 4 about 3
/// cycles per 512-bit vector. Bit-identical to RoundToF16 on that range (the simd suite checks
/// every float in it); outside it the result is not an fp16 value, so callers prove the range
/// (NormalProducts). Needs -ffp-contract=off, as the whole library has.
template <class V>
HWY_INLINE V RoundNormalToF16(V v) {
  const auto spread = hn::Mul(v, hn::Set(DF(), 8193.0f));
  return hn::Add(spread, hn::Sub(v, spread));
}

/// The scalar twin of one dequantization rounding chain: to the scale type, then to the
/// activation type. A value already rounded to fp16 is unchanged by a second rounding to fp16,
/// so at most one rounding is ever done.
HWY_INLINE float RoundChainScalar(float x, bool round_scale_type, bool round_io_type) {
  return (round_scale_type || round_io_type) ? internal::RoundToF16(x) : x;
}

template <class V>
HWY_INLINE V RoundChain(V v, bool round_scale_type, bool round_io_type) {
  return (round_scale_type || round_io_type) ? RoundToF16(v) : v;
}

/// The kN fp16 values at `src` as floats, bit for bit internal::F16ToF32 (infinities included;
/// a NaN stays NaN, though F16C returns a signaling one quiet). AVX2 and AVX-512 convert with F16C;
/// on the other targets Highway 1.0.3's software promotion turns infinities and NaN into finite
/// values, so the fields are rebased with integer operations instead (subnormals: mantissa times
/// 2^-24, exact). F16LanesOf takes any float tag (D's lanes), F16Lanes the kernels' DF.
template <class D>
HWY_INLINE hn::Vec<D> F16LanesOf(D df, const uint16_t* src) {
#if HWY_TARGET < HWY_SSE4
  const hn::Rebind<hwy::float16_t, D> df16;
  return hn::PromoteTo(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(src)));
#else
  const hn::RebindToSigned<D> di;
  const auto half = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint16_t, D>(), src));
  const auto sign = hn::ShiftLeft<16>(hn::And(half, hn::Set(di, 0x8000)));
  const auto magnitude = hn::And(half, hn::Set(di, 0x7FFF));
  const auto shifted = hn::ShiftLeft<13>(magnitude);
  const auto normal = hn::Add(shifted, hn::Set(di, 112 << 23));
  const auto special = hn::Or(shifted, hn::Set(di, 0x7F800000));
  const auto subnormal =
      hn::BitCast(di, hn::Mul(hn::ConvertTo(df, magnitude), hn::Set(df, 1.0f / 16777216.0f)));
  auto bits = hn::IfThenElse(hn::Lt(magnitude, hn::Set(di, 0x400)), subnormal, normal);
  bits = hn::IfThenElse(hn::Gt(magnitude, hn::Set(di, 0x7BFF)), special, bits);
  return hn::BitCast(df, hn::Or(bits, sign));
#endif
}

HWY_INLINE hn::Vec<DF> F16Lanes(const uint16_t* src) { return F16LanesOf(DF(), src); }

/// How to decode one row of a cache plane into fp32.
struct RowCodec {
  int head_dim = 0;
  int quant_group = 1;
  bool scale_is_f16 = false;    ///< T3 = fp16 (quantized caches).
  bool io_is_f16 = false;       ///< T1 = fp16: every value read is rounded to fp16.
  bool io_is_bf16 = false;      ///< T1 = bf16: products stay exact fp32 (ProductsRoundToF16).
  bool exact_products = false;  ///< No rounding at all (attention's values: ReadsExactValues).

  /// The cache rule: the KeyValueCache op's dequantized outputs and attention's keys.
  static RowCodec For(const CacheDesc& cache, DType io_type) {
    RowCodec codec;
    codec.head_dim = cache.head_dim;
    codec.quant_group = cache.quant_group;
    codec.scale_is_f16 = cache.scale_type == ScaleType::kF16;
    codec.io_is_f16 = io_type == DType::kF16;
    codec.io_is_bf16 = io_type == DType::kBF16;
    return codec;
  }

  /// How attention reads the cache's values.
  static RowCodec ForValues(const CacheDesc& cache, DType io_type) {
    RowCodec codec = For(cache, io_type);
    codec.exact_products = internal::ReadsExactValues(cache.elem, io_type);
    return codec;
  }

  bool RoundsScaled() const {
    return !exact_products && ((scale_is_f16 && !io_is_bf16) || io_is_f16);
  }
  bool RoundsWidened() const { return !exact_products && io_is_f16; }

  /// True when values of a cache of `elem` decode with a rounding to fp16.
  bool Rounds(CacheElem elem) const {
    if (elem == CacheElem::kF16) return false;  // already fp16 values
    const bool scaled = elem == CacheElem::kInt8 || elem == CacheElem::kInt4;
    return scaled ? RoundsScaled() : RoundsWidened();
  }
};

/// Widens `count` group scales (fp16 when `f16`, else fp32, at `src`) into out[0, count): whole
/// vectors, then one vector of 8 and one of 4 lanes (a D = 64 row has 8 groups of 8), then at
/// most 3 scalar conversions.
HWY_INLINE void WidenScales(const void* src, bool f16, int count, float* out) {
  if (!f16) {
    std::copy(static_cast<const float*>(src), static_cast<const float*>(src) + count, out);
    return;
  }
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  const auto* half = static_cast<const uint16_t*>(src);
  int g = 0;
  for (; g + n <= count; g += n) hn::StoreU(F16Lanes(half + g), df, out + g);
  if constexpr (hn::MaxLanes(DF()) > 8) {
    const hn::CappedTag<float, 8> d8;
    if (g + 8 <= count) {
      hn::StoreU(F16LanesOf(d8, half + g), d8, out + g);
      g += 8;
    }
  }
  if constexpr (hn::MaxLanes(DF()) > 4) {
    const hn::CappedTag<float, 4> d4;
    if (g + 4 <= count) {
      hn::StoreU(F16LanesOf(d4, half + g), d4, out + g);
      g += 4;
    }
  }
  for (; g < count; ++g) out[g] = internal::F16ToF32(half[g]);
}

/// Writes the scale of every element of the row (scale of group d / quant_group) as a float
/// into `out` (head_dim values): the group scales are widened in place, then spread from the
/// last group down (group g's scale sits at out[g] <= g * quant_group until it is read).
HWY_INLINE void ExpandScales(const RowCodec& c, const void* scale, float* out) {
  const int groups = c.head_dim / c.quant_group;
  WidenScales(scale, c.scale_is_f16, groups, out);
  for (int g = groups - 1; g >= 0; --g) {
    const float s = out[g];
    std::fill(out + g * c.quant_group, out + (g + 1) * c.quant_group, s);
  }
}

/// Writes zeros to dst[from, to): the padding of a scratch row, so padded lanes add exact zeros.
HWY_INLINE void ZeroPad(float* dst, int from, int to) { std::fill(dst + from, dst + to, 0.0f); }

/// fp32 row -> fp32 values as T1 sees them.
HWY_INLINE void DecodeRowF32(const RowCodec& c, const float* src, float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= c.head_dim; d += n) {
    hn::StoreU(RoundChain(hn::LoadU(df, src + d), false, c.io_is_f16), df, dst + d);
  }
  for (; d < c.head_dim; ++d) dst[d] = RoundChainScalar(src[d], false, c.io_is_f16);
}

/// fp16 row -> fp32 (exact).
HWY_INLINE void DecodeRowF16(const RowCodec& c, const uint16_t* src, float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= c.head_dim; d += n) hn::StoreU(F16Lanes(src + d), df, dst + d);
  for (; d < c.head_dim; ++d) dst[d] = internal::F16ToF32(src[d]);
}

/// Multiplies integer codes (already floats in dst[0, head_dim)) by their expanded scales and
/// applies the rounding chain.
HWY_INLINE void ApplyScales(const RowCodec& c, const float* scales, float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= c.head_dim; d += n) {
    const auto product = hn::Mul(hn::LoadU(df, dst + d), hn::LoadU(df, scales + d));
    hn::StoreU(RoundChain(product, c.RoundsScaled(), false), df, dst + d);
  }
  for (; d < c.head_dim; ++d) {
    dst[d] = RoundChainScalar(dst[d] * scales[d], c.RoundsScaled(), false);
  }
}

/// The kN int8 codes at `src` as floats.
HWY_INLINE hn::Vec<DF> Int8Lanes(const int8_t* src) {
  const DF df;
  return hn::ConvertTo(
      df, hn::PromoteTo(hn::Rebind<int32_t, DF>(), hn::LoadU(hn::Rebind<int8_t, DF>(), src)));
}

/// int8 codes -> float codes in dst[0, n).
HWY_INLINE void Int8ToFloat(const int8_t* src, int count, float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= count; d += n) hn::StoreU(Int8Lanes(src + d), df, dst + d);
  for (; d < count; ++d) dst[d] = static_cast<float>(src[d]);
}

/// Elements [e, e + kN) of a packed int4 row as floats (e is a multiple of the lane count).
/// Every lane receives a word holding its nibble, shifts the nibble to the top, and sign-extends
/// it with an arithmetic shift back. Up to 8 lanes the word is one broadcast 32-bit (or 16-bit)
/// load. 16 lanes would need two broadcasts and a blend; there each lane takes its byte through a
/// byte shuffle and a sign extension instead (1.3 cycles less per 16 codes in the int4 key loop
/// on Zen 4).
HWY_INLINE hn::Vec<DF> Int4Lanes(const uint8_t* packed, int e) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR  // one lane: nothing to share
  return hn::Set(df, static_cast<float>(internal::Int4At(packed, e)));
#else
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  const auto lane = hn::BitCast(du, hn::Iota(di, 0));
  hn::Vec<decltype(di)> words;
  hn::Vec<decltype(du)> up;  // how far each lane's nibble lies below bit 28
  if constexpr (kN >= 16) {  // lane l: byte l / 2 (sign-extended), nibble l % 2 of it
    const hn::Rebind<int8_t, DF> d8;
    const hn::RebindToUnsigned<decltype(d8)> du8;
    const auto bytes =
        hn::LoadU(hn::Half<decltype(d8)>(), reinterpret_cast<const int8_t*>(packed) + e / 2);
    const auto byte_of_lane = hn::BitCast(d8, hn::ShiftRight<1>(hn::Iota(du8, 0)));
    words = hn::PromoteTo(di, hn::TableLookupBytes(bytes, byte_of_lane));
    up = hn::Sub(hn::Set(du, 28), hn::ShiftLeft<2>(hn::And(lane, hn::Set(du, 1))));
  } else {  // lane l: nibble l of one broadcast 32-bit (4 lanes: 16-bit) word
    if constexpr (kN == 8) {
      int32_t raw;
      std::memcpy(&raw, packed + e / 2, sizeof(raw));
      words = hn::Set(di, raw);
    } else {
      uint16_t raw;
      std::memcpy(&raw, packed + e / 2, sizeof(raw));
      words = hn::Set(di, static_cast<int32_t>(raw));
    }
    up = hn::Sub(hn::Set(du, 28), hn::ShiftLeft<2>(hn::And(lane, hn::Set(du, 7))));
  }
  const auto top = hn::BitCast(di, hn::BitCast(du, words) << up);
  return hn::ConvertTo(df, hn::ShiftRight<28>(top));
#endif
}

/// int8 row with group scales -> fp32.
HWY_INLINE void DecodeRowInt8(const RowCodec& c, const int8_t* src, const void* scale, float* dst,
                              float* scales_tmp) {
  ExpandScales(c, scale, scales_tmp);
  Int8ToFloat(src, c.head_dim, dst);
  ApplyScales(c, scales_tmp, dst);
}

/// Packed int4 codes (element 2k in the low nibble of byte k) -> float codes in dst[0, count).
HWY_INLINE void Int4ToFloat(const uint8_t* packed, int count, float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= count; d += n) hn::StoreU(Int4Lanes(packed, d), df, dst + d);
  for (; d < count; ++d) dst[d] = static_cast<float>(internal::Int4At(packed, d));
}

/// Packed int4 row with group scales -> fp32.
HWY_INLINE void DecodeRowInt4(const RowCodec& c, const uint8_t* src, const void* scale, float* dst,
                              float* scales_tmp) {
  ExpandScales(c, scale, scales_tmp);
  Int4ToFloat(src, c.head_dim, dst);
  ApplyScales(c, scales_tmp, dst);
}

/// The kN bf16 values at `src` as floats (exact: the bits move to the top half).
HWY_INLINE hn::Vec<DF> Bf16Lanes(const uint16_t* src) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, DF>(), src));
  return hn::BitCast(df, hn::ShiftLeft<16>(bits));
}

/// The kN fp8 bytes at `src` as floats, bit for bit internal::Fp8ToF32.
///
/// AVX2 and AVX-512 move each byte into an fp16 bit pattern and widen it with F16C (about half
/// the operations of the rebasing below). An e5m2 byte is the top byte of the fp16 of the same
/// value. An e4m3fn byte with its magnitude bits moved to bits 7..13 is an fp16 (normal or
/// subnormal) of 2^-8 times its value, so the widened value is multiplied by 256 (exact). NaN
/// codes become the quiet fp16 NaN with their sign, which widens to Fp8ToF32's NaN.
template <CacheElem kElem>
HWY_INLINE hn::Vec<DF> Fp8Lanes(const uint8_t* src) {
  const DF df;
#if HWY_TARGET < HWY_SSE4
  const hn::Rebind<int16_t, DF> d16;
  const auto byte =
      hn::PromoteTo(d16, hn::LoadU(hn::Rebind<int8_t, DF>(), reinterpret_cast<const int8_t*>(src)));
  constexpr bool kE4M3 = kElem == CacheElem::kF8E4M3;
  // Sign-extended bytes: the sign reaches bit 15 either way; e4m3fn clears the copy in bit 14.
  const auto bits = kE4M3 ? hn::And(hn::ShiftLeft<7>(byte), hn::Set(d16, int16_t{-16385}))
                          : hn::ShiftLeft<8>(byte);
  const auto magnitude = hn::And(bits, hn::Set(d16, int16_t{0x7FFF}));
  const auto is_nan = kE4M3 ? hn::Eq(magnitude, hn::Set(d16, int16_t{0x3F80}))
                            : hn::Gt(magnitude, hn::Set(d16, int16_t{0x7C00}));
  const auto quiet_nan =
      hn::Or(hn::AndNot(magnitude, bits), hn::Set(d16, int16_t{0x7E00}));  // sign | 0x7E00
  const auto half = hn::IfThenElse(is_nan, quiet_nan, bits);
  const auto value = hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), half));
  return kE4M3 ? hn::Mul(value, hn::Set(df, 256.0f)) : value;
#else
  const hn::RebindToSigned<DF> di;
  constexpr bool kE4M3 = kElem == CacheElem::kF8E4M3;
  constexpr int kMant = kE4M3 ? 3 : 2;
  constexpr int kBias = kE4M3 ? 7 : 15;
  const auto byte = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, DF>(), src));
  const auto sign = hn::ShiftLeft<24>(hn::And(byte, hn::Set(di, 0x80)));
  const auto magnitude = hn::And(byte, hn::Set(di, 0x7F));
  const auto normal = hn::BitCast(
      df, hn::Add(hn::ShiftLeft<23 - kMant>(magnitude), hn::Set(di, (127 - kBias) << 23)));
  const auto mantissa = hn::And(magnitude, hn::Set(di, (1 << kMant) - 1));
  const float unit = internal::BitsFloat(static_cast<uint32_t>(127 + 1 - kBias - kMant) << 23);
  const auto subnormal = hn::Mul(hn::ConvertTo(df, mantissa), hn::Set(df, unit));
  const auto is_subnormal = hn::RebindMask(df, hn::Lt(magnitude, hn::Set(di, 1 << kMant)));
  auto value = hn::IfThenElse(is_subnormal, subnormal, normal);
  const auto quiet_nan = hn::BitCast(df, hn::Set(di, 0x7FC00000));
  if constexpr (kE4M3) {
    value =
        hn::IfThenElse(hn::RebindMask(df, hn::Eq(magnitude, hn::Set(di, 0x7F))), quiet_nan, value);
  } else {
    const auto infinity = hn::BitCast(df, hn::Set(di, 0x7F800000));
    value =
        hn::IfThenElse(hn::RebindMask(df, hn::Gt(magnitude, hn::Set(di, 0x7C))), quiet_nan, value);
    value =
        hn::IfThenElse(hn::RebindMask(df, hn::Eq(magnitude, hn::Set(di, 0x7C))), infinity, value);
  }
  return hn::BitCast(df, hn::Or(hn::BitCast(di, value), sign));
#endif
}

/// A bf16 or fp8 row -> fp32 values as T1 sees them (internal::DecodeElement bit for bit).
template <CacheElem kElem>
HWY_INLINE void DecodeRowWidened(const RowCodec& c, const void* row, float tensor_scale,
                                 float* dst) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  int d = 0;
  for (; d + n <= c.head_dim; d += n) {
    hn::Vec<DF> v;
    if constexpr (kElem == CacheElem::kBF16) {
      v = Bf16Lanes(static_cast<const uint16_t*>(row) + d);
    } else {
      v = hn::Mul(Fp8Lanes<kElem>(static_cast<const uint8_t*>(row) + d), hn::Set(df, tensor_scale));
    }
    hn::StoreU(RoundChain(v, false, c.RoundsWidened()), df, dst + d);
  }
  for (; d < c.head_dim; ++d) {
    dst[d] = internal::DecodeElement(row, nullptr, d, kElem, 1, false,
                                     c.RoundsWidened() ? DType::kF16 : DType::kF32, tensor_scale);
  }
}

/// True for the cache elements whose values are read without group scales but are not fp32 or
/// fp16: bf16 (a shift) and the two fp8 formats (a bit rebase and the plane's tensor scale).
template <CacheElem kElem>
constexpr bool IsWidenedElem() {
  return kElem == CacheElem::kBF16 || kElem == CacheElem::kF8E4M3 || kElem == CacheElem::kF8E5M2;
}

/// True for the two fp8 cache elements.
template <CacheElem kElem>
constexpr bool IsFp8Elem() {
  return kElem == CacheElem::kF8E4M3 || kElem == CacheElem::kF8E5M2;
}

/// True for the two cache elements with group scales (int8, int4).
template <CacheElem kElem>
constexpr bool IsGroupScaledElem() {
  return kElem == CacheElem::kInt8 || kElem == CacheElem::kInt4;
}

/// Element offset of (slot, head) in a plane -> pointer to the row's first byte.
template <CacheElem kElem>
HWY_INLINE const void* RowPointer(const CachePlane& plane, int64_t slot, int head) {
  return internal::RowAddress(plane, kElem, slot, head);
}

/// Bytes of one element of an unquantized kElem (the formats a dimension-major plane may hold).
template <CacheElem kElem>
constexpr size_t UnquantizedElemBytes() {
  return kElem == CacheElem::kF32                                ? 4
         : kElem == CacheElem::kF16 || kElem == CacheElem::kBF16 ? 2
                                                                 : 1;
}

/// Row (slot, head) of `plane` as `dim` contiguous codes: the row where it lies, or, for a
/// dimension-major plane (CachePlane::dim_stride > 1), its elements gathered into `staging`
/// (room for `dim` floats). Why gather: every kernel then reads one row format, and a
/// dimension-major cache gives the bits of the same values stored token-major.
template <CacheElem kElem>
HWY_INLINE const void* ContiguousRow(const CachePlane& plane, int64_t slot, int head, int dim,
                                     void* staging) {
  const void* row = RowPointer<kElem>(plane, slot, head);
  if constexpr (IsGroupScaledElem<kElem>()) {
    return row;  // never dimension-major (validation)
  } else {
    const int64_t stride = internal::DimStride(plane);
    if (stride == 1) return row;
    constexpr size_t kSize = UnquantizedElemBytes<kElem>();
    const char* src = static_cast<const char*>(row);
    char* dst = static_cast<char*>(staging);
    for (int d = 0; d < dim; ++d) std::memcpy(dst + d * kSize, src + d * stride * kSize, kSize);
    return staging;
  }
}

/// Stores `dim` contiguous codes as row (slot, head) of a dimension-major plane.
template <CacheElem kElem>
HWY_INLINE void ScatterRow(const void* codes, const CachePlane& plane, int64_t slot, int head,
                           int dim) {
  constexpr size_t kSize = UnquantizedElemBytes<kElem>();
  const int64_t stride = internal::DimStride(plane);
  char* dst = static_cast<char*>(const_cast<void*>(RowPointer<kElem>(plane, slot, head)));
  const char* src = static_cast<const char*>(codes);
  for (int d = 0; d < dim; ++d) std::memcpy(dst + d * stride * kSize, src + d * kSize, kSize);
}

/// Pointer to the first scale of (slot, head), with the scale type's size.
HWY_INLINE const void* ScalePointer(const CacheDesc& cache, const CachePlane& plane, int64_t slot,
                                    int head) {
  return internal::ScaleAddress(plane, cache.scale_type == ScaleType::kF16, slot, head);
}

/// The cache level a prefetch fills (x86 hints; other architectures prefetch into L1).
enum class PrefetchTo : uint8_t {
  kL1,  ///< The fused decode's unquantized rows, read within a tile (docs/performance-history.md).
  kL2,  ///< Everything else: tiled key tiles, query rows, quantized decode rows.
};

/// Prefetches the bytes [p, p + bytes) into the cache level kTo.
template <PrefetchTo kTo = PrefetchTo::kL2>
HWY_INLINE void PrefetchBytes(const void* p, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last = reinterpret_cast<uintptr_t>(p) + bytes - 1;
  for (uintptr_t line = first; line <= last; line += 64) {
#if HWY_ARCH_X86
    _mm_prefetch(reinterpret_cast<const char*>(line),
                 kTo == PrefetchTo::kL1 ? _MM_HINT_T0 : _MM_HINT_T1);
#else
    hwy::Prefetch(reinterpret_cast<const char*>(line));
#endif
  }
}

/// Decodes row (slot, head) of `plane` into dst[0, head_dim). `scales_tmp` holds head_dim
/// floats (a dimension-major row is gathered there: such planes have no scales).
template <CacheElem kElem>
HWY_INLINE void DecodeRow(const CacheDesc& cache, const RowCodec& c, const CachePlane& plane,
                          int64_t slot, int head, float* dst, float* scales_tmp) {
  const void* row = ContiguousRow<kElem>(plane, slot, head, cache.head_dim, scales_tmp);
  if constexpr (kElem == CacheElem::kF32) {
    DecodeRowF32(c, static_cast<const float*>(row), dst);
  } else if constexpr (kElem == CacheElem::kF16) {
    DecodeRowF16(c, static_cast<const uint16_t*>(row), dst);
  } else if constexpr (IsWidenedElem<kElem>()) {
    DecodeRowWidened<kElem>(c, row, plane.tensor_scale, dst);
  } else if constexpr (kElem == CacheElem::kInt8) {
    DecodeRowInt8(c, static_cast<const int8_t*>(row), ScalePointer(cache, plane, slot, head), dst,
                  scales_tmp);
  } else {
    DecodeRowInt4(c, static_cast<const uint8_t*>(row), ScalePointer(cache, plane, slot, head), dst,
                  scales_tmp);
  }
}

// ------------------------------------------------------------------------------------------------
// Decoding a vector of lanes at a time, in registers (the fused decode kernel, and tile decoding
// when the head size is a multiple of the lane count).

/// Lanes of a physical vector, and physical vectors per virtual row of kVirtualLanes floats.
constexpr int kLanes = static_cast<int>(hn::MaxLanes(DF()));
constexpr int kVectorsPerRow = internal::kVirtualLanes / kLanes;

/// True when attention's decoded keys of this cache need a rounding to fp16 (the cache rule).
template <CacheElem kElem>
HWY_INLINE bool KeysRound(const internal::AttentionProblem& p) {
  return RowCodec::For(p.kv.cache, p.io_type).Rounds(kElem);
}

/// The same for values, which ReadsExactValues may read unrounded.
template <CacheElem kElem>
HWY_INLINE bool ValuesRound(const internal::AttentionProblem& p) {
  return RowCodec::ForValues(p.kv.cache, p.io_type).Rounds(kElem);
}

/// How the group scales of a row are kept per row and spread over the lanes of a vector.
struct ScaleLanes {
  enum class Mode : uint8_t {
    kNone,       ///< Unquantized cache.
    kBroadcast,  ///< Group size a power of two >= lanes: one scale per vector.
    kLookup,     ///< Group size a power of two < lanes: a table lookup of kLanes / G scales.
    kExpanded,   ///< Other group sizes: one scale per element, expanded per row.
    kAny,        ///< As a template argument: the mode is read from `mode` at run time.
  };
  Mode mode = Mode::kNone;
  int shift = 0;       ///< log2(group size) in the power-of-two modes.
  int row_floats = 0;  ///< Floats per row in the scale buffer (with kLanes of slack).
  int groups = 0;      ///< Group scales per row.
  int stored = 0;      ///< Floats a row's scales fill in the buffer (groups, or head_dim).

  static ScaleLanes For(const CacheDesc& cache) {
    ScaleLanes s;
    if (cache.elem != CacheElem::kInt8 && cache.elem != CacheElem::kInt4) return s;
    const int group = cache.quant_group;
    s.groups = cache.head_dim / group;
    const bool power_of_two = (group & (group - 1)) == 0;
    while (power_of_two && (1 << s.shift) < group) ++s.shift;
    s.mode = !power_of_two ? Mode::kExpanded : group >= kLanes ? Mode::kBroadcast : Mode::kLookup;
    s.stored = s.mode == Mode::kExpanded ? cache.head_dim : cache.head_dim / group;
    s.row_floats = (s.stored + 2 * kLanes - 1) / kLanes * kLanes;
    return s;
  }

  /// The scales of elements [e, e + kLanes) of a row whose buffer is `scales`; kKnown is `mode`
  /// when the caller knows it at compile time (the fused decode kernel's inner loops).
  template <Mode kKnown = Mode::kAny>
  HWY_INLINE hn::Vec<DF> At(const float* scales, int e) const {
    const DF df;
    const Mode m = kKnown == Mode::kAny ? mode : kKnown;
    if (m == Mode::kBroadcast) return hn::Set(df, scales[e >> shift]);
    if (m == Mode::kExpanded) return hn::LoadU(df, scales + e);
    const hn::RebindToSigned<DF> di;
    const auto index = hn::ShiftRightSame(hn::Iota(di, 0), shift);  // lane l -> l / G
    return hn::TableLookupLanes(hn::LoadU(df, scales + (e >> shift)),
                                hn::IndicesFromVec(df, index));
  }
};

/// Widens the group scales of one row (at `src`) into `out` as `lanes` keeps them.
HWY_INLINE void LoadRowScales(const CacheDesc& cache, const void* src, const ScaleLanes& lanes,
                              float* out) {
  const bool f16 = cache.scale_type == ScaleType::kF16;
  if (lanes.mode == ScaleLanes::Mode::kExpanded) {
    RowCodec codec;
    codec.head_dim = cache.head_dim;
    codec.quant_group = cache.quant_group;
    codec.scale_is_f16 = f16;
    ExpandScales(codec, src, out);
    return;
  }
  WidenScales(src, f16, lanes.groups, out);
}

/// Largest scale whose products with every code of kElem stay within fp16's normal range.
template <CacheElem kElem>
constexpr float LargestNormalScale() {
  return kElem == CacheElem::kInt8 ? 65504.0f / 128 : 65504.0f / 8;
}

/// The bounds of NormalProducts, checked a vector of scales at a time.
template <CacheElem kElem>
struct NormalScales {
  HWY_INLINE NormalScales()
      : low(hn::Set(DF(), 0x1p-14f)),
        high(hn::Set(DF(), LargestNormalScale<kElem>())),
        in_range(hn::Eq(low, low)) {}

  hn::Vec<DF> low, high;
  hn::Mask<DF> in_range;

  HWY_INLINE void Check(hn::Vec<DF> scales) {
    in_range = hn::And(in_range, hn::And(hn::Ge(scales, low), hn::Le(scales, high)));
  }
  HWY_INLINE bool Hold() const { return hn::AllTrue(DF(), in_range); }
};

/// True when every product code x scale of `rows` rows of widened scales (rows `row_floats`
/// apart, `lanes.stored` each) is +0 or lies in fp16's normal range, so that RoundNormalToF16
/// rounds it: each scale in [2^-14, LargestNormalScale] (a code is 0 or at least 1 in
/// magnitude; negative, zero, tiny, huge and NaN scales say no).
template <CacheElem kElem>
HWY_INLINE bool NormalProducts(const float* scales, int rows, const ScaleLanes& lanes) {
  const DF df;
  NormalScales<kElem> normal;
  for (int j = 0; j < rows; ++j) {
    const float* row = scales + j * lanes.row_floats;
    for (int g = 0; g < lanes.stored; g += kLanes) {
      normal.Check(
          hn::IfThenElse(hn::FirstN(df, lanes.stored - g), hn::LoadU(df, row + g), normal.low));
    }
  }
  return normal.Hold();
}

/// LoadRowScales of `count` rows (scale rows at `rows`, out rows lanes.row_floats apart) and
/// NormalProducts in one pass, for rows whose group scales fill whole vectors (kBroadcast and
/// kLookup modes, groups a multiple of kLanes: D = 128 in groups of 8 on AVX-512 and AVX2):
/// each vector is widened, stored and checked in registers.
template <CacheElem kElem, bool kF16Scales>
HWY_INLINE bool WidenWholeScaleRows(const void* const* rows, int count, const ScaleLanes& lanes,
                                    float* out) {
  const DF df;
  NormalScales<kElem> normal;
  for (int j = 0; j < count; ++j) {
    for (int g = 0; g < lanes.groups; g += kLanes) {
      const auto s = kF16Scales ? F16Lanes(static_cast<const uint16_t*>(rows[j]) + g)
                                : hn::LoadU(df, static_cast<const float*>(rows[j]) + g);
      hn::StoreU(s, df, out + j * lanes.row_floats + g);
      normal.Check(s);
    }
  }
  return normal.Hold();
}

/// WidenWholeScaleRows for rows of fewer group scales than a vector (D = 128 in groups of 32,
/// 64 or 128): the scales of all `count` rows (at most internal::kKeyTile) are packed side by side,
/// widened and checked a whole vector at a time, and stored back row by row. The same floats as
/// LoadRowScales and the same answer as NormalProducts, without a scalar conversion per row.
template <CacheElem kElem, bool kF16Scales>
HWY_INLINE bool WidenShortScaleRows(const void* const* rows, int count, const ScaleLanes& lanes,
                                    float* out) {
  using Stored = std::conditional_t<kF16Scales, uint16_t, float>;
  const DF df;
  const int groups = lanes.groups;
  const int total = count * groups;
  HWY_ALIGN Stored packed[internal::kKeyTile * kLanes];
  HWY_ALIGN float widened[internal::kKeyTile * kLanes];
  for (int j = 0; j < count; ++j) {
    const Stored* row = static_cast<const Stored*>(rows[j]);
    for (int g = 0; g < groups; ++g) packed[j * groups + g] = row[g];
  }
  const Stored one = kF16Scales ? Stored(0x3C00) : Stored(1);  // a normal scale: pads the tail
  for (int i = total; i % kLanes != 0; ++i) packed[i] = one;
  NormalScales<kElem> normal;
  for (int i = 0; i < total; i += kLanes) {
    const auto s = kF16Scales ? F16Lanes(reinterpret_cast<const uint16_t*>(packed) + i)
                              : hn::Load(df, reinterpret_cast<const float*>(packed) + i);
    hn::Store(s, df, widened + i);
    normal.Check(s);
  }
  for (int j = 0; j < count; ++j) {
    for (int g = 0; g < groups; ++g) out[j * lanes.row_floats + g] = widened[j * groups + g];
  }
  return normal.Hold();
}

/// Elements [e, e + kLanes) of a cached row as T1 sees them: T1(T3(code * scale)). For an fp8
/// row `scales` points to the plane's tensor scale (one float). kNormal: the caller proved
/// NormalProducts for the row, so a quantized row's rounding takes RoundNormalToF16. kMode:
/// `lanes.mode` if known at compile time.
template <CacheElem kElem, bool kRound, bool kNormal = false,
          ScaleLanes::Mode kMode = ScaleLanes::Mode::kAny>
HWY_INLINE hn::Vec<DF> DecodeLanes(const void* row, const float* scales, const ScaleLanes& lanes,
                                   int e) {
  const DF df;
  if constexpr (kElem == CacheElem::kF32) {
    const auto v = hn::LoadU(df, static_cast<const float*>(row) + e);
    return kRound ? RoundToF16(v) : v;
  } else if constexpr (kElem == CacheElem::kBF16) {
    const auto v = Bf16Lanes(static_cast<const uint16_t*>(row) + e);
    return kRound ? RoundToF16(v) : v;
  } else if constexpr (IsFp8Elem<kElem>()) {
    const auto v =
        hn::Mul(Fp8Lanes<kElem>(static_cast<const uint8_t*>(row) + e), hn::Set(df, scales[0]));
    return kRound ? RoundToF16(v) : v;
  } else if constexpr (kElem == CacheElem::kF16) {
    return F16Lanes(static_cast<const uint16_t*>(row) + e);
  } else {
    const auto codes = kElem == CacheElem::kInt8 ? Int8Lanes(static_cast<const int8_t*>(row) + e)
                                                 : Int4Lanes(static_cast<const uint8_t*>(row), e);
    const auto product = hn::Mul(codes, lanes.At<kMode>(scales, e));
    if constexpr (!kRound) return product;
    return kNormal ? RoundNormalToF16(product) : RoundToF16(product);
  }
}

// ------------------------------------------------------------------------------------------------
// Quantization of new tokens (spec pmx-ops §2.1, §2.2). The group scale is computed literally in
// scalar code; the codes are vectorised, which changes no bit: division is correctly rounded in
// every lane, the fp16 rounding is RoundToF16 (bit-identical to the scalar one), and Round is
// round-to-nearest-even like std::nearbyint in the default mode.

/// q[i] = internal::QuantizeCode(x[i], scales[i]) for i < count, a vector at a time.
HWY_INLINE void QuantizeCodes(const float* x, const float* scales, int count, int qmax,
                              bool io_is_f16, int8_t* q) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Rebind<int8_t, DF> d8;
  const int n = static_cast<int>(hn::Lanes(df));
  const auto high = hn::Set(df, static_cast<float>(qmax));
  const auto low = hn::Neg(high);
  int i = 0;
  for (; i + n <= count; i += n) {
    auto quotient = hn::Div(hn::LoadU(df, x + i), hn::LoadU(df, scales + i));
    if (io_is_f16) quotient = RoundToF16(quotient);
    const auto r = hn::Round(quotient);
    const auto clamped = hn::IfThenElseZero(hn::Eq(r, r), hn::Min(hn::Max(r, low), high));
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(d32, clamped)), d8, q + i);
  }
  for (; i < count; ++i) q[i] = internal::QuantizeCode(x[i], scales[i], qmax, io_is_f16);
}

/// The kN floats of `v` as binary16 bits at `dst`, bit for bit internal::F32ToF16. F16C's
/// vcvtps2ph rounds to nearest even as F32ToF16 does; it keeps a NaN's payload, so NaN lanes are
/// first made the quiet NaN with an empty payload, which converts to F32ToF16's sign | 0x7E00.
HWY_INLINE void StoreF16Lanes(hn::Vec<DF> v, uint16_t* dst) {
#if HWY_TARGET < HWY_SSE4
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const auto quiet =
      hn::Or(hn::And(hn::BitCast(du, v), hn::Set(du, 0x80000000u)), hn::Set(du, 0x7FC00000u));
  v = hn::IfThenElse(hn::IsNaN(v), hn::BitCast(df, quiet), v);
  const hn::Rebind<hwy::float16_t, DF> df16;
  hn::StoreU(hn::DemoteTo(df16, v), df16, reinterpret_cast<hwy::float16_t*>(dst));
#else
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(v, DF(), lanes);
  for (size_t i = 0; i < hn::Lanes(DF()); ++i) dst[i] = internal::F32ToF16(lanes[i]);
#endif
}

/// The kN floats of `v` as bfloat16 bits at `dst`, bit for bit internal::F32ToBf16: adding
/// 0x7FFF plus the kept part's lowest bit rounds to nearest even; NaN keeps its top half, made
/// quiet.
HWY_INLINE void StoreBf16Lanes(hn::Vec<DF> v, uint16_t* dst) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x0040u));
  const auto top = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
  const hn::Rebind<uint16_t, DF> du16;  // every lane is below 2^16: the demotion is exact
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, top)), du16, dst);
}

/// Stores `count` floats as activations of type `io`, rounding to nearest even for fp16 and bf16.
HWY_INLINE void StoreActivations(const float* src, DType io, int count, void* dst) {
  if (io == DType::kF32) {
    std::copy(src, src + count, static_cast<float*>(dst));
    return;
  }
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  uint16_t* half = static_cast<uint16_t*>(dst);
  const bool bf16 = io == DType::kBF16;
  int i = 0;
  for (; i + n <= count; i += n) {
    const auto v = hn::LoadU(df, src + i);
    bf16 ? StoreBf16Lanes(v, half + i) : StoreF16Lanes(v, half + i);
  }
  for (; i < count; ++i) half[i] = bf16 ? internal::F32ToBf16(src[i]) : internal::F32ToF16(src[i]);
}

/// Encodes one new row (D values in T1, held as floats) as the contiguous codes at `row`, the
/// group scales of a quantized row going to (slot, head) of `plane`. `codes_tmp` holds D codes
/// and `scales_tmp` D floats (quantized rows only).
template <CacheElem kElem>
HWY_INLINE void EncodeRowAt(const CacheDesc& cache, bool io_is_f16, const CachePlane& plane,
                            int64_t slot, int head, const float* x, void* row, int8_t* codes_tmp,
                            float* scales_tmp) {
  const int dim = cache.head_dim;
  if constexpr (kElem == CacheElem::kF32) {
    std::copy(x, x + dim, static_cast<float*>(row));
  } else if constexpr (kElem == CacheElem::kF16 || kElem == CacheElem::kBF16) {
    // internal::F32ToF16 / F32ToBf16 (core's codec for these rows), a vector at a time.
    StoreActivations(x, kElem == CacheElem::kF16 ? DType::kF16 : DType::kBF16, dim, row);
  } else if constexpr (IsWidenedElem<kElem>()) {
    // fp8 rows: core's scalar codec, element by element (one row per new token; the fp8
    // division and rounding are not worth vectorising), so the bytes have one definition.
    internal::EncodeRow([x](int i) { return x[i]; }, kElem, dim, 1, false, io_is_f16, row, nullptr,
                        plane.tensor_scale);
  } else {
    const int qmax = kElem == CacheElem::kInt8 ? 127 : 7;
    const int group = cache.quant_group;
    void* scale = const_cast<void*>(ScalePointer(cache, plane, slot, head));
    for (int g = 0; g < dim / group; ++g) {
      const float s =
          internal::GroupScaleOf([x](int i) { return x[i]; }, g * group, group, qmax, io_is_f16);
      std::fill(scales_tmp + g * group, scales_tmp + (g + 1) * group, s);
      if (cache.scale_type == ScaleType::kF16) {
        static_cast<uint16_t*>(scale)[g] = internal::F32ToF16(s);
      } else {
        static_cast<float*>(scale)[g] = s;
      }
    }
    QuantizeCodes(x, scales_tmp, dim, qmax, io_is_f16, codes_tmp);
    if constexpr (kElem == CacheElem::kInt8) {
      std::copy(codes_tmp, codes_tmp + dim, static_cast<int8_t*>(row));
    } else {
      uint8_t* packed = static_cast<uint8_t*>(row);
      for (int k = 0; k < dim; k += 2) {
        packed[k / 2] =
            static_cast<uint8_t>((codes_tmp[k] & 0xF) | ((codes_tmp[k + 1] & 0xF) << 4));
      }
    }
  }
}

/// Stores one new row (D values in T1, held as floats) into (slot, head) of `plane`.
/// `codes_tmp` holds D codes and `scales_tmp` D floats (a dimension-major row is encoded there,
/// then scattered: such planes have no scales).
template <CacheElem kElem>
HWY_INLINE void EncodeRow(const CacheDesc& cache, bool io_is_f16, const CachePlane& plane,
                          int64_t slot, int head, const float* x, int8_t* codes_tmp,
                          float* scales_tmp) {
  if constexpr (!IsGroupScaledElem<kElem>()) {
    if (internal::DimStride(plane) > 1) {
      EncodeRowAt<kElem>(cache, io_is_f16, plane, slot, head, x, scales_tmp, codes_tmp, nullptr);
      return ScatterRow<kElem>(scales_tmp, plane, slot, head, cache.head_dim);
    }
  }
  void* row = const_cast<void*>(RowPointer<kElem>(plane, slot, head));
  EncodeRowAt<kElem>(cache, io_is_f16, plane, slot, head, x, row, codes_tmp, scales_tmp);
}

/// Loads `count` activations of type `io` (fp32, fp16 or bf16) as floats (exact).
HWY_INLINE void LoadActivations(const void* src, DType io, int count, float* dst) {
  if (io == DType::kF32) {
    std::copy(static_cast<const float*>(src), static_cast<const float*>(src) + count, dst);
    return;
  }
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  const auto* half = static_cast<const uint16_t*>(src);
  const bool bf16 = io == DType::kBF16;
  int i = 0;
  for (; i + n <= count; i += n) {
    hn::StoreU(bf16 ? Bf16Lanes(half + i) : F16Lanes(half + i), df, dst + i);
  }
  for (; i < count; ++i) dst[i] = bf16 ? internal::Bf16ToF32(half[i]) : internal::F16ToF32(half[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_CODEC_INL_H_
