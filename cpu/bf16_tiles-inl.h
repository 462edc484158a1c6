// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the fast tier's tiled attention (prompts, prefill chunks and unified attention's
// shared segments: many query vectors per work item) over fp16 and bf16 caches, in bf16 dot
// products (Precision::kFast), on the AVX-512 targets of CPUs with AVX512_BF16.
//
// Why it looks like this:
// * It is the exact tiled path (prefill-inl.h) with its two fp32 multiply-add loops replaced by
//   `vdpbf16ps`, which multiplies pairs of bf16 exactly and adds both products into an fp32 lane:
//   keys stay across lanes and each dot product is one chain, but each step of a chain takes two
//   dimensions (scores: a query's dimensions 2i and 2i + 1 against the same of 16 keys) or two
//   keys (values: keys 2m and 2m + 1 of 16 output elements). Twice the work per instruction of
//   the fp32 loops, with the same register blocking, loads and broadcasts. The tile loop, the
//   softmax, the masks and the running states are the exact path's.
// * The operands are laid out in those pairs once, rounded to bf16 (nearest even) where they are
//   not bf16 already: the queries once per work item, the key and value tiles once per tile,
//   straight from the cache's rows (a key row's 32-bit words are its dimension pairs, moved across
//   lanes by a 16 x 16 transpose; value rows are interleaved two at a time), the weights once per
//   block of query vectors.
// * A hidden key's weight is -0, which adds nothing to a sum when its value is finite: a tile
//   whose values (as bf16) are all finite takes the pair loop over every visible key, causal
//   diagonal included; a tile with an infinite or NaN value takes the exact value loops, whose
//   tests keep a hidden value out of every sum.

#if defined(DYNATTN_CPU_BF16_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_BF16_TILES_INL_H_
#undef DYNATTN_CPU_BF16_TILES_INL_H_
#else
#define DYNATTN_CPU_BF16_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "cpu/bf16_dots-inl.h"
#include "cpu/prefill-inl.h"
#include "cpu/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

static_assert(kScoreKeys == 32, "a key panel is two vectors of 16 keys");

/// Where dimension pair i of key j lies in a tile of key pairs: panels of kScoreKeys keys, each
/// DimPairs rows of kScoreKeys pairs (the layout of PanelIndex, two dimensions per element).
HWY_INLINE int64_t KeyPairIndex(int pairs, int i, int j) {
  return static_cast<int64_t>(j / kScoreKeys) * pairs * kScoreKeys + i * kScoreKeys +
         j % kScoreKeys;
}

/// Where element e of key pair m (keys 2m and 2m + 1) lies in a tile of value pairs: panels of 16
/// elements, each the tile's key pairs in order.
HWY_INLINE int64_t ValuePairIndex(int e, int m) {
  return static_cast<int64_t>(e / 16) * (kKeyTile / 2) * 16 + m * 16 + e % 16;
}

/// The query vectors (rows of `queries`, zero-padded to padded_dim, a multiple of 16) rounded to
/// bf16 in rows of padded_dim / 2 dimension pairs: a row's bf16 elements in order, so that pair i
/// holds dimensions 2i and 2i + 1, the even one in the low half.
DYNATTN_BF16_DOTS HWY_INLINE void RoundQueryPairs(const float* queries, int count, int padded_dim,
                                                  uint32_t* out) {
  const int64_t total = static_cast<int64_t>(count) * padded_dim;  // rows are back to back
  int64_t i = 0;
  for (; i + 32 <= total; i += 32) {
    const __m512bh pairs =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(queries + i + 16), _mm512_loadu_ps(queries + i));
    _mm512_storeu_si512(out + i / 2, reinterpret_cast<__m512i>(pairs));
  }
  if (i < total) {  // 16 left
    const __m256bh pairs = _mm512_cvtneps_pbh(_mm512_loadu_ps(queries + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i / 2), reinterpret_cast<__m256i>(pairs));
  }
}

