// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: attention over a packed batch, for one work item at a time (a request's KV head
// with all its GQA query heads, a tile of query rows, and one split of the context), plus the
// exact merge of split contexts and the two KeyValueCache steps (write, gather).
//
// Why it looks like this:
// * GQA: the work item owns a KV head, so each K/V row is decoded once for all R query heads.
// * Online softmax over fixed 64-key tiles (running max m, sum l, unnormalised accumulator): the
//   context is read once, and a split's state merges exactly with the others.
// * Determinism without horizontal sums: the key tile is transposed so that keys run across
//   lanes; each score is then one fused multiply-add chain over d = 0..D-1, and each output
//   element one chain over the keys, whatever the vector width. The only reduction across keys
//   (the softmax sum) keeps kVirtualLanes partial sums folded in a fixed tree. exp is Highway's
//   polynomial, lane-wise. Tiles and splits come from the plan, which depends on shapes only. So
//   bits do not depend on threads, request order or the FMA target (AVX2, AVX-512).
// * Register blocking: blocks of 8 (or 4) query vectors, rows of a tile times the GQA group of its
//   KV head, share every key and value load.
// * Quantized K/V tiles are decoded into L1-resident fp32 scratch (codec-inl.h) with the exact
//   spec rounding; the fast decode path that consumes codes inside the dot product drops in here
//   as another `attend` entry of the same table.

#if defined(DYNATTN_SIMD_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_SIMD_ATTENTION_INL_H_
#undef DYNATTN_SIMD_ATTENTION_INL_H_
#else
#define DYNATTN_SIMD_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "simd/codec-inl.h"
#include "simd/kernel_abi.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

using internal::AttentionProblem;
using internal::kKeyTile;
using internal::kVirtualLanes;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Query vectors scored together share each load of the key and value tiles. Blocks of 8 keep
/// enough independent FMA chains in flight for prefill tiles; decode tiles with a GQA group of 4
/// use blocks of 4. The block size changes no bit: every dot product and every output element is
/// its own chain.
constexpr int kQueryBlock = 8;

/// exp(x) for one float with the same polynomial (and bits) as the vector path.
HWY_INLINE float ExpScalar(float x) {
  const DF df;
  return hn::GetLane(hn::Exp(df, hn::Set(df, x)));
}

/// Sum of p[0, kKeyTile): kVirtualLanes partial sums (p[i], p[i + 16], ... in order) folded in a
/// fixed tree, so every vector width gives the same bits.
HWY_INLINE float SumOfTile(const float* p) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  HWY_ALIGN float lanes[kVirtualLanes];
  for (int a = 0; a < kVirtualLanes; a += kN) {
    auto acc = hn::LoadU(df, p + a);
    for (int j = kVirtualLanes; j < kKeyTile; j += kVirtualLanes)
      acc = hn::Add(acc, hn::LoadU(df, p + j + a));
    hn::Store(acc, df, lanes + a);
  }
  for (int width = kVirtualLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
}

/// dots[v][j] = q_v . k_j for kBlock query vectors (rows of `queries`, padded_dim apart) and
/// the first `num_keys` keys of a transposed tile (keys_t[d * kKeyTile + j]). Each dot is one
/// sequential fused multiply-add chain over d.
template <int kBlock>
HWY_INLINE void ScoreBlock(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                           int num_keys, float* dots) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kVectors = kVirtualLanes / kN;
  for (int j0 = 0; j0 < num_keys; j0 += kVirtualLanes) {
    hn::Vec<DF> acc[kBlock][kVectors];
    for (int v = 0; v < kBlock; ++v) {
      for (int a = 0; a < kVectors; ++a) acc[v][a] = hn::Zero(df);
    }
    for (int d = 0; d < head_dim; ++d) {
      const float* k = keys_t + d * kKeyTile + j0;
      for (int a = 0; a < kVectors; ++a) {
        const auto kv = hn::LoadU(df, k + a * kN);
        for (int v = 0; v < kBlock; ++v) {
          acc[v][a] = hn::MulAdd(hn::Set(df, queries[v * padded_dim + d]), kv, acc[v][a]);
        }
      }
    }
    for (int v = 0; v < kBlock; ++v) {
      for (int a = 0; a < kVectors; ++a)
        hn::StoreU(acc[v][a], df, dots + v * kKeyTile + j0 + a * kN);
    }
  }
}

