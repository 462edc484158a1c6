// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the online softmax and the per-query-vector bookkeeping that both attention
// paths (prefill-inl.h, decode-inl.h) share: scores finished with scale, soft-cap, ALiBi, causal
// limit, sliding window and mask; the running (max, sum, accumulator) state over fixed 64-key
// tiles; output rows, split states and their exact merge, where an attention sink enters once.
//
// Why it looks like this: these steps fix the numerics of every path. exp is Highway's polynomial,
// lane-wise (ExpOfNonPositive: `Exp`'s bits on the softmax's range x <= 0); the one reduction
// across keys (the softmax sum) keeps kVirtualLanes partial sums folded in a fixed tree; split
// states merge in split order. So bits depend on shapes only, never on threads, request order or
// the SIMD target.

#if defined(DYNATTN_CPU_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_SOFTMAX_INL_H_
#undef DYNATTN_CPU_SOFTMAX_INL_H_
#else
#define DYNATTN_CPU_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/softmax_state.h"
#include "cpu/codec-inl.h"
#include "cpu/kernel_table.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

using internal::AttentionProblem;
using internal::kKeyTile;
using internal::kVirtualLanes;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// exp(x) for one float with the same polynomial (and bits) as the vector path; NaN for NaN
/// (Highway's `Exp` gives 0 there).
HWY_INLINE float ExpScalar(float x) {
  const DF df;
  return x != x ? x : hn::GetLane(hn::Exp(df, hn::Set(df, x)));
}

/// The weight of a key that a query vector does not see (its score is -inf): -0, which exp never
/// makes. The P.V loops skip such keys instead of multiplying: a hidden value is never read, so a
/// NaN or infinity there cannot reach the vector (0 * NaN is NaN), while a visible key whose
/// weight underflowed to +0 still multiplies its value, as IEEE arithmetic does.
HWY_INLINE bool IsHiddenWeight(float p) { return p == 0.0f && std::signbit(p); }

/// exp(x) for x <= 0 (+0 for -inf, NaN for NaN), the softmax's exponential. It has the bits of
/// Highway's `Exp` wherever the result is at least about 2^-126.5 (x > -87.68); below that, where
/// `Exp` makes tiny and subnormal values down to x = -104, it gives +0. The range lets it skip
/// `Exp`'s work for positive and very negative x: 2^q is one exponent field instead of two
/// halves multiplied in turn, and q stays a float (truncated in place, never converted to int32
/// and back, so no overflow fix-up). The reduction and polynomial are `Exp`'s own, so each
/// result is the same single rounding of the same value. About 19 operations instead of about 30.
HWY_INLINE hn::Vec<DF> ExpOfNonPositive(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  // q = round(x / ln 2), ties away from zero as `Exp` rounds them (x <= 0 here).
  const auto q =
      hn::Trunc(hn::MulAdd(x, hn::Set(df, 1.442695040888963407359924681f), hn::Set(df, -0.5f)));
  // x - q ln 2 with ln 2 in two parts (`Exp`'s constants), then `Exp`'s polynomial on it.
  auto reduced = hn::MulAdd(q, hn::Set(df, -0.693145751953125f), x);
  reduced = hn::MulAdd(q, hn::Set(df, -1.428606765330187045e-6f), reduced);
  const auto mantissa = hn::Add(hn::impl::ExpImpl<float>().ExpPoly(df, reduced), hn::Set(df, 1.0f));
  // 2^q for q in [-126, 0]: q + 127 lands in the low mantissa bits of 2^23 + 127 + q, and a
  // shift by 23 moves it into the exponent field (the bits of 2^23 leave the word).
  const auto biased = hn::BitCast(di, hn::Add(q, hn::Set(df, 8388735.0f)));
  const auto two_to_q = hn::BitCast(df, hn::ShiftLeft<23>(biased));
  // A NaN x keeps its NaN mantissa (q is NaN and no comparison holds).
  return hn::IfThenZeroElse(hn::Lt(q, hn::Set(df, -126.0f)), hn::Mul(mantissa, two_to_q));
}

