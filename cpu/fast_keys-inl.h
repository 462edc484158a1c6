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
// * CPUs with AVX512_VNNI: `vpdpbusd` multiplies 64 byte pairs and
//   adds each four into an int32 lane, unsigned by signed. The keys become unsigned by an offset
//   (int8 codes + 128, int4 codes + 8, one XOR), the query codes stay signed, and the offset
//   times the group's query code sum is taken back from the exact integer sum. Each (query
//   vector, key) keeps one accumulator per group (groups of 32: two, in its two halves); 16 of
//   them fold into one vector of sums with
//   the exact tier's shuffle tree (integer adds: any order is exact), and the float64 combine runs
//   in 8 lanes with the scalar path's operations in its order, so a score has the same bits.

#if defined(DYNATTN_CPU_FAST_KEYS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_FAST_KEYS_INL_H_
#undef DYNATTN_CPU_FAST_KEYS_INL_H_
#else
#define DYNATTN_CPU_FAST_KEYS_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include "cpu/codec-inl.h"
#include "cpu/fused_tile-inl.h"
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

/// s_q = max|q| / 127 of a query vector: 0 for a vector of zeros, NaN for one with a NaN or an
/// infinity (which then scores NaN against every key).
HWY_INLINE float QueryScale(const float* q, int head_dim) {
  float max_abs = 0.0f;
  for (int i = 0; i < head_dim; ++i) max_abs = std::max(max_abs, std::fabs(q[i]));
  bool finite = std::isfinite(max_abs);
  for (int i = 0; i < head_dim && finite; ++i) finite = !std::isnan(q[i]);
  return finite ? max_abs / 127.0f : std::nanf("");
}

/// The code rne(x / s_q) within [-127, 127] (0 where s_q is not positive).
HWY_INLINE int16_t QueryCode(float x, float scale) {
  const float code = scale > 0.0f ? std::nearbyint(x / scale) : 0.0f;
  return static_cast<int16_t>(std::min(127.0f, std::max(-127.0f, code)));
}

/// Quantizes `count` query vectors (rows of `queries`, padded_dim apart) for rows of kElem:
/// s_q (QueryScale) and codes rne(q / s_q), within [-127, 127] (0 past head_dim).
template <CacheElem kElem>
HWY_INLINE void QuantizeQueries(const float* queries, int count, int head_dim,
                                const FastQueries& out) {
  const int step = FastStep<kElem>();
  for (int v = 0; v < count; ++v) {
    const float* q = queries + static_cast<int64_t>(v) * out.padded_dim;
    int16_t* codes = out.codes + static_cast<int64_t>(v) * out.padded_dim;
    const float scale = QueryScale(q, head_dim);
    out.scales[v] = scale;
    for (int i = 0; i < out.padded_dim; ++i) {
      const int16_t code = i < head_dim ? QueryCode(q[i], scale) : 0;
      // Int4 steps keep their even elements first: element i goes to its step's half i % 2.
      const int in_step = i % step, half = step / 2;
      const int lane = kElem == CacheElem::kInt8 ? in_step : in_step / 2 + (in_step % 2) * half;
      codes[i - in_step + lane] = code;
    }
  }
}

/// Query vectors quantized for byte dot products (VNNI): the codes of QuantizeQueries in element
/// order, and each group's code sum.
struct ByteQueries {
  int8_t* codes;       ///< vectors x stride codes.
  int32_t* code_sums;  ///< vectors x groups sums of codes.
  float* scales;       ///< s_q per vector.
  int stride;
  int groups;
};

/// Codes a query vector holds for byte dot products: head_dim rounded up to steps of 64.
HWY_INLINE int ByteQueryStride(int head_dim) { return (head_dim + 63) / 64 * 64; }