/// acc_v[d] += sum_j p_v[j] * values[j][d] for kBlock accumulators, one fused multiply-add
/// chain per element in key order. Keys no vector attends to are skipped (adding 0 * v changes
/// no bit of a finite accumulator).
template <int kBlock>
HWY_INLINE void AccumulateBlock(const float* probs, const float* values, int num_keys,
                                int padded_dim, float* acc) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  for (int d = 0; d < padded_dim; d += n) {
    hn::Vec<DF> sums[kBlock];
    for (int v = 0; v < kBlock; ++v) sums[v] = hn::LoadU(df, acc + v * padded_dim + d);
    for (int j = 0; j < num_keys; ++j) {
      bool any = false;
      for (int v = 0; v < kBlock; ++v) any |= probs[v * kKeyTile + j] != 0.0f;
      if (!any) continue;
      const auto value = hn::LoadU(df, values + j * padded_dim + d);
      for (int v = 0; v < kBlock; ++v) {
        sums[v] = hn::MulAdd(hn::Set(df, probs[v * kKeyTile + j]), value, sums[v]);
      }
    }
    for (int v = 0; v < kBlock; ++v) hn::StoreU(sums[v], df, acc + v * padded_dim + d);
  }
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

/// out = acc / sum, or 0 for a row that saw no key (fully masked, or empty context).
HWY_INLINE void NormalizeRow(const float* acc, float sum, int n, float* out) {
  const DF df;
  const auto s = hn::Set(df, sum);
  for (int d = 0; d < n; d += static_cast<int>(hn::Lanes(df))) {
    const auto v = sum > 0.0f ? hn::Div(hn::LoadU(df, acc + d), s) : hn::Zero(df);
    hn::StoreU(v, df, out + d);
  }
}

/// Running softmax state of one query vector.
struct RowState {
  float max = kNegInf;
  float sum = 0.0f;
  float* acc = nullptr;  ///< padded_dim floats.
};

/// Turns one row of scores (kKeyTile floats, -inf where masked or past the tile) into
/// probabilities relative to the updated running max, rescaling the running sum and accumulator.
/// Afterwards `scores` holds p_j (0 where masked); the caller adds sum_j p_j v_j.
HWY_INLINE void OnlineSoftmaxStep(float* scores, int padded_dim, RowState* state) {
  const DF df;
  const int n = static_cast<int>(hn::Lanes(df));
  auto tile_max = hn::Set(df, kNegInf);
  for (int j = 0; j < kKeyTile; j += n) tile_max = hn::Max(tile_max, hn::LoadU(df, scores + j));
  const float new_max = std::max(state->max, hn::GetLane(hn::MaxOfLanes(df, tile_max)));
  if (new_max == kNegInf) {  // nothing visible yet: every p_j is 0
    std::fill(scores, scores + kKeyTile, 0.0f);
    return;
  }
  const auto shift = hn::Set(df, new_max);
  for (int j = 0; j < kKeyTile; j += n) {
    hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j), shift)), df, scores + j);
  }
  if (state->max != new_max) {
    const float alpha = ExpScalar(state->max - new_max);  // 0 when the old max is -inf
    state->sum *= alpha;
    ScaleRow(alpha, padded_dim, state->acc);
    state->max = new_max;
  }
  state->sum += SumOfTile(scores);
}

/// Where a query vector (query row of a request, query head) reads its bias and limits from.
struct QueryRow {
  int64_t request = 0;
  int64_t row = 0;       ///< Row within the request.
  int head = 0;          ///< Query head.
  int64_t last_key = 0;  ///< Last visible key (inclusive) under the causal / ALiBi rule.
};

/// Adds the additive mask (in the activation type) at (head, packed row, packed column).
HWY_INLINE float MaskValue(const AttentionProblem& p, const QueryRow& r, int64_t key) {
  const int64_t t = p.batch.seqstarts[r.request] + r.row;
  const int64_t column = p.batch.kvstarts[r.request] + key;
  const int64_t offset = r.head * p.mask_head_stride + t * p.mask_row_stride + column;
  if (p.io_type == DType::kF32) return static_cast<const float*>(p.mask)[offset];
  return internal::F16ToF32(static_cast<const uint16_t*>(p.mask)[offset]);
}