/// Vectors that hold the kVirtualLanes partial sums of a tile (partial sum a in lane a % lanes).
constexpr int kSumVectors = kVirtualLanes / static_cast<int>(hn::MaxLanes(DF()));

/// Folds the kVirtualLanes partial sums in a fixed tree (lane i + lane i + width, width 8, 4, 2,
/// 1), so that every vector width gives the same bits. AVX2 and AVX-512 fold in registers;
/// narrower targets through memory.
HWY_INLINE float FoldPartialSums(const hn::Vec<DF>* sums) {
#if HWY_TARGET <= HWY_AVX2
  const hn::FixedTag<float, 4> d4;
#if HWY_TARGET <= HWY_AVX3
  const hn::FixedTag<float, 8> d8;
  const auto by8 = hn::Add(hn::LowerHalf(d8, sums[0]), hn::UpperHalf(d8, sums[0]));
#else
  const auto by8 = hn::Add(sums[0], sums[1]);
#endif
  const auto by4 = hn::Add(hn::LowerHalf(d4, by8), hn::UpperHalf(d4, by8));
  const auto by2 = hn::Add(by4, hn::Shuffle1032(by4));
  return hn::GetLane(hn::Add(by2, hn::Shuffle2301(by2)));
#else
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  HWY_ALIGN float lanes[kVirtualLanes];
  for (int c = 0; c < kSumVectors; ++c) hn::Store(sums[c], df, lanes + c * kN);
  for (int width = kVirtualLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
#endif
}

/// Sum of p[0, kKeyTile): kVirtualLanes partial sums (p[i], p[i + 16], ... in order) folded by
/// FoldPartialSums. With `span` (a multiple of kVirtualLanes) only p[0, span) is read: the rest
/// must be +0, whose terms change no sum. The softmax adds its tile sums in this order as it
/// makes the exponentials (ExpAndSumOfTile); the simd suite holds the two to the same bits.
HWY_INLINE float SumOfTile(const float* p, int span = kKeyTile) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  hn::Vec<DF> sums[kSumVectors];
  for (int c = 0; c < kSumVectors; ++c) sums[c] = hn::LoadU(df, p + c * kN);
  for (int j = kVirtualLanes; j < span; j += kVirtualLanes) {
    for (int c = 0; c < kSumVectors; ++c) sums[c] = hn::Add(sums[c], hn::LoadU(df, p + j + c * kN));
  }
  return FoldPartialSums(sums);
}

/// scores[j] = exp(scores[j] - max) over the first `span` scores (a multiple of kVirtualLanes),
/// -0 for a hidden key (score -inf under a finite max: IsHiddenWeight), and their sum in the
/// order of SumOfTile (same bits), added up as the exponentials are made instead of in a second
/// pass.
HWY_INLINE float ExpAndSumOfTile(float max, int span, float* scores) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  const auto shift = hn::Set(df, max);
  const auto neg_inf = hn::Set(df, kNegInf);
  const auto hidden = hn::Set(df, -0.0f);
  hn::Vec<DF> sums[kSumVectors];  // from +0: +0 + e is e for every weight (+0 + -0 is +0)
  for (int c = 0; c < kSumVectors; ++c) sums[c] = hn::Zero(df);
  for (int j = 0; j < span; j += kVirtualLanes) {
    for (int c = 0; c < kSumVectors; ++c) {
      float* at = scores + j + c * kN;
      const auto x = hn::Sub(hn::LoadU(df, at), shift);
      const auto e = hn::IfThenElse(hn::Eq(x, neg_inf), hidden, ExpOfNonPositive(df, x));
      hn::StoreU(e, df, at);
      sums[c] = hn::Add(sums[c], e);
    }
  }
  return FoldPartialSums(sums);
}

/// acc[0, n) *= factor.
HWY_INLINE void ScaleRow(float factor, int n, float* acc) {
  const DF df;
  const auto f = hn::Set(df, factor);
  for (int d = 0; d < n; d += static_cast<int>(hn::Lanes(df))) {
    hn::StoreU(hn::Mul(hn::LoadU(df, acc + d), f), df, acc + d);
  }
}

