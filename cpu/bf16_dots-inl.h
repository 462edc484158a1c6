// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the fast tier's bf16 dot products for fp16 and bf16 caches (Precision::kFast),
// on the AVX-512 targets of CPUs with AVX512_BF16.
//
// Why it looks like this:
// * `vdpbf16ps` multiplies 32 bf16 pairs exactly and adds each lane's two products into an fp32
//   sum: twice the elements of an fp32 FMA per instruction. The exact tier spends two FMAs (and,
//   for fp16 rows, two conversions) where this spends one dot product and, for fp16 rows, one
//   conversion more (fp32 to bf16, two vectors at a time).
// * Keys: dimensions across lanes, as in the exact fused decode: the query vectors are rounded to
//   bf16 once per work item, each key row is read 32 elements at a time, and each (query vector,
//   key) keeps one accumulator of 16 lanes, folded by the exact tier's fixed tree. A score is the
//   same on every machine that runs this kernel, whatever the thread count.
// * Values: a pass keeps the accumulators of up to 64 output elements of every query vector in
//   registers and walks the tile's keys two at a time: the two value rows' elements are
//   interleaved in pairs (one `vpermt2w` per 16 outputs) and each query vector's two weights,
//   rounded to bf16, are one broadcast pair. Tiles where some key is hidden from some vector take
//   the exact loops (their tests keep a hidden key's value out of every sum).
// * Highway 1.0.3 has no AVX512_BF16 target, so these functions add the feature to the AVX-512
//   target's own (DYNATTN_BF16_DOTS) and run only where the CPU reports it (CpuHasBf16Dots).

#if defined(DYNATTN_CPU_BF16_DOTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_BF16_DOTS_INL_H_
#undef DYNATTN_CPU_BF16_DOTS_INL_H_
#else
#define DYNATTN_CPU_BF16_DOTS_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "core/codec.h"
#include "cpu/codec-inl.h"
#include "cpu/fused_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

#undef DYNATTN_BF16_DOTS
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
/// The AVX-512 target's features plus AVX512_BF16 (clang's explicit target replaces the one
/// Highway's pragma gives, so the whole string is spelled).
#define DYNATTN_BF16_DOTS __attribute__((target(HWY_TARGET_STR ",avx512bf16")))
inline constexpr bool kBf16DotsTarget = true;
#else
inline constexpr bool kBf16DotsTarget = false;
#endif

/// Cache formats whose rows the bf16 dot products read: fp16 (converted) and bf16.
template <CacheElem kElem>
constexpr bool IsBf16DotElem() {
  return kElem == CacheElem::kF16 || kElem == CacheElem::kBF16;
}

/// Elements a query row holds for the bf16 dot products: head_dim rounded up to whole steps of 32.
HWY_INLINE int Bf16QueryStride(int head_dim) { return (head_dim + 31) / 32 * 32; }

/// Rounds `count` query vectors (rows of `queries`, padded_dim apart) to bf16 (nearest even; a
/// NaN stays a NaN), rows `stride` apart, zero past head_dim.
HWY_INLINE void RoundQueriesToBf16(const float* queries, int count, int padded_dim, int head_dim,
                                   int stride, uint16_t* out) {
  for (int v = 0; v < count; ++v) {
    const float* q = queries + static_cast<int64_t>(v) * padded_dim;
    uint16_t* row = out + static_cast<int64_t>(v) * stride;
    for (int i = 0; i < stride; ++i) row[i] = i < head_dim ? internal::F32ToBf16(q[i]) : 0;
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

/// Elements [e, e + 32) of a row of kElem as bf16 (zeros past `dim`, which is a multiple of 16).
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_INLINE __m512i Bf16Step(const void* row, int e, int dim) {
  const bool whole = e + 32 <= dim;
  if constexpr (kElem == CacheElem::kBF16) {
    const uint16_t* src = static_cast<const uint16_t*>(row) + e;
    return whole ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi16(0xFFFFu, src);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(row) + e;
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    const __m512 hi =
        whole ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16)))
              : _mm512_setzero_ps();
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  }
}