/// Turns the dots of one query vector against the tile at context key `key0` into scores:
/// dot * scale + mask + ALiBi, and -inf for keys past the tile or past the row's causal limit.
HWY_INLINE void FinishScores(const AttentionProblem& p, const QueryRow& r, int64_t key0,
                             int num_keys, float* scores) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int n = static_cast<int>(hn::Lanes(df));
  const int64_t limit = std::min<int64_t>(num_keys - 1, r.last_key - key0);  // last visible j
  const int32_t last = static_cast<int32_t>(std::max<int64_t>(-1, limit));
  const auto scale = hn::Set(df, p.score_scale);
  const auto neg_inf = hn::Set(df, kNegInf);
  const float slope = p.alibi_slopes != nullptr ? p.alibi_slopes[r.head] : 0.0f;
  const auto base = hn::Set(df, static_cast<float>(key0 - r.last_key));
  // Scores saturate at FLT_MAX: a dot product that overflows fp32 (keys near 1e38) then wins the
  // softmax outright, which is the limit, instead of turning into inf - inf = NaN.
  const auto largest = hn::Set(df, std::numeric_limits<float>::max());
  for (int j = 0; j < kKeyTile; j += n) {
    auto s = hn::Min(hn::Mul(hn::LoadU(df, scores + j), scale), largest);
    const auto index = hn::Iota(di, j);
    if (p.alibi_slopes != nullptr) {
      // slope * (key - a), with key - a = (key0 - a) + j exact in float for any real context.
      s = hn::Add(s, hn::Mul(hn::Set(df, slope), hn::Add(base, hn::ConvertTo(df, index))));
    }
    const auto visible = hn::RebindMask(df, hn::Lt(index, hn::Set(di, last + 1)));
    hn::StoreU(hn::IfThenElse(visible, s, neg_inf), df, scores + j);
  }
  if (p.mask == nullptr) return;
  for (int j = 0; j <= last; ++j) scores[j] += MaskValue(p, r, key0 + j);
}

/// Decodes context keys [key0, key0 + count) of one plane into rows of padded_dim floats.
template <CacheElem kElem>
HWY_INLINE void DecodeTile(const AttentionProblem& p, const CachePlane& plane,
                           const RowCodec& codec, int64_t request, int kv_head, int64_t key0,
                           int count, float* rows, float* scales_tmp) {
  for (int j = 0; j < count; ++j) {
    float* row = rows + j * p.padded_dim;
    const int64_t slot = p.kv.slots.Slot(request, key0 + j);
    DecodeRow<kElem>(p.kv.cache, codec, plane, slot, kv_head, row, scales_tmp);
    ZeroPad(row, p.head_dim, p.padded_dim);
  }
}

/// keys_t[d * kKeyTile + j] = keys[j][d] for j < count (zeros up to the next 16 keys).
HWY_INLINE void TransposeTile(const float* keys, int count, int head_dim, int padded_dim,
                              float* keys_t) {
  const int padded_count =
      std::min<int>(kKeyTile, (count + kVirtualLanes - 1) / kVirtualLanes * kVirtualLanes);
  for (int d = 0; d < head_dim; ++d) {
    float* out = keys_t + d * kKeyTile;
    for (int j = 0; j < count; ++j) out[j] = keys[j * padded_dim + d];
    for (int j = count; j < padded_count; ++j) out[j] = 0.0f;
  }
}

/// Packed output (or query) element offset of (request row, head).
HWY_INLINE int64_t RowOffset(const AttentionProblem& p, int64_t request, int64_t row, int head) {
  return ((p.batch.seqstarts[request] + row) * p.num_heads + head) * p.head_dim;
}

HWY_INLINE void* OutputRow(const AttentionProblem& p, int64_t request, int64_t row, int head) {
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  return static_cast<char*>(p.output) + RowOffset(p, request, row, head) * size;
}