/// acc[0, n) += weight * v[0, n), one fused multiply-add per element.
HWY_INLINE void AddScaledRow(float weight, const float* v, int n, float* acc) {
  const DF df;
  const auto w = hn::Set(df, weight);
  for (int d = 0; d < n; d += static_cast<int>(hn::Lanes(df))) {
    hn::StoreU(hn::MulAdd(w, hn::LoadU(df, v + d), hn::LoadU(df, acc + d)), df, acc + d);
  }
}

/// out = acc / sum, or 0 for a row that saw no key (fully masked, or empty context: sum 0; a
/// row that saw one has sum >= 1, or NaN).
HWY_INLINE void NormalizeRow(const float* acc, float sum, int n, float* out) {
  const DF df;
  const auto s = hn::Set(df, sum);
  for (int d = 0; d < n; d += static_cast<int>(hn::Lanes(df))) {
    const auto v = sum != 0.0f ? hn::Div(hn::LoadU(df, acc + d), s) : hn::Zero(df);
    hn::StoreU(v, df, out + d);
  }
}

/// out = (acc * acc_scale) / sum: a state with its attention sink folded in (FoldSink).
HWY_INLINE void NormalizeRowScaled(const float* acc, float acc_scale, float sum, int n,
                                   float* out) {
  const DF df;
  const auto s = hn::Set(df, sum);
  const auto f = hn::Set(df, acc_scale);
  for (int d = 0; d < n; d += static_cast<int>(hn::Lanes(df))) {
    hn::StoreU(hn::Div(hn::Mul(hn::LoadU(df, acc + d), f), s), df, out + d);
  }
}

/// Running softmax state of one query vector.
struct RowState {
  float max = kNegInf;
  float sum = 0.0f;
  float* acc = nullptr;  ///< padded_value_dim floats.
};

/// The scores of a tile of `count` keys that the softmax reads: count rounded up to whole virtual
/// rows. A partly filled tile (a short context, a request's last tile) skips the rest.
HWY_INLINE int LiveSpan(int count) {
  return std::min(kKeyTile, (count + kVirtualLanes - 1) / kVirtualLanes * kVirtualLanes);
}

/// Turns one row of scores (the first `span` of kKeyTile floats, -inf where masked or past the
/// tile; span from LiveSpan; `tile_max` their maximum) into probabilities relative to the updated
/// running max, rescaling the running sum and accumulator. Afterwards `scores` holds p_j (-0
/// where hidden, 0 from span on); the caller adds sum_j p_j v_j over the keys the vector sees.
/// Skipping the -inf scores past the span changes no bit. A NaN max makes every p_j, the sum and
/// the accumulator NaN.
HWY_INLINE void OnlineSoftmaxStep(float* scores, int span, float tile_max, int padded_dim,
                                  RowState* state) {
  std::fill(scores + span, scores + kKeyTile, 0.0f);
  const float new_max = internal::MaxOrNaN(state->max, tile_max);
  if (new_max == kNegInf) {  // nothing visible yet: every key is hidden
    std::fill(scores, scores + span, -0.0f);
    return;
  }
  const float tile_sum = ExpAndSumOfTile(new_max, span, scores);
  if (state->max != new_max) {
    // An empty state (old max -inf: sum and accumulator +0) would be scaled by alpha = 0, which
    // leaves it as it is: only a state that saw keys is rescaled.
    if (state->max != kNegInf) {
      const float alpha = ExpScalar(state->max - new_max);
      state->sum *= alpha;
      ScaleRow(alpha, padded_dim, state->acc);
    }
    state->max = new_max;
  }
  state->sum += tile_sum;
}

/// One query vector of a work item: where it is read from and written to, and which of the item's
/// keys it sees. Key numbers are those of the item's key sequence (a request's context, or a
/// shared segment).
struct QueryRow {
  int64_t request = 0;
  int64_t token = 0;      ///< Packed query row.
  int head = 0;           ///< Query head.
  int64_t first_key = 0;  ///< First visible key (a sliding window's start; may be negative).
  int64_t last_key = 0;   ///< Last visible key (inclusive).
  int64_t origin = 0;     ///< The query's own position in key numbers (ALiBi: key - origin).
};