/// acc += the lane-pair products of a and b (vdpbf16ps).
DYNATTN_BF16_DOTS HWY_INLINE __m512 DotPairs(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

/// dots[v * kKeyTile + k] = the bf16 dot product of query vector v (v < kBlock, rows of
/// `queries`, stride apart) with key row j + k (k < kKeys) of `keys`.
template <CacheElem kElem, int kBlock, int kKeys>
DYNATTN_BF16_DOTS HWY_INLINE void Bf16Dots(const uint16_t* queries, int stride,
                                           const TileRows& keys, int j, int head_dim, float* dots) {
  __m512 acc[kBlock * kKeys];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int e = 0; e < head_dim; e += 32) {
    __m512i key[kKeys];
    for (int k = 0; k < kKeys; ++k) key[k] = Bf16Step<kElem>(keys.rows[j + k], e, head_dim);
    for (int v = 0; v < kBlock; ++v) {
      const __m512i q = _mm512_loadu_si512(queries + v * stride + e);
      for (int k = 0; k < kKeys; ++k) acc[v * kKeys + k] = DotPairs(acc[v * kKeys + k], q, key[k]);
    }
  }
  hn::Vec<DF> sums[kBlock * kKeys];
  for (int x = 0; x < kBlock * kKeys; ++x) sums[x] = hn::Vec<DF>{acc[x]};
  float folded[kBlock * kKeys];
  FoldVirtualLanes<kBlock * kKeys>(sums, folded);
  for (int v = 0; v < kBlock; ++v) {
    for (int k = 0; k < kKeys; ++k) dots[v * kKeyTile + j + k] = folded[v * kKeys + k];
  }
}

/// Keys a bf16 score step takes for blocks of kBlock vectors: 16 accumulators, at most 8 keys.
template <int kBlock>
constexpr int Bf16Keys() {
  return 16 / kBlock > 8 ? 8 : 16 / kBlock;
}

/// scores[v * kKeyTile + j] = the bf16 dot products of the tile's keys (rows, not
/// dimension-major) with every query vector of the block, while `ahead` and `also_ahead` are
/// fetched in step.
template <CacheElem kElem, int kBlock>
DYNATTN_BF16_DOTS HWY_NOINLINE void ScoreBf16Tile(const uint16_t* queries, int stride, int head_dim,
                                                  const TileRows& keys, int count,
                                                  const RowsAhead& ahead,
                                                  const RowsAhead& also_ahead, float* scores) {
  constexpr int kKeys = Bf16Keys<kBlock>();
  int j = 0;
  for (; j + kKeys <= count; j += kKeys) {
    ahead.Fetch(j, kKeys);
    also_ahead.Fetch(j, kKeys);
    Bf16Dots<kElem, kBlock, kKeys>(queries, stride, keys, j, head_dim, scores);
  }
  ahead.Fetch(j, kKeyTile);
  also_ahead.Fetch(j, kKeyTile);
  for (; j < count; ++j) Bf16Dots<kElem, kBlock, 1>(queries, stride, keys, j, head_dim, scores);
}