/// Scratch carve-up for one work item.
struct ItemScratch {
  float* queries;  ///< padded vectors x padded_dim
  float* acc;      ///< padded vectors x padded_dim
  float* maxes;    ///< padded vectors
  float* sums;     ///< padded vectors
  float* keys;     ///< kKeyTile x padded_dim
  float* keys_t;   ///< head_dim x kKeyTile: the key tile transposed
  float* values;   ///< kKeyTile x padded_dim
  float* scores;   ///< kQueryBlock x kKeyTile
  float* scales;   ///< head_dim + 1 (group scales of one row)
  float* row_out;  ///< padded_dim

  /// Splits the worker's scratch; `vectors` is a multiple of kQueryBlock / 2.
  static ItemScratch Carve(int vectors, const AttentionProblem& p, internal::Scratch* scratch) {
    const size_t dp = p.padded_dim, dim = p.head_dim, n = vectors;
    const size_t sizes[] = {
        n * dp,  n * dp, n, n, kKeyTile * dp, dim * kKeyTile, kKeyTile * dp, kQueryBlock * kKeyTile,
        dim + 1, dp};
    size_t total = 0;
    for (size_t size : sizes) total += (size + 15) / 16 * 16;  // 64-byte aligned parts
    float* next = scratch->Reserve(total);
    float* parts[std::size(sizes)];
    for (size_t i = 0; i < std::size(sizes); ++i) {
      parts[i] = next;
      next += (sizes[i] + 15) / 16 * 16;
    }
    return {parts[0], parts[1], parts[2], parts[3], parts[4],
            parts[5], parts[6], parts[7], parts[8], parts[9]};
  }
};

/// The query vectors of a work item, in (head of the group, row) order.
HWY_INLINE QueryRow MakeQueryRow(const AttentionProblem& p, int64_t request, int kv_head,
                                 int row_begin, int rows, int index) {
  QueryRow r;
  r.request = request;
  r.head = kv_head * p.group_size + index / rows;
  r.row = row_begin + index % rows;
  const int64_t kvlen = p.batch.KvLen(request);
  r.last_key = p.BottomRightLimited(request) ? kvlen - p.batch.SeqLen(request) + r.row : kvlen - 1;
  return r;
}

HWY_INLINE void LoadQueries(const AttentionProblem& p, const internal::WorkItem& w, int rows,
                            int padded_vectors, float* queries) {
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  std::fill(queries + static_cast<int64_t>(p.group_size) * rows * p.padded_dim,
            queries + static_cast<int64_t>(padded_vectors) * p.padded_dim, 0.0f);
  for (int index = 0; index < p.group_size * rows; ++index) {
    const int head = w.kv_head * p.group_size + index / rows;
    const int64_t row = w.row_begin + index % rows;
    const char* src = static_cast<const char*>(p.query) + RowOffset(p, w.request, row, head) * size;
    float* dst = queries + static_cast<int64_t>(index) * p.padded_dim;
    LoadActivations(src, p.io_type, p.head_dim, dst);
    ZeroPad(dst, p.head_dim, p.padded_dim);
  }
}

/// Writes the finished rows of a work item (single split) to the output.
HWY_INLINE void WriteOutputs(const AttentionProblem& p, const internal::WorkItem& w, int rows,
                             const ItemScratch& s) {
  for (int index = 0; index < p.group_size * rows; ++index) {
    const int head = w.kv_head * p.group_size + index / rows;
    const int64_t row = w.row_begin + index % rows;
    NormalizeRow(s.acc + static_cast<int64_t>(index) * p.padded_dim, s.sums[index], p.padded_dim,
                 s.row_out);
    StoreActivations(s.row_out, p.io_type, p.head_dim, OutputRow(p, w.request, row, head));
  }
}

/// Saves (max, sum, accumulator) of every query vector of a split work item.
HWY_INLINE void WriteStates(const AttentionProblem& p, const internal::WorkItem& w, int vectors,
                            const ItemScratch& s, float* states) {
  const int64_t stride = internal::StateFloats(p.padded_dim);
  for (int index = 0; index < vectors; ++index) {
    float* state = states + (w.state_index + index) * stride;
    state[0] = s.maxes[index];
    state[1] = s.sums[index];
    std::copy(s.acc + static_cast<int64_t>(index) * p.padded_dim,
              s.acc + static_cast<int64_t>(index + 1) * p.padded_dim, state + 2);
  }
}