/// Adds the additive mask (in the activation type) at (head, packed row, packed column).
HWY_INLINE float MaskValue(const AttentionProblem& p, const QueryRow& r, int64_t key) {
  const int64_t column = p.batch.kvstarts[r.request] + key;
  const int64_t offset = r.head * p.mask_head_stride + r.token * p.mask_row_stride + column;
  return internal::LoadActivationOf(p.mask, offset, p.io_type);
}

/// A row's maximum from its lane-wise maxima, or NaN when a lane saw a NaN score (`hn::Max`
/// does not carry NaN along, so the scans remember it in `nan_seen`).
HWY_INLINE float RowMaxOrNaN(hn::Vec<DF> row_max, hn::Mask<DF> nan_seen) {
  const DF df;
  if (!hn::AllFalse(df, nan_seen)) return std::numeric_limits<float>::quiet_NaN();
  return hn::GetLane(hn::MaxOfLanes(df, row_max));
}

/// FinishScores for a row that sees every key of its span and whose scores are the scaled dots
/// alone (no soft-cap, ALiBi or mask): the same products, maximum and NaN rule, without the
/// per-vector visibility masks (most rows of a prefill, below its causal diagonal).
HWY_INLINE float ScaleVisibleScores(float score_scale, int span, float* scores) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  const auto scale = hn::Set(df, score_scale);
  auto row_max = hn::Set(df, kNegInf);
  auto nan_seen = hn::Ne(row_max, row_max);
  for (int j = 0; j < span; j += n) {
    const auto s = hn::Mul(hn::LoadU(df, scores + j), scale);
    hn::StoreU(s, df, scores + j);
    row_max = hn::Max(row_max, s);
    nan_seen = hn::Or(nan_seen, hn::IsNaN(s));
  }
  return RowMaxOrNaN(row_max, nan_seen);
}

/// Turns the dots of one query vector against the tile at context key `key0` into scores:
/// s0 = dot * scale, soft-capped (cap * tanh(s0 / cap)), + ALiBi, + mask, and -inf for keys past
/// the tile, past the row's causal limit or before its sliding window. Only the first `span`
/// scores (LiveSpan(num_keys)) are written. Returns their maximum (-inf when none is visible, NaN
/// when a visible score is NaN), taken as they are written. Scores are IEEE fp32 throughout: an
/// infinite or NaN input stays one (a dot that overflows fp32 too).
/// tanh is Highway's (built on the same lane-wise Expm1 polynomial on every target); it gives
/// +-1 for +-inf, and a NaN s0 is kept as it is (Highway's tanh would make it 0).
HWY_INLINE float FinishScores(const AttentionProblem& p, const QueryRow& r, int64_t key0,
                              int num_keys, int span, float* scores) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int n = static_cast<int>(hn::Lanes(df));
  const int64_t limit = std::min<int64_t>(num_keys - 1, r.last_key - key0);  // last visible j
  const int32_t last = static_cast<int32_t>(std::max<int64_t>(-1, limit));
  const int32_t first =  // first visible j
      static_cast<int32_t>(std::clamp<int64_t>(r.first_key - key0, 0, kKeyTile));
  const bool capped = p.soft_cap > 0.0f;
  if (!capped && p.alibi_slopes == nullptr && p.mask == nullptr && first == 0 && last >= span - 1) {
    return ScaleVisibleScores(p.score_scale, span, scores);
  }
  const auto cap = hn::Set(df, p.soft_cap);
  const auto scale = hn::Set(df, p.score_scale);
  const auto neg_inf = hn::Set(df, kNegInf);
  const float slope = p.alibi_slopes != nullptr ? p.alibi_slopes[r.head] : 0.0f;
  const auto base = hn::Set(df, static_cast<float>(key0 - r.origin));
  // Lane l of the vector at j is key j + l. The lane numbers are a constant; Iota(di, j) with a
  // variable j is built through the stack (16 scalar stores, then a wide load that stalls).
  const auto lanes = hn::Iota(di, 0);
  auto row_max = neg_inf;
  auto nan_seen = hn::Ne(row_max, row_max);  // the maximum ignores NaN; this remembers one
  for (int j = 0; j < span; j += n) {
    auto s = hn::Mul(hn::LoadU(df, scores + j), scale);
    if (capped) s = hn::IfThenElse(hn::IsNaN(s), s, hn::Mul(cap, hn::Tanh(df, hn::Div(s, cap))));
    if (p.alibi_slopes != nullptr) {
      // slope * (key - a), with key - a = (key0 - a) + j exact in float for any real context.
      const auto index = hn::ConvertTo(df, hn::Add(lanes, hn::Set(di, j)));
      s = hn::Add(s, hn::Mul(hn::Set(df, slope), hn::Add(base, index)));
    }
    // first <= j + l <= last, compared as l against bounds moved by j.
    const auto visible = hn::RebindMask(df, hn::And(hn::Lt(lanes, hn::Set(di, last + 1 - j)),
                                                    hn::Gt(lanes, hn::Set(di, first - 1 - j))));
    s = hn::IfThenElse(visible, s, neg_inf);
    hn::StoreU(s, df, scores + j);
    row_max = hn::Max(row_max, s);
    nan_seen = hn::Or(nan_seen, hn::IsNaN(s));
  }
  if (p.mask != nullptr) {
    for (int j = first; j <= last; ++j) {  // an -inf entry hides the key, whatever its logit
      const float mask = MaskValue(p, r, key0 + j);
      scores[j] = mask == kNegInf ? kNegInf : scores[j] + mask;
    }
    row_max = neg_inf;  // the mask may hide the keys whose logits were NaN: look again
    nan_seen = hn::Ne(row_max, row_max);
    for (int j = 0; j < span; j += n) {
      const auto s = hn::LoadU(df, scores + j);
      row_max = hn::Max(row_max, s);
      nan_seen = hn::Or(nan_seen, hn::IsNaN(s));
    }
  }
  return RowMaxOrNaN(row_max, nan_seen);
}