/// The mask of the first `n` of 16 lanes (none for n <= 0, all for n >= 16).
HWY_INLINE __mmask16 LowMask(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

/// Lanes of the pairs (a[i], b[i]) for i in [0, 16) and [16, 32) of two vectors of 32 bf16.
DYNATTN_BF16_DOTS HWY_INLINE void InterleavePairs(__m512i a, __m512i b, __m512i* lo, __m512i* hi) {
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  *lo = _mm512_permutex2var_epi16(a, _mm512_load_si512(kLo), b);
  *hi = _mm512_permutex2var_epi16(a, _mm512_load_si512(kHi), b);
}

/// acc_v[e, e + 16 * kParts) += the bf16 products of the weights (pairs[v * 32 + m]: keys 2m and
/// 2m + 1) with the values of the tile's `count` keys.
template <CacheElem kElem, int kBlock, int kParts>
DYNATTN_BF16_DOTS HWY_INLINE void Bf16AccumulateLanes(const uint32_t* pairs, const TileRows& values,
                                                      int count, int e, int dim, int padded_dim,
                                                      float* acc) {
  __m512 sums[kBlock][kParts];
  for (int v = 0; v < kBlock; ++v) {
    for (int u = 0; u < kParts; ++u)
      sums[v][u] = _mm512_loadu_ps(acc + v * padded_dim + e + 16 * u);
  }
  for (int j = 0; j < count; j += 2) {
    __m512i interleaved[kParts + 1];
    for (int u = 0; u < kParts; u += 2) {
      const __m512i a = Bf16Step<kElem>(values.rows[j], e + 16 * u, dim);
      const __m512i b = j + 1 < count ? Bf16Step<kElem>(values.rows[j + 1], e + 16 * u, dim)
                                      : _mm512_setzero_si512();
      InterleavePairs(a, b, &interleaved[u], &interleaved[u + 1]);
    }
    for (int v = 0; v < kBlock; ++v) {
      const __m512i weights = _mm512_set1_epi32(static_cast<int>(pairs[v * kKeyTile / 2 + j / 2]));
      for (int u = 0; u < kParts; ++u) sums[v][u] = DotPairs(sums[v][u], interleaved[u], weights);
    }
  }
  for (int v = 0; v < kBlock; ++v) {
    for (int u = 0; u < kParts; ++u)
      _mm512_storeu_ps(acc + v * padded_dim + e + 16 * u, sums[v][u]);
  }
}

/// The whole P.V of a tile whose every key every query vector sees, in bf16 dot products: the
/// weights of probs (kBlock x kKeyTile) rounded to bf16 (those past `count` are 0), which puts
/// keys 2m and 2m + 1 side by side as pair m, then passes of 16 * kParts output elements.
template <CacheElem kElem, int kBlock>
DYNATTN_BF16_DOTS HWY_NOINLINE void AccumulateBf16Tile(const float* probs, const TileRows& values,
                                                       int count, int dim, int padded_dim,
                                                       uint32_t* pairs, float* acc) {
  static_assert(kKeyTile % 32 == 0, "a tile's weights are whole conversions of 32");
  for (int v = 0; v < kBlock; ++v) {
    for (int j = 0; j < count; j += 32) {  // keys j, j + 1 side by side: a pair is 32 bits
      const float* p = probs + v * kKeyTile + j;
      const __m512 lo = _mm512_maskz_loadu_ps(LowMask(count - j), p);
      const __m512 hi = _mm512_maskz_loadu_ps(LowMask(count - j - 16), p + 16);
      _mm512_storeu_si512(pairs + v * kKeyTile / 2 + j / 2,
                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
  constexpr int kParts = 16 / kBlock > 4 ? 4 : 16 / kBlock;
  int e = 0;
  for (; e + 16 * kParts <= dim; e += 16 * kParts) {
    Bf16AccumulateLanes<kElem, kBlock, kParts>(pairs, values, count, e, dim, padded_dim, acc);
  }
  for (; e < dim; e += 16) {
    Bf16AccumulateLanes<kElem, kBlock, 1>(pairs, values, count, e, dim, padded_dim, acc);
  }
}

#else  // declared for the fused decode's template, never instantiated on these targets

template <CacheElem kElem, int kBlock>
void ScoreBf16Tile(const uint16_t* queries, int stride, int head_dim, const TileRows& keys,
                   int count, const RowsAhead& ahead, const RowsAhead& also_ahead, float* scores);
template <CacheElem kElem, int kBlock>
void AccumulateBf16Tile(const float* probs, const TileRows& values, int count, int dim,
                        int padded_dim, uint32_t* pairs, float* acc);

#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_BF16_DOTS_INL_H_
