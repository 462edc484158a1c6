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
// * Determinism: a dot product keeps kVirtualLanes partial sums (two AVX2 vectors or one AVX-512
//   vector hold the same 16 sums) and reduces them in one fixed tree; sums of probabilities are
//   sequential; exp is Highway's polynomial, lane-wise. Tiles and splits come from the plan, which
//   depends on shapes only. So bits do not depend on threads, request order or FMA target.
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

/// q . k over `padded_dim` floats (both zero-padded) with kVirtualLanes partial sums reduced in a
/// fixed tree: the same bits for every vector width that has FMA.
HWY_INLINE float DotVirtual(const float* q, const float* k, int padded_dim) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kVectors = kVirtualLanes / kN;
  hn::Vec<DF> acc[kVectors];
  for (int a = 0; a < kVectors; ++a) acc[a] = hn::Zero(df);
  for (int d = 0; d < padded_dim; d += kVirtualLanes) {
    for (int a = 0; a < kVectors; ++a) {
      acc[a] = hn::MulAdd(hn::LoadU(df, q + d + a * kN), hn::LoadU(df, k + d + a * kN), acc[a]);
    }
  }
  HWY_ALIGN float lanes[kVirtualLanes];
  for (int a = 0; a < kVectors; ++a) hn::Store(acc[a], df, lanes + a * kN);
  for (int width = kVirtualLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
}

/// exp(x) for one float with the same polynomial (and bits) as the vector path.
HWY_INLINE float ExpScalar(float x) {
  const DF df;
  return hn::GetLane(hn::Exp(df, hn::Set(df, x)));
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

/// Folds one tile of scores (kKeyTile floats, -inf where masked or past the tile) and its value
/// rows into the running state.
HWY_INLINE void OnlineSoftmaxStep(float* scores, int num_keys, const float* values, int padded_dim,
                                  RowState* state) {
  float tile_max = kNegInf;
  for (int j = 0; j < num_keys; ++j) tile_max = std::max(tile_max, scores[j]);
  const float new_max = std::max(state->max, tile_max);
  if (new_max == kNegInf) return;  // nothing visible yet
  const DF df;
  const auto shift = hn::Set(df, new_max);
  for (int j = 0; j < kKeyTile; j += static_cast<int>(hn::Lanes(df))) {
    hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j), shift)), df, scores + j);
  }
  if (state->max != new_max) {
    const float alpha = ExpScalar(state->max - new_max);  // 0 when the old max is -inf
    state->sum *= alpha;
    ScaleRow(alpha, padded_dim, state->acc);
    state->max = new_max;
  }
  float tile_sum = 0.0f;
  for (int j = 0; j < num_keys; ++j) tile_sum += scores[j];
  state->sum += tile_sum;
  for (int j = 0; j < num_keys; ++j) {
    if (scores[j] != 0.0f) AddScaledRow(scores[j], values + j * padded_dim, padded_dim, state->acc);
  }
}

/// Where a query vector (query row of a request, query head) reads its bias and limits from.
struct QueryRow {
  int64_t request = 0;
  int64_t row = 0;       ///< Row within the request.
  int head = 0;          ///< Query head.
  int64_t last_key = 0;  ///< Last visible key (inclusive) under the causal / ALiBi rule.
  const float* q = nullptr;
};

/// Adds the additive mask (in the activation type) at (head, packed row, packed column).
HWY_INLINE float MaskValue(const AttentionProblem& p, const QueryRow& r, int64_t key) {
  const int64_t t = p.batch.seqstarts[r.request] + r.row;
  const int64_t column = p.batch.kvstarts[r.request] + key;
  const int64_t offset = r.head * p.mask_head_stride + t * p.mask_row_stride + column;
  if (p.io_type == DType::kF32) return static_cast<const float*>(p.mask)[offset];
  return internal::F16ToF32(static_cast<const uint16_t*>(p.mask)[offset]);
}