/// Bytes per element of the query and the output (fp32, or fp16 / bf16).
HWY_INLINE size_t ActivationBytes(const AttentionProblem& p) {
  return p.io_type == DType::kF32 ? 4 : 2;
}

HWY_INLINE void* OutputRow(const AttentionProblem& p, int64_t token, int head) {
  return static_cast<char*>(p.output) + p.OutputOffset(token, head) * ActivationBytes(p);
}

/// The query vectors of a request work item, in (head of the group, row) order: vector
/// h * rows + r is row row_begin + r under query head kv_head * group_size + h.
HWY_INLINE void MakeQueryRows(const AttentionProblem& p, const internal::WorkItem& w,
                              QueryRow* out) {
  const int rows = w.row_end - w.row_begin;
  for (int index = 0; index < p.group_size * rows; ++index) {
    QueryRow& r = out[index];
    r.request = w.request;
    r.head = w.kv_head * p.group_size + index / rows;
    const int64_t row = w.row_begin + index % rows;
    r.token = p.batch.seqstarts[w.request] + row;
    r.last_key = p.LastVisibleKey(w.request, row);
    r.first_key = p.FirstVisibleKey(w.request, row);
    r.origin = p.QueryPosition(w.request, row);
  }
}

/// The first key of the first tile of [key_begin, ...) that some of the query vectors sees.
/// Tiles keep their places (key_begin + a multiple of kKeyTile); those before every vector's
/// sliding window are neither read nor scored, which changes no bit (a fully masked tile adds
/// nothing to a state).
HWY_INLINE int64_t FirstTileKey(const QueryRow* rows, int vectors, int64_t key_begin) {
  if (vectors == 0) return key_begin;
  int64_t first = rows[0].first_key;
  for (int index = 1; index < vectors; ++index) first = std::min(first, rows[index].first_key);
  if (first <= key_begin) return key_begin;
  return key_begin + (first - key_begin) / kKeyTile * kKeyTile;
}

/// Where query vector `r` starts in p.query.
HWY_INLINE const char* QuerySource(const AttentionProblem& p, const QueryRow& r) {
  return static_cast<const char*>(p.query) + p.QueryOffset(r.token, r.head) * ActivationBytes(p);
}