/// Elements [e, e + 32) of an fp16 or bf16 row as bf16 (fp16 rounded to nearest even), zeros from
/// `dim` on (e < dim).
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_INLINE __m512i RowAsBf16(const void* row, int e, int dim) {
  const __mmask32 live = dim - e >= 32 ? ~__mmask32{0} : (__mmask32{1} << (dim - e)) - 1;
  const __m512i bits = _mm512_maskz_loadu_epi16(live, static_cast<const uint16_t*>(row) + e);
  if constexpr (kElem == CacheElem::kBF16) {
    return bits;
  } else {
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(bits));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(bits, 1));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  }
}

/// Transposes 16 rows of 16 32-bit lanes in registers: interleaves of 32-bit, then 64-bit lanes
/// within each 128-bit block, then the blocks exchanged twice.
DYNATTN_BF16_DOTS HWY_INLINE void Transpose16x16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  __m512i u[16];  // u[4g + m], block b: column 4b + m of rows 4g .. 4g + 3
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i even_low = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_low = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i even_high = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_high = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
    r[m] = _mm512_shuffle_i32x4(even_low, even_high, _MM_SHUFFLE(2, 0, 2, 0));
    r[8 + m] = _mm512_shuffle_i32x4(even_low, even_high, _MM_SHUFFLE(3, 1, 3, 1));
    r[4 + m] = _mm512_shuffle_i32x4(odd_low, odd_high, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + m] = _mm512_shuffle_i32x4(odd_low, odd_high, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// key_pairs[KeyPairIndex(pairs, i, j)] = dimensions 2i and 2i + 1 of key j (rows of kElem) in
/// bf16, zeros for the keys from `count` to a multiple of 16 (a score step's last vector) and an
/// odd head's last partner: a row's 32-bit words are its dimension pairs, moved across lanes 16
/// keys x 16 pairs at a time.
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_INLINE void PairKeyRows(const void* const* rows, int count, int head_dim,
                                              uint32_t* key_pairs) {
  const int pairs = DimPairs(head_dim);
  for (int j0 = 0; j0 < count; j0 += 16) {
    for (int i0 = 0; i0 < pairs; i0 += 16) {
      __m512i block[16];
      for (int r = 0; r < 16; ++r) {
        block[r] = j0 + r < count ? RowAsBf16<kElem>(rows[j0 + r], 2 * i0, head_dim)
                                  : _mm512_setzero_si512();
      }
      Transpose16x16(block);
      for (int c = 0; c < 16 && i0 + c < pairs; ++c) {
        _mm512_storeu_si512(key_pairs + KeyPairIndex(pairs, i0 + c, j0), block[c]);
      }
    }
  }
}

/// value_pairs[ValuePairIndex(e, m)] = element e of value rows 2m and 2m + 1 (`count` rows of
/// kElem, `dim` elements) in bf16, zeros from dim to padded_dim and for an odd count's last
/// partner. Returns whether every one is finite.
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_INLINE bool PairValueRows(const void* const* rows, int count, int dim,
                                                int padded_dim, uint32_t* value_pairs) {
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  __mmask32 special = 0;
  for (int m = 0; 2 * m < count; ++m) {
    const bool has_b = 2 * m + 1 < count;
    for (int e = 0; e < padded_dim; e += 32) {
      const __m512i a = e < dim ? RowAsBf16<kElem>(rows[2 * m], e, dim) : _mm512_setzero_si512();
      const __m512i b =
          has_b && e < dim ? RowAsBf16<kElem>(rows[2 * m + 1], e, dim) : _mm512_setzero_si512();
      special |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, exponent), exponent);
      special |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(b, exponent), exponent);
      __m512i lo, hi;
      InterleavePairs(a, b, &lo, &hi);
      _mm512_storeu_si512(value_pairs + ValuePairIndex(e, m), lo);
      if (e + 16 < padded_dim) _mm512_storeu_si512(value_pairs + ValuePairIndex(e + 16, m), hi);
    }
  }
  return special == 0;
}