/// Quantizes `count` query vectors as QuantizeQueries does, for groups of `group` codes (codes 0
/// past head_dim, up to the stride).
HWY_INLINE void QuantizeQueryBytes(const float* queries, int count, int padded_dim, int head_dim,
                                   int group, const ByteQueries& out) {
  for (int v = 0; v < count; ++v) {
    const float* q = queries + static_cast<int64_t>(v) * padded_dim;
    int8_t* codes = out.codes + static_cast<int64_t>(v) * out.stride;
    const float scale = QueryScale(q, head_dim);
    out.scales[v] = scale;
    std::fill(codes + head_dim, codes + out.stride, int8_t{0});
    for (int g = 0; g < out.groups; ++g) {
      int32_t sum = 0;
      for (int i = g * group; i < (g + 1) * group; ++i) {
        codes[i] = static_cast<int8_t>(QueryCode(q[i], scale));
        sum += codes[i];
      }
      out.code_sums[v * out.groups + g] = sum;
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

#undef DYNATTN_VNNI
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
/// The AVX-512 target's features plus AVX512_VNNI (spelled whole, as DYNATTN_BF16_DOTS is).
#define DYNATTN_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
inline constexpr bool kVnniTarget = true;

/// Codes [e, e + 64) of a key row as unsigned bytes: int8 codes + 128, int4 codes + 8 (the low
/// nibble of byte b is element 2b, its high nibble element 2b + 1); `half`: codes [e, e + 32)
/// only (the row's last 32), the rest 128 or 8 (their query codes are 0).
template <CacheElem kElem>
DYNATTN_VNNI HWY_INLINE __m512i UnsignedCodes(const void* row, int e, bool half) {
  if constexpr (kElem == CacheElem::kInt8) {
    const int8_t* src = static_cast<const int8_t*>(row) + e;
    const __m512i codes =
        half ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, src) : _mm512_loadu_si512(src);
    return _mm512_xor_si512(codes, _mm512_set1_epi8(-128));
  } else {
    const uint8_t* src = static_cast<const uint8_t*>(row) + e / 2;
    const __m256i bytes = half ? _mm256_maskz_loadu_epi8(0xFFFFu, src)
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m512i words = _mm512_cvtepu8_epi16(bytes);  // byte b in the low half of word b
    const __m512i nibbles =
        _mm512_or_si512(_mm512_and_si512(words, _mm512_set1_epi16(0x000F)),
                        _mm512_and_si512(_mm512_slli_epi16(words, 4), _mm512_set1_epi16(0x0F00)));
    return _mm512_xor_si512(nibbles, _mm512_set1_epi8(8));
  }
}

using DI = hn::RebindToSigned<DF>;

/// Adds group g's sums to totals (lane x: query vector x / kKeys, key j + x % kKeys), in float64:
/// each accumulator's integer sum (acc: 16 accumulators, only the lanes of group g set) less the
/// keys' offset times the vector's query code sum, times the key's group scale.
template <CacheElem kElem, int kBlock, int kKeys>
DYNATTN_VNNI HWY_INLINE void AddGroup(const ByteQueries& q, const TileRows& keys, int j, int g,
                                      const hn::Vec<DI>* acc, __m512d* totals) {
  constexpr int32_t kOffset = kElem == CacheElem::kInt8 ? 128 : 8;
  alignas(64) int32_t offsets[16] = {};
  alignas(64) double scales[8];
  for (int x = 0; x < kBlock * kKeys; ++x) {
    offsets[x] = kOffset * q.code_sums[x / kKeys * q.groups + g];
  }
  for (int x = 0; x < 8; ++x) scales[x] = keys.scales[(j + x % kKeys) * keys.row_floats + g];
  const __m512i sums =
      _mm512_sub_epi32(FoldSixteenLanes(DI(), acc).raw, _mm512_load_si512(offsets));
  const __m512d scale = _mm512_load_pd(scales);
  const __m512d low = _mm512_cvtepi32_pd(_mm512_castsi512_si256(sums));
  const __m512d high = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(sums, 1));
  totals[0] = _mm512_add_pd(totals[0], _mm512_mul_pd(scale, low));
  totals[1] = _mm512_add_pd(totals[1], _mm512_mul_pd(scale, high));
}

/// dots[v * kKeyTile + j + k] = the fast score of query vector v (v < kBlock) against key row
/// j + k (k < kKeys); query_scales: s_q of lane x's vector (x / kKeys) in float64, 8 lanes each.
/// A span of 64 codes or one group, whichever is longer, accumulates before its fold; groups of
/// 32 share a span, group 2s in the low 8 lanes of each accumulator and 2s + 1 in the high 8.
template <CacheElem kElem, int kBlock, int kKeys>
DYNATTN_VNNI HWY_INLINE void VnniDots(const ByteQueries& q, const TileRows& keys, int j, int group,
                                      int head_dim, const __m512d* query_scales, float* dots) {
  static_assert(kBlock * kKeys <= 16 && 8 % kKeys == 0, "lane x is (x / kKeys, x % kKeys)");
  const int span = std::max(group, 64);
  __m512d totals[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  for (int begin = 0; begin < head_dim; begin += span) {
    hn::Vec<DI> acc[16];
    for (auto& a : acc) a = hn::Zero(DI());
    for (int e = begin; e < std::min(begin + span, head_dim); e += 64) {
      const bool half = head_dim - e < 64;
      __m512i key[kKeys];
      for (int k = 0; k < kKeys; ++k) key[k] = UnsignedCodes<kElem>(keys.rows[j + k], e, half);
      for (int v = 0; v < kBlock; ++v) {
        const __m512i codes = _mm512_loadu_si512(q.codes + v * q.stride + e);
        for (int k = 0; k < kKeys; ++k) {
          acc[v * kKeys + k].raw = _mm512_dpbusd_epi32(acc[v * kKeys + k].raw, key[k], codes);
        }
      }
    }
    if (group >= 64) {
      AddGroup<kElem, kBlock, kKeys>(q, keys, j, begin / group, acc, totals);
      continue;
    }
    hn::Vec<DI> high[16];
    for (int x = 0; x < 16; ++x) {
      high[x].raw = _mm512_maskz_mov_epi32(0xFF00, acc[x].raw);
      acc[x].raw = _mm512_maskz_mov_epi32(0x00FF, acc[x].raw);
    }
    AddGroup<kElem, kBlock, kKeys>(q, keys, j, begin / 32, acc, totals);
    if (begin + 32 < head_dim)
      AddGroup<kElem, kBlock, kKeys>(q, keys, j, begin / 32 + 1, high, totals);
  }
  alignas(64) float out[16];
  _mm256_store_ps(out, _mm512_cvtpd_ps(_mm512_mul_pd(query_scales[0], totals[0])));
  _mm256_store_ps(out + 8, _mm512_cvtpd_ps(_mm512_mul_pd(query_scales[1], totals[1])));
  for (int v = 0; v < kBlock; ++v) {
    for (int k = 0; k < kKeys; ++k) dots[v * kKeyTile + j + k] = out[v * kKeys + k];
  }
}

/// s_q of lane x's query vector (x / kKeys; 0 past the block), in float64.
template <int kBlock, int kKeys>
HWY_INLINE void QueryScaleLanes(const ByteQueries& q, __m512d* lanes) {
  alignas(64) double scales[16];
  for (int x = 0; x < 16; ++x) scales[x] = x / kKeys < kBlock ? q.scales[x / kKeys] : 0.0;
  lanes[0] = _mm512_load_pd(scales);
  lanes[1] = _mm512_load_pd(scales + 8);
}

/// Keys a VNNI score step takes for blocks of kBlock vectors: 16 accumulators, at most 8 keys.
template <int kBlock>
constexpr int VnniKeys() {
  return 16 / kBlock > 8 ? 8 : 16 / kBlock;
}

/// ScoreFusedTile of the fast tier's integer key scores through VNNI, while `ahead` and
/// `also_ahead` are fetched in step.
template <CacheElem kElem, int kBlock>
DYNATTN_VNNI HWY_NOINLINE void ScoreVnniTile(const ByteQueries& q, const TileRows& keys, int count,
                                             int group, int head_dim, const RowsAhead& ahead,
                                             const RowsAhead& also_ahead, float* scores) {
  constexpr int kKeys = VnniKeys<kBlock>();
  __m512d lanes[2], single[2];
  QueryScaleLanes<kBlock, kKeys>(q, lanes);
  QueryScaleLanes<kBlock, 1>(q, single);
  int j = 0;
  for (; j + kKeys <= count; j += kKeys) {
    ahead.Fetch(j, kKeys);
    also_ahead.Fetch(j, kKeys);
    VnniDots<kElem, kBlock, kKeys>(q, keys, j, group, head_dim, lanes, scores);
  }
  ahead.Fetch(j, kKeyTile);
  also_ahead.Fetch(j, kKeyTile);
  for (; j < count; ++j) VnniDots<kElem, kBlock, 1>(q, keys, j, group, head_dim, single, scores);
}

#else
inline constexpr bool kVnniTarget = false;

// Declared for the fused decode's template, never instantiated on these targets.
template <CacheElem kElem, int kBlock>
void ScoreVnniTile(const ByteQueries& q, const TileRows& keys, int count, int group, int head_dim,
                   const RowsAhead& ahead, const RowsAhead& also_ahead, float* scores);
#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_FAST_KEYS_INL_H_