/// Scores of one query vector against a decoded key tile starting at context key `key0`.
HWY_INLINE void ScoreTile(const AttentionProblem& p, const QueryRow& r, const float* keys,
                          int64_t key0, int num_keys, float* scores) {
  for (int j = 0; j < kKeyTile; ++j) {
    const int64_t key = key0 + j;
    if (j >= num_keys || key > r.last_key) {
      scores[j] = kNegInf;
      continue;
    }
    float s = DotVirtual(r.q, keys + j * p.padded_dim, p.padded_dim) * p.score_scale;
    if (p.mask != nullptr) s += MaskValue(p, r, key);
    if (p.alibi_slopes != nullptr)
      s += p.alibi_slopes[r.head] * static_cast<float>(key - r.last_key);
    scores[j] = s;
  }
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
  float* queries;  ///< query vectors x padded_dim
  float* acc;      ///< query vectors x padded_dim
  float* maxes;    ///< query vectors
  float* sums;     ///< query vectors
  float* keys;     ///< kKeyTile x padded_dim
  float* values;   ///< kKeyTile x padded_dim
  float* scores;   ///< kKeyTile
  float* scales;   ///< head_dim (group scales of one row)
  float* row_out;  ///< padded_dim

  static ItemScratch Carve(int vectors, const AttentionProblem& p, internal::Scratch* scratch) {
    const size_t dp = p.padded_dim;
    const size_t sizes[] = {vectors * dp,    vectors * dp,           size_t(vectors),
                            size_t(vectors), kKeyTile * dp,          kKeyTile * dp,
                            kKeyTile,        size_t(p.head_dim) + 1, dp};
    size_t total = 0;
    for (size_t s : sizes) total += (s + 15) / 16 * 16;
    float* base = scratch->Reserve(total);
    float* parts[9];
    for (int i = 0; i < 9; ++i) {
      parts[i] = base;
      base += (sizes[i] + 15) / 16 * 16;
    }
    return {parts[0], parts[1], parts[2], parts[3], parts[4],
            parts[5], parts[6], parts[7], parts[8]};
  }
};

/// The query vectors of a work item, in (head of the group, row) order.
HWY_INLINE QueryRow MakeQueryRow(const AttentionProblem& p, int64_t request, int kv_head,
                                 int row_begin, int rows, int index, const float* queries) {
  QueryRow r;
  r.request = request;
  r.head = kv_head * p.group_size + index / rows;
  r.row = row_begin + index % rows;
  const int64_t kvlen = p.batch.KvLen(request);
  r.last_key = p.BottomRightLimited(request) ? kvlen - p.batch.SeqLen(request) + r.row : kvlen - 1;
  r.q = queries + static_cast<int64_t>(index) * p.padded_dim;
  return r;
}

HWY_INLINE void LoadQueries(const AttentionProblem& p, const internal::WorkItem& w, int rows,
                            float* queries) {
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
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

template <CacheElem kElem>
void Attend(const AttentionProblem& p, const internal::WorkItem& w, float* states,
            internal::Scratch* scratch) {
  const int rows = w.row_end - w.row_begin;
  const int vectors = p.group_size * rows;
  const ItemScratch s = ItemScratch::Carve(vectors, p, scratch);
  const RowCodec codec = RowCodec::For(p.kv.cache, p.io_type);
  LoadQueries(p, w, rows, s.queries);
  std::fill(s.acc, s.acc + static_cast<int64_t>(vectors) * p.padded_dim, 0.0f);
  std::fill(s.maxes, s.maxes + vectors, kNegInf);
  std::fill(s.sums, s.sums + vectors, 0.0f);
  for (int64_t key0 = w.key_begin; key0 < w.key_end; key0 += kKeyTile) {
    const int count = static_cast<int>(std::min<int64_t>(kKeyTile, w.key_end - key0));
    DecodeTile<kElem>(p, p.kv.cache.key, codec, w.request, w.kv_head, key0, count, s.keys,
                      s.scales);
    DecodeTile<kElem>(p, p.kv.cache.value, codec, w.request, w.kv_head, key0, count, s.values,
                      s.scales);
    for (int index = 0; index < vectors; ++index) {
      const QueryRow r = MakeQueryRow(p, w.request, w.kv_head, w.row_begin, rows, index, s.queries);
      ScoreTile(p, r, s.keys, key0, count, s.scores);
      RowState state{s.maxes[index], s.sums[index],
                     s.acc + static_cast<int64_t>(index) * p.padded_dim};
      OnlineSoftmaxStep(s.scores, count, s.values, p.padded_dim, &state);
      s.maxes[index] = state.max;
      s.sums[index] = state.sum;
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