/// weight_pairs[v * kKeyTile / 2 + m] = the weights of keys 2m and 2m + 1 of block row v
/// (`probs`, rows of kKeyTile) in bf16, keys from `count` on weighing +0.
template <int kBlock>
DYNATTN_BF16_DOTS HWY_INLINE void PairWeights(const float* probs, int count,
                                              uint32_t* weight_pairs) {
  for (int v = 0; v < kBlock; ++v) {
    for (int j = 0; j < count; j += 32) {
      const float* p = probs + v * kKeyTile + j;
      const __m512 lo = _mm512_maskz_loadu_ps(LowMask(count - j), p);
      const __m512 hi = _mm512_maskz_loadu_ps(LowMask(count - j - 16), p + 16);
      _mm512_storeu_si512(weight_pairs + v * kKeyTile / 2 + j / 2,
                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

/// dots[v][j0, j0 + 16 kVectors) = the bf16 dot products of kPass query vectors (rows of
/// `queries`, `stride` pairs apart) with the keys from j0 (a multiple of kScoreKeys) of a tile of
/// key pairs: one chain over the `pairs` dimension pairs per dot.
template <int kPass, int kVectors>
DYNATTN_BF16_DOTS HWY_INLINE void PairScoreStep(const uint32_t* queries, int stride, int pairs,
                                                const uint32_t* key_pairs, int j0, float* dots) {
  __m512 acc[kPass][kVectors];
  for (auto& row : acc) {
    for (auto& a : row) a = _mm512_setzero_ps();
  }
  const uint32_t* panel = key_pairs + KeyPairIndex(pairs, 0, j0);
  for (int i = 0; i < pairs; ++i) {
    __m512i keys[kVectors];
    for (int a = 0; a < kVectors; ++a)
      keys[a] = _mm512_loadu_si512(panel + i * kScoreKeys + 16 * a);
    for (int v = 0; v < kPass; ++v) {
      const __m512i q = _mm512_set1_epi32(static_cast<int>(queries[v * stride + i]));
      for (int a = 0; a < kVectors; ++a) acc[v][a] = DotPairs(acc[v][a], q, keys[a]);
    }
  }
  for (int v = 0; v < kPass; ++v) {
    for (int a = 0; a < kVectors; ++a)
      _mm512_storeu_ps(dots + v * kKeyTile + j0 + 16 * a, acc[v][a]);
  }
}

/// The dots of kBlock query vectors with at least the first `num_keys` keys of the tile (as
/// ScoreBlock: steps of kScoreKeys keys, a last step of at most 16 keys alone, passes that fit
/// the registers).
template <int kBlock>
DYNATTN_BF16_DOTS HWY_INLINE void PairScoreBlock(const uint32_t* queries, int stride, int pairs,
                                                 const uint32_t* key_pairs, int num_keys,
                                                 float* dots) {
  constexpr int kPass = PassVectors<kBlock>(2, 3);
  for (int v = 0; v < kBlock; v += kPass) {
    const uint32_t* q = queries + v * stride;
    float* out = dots + v * kKeyTile;
    for (int j0 = 0; j0 < num_keys; j0 += kScoreKeys) {
      if (num_keys - j0 <= 16) {
        PairScoreStep<kPass, 1>(q, stride, pairs, key_pairs, j0, out);
      } else {
        PairScoreStep<kPass, 2>(q, stride, pairs, key_pairs, j0, out);
      }
    }
  }
}

/// acc_v[e, e + 16 kParts) += the bf16 products of kPass vectors' weight pairs (rows of kKeyTile
/// / 2) with the value pairs of key pairs [0, key_pairs): one chain per element in key order.
template <int kPass, int kParts>
DYNATTN_BF16_DOTS HWY_INLINE void PairAccumulateLanes(const uint32_t* weights,
                                                      const uint32_t* value_pairs, int key_pairs,
                                                      int padded_dim, int e, float* acc) {
  __m512 sums[kPass][kParts];
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u)
      sums[v][u] = _mm512_loadu_ps(acc + v * padded_dim + e + 16 * u);
  }
  const uint32_t* panel[kParts];
  for (int u = 0; u < kParts; ++u) panel[u] = value_pairs + ValuePairIndex(e + 16 * u, 0);
  for (int m = 0; m < key_pairs; ++m) {
    __m512i values[kParts];
    for (int u = 0; u < kParts; ++u) values[u] = _mm512_loadu_si512(panel[u] + 16 * m);
    for (int v = 0; v < kPass; ++v) {
      const __m512i w = _mm512_set1_epi32(static_cast<int>(weights[v * kKeyTile / 2 + m]));
      for (int u = 0; u < kParts; ++u) sums[v][u] = DotPairs(sums[v][u], values[u], w);
    }
  }
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u)
      _mm512_storeu_ps(acc + v * padded_dim + e + 16 * u, sums[v][u]);
  }
}