/// Fetches query vectors [0, vectors) into the caches. Their rows are strided (a token apart):
/// fetched together, their misses overlap instead of each conversion waiting for its own.
HWY_INLINE void PrefetchQueries(const AttentionProblem& p, const QueryRow* rows, int vectors) {
  const size_t bytes = static_cast<size_t>(p.head_dim) * ActivationBytes(p);
  for (int index = 0; index < vectors; ++index) PrefetchBytes(QuerySource(p, rows[index]), bytes);
}

/// Loads query vectors [0, vectors) into rows of padded_dim floats, zero rows up to `padded`.
DYNATTN_TILE_STEP void LoadQueries(const AttentionProblem& p, const QueryRow* rows, int vectors,
                                   int padded, float* queries) {
  std::fill(queries + static_cast<int64_t>(vectors) * p.padded_dim,
            queries + static_cast<int64_t>(padded) * p.padded_dim, 0.0f);
  for (int index = 0; index < vectors; ++index) {
    float* dst = queries + static_cast<int64_t>(index) * p.padded_dim;
    LoadActivations(QuerySource(p, rows[index]), p.io_type, p.head_dim, dst);
    ZeroPad(dst, p.head_dim, p.padded_dim);
  }
}

/// The running softmax states of a work item's query vectors, carved from the worker's scratch.
struct VectorStates {
  float* acc;      ///< vectors x padded_value_dim unnormalised accumulators.
  float* maxes;    ///< Running maxima.
  float* sums;     ///< Running sums.
  float* row_out;  ///< padded_value_dim floats: one normalised row on its way out.

  /// Empty states (max -inf, sum 0, accumulator 0) for `vectors` query vectors.
  void Reset(int vectors, int padded_dim) const {
    std::fill(acc, acc + static_cast<int64_t>(vectors) * padded_dim, 0.0f);
    std::fill(maxes, maxes + vectors, kNegInf);
    std::fill(sums, sums + vectors, 0.0f);
  }
};

/// Natural-log log-sum-exp of a finished state: max + ln(sum), -inf when it saw no key (sum 0).
HWY_INLINE float LogSumExp(float max, float sum) {
  return sum != 0.0f ? max + static_cast<float>(std::log(static_cast<double>(sum))) : kNegInf;
}

/// Normalises the finished state (max, sum, acc) of query head `head` into `out`, folding the
/// head's attention sink in when there is one (the only place it enters), and writes the
/// log-sum-exp of the folded state to `lse` when asked.
HWY_INLINE void FinishVector(const AttentionProblem& p, int head, float max, float sum,
                             const float* acc, float* out, float* lse) {
  if (p.sinks == nullptr) {
    NormalizeRow(acc, sum, p.padded_value_dim, out);
    if (lse != nullptr) *lse = LogSumExp(max, sum);
    return;
  }
  // A lambda of this target: core's FoldSink is compiled without target attributes and may not
  // call the always-inline ExpScalar itself.
  const auto exp = [](float x) { return ExpScalar(x); };
  const internal::SinkFolded<float> folded = internal::FoldSink(max, sum, p.sinks[head], exp);
  NormalizeRowScaled(acc, folded.acc_scale, folded.sum, p.padded_value_dim, out);
  if (lse != nullptr) *lse = LogSumExp(folded.max, folded.sum);
}

/// The log-sum-exp slot of (token, head), or null when none is asked for.
HWY_INLINE float* LseSlot(const AttentionProblem& p, int64_t token, int head) {
  return p.lse != nullptr ? p.lse + token * p.num_heads + head : nullptr;
}

/// Writes the finished query vectors of a work item (its only part) to the output.
HWY_INLINE void WriteOutputs(const AttentionProblem& p, const QueryRow* rows, int vectors,
                             const VectorStates& s) {
  for (int index = 0; index < vectors; ++index) {
    const QueryRow& r = rows[index];
    FinishVector(p, r.head, s.maxes[index], s.sums[index],
                 s.acc + static_cast<int64_t>(index) * p.padded_value_dim, s.row_out,
                 LseSlot(p, r.token, r.head));
    StoreActivations(s.row_out, p.io_type, p.value_dim, OutputRow(p, r.token, r.head));
  }
}