/// Scores, softmax and value accumulation of query vectors [first, first + kBlock) against one
/// decoded tile.
template <int kBlock>
HWY_INLINE void AttendBlock(const AttentionProblem& p, const internal::WorkItem& w, int rows,
                            int first, int64_t key0, int count, const ItemScratch& s) {
  const int vectors = p.group_size * rows;
  const int dp = p.padded_dim;
  ScoreBlock<kBlock>(s.queries + static_cast<int64_t>(first) * dp, dp, s.keys_t, p.head_dim, count,
                     s.scores);
  for (int v = 0; v < kBlock; ++v) {
    float* scores = s.scores + v * kKeyTile;
    if (first + v >= vectors) {  // padding vector: attends to nothing
      std::fill(scores, scores + kKeyTile, 0.0f);
      continue;
    }
    const QueryRow r = MakeQueryRow(p, w.request, w.kv_head, w.row_begin, rows, first + v);
    FinishScores(p, r, key0, count, scores);
    RowState state{s.maxes[first + v], s.sums[first + v],
                   s.acc + static_cast<int64_t>(first + v) * dp};
    OnlineSoftmaxStep(scores, dp, &state);
    s.maxes[first + v] = state.max;
    s.sums[first + v] = state.sum;
  }
  AccumulateBlock<kBlock>(s.scores, s.values, count, dp, s.acc + static_cast<int64_t>(first) * dp);
}

template <CacheElem kElem>
void Attend(const AttentionProblem& p, const internal::WorkItem& w, float* states,
            internal::Scratch* scratch) {
  const int rows = w.row_end - w.row_begin;
  const int vectors = p.group_size * rows;
  constexpr int kSmallBlock = kQueryBlock / 2;
  const int padded_vectors = (vectors + kSmallBlock - 1) / kSmallBlock * kSmallBlock;
  const ItemScratch s = ItemScratch::Carve(padded_vectors, p, scratch);
  const RowCodec codec = RowCodec::For(p.kv.cache, p.io_type);
  LoadQueries(p, w, rows, padded_vectors, s.queries);
  std::fill(s.acc, s.acc + static_cast<int64_t>(padded_vectors) * p.padded_dim, 0.0f);
  std::fill(s.maxes, s.maxes + padded_vectors, kNegInf);
  std::fill(s.sums, s.sums + padded_vectors, 0.0f);
  for (int64_t key0 = w.key_begin; key0 < w.key_end; key0 += kKeyTile) {
    const int count = static_cast<int>(std::min<int64_t>(kKeyTile, w.key_end - key0));
    DecodeTile<kElem>(p, p.kv.cache.key, codec, w.request, w.kv_head, key0, count, s.keys,
                      s.scales);
    TransposeTile(s.keys, count, p.head_dim, p.padded_dim, s.keys_t);
    DecodeTile<kElem>(p, p.kv.cache.value, codec, w.request, w.kv_head, key0, count, s.values,
                      s.scales);
    int first = 0;
    for (; first + kQueryBlock <= vectors; first += kQueryBlock) {
      AttendBlock<kQueryBlock>(p, w, rows, first, key0, count, s);
    }
    for (; first < vectors; first += kSmallBlock) {
      AttendBlock<kSmallBlock>(p, w, rows, first, key0, count, s);
    }
  }
  if (w.num_splits == 1) {
    WriteOutputs(p, w, rows, s);
  } else {
    WriteStates(p, w, vectors, s, states);
  }
}