/// acc_v += P_v . V over the whole padded row for kBlock query vectors: stretches of 32 elements
/// (16 for the last one of an odd count of 16), each read by every pass of the block while it is
/// in L1.
template <int kBlock>
DYNATTN_BF16_DOTS HWY_INLINE void PairAccumulateBlock(const uint32_t* weights,
                                                      const uint32_t* value_pairs, int key_pairs,
                                                      int padded_dim, float* acc) {
  constexpr int kPass = PassVectors<kBlock>(2, 3);
  int e = 0;
  for (; e + 32 <= padded_dim; e += 32) {
    for (int v = 0; v < kBlock; v += kPass) {
      PairAccumulateLanes<kPass, 2>(weights + v * kKeyTile / 2, value_pairs, key_pairs, padded_dim,
                                    e, acc + v * padded_dim);
    }
  }
  for (; e < padded_dim; e += 16) {
    for (int v = 0; v < kBlock; v += kPass) {
      PairAccumulateLanes<kPass, 1>(weights + v * kKeyTile / 2, value_pairs, key_pairs, padded_dim,
                                    e, acc + v * padded_dim);
    }
  }
}

/// Scores, softmax and value accumulation of query vectors [first, first + kBlock) against one
/// tile of pairs, up to the last key any of them sees (AttendBlock's steps in bf16 dot products;
/// the exact value loops where `values_finite` is false).
template <int kBlock>
DYNATTN_BF16_DOTS HWY_INLINE void PairAttendBlock(const AttentionProblem& p, int vectors, int first,
                                                  int64_t key0, int count, bool values_finite,
                                                  const ItemScratch& s) {
  const int visible = BlockVisibleKeys(s.rows, vectors, first, kBlock, key0, count);
  if (visible == 0) return;
  const int stride = p.padded_dim / 2, dpv = p.padded_value_dim;
  PairScoreBlock<kBlock>(s.query_pairs + static_cast<int64_t>(first) * stride, stride,
                         DimPairs(p.head_dim), s.key_pairs, visible, s.scores);
  SoftmaxBlock(p, s.rows, vectors, first, kBlock, key0, visible, s.scores, s.states);
  float* acc = s.states.acc + static_cast<int64_t>(first) * dpv;
  if (values_finite) {
    PairWeights<kBlock>(s.scores, visible, s.weight_pairs);
    PairAccumulateBlock<kBlock>(s.weight_pairs, s.value_pairs, (visible + 1) / 2, dpv, acc);
  } else {
    MarkActiveKeys<kBlock>(s.scores, std::clamp(vectors - first, 0, kBlock), visible, s.active);
    AccumulateBlock<kBlock>(s.scores, s.values, s.active, visible, dpv, acc);
  }
}