/// Saves (max, sum, accumulator) of query vectors [0, vectors) at states [state_index, ...).
HWY_INLINE void WriteStates(const AttentionProblem& p, int64_t state_index, int vectors,
                            const VectorStates& s, float* states) {
  const int64_t stride = internal::StateFloats(p.padded_value_dim);
  for (int index = 0; index < vectors; ++index) {
    float* state = states + (state_index + index) * stride;
    state[0] = s.maxes[index];
    state[1] = s.sums[index];
    std::copy(s.acc + static_cast<int64_t>(index) * p.padded_value_dim,
              s.acc + static_cast<int64_t>(index + 1) * p.padded_value_dim, state + 2);
  }
}

/// Finishes the dots of query vectors [first, first + block) against one tile (`scores`, rows of
/// kKeyTile) and folds them into the vectors' running states. Afterwards `scores` holds the
/// probabilities relative to the updated maxima; padding vectors (index >= vectors) get zeros.
DYNATTN_TILE_STEP void SoftmaxBlock(const AttentionProblem& p, const QueryRow* rows, int vectors,
                                    int first, int block, int64_t key0, int count, float* scores,
                                    const VectorStates& s) {
  const int span = LiveSpan(count);
  const int live = std::clamp(vectors - first, 0, block);  // the rest are padding vectors
  std::fill(scores + live * kKeyTile, scores + block * kKeyTile, -0.0f);  // see no key
  for (int v = 0; v < live; ++v) {
    const int index = first + v;
    float* row = scores + v * kKeyTile;
    const float tile_max = FinishScores(p, rows[index], key0, count, span, row);
    RowState state{s.maxes[index], s.sums[index],
                   s.acc + static_cast<int64_t>(index) * p.padded_value_dim};
    OnlineSoftmaxStep(row, span, tile_max, p.padded_value_dim, &state);
    s.maxes[index] = state.max;
    s.sums[index] = state.sum;
  }
}

/// Which query vectors of a block see a key (active[j] of MarkActiveKeys).
enum KeySeenBy : uint8_t {
  kSeenByNone = 0,  ///< Hidden from every vector: its value is not read.
  kSeenByAll = 1,   ///< Every live vector multiplies its value (padding vectors may too).
  kSeenBySome = 2,  ///< Vectors whose weight is hidden (IsHiddenWeight) skip it, unless the
                    ///< value is finite: then hidden vectors add -0 * v, which changes nothing.
};

/// active[j] = which of the first `live` of the kBlock probability rows see key j, a vector of
/// keys at a time (rows are kKeyTile floats, so the last vector may pass num_keys; active holds
/// kKeyTile flags).
template <int kBlock>
HWY_INLINE void MarkActiveKeys(const float* probs, int live, int num_keys, uint8_t* active) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  const auto hidden = hn::Set(di, static_cast<int32_t>(0x80000000u));  // -0's bits
  HWY_ALIGN int32_t seen_by[kN];
  for (int j = 0; j < num_keys; j += kN) {
    auto any = hn::Zero(di), all = hn::Set(di, -1);
    for (int v = 0; v < live && v < kBlock; ++v) {
      const auto sees = hn::VecFromMask(
          di, hn::Ne(hn::BitCast(di, hn::LoadU(df, probs + v * kKeyTile + j)), hidden));
      any = hn::Or(any, sees);
      all = hn::And(all, sees);
    }
    hn::Store(hn::IfThenElseZero(hn::MaskFromVec(any),
                                 hn::IfThenElse(hn::MaskFromVec(all), hn::Set(di, kSeenByAll),
                                                hn::Set(di, kSeenBySome))),
              di, seen_by);
    for (int l = 0; l < kN && j + l < kKeyTile; ++l)
      active[j + l] = static_cast<uint8_t>(seen_by[l]);
  }
}