/// Merges the split states of one tile in split order and writes its output rows. Exact for
/// empty splits (max -inf, sum 0): they are skipped, never turned into NaN.
inline void MergeSplits(const AttentionProblem& p, const internal::MergeTask& task,
                        const float* states, internal::Scratch* scratch) {
  const int rows = task.row_end - task.row_begin;
  const int vectors = p.group_size * rows;
  const int64_t stride = internal::StateFloats(p.padded_dim);
  float* acc = scratch->Reserve(2 * static_cast<size_t>(p.padded_dim));
  float* out = acc + p.padded_dim;
  for (int index = 0; index < vectors; ++index) {
    float global_max = kNegInf;
    for (int s = 0; s < task.num_splits; ++s) {
      global_max = std::max(global_max, states[(task.state_index + s * vectors + index) * stride]);
    }
    std::fill(acc, acc + p.padded_dim, 0.0f);
    float sum = 0.0f;
    for (int s = 0; s < task.num_splits && global_max != kNegInf; ++s) {
      const float* state = states + (task.state_index + s * vectors + index) * stride;
      if (state[0] == kNegInf) continue;
      const float weight = state[0] == global_max ? 1.0f : ExpScalar(state[0] - global_max);
      sum += state[1] * weight;
      AddScaledRow(weight, state + 2, p.padded_dim, acc);
    }
    NormalizeRow(acc, sum, p.padded_dim, out);
    const int head = task.kv_head * p.group_size + index / rows;
    StoreActivations(out, p.io_type, p.head_dim,
                     OutputRow(p, task.request, task.row_begin + index % rows, head));
  }
}

// ------------------------------------------------------------------------------------------------
// KeyValueCache steps.

/// Request owning packed query row t (seqstarts is non-decreasing; empty requests own no row).
HWY_INLINE int64_t RequestOfRow(const internal::Batch& batch, int64_t t) {
  const int64_t* end = batch.seqstarts + batch.size + 1;
  return std::upper_bound(batch.seqstarts, end, t) - batch.seqstarts - 1;
}

template <CacheElem kElem>
void WriteTokens(const internal::WriteProblem& p, int64_t token_begin, int64_t token_end) {
  const CacheDesc& cache = p.kv.cache;
  const int dim = cache.head_dim;
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  std::vector<float> values(dim);
  std::vector<int8_t> codes(dim);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const int64_t b = RequestOfRow(p.batch, t);
    const int64_t position = p.batch.start_pos[b] + (t - p.batch.seqstarts[b]);
    const int64_t slot = p.kv.slots.Slot(b, position);
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t offset = (t * cache.num_kv_heads + h) * dim;
      LoadActivations(static_cast<const char*>(p.current_key) + offset * size, p.io_type, dim,
                      values.data());
      EncodeRow<kElem>(cache, p.io_type == DType::kF16, cache.key, slot, h, values.data(),
                       codes.data());
      LoadActivations(static_cast<const char*>(p.current_value) + offset * size, p.io_type, dim,
                      values.data());
      EncodeRow<kElem>(cache, p.io_type == DType::kF16, cache.value, slot, h, values.data(),
                       codes.data());
    }
  }
}

template <CacheElem kElem>
void GatherRows(const internal::GatherProblem& p, int64_t b, int64_t pos_begin, int64_t pos_end,
                internal::Scratch* scratch) {
  const CacheDesc& cache = p.kv.cache;
  const int dim = cache.head_dim;
  const RowCodec codec = RowCodec::For(cache, p.io_type);
  float* row = scratch->Reserve(2 * static_cast<size_t>(dim) + 1);
  float* scales = row + dim;
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  const int out_heads = cache.num_kv_heads * p.num_repeat;
  for (int64_t pos = pos_begin; pos < pos_end; ++pos) {
    const int64_t slot = p.kv.slots.Slot(b, pos);
    const int64_t out_row = p.batch.kvstarts[b] + pos;
    for (int plane = 0; plane < 2; ++plane) {
      const CachePlane& source = plane == 0 ? cache.key : cache.value;
      char* out = static_cast<char*>(plane == 0 ? p.key : p.value);
      for (int h = 0; h < cache.num_kv_heads; ++h) {
        DecodeRow<kElem>(cache, codec, source, slot, h, row, scales);
        for (int r = 0; r < p.num_repeat; ++r) {
          const int64_t offset = (out_row * out_heads + h * p.num_repeat + r) * dim;
          StoreActivations(row, p.io_type, dim, out + offset * size);
        }
      }
    }
  }
}

template <CacheElem kElem>
internal::CpuKernels MakeCpuKernels() {
  internal::CpuKernels k;
  k.write_tokens = &WriteTokens<kElem>;
  k.gather_rows = &GatherRows<kElem>;
  k.attend = &Attend<kElem>;
  k.merge = &MergeSplits;
  return k;
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_SIMD_ATTENTION_INL_H_
