// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the fast tier's key scores for int8 and int4 caches (Precision::kFast).
//
// Why it looks like this:
// * The exact tier widens every code to fp32, scales it and (under fp16 activations) rounds it
//   before its multiply-add: about five operations per eight codes, once per key, before any query
//   vector uses it. Here the query vector is quantized once per work item to int8 codes
//   (s_q = max|q| / 127, round to nearest even) and each key code is only widened to int16:
//   multiply-add pairs of int16 lanes into int32 (pmaddwd, on every x86 target) consume sixteen
//   codes per operation, and no code is converted, scaled or rounded.
// * The integer sums of a group are exact, so their order and the vector width do not matter. The
//   rest is scalar float64 in a fixed order: t = sum over groups g of s_k[g] * I_g, then the score
//   fl32(s_q * t). A score is therefore the same on every target, whatever its vector width.
// * Groups are powers of two of at least 32 codes, so a group is whole steps of at most 32 codes
//   on every target, and the row's scales are one per group (ScaleLanes' broadcast mode).
// * Int4 rows: a step's bytes widen to int16 lanes; the low nibbles (even elements) and the high
//   nibbles (odd elements) are sign-extended by shifts, and the query codes of the step are kept
//   evens first, odds after, so that no lane is moved.

#if defined(DYNATTN_CPU_FAST_KEYS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_FAST_KEYS_INL_H_
#undef DYNATTN_CPU_FAST_KEYS_INL_H_
#else
#define DYNATTN_CPU_FAST_KEYS_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include "cpu/codec-inl.h"
#include "cpu/kernel_table.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// The int16 lanes of one step: 32 codes at most on every target, half of that for int4 (whose
/// steps read twice as many codes as lanes).
template <CacheElem kElem>
using FastTag = hn::CappedTag<int16_t, kElem == CacheElem::kInt8 ? 32 : 16>;

/// Codes of a row one step of FastTag<kElem> reads.
template <CacheElem kElem>
HWY_INLINE int FastStep() {
  const int lanes = static_cast<int>(hn::Lanes(FastTag<kElem>()));
  return kElem == CacheElem::kInt8 ? lanes : 2 * lanes;
}

/// Query vectors quantized for integer dot products.
struct FastQueries {
  int16_t* codes;  ///< vectors x padded_dim codes in each step's lane order.
  float* scales;   ///< s_q per vector; NaN for a vector with a non-finite element.
  int padded_dim;
};

/// Quantizes `count` query vectors (rows of `queries`, padded_dim apart) for rows of kElem:
/// s_q = max|q| / 127 and codes rne(q / s_q), within [-127, 127]. A vector of zeros (or one so
/// small that s_q is 0) gets codes 0; a vector with a NaN or an infinity gets s_q NaN, so that it
/// scores NaN against every key.
template <CacheElem kElem>
HWY_INLINE void QuantizeQueries(const float* queries, int count, int head_dim,
                                const FastQueries& out) {
  const int step = FastStep<kElem>();
  for (int v = 0; v < count; ++v) {
    const float* q = queries + static_cast<int64_t>(v) * out.padded_dim;
    int16_t* codes = out.codes + static_cast<int64_t>(v) * out.padded_dim;
    float max_abs = 0.0f;
    for (int i = 0; i < head_dim; ++i) max_abs = std::max(max_abs, std::fabs(q[i]));
    bool finite = std::isfinite(max_abs);
    for (int i = 0; i < head_dim && finite; ++i) finite = !std::isnan(q[i]);
    const float scale = finite ? max_abs / 127.0f : std::nanf("");
    out.scales[v] = scale;
    for (int i = 0; i < out.padded_dim; ++i) {
      const float code = scale > 0.0f && i < head_dim ? std::nearbyint(q[i] / scale) : 0.0f;
      const int16_t clamped = static_cast<int16_t>(std::min(127.0f, std::max(-127.0f, code)));
      // Int4 steps keep their even elements first: element i goes to its step's half i % 2.
      const int in_step = i % step, half = step / 2;
      const int lane = kElem == CacheElem::kInt8 ? in_step : in_step / 2 + (in_step % 2) * half;
      codes[i - in_step + lane] = clamped;
    }
  }
}