/// Whether every lane of the kParts vectors of a value row is finite.
template <int kParts>
HWY_INLINE bool AllFinite(const hn::Vec<DF>* value) {
  const DF df;
  auto finite = hn::IsFinite(value[0]);
  for (int u = 1; u < kParts; ++u) finite = hn::And(finite, hn::IsFinite(value[u]));
  return hn::AllTrue(df, finite);
}

/// Ends a request work item: its output rows when it is their only part, else its states.
DYNATTN_TILE_STEP void FinishItem(const AttentionProblem& p, const internal::WorkItem& w,
                                  const QueryRow* rows, const VectorStates& s, float* states) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  if (w.num_splits == 1) {
    WriteOutputs(p, rows, vectors, s);
  } else {
    WriteStates(p, w.state_index, vectors, s, states);
  }
}

/// Merges states [0, count) (given by pointer, in that order) into `acc` and the total sum over
/// the largest max. Exact for empty states (max -inf, sum 0): they are skipped, never turned into
/// NaN. Returns the merged (max, sum).
HWY_INLINE RowState MergeStates(const float* const* parts, int count, int padded_dim, float* acc) {
  RowState merged{kNegInf, 0.0f, acc};
  for (int k = 0; k < count; ++k) merged.max = internal::MaxOrNaN(merged.max, parts[k][0]);
  std::fill(acc, acc + padded_dim, 0.0f);
  for (int k = 0; k < count && merged.max != kNegInf; ++k) {
    const float* state = parts[k];
    if (internal::IsEmptyPart(state[0])) continue;
    const float weight = internal::MergeWeight(state[0], merged.max, ExpScalar);
    merged.sum += state[1] * weight;
    AddScaledRow(weight, state + 2, padded_dim, acc);
  }
  return merged;
}

/// Normalises a merged state and stores it as the output (and log-sum-exp) of (token, head).
HWY_INLINE void StoreMerged(const AttentionProblem& p, int64_t token, int head,
                            const RowState& merged, float* out) {
  FinishVector(p, head, merged.max, merged.sum, merged.acc, out, LseSlot(p, token, head));
  StoreActivations(out, p.io_type, p.value_dim, OutputRow(p, token, head));
}

/// Merges the split states of one tile in split order and writes its output rows.
inline void MergeSplits(const AttentionProblem& p, const internal::MergeTask& task,
                        const float* states, internal::Scratch* scratch) {
  const int rows = task.row_end - task.row_begin;
  const int vectors = p.group_size * rows;
  const int64_t stride = internal::StateFloats(p.padded_value_dim);
  float* acc = scratch->Reserve(2 * static_cast<size_t>(p.padded_value_dim));
  float* out = acc + p.padded_value_dim;
  const float** parts = scratch->ReserveParts(static_cast<size_t>(task.num_splits));
  for (int index = 0; index < vectors; ++index) {
    for (int s = 0; s < task.num_splits; ++s) {
      parts[s] = states + (task.state_index + s * vectors + index) * stride;
    }
    const RowState merged = MergeStates(parts, task.num_splits, p.padded_value_dim, acc);
    const int64_t token = p.batch.seqstarts[task.request] + task.row_begin + index % rows;
    StoreMerged(p, token, task.kv_head * p.group_size + index / rows, merged, out);
  }
}

/// Merges the parts of one unified-attention token, in the order given, for every query head.
inline void MergeParts(const AttentionProblem& p, int64_t token, const internal::PartRef* refs,
                       int count, const float* states, internal::Scratch* scratch) {
  const int64_t stride = internal::StateFloats(p.padded_value_dim);
  float* acc = scratch->Reserve(2 * static_cast<size_t>(p.padded_value_dim));
  float* out = acc + p.padded_value_dim;
  const float** parts = scratch->ReserveParts(static_cast<size_t>(count));
  for (int head = 0; head < p.num_heads; ++head) {
    for (int k = 0; k < count; ++k) {
      parts[k] = states + (refs[k].first + head * refs[k].head_stride) * stride;
    }
    StoreMerged(p, token, head, MergeStates(parts, count, p.padded_value_dim, acc), out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_SOFTMAX_INL_H_