/// One tile of `count` keys (their slots) laid out in pairs from the cache's rows and attended by
/// every block of the item's query vectors (whose pairs are in s.query_pairs). A tile with a
/// non-finite value also decodes its values into fp32 panels, for the exact value loops.
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_NOINLINE void AttendPairTile(const AttentionProblem& p, int vectors,
                                                   const TiledKeys& k, int64_t key0, int count,
                                                   const int64_t* slots, const ItemScratch& s) {
  const CacheDesc& cache = p.kv.cache;
  const void* rows[kKeyTile];
  for (int j = 0; j < count; ++j) rows[j] = RowPointer<kElem>(cache.key, slots[j], k.kv_head);
  PairKeyRows<kElem>(rows, count, p.head_dim, s.key_pairs);
  for (int j = 0; j < count; ++j) rows[j] = RowPointer<kElem>(cache.value, slots[j], k.kv_head);
  const bool finite =
      PairValueRows<kElem>(rows, count, p.value_dim, p.padded_value_dim, s.value_pairs);
  if (!finite) {
    const PlaneRows values = PlaneRows::For(internal::ValueView(cache));
    DecodeValueTile<kElem>(p, values, slots, k.kv_head, count, s.value_rows, s.scales);
    PanelValueTile(s.value_rows, count, p.padded_value_dim, s.values);
  }
  int first = 0;
  for (; first + kQueryBlock <= vectors; first += kQueryBlock) {
    PairAttendBlock<kQueryBlock>(p, vectors, first, key0, count, finite, s);
  }
  for (; first < vectors; first += kSmallBlock) {
    PairAttendBlock<kSmallBlock>(p, vectors, first, key0, count, finite, s);
  }
}

/// The query vectors s.rows[0, vectors) (already filled) against keys `k` through tiles of bf16
/// pairs (AttendTiledCore's loop). Leaves the vectors' running states in s.states.
template <CacheElem kElem>
DYNATTN_BF16_DOTS HWY_INLINE void AttendPairTiles(const AttentionProblem& p, int vectors,
                                                  const TiledKeys& k, const ItemScratch& s) {
  StartTiledItem(p, vectors, s);
  RoundQueryPairs(s.queries, PaddedVectors(vectors), p.padded_dim, s.query_pairs);
  ForEachTile<kElem>(p, vectors, k, s, [&](int64_t key0, int count, const int64_t* slots) {
    AttendPairTile<kElem>(p, vectors, k, key0, count, slots, s);
  });
}

/// A request work item of many query vectors (a prompt, a chunk: not UseFusedDecode) through
/// tiles of bf16 pairs.
template <CacheElem kElem>
DYNATTN_BF16_DOTS void AttendFastTiled(const AttentionProblem& p, const internal::WorkItem& w,
                                       float* states, internal::Scratch* scratch) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  const ItemScratch s = ItemScratch::Carve(PaddedVectors(vectors), p, scratch);
  MakeQueryRows(p, w, s.rows);
  const TiledKeys keys{&p.kv.slots, w.request, w.kv_head, w.key_begin, w.key_end};
  AttendPairTiles<kElem>(p, vectors, keys, s);
  FinishItem(p, w, s.rows, s.states, states);
}

/// A shared-path item of unified attention (AttendShared) through tiles of bf16 pairs.
template <CacheElem kElem>
DYNATTN_BF16_DOTS void AttendFastShared(const AttentionProblem& p, const internal::SharedItem& w,
                                        float* states, internal::Scratch* scratch) {
  const int vectors = p.group_size * w.num_readers;
  const ItemScratch s = ItemScratch::Carve(PaddedVectors(vectors), p, scratch);
  MakeSharedRows(p, w, s.rows);
  const internal::SlotMap segment = SegmentSlots(w);
  AttendPairTiles<kElem>(p, vectors, TiledKeys{&segment, 0, w.kv_head, w.key_begin, w.key_end}, s);
  WriteStates(p, w.state_index, vectors, s.states, states);
}

#else  // declared for the fast table's template, never instantiated on these targets

template <CacheElem kElem>
void AttendFastTiled(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                     internal::Scratch* scratch);
template <CacheElem kElem>
void AttendFastShared(const AttentionProblem& p, const internal::SharedItem& w, float* states,
                      internal::Scratch* scratch);

#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_BF16_TILES_INL_H_