/// The key codes [e, e + FastStep) of an int8 row, or their even and odd elements (int4).
template <CacheElem kElem>
HWY_INLINE void LoadKeyStep(const void* row, int e, hn::Vec<FastTag<kElem>>* even,
                            hn::Vec<FastTag<kElem>>* odd) {
  const FastTag<kElem> d16;
  if constexpr (kElem == CacheElem::kInt8) {
    *even = hn::PromoteTo(
        d16, hn::LoadU(hn::Rebind<int8_t, decltype(d16)>(), static_cast<const int8_t*>(row) + e));
  } else {
    const auto bytes =
        hn::BitCast(d16, hn::PromoteTo(hn::Rebind<uint16_t, decltype(d16)>(),
                                       hn::LoadU(hn::Rebind<uint8_t, decltype(d16)>(),
                                                 static_cast<const uint8_t*>(row) + e / 2)));
    *even = hn::ShiftRight<12>(hn::ShiftLeft<12>(bytes));  // low nibble, sign-extended
    *odd = hn::ShiftRight<12>(hn::ShiftLeft<8>(bytes));    // high nibble
  }
}

/// totals[v] = the sum of the lanes of sums[v] + spare[v] for v < kBlock: exact integer sums,
/// so any order gives the same result. AVX2 sums four vectors at a time with horizontal adds.
template <class D32, int kBlock>
HWY_INLINE void LaneTotals(D32 d32, const hn::Vec<D32>* sums, const hn::Vec<D32>* spare,
                           int32_t* totals) {
  int v = 0;
#if HWY_TARGET == HWY_AVX2
  if constexpr (hn::MaxLanes(D32()) == 8) {
    for (; v + 4 <= kBlock; v += 4) {
      __m256i pairs[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i a = hn::Add(sums[v + 2 * h], spare[v + 2 * h]).raw;
        const __m256i b = hn::Add(sums[v + 2 * h + 1], spare[v + 2 * h + 1]).raw;
        pairs[h] = _mm256_hadd_epi32(a, b);
      }
      const __m256i halves = _mm256_hadd_epi32(pairs[0], pairs[1]);  // 128-bit halves' sums
      const __m128i four =
          _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(totals + v), four);
    }
  }
#endif
  for (; v < kBlock; ++v) totals[v] = hn::GetLane(hn::SumOfLanes(d32, hn::Add(sums[v], spare[v])));
}

/// dots[v * kKeyTile] = the fast score of query vector v (v < kBlock) against one row of codes
/// whose group scales are scales[0, head_dim / group).
template <CacheElem kElem, int kBlock>
HWY_INLINE void FastDots(const FastQueries& q, const void* row, const float* scales, int group,
                         int head_dim, float* dots) {
  const FastTag<kElem> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const int step = FastStep<kElem>();
  const int lanes = static_cast<int>(hn::Lanes(d16));
  double totals[kBlock] = {};
  for (int g = 0; g * group < head_dim; ++g) {
    hn::Vec<decltype(d32)> sums[kBlock], spare[kBlock];
    for (int v = 0; v < kBlock; ++v) sums[v] = spare[v] = hn::Zero(d32);
    for (int e = g * group; e < (g + 1) * group; e += step) {
      hn::Vec<decltype(d16)> even, odd;
      LoadKeyStep<kElem>(row, e, &even, &odd);
      for (int v = 0; v < kBlock; ++v) {
        const int16_t* codes = q.codes + static_cast<int64_t>(v) * q.padded_dim + e;
        sums[v] =
            hn::ReorderWidenMulAccumulate(d32, even, hn::LoadU(d16, codes), sums[v], spare[v]);
        if constexpr (kElem == CacheElem::kInt4) {
          sums[v] = hn::ReorderWidenMulAccumulate(d32, odd, hn::LoadU(d16, codes + lanes), sums[v],
                                                  spare[v]);
        }
      }
    }
    int32_t integers[kBlock];
    LaneTotals<decltype(d32), kBlock>(d32, sums, spare, integers);
    const double scale = scales[g];
    for (int v = 0; v < kBlock; ++v) totals[v] += scale * static_cast<double>(integers[v]);
  }
  for (int v = 0; v < kBlock; ++v) {
    dots[v * internal::kKeyTile] = static_cast<float>(static_cast<double>(q.scales[v]) * totals[v]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_FAST_KEYS_INL_H_
