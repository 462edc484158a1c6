// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// One validated call as every backend sees it: the packed batch, the slot map that addresses the
// cache, and the attention, write and gather problems. Plain data that crosses unchanged from
// src/ (validation, planning) into the kernels of cpu/ and cuda/; the member functions are the
// addressing and masking rules themselves, compiled for the host and the device (DYNATTN_HD), so
// no backend has its own copy. Everything here is already validated: kernels trust every index.

#ifndef DYNATTN_CORE_PROBLEM_H_
#define DYNATTN_CORE_PROBLEM_H_

#include <cstdint>

#include "core/cache_rows.h"
#include "core/host_device.h"
#include "dynattn/cache.h"
#include "dynattn/types.h"

namespace dynattn::internal {

/// Floats per "virtual vector": scratch rows are padded to it, key tiles are scored in chunks of
/// it, and the softmax sum keeps this many partial sums folded in one fixed order, so AVX2 (two
/// vectors) and AVX-512 (one) give the same bits.
inline constexpr int kVirtualLanes = 16;
/// Keys per online-softmax step. Fixed (never derived from the target) for the same reason.
inline constexpr int kKeyTile = 64;

/// Rounds `n` up to a multiple of `kVirtualLanes`.
DYNATTN_HD int64_t PadToLanes(int64_t n) {
  return (n + kVirtualLanes - 1) / kVirtualLanes * kVirtualLanes;
}

/// Logical position p of request b -> physical slot.
struct SlotMap {
  enum class Mode : uint8_t {
    kOffset,  ///< starts[b] + p (PMX cache_mode 0; also MHA's packed key rows).
    kPaged,   ///< starts[b * table_stride + p / page_size] + p % page_size (cache_mode 1).
    kBlocks,  ///< starts[b * table_stride + p / page_size] * block_stride + p % page_size: block
              ///< tables of block ids (unified attention, engines' caches).
  };
  Mode mode = Mode::kOffset;
  const int64_t* starts = nullptr;  ///< Offsets (B), page table or block table (B, table_stride).
  int64_t table_stride = 0;         ///< Paged / blocks: entries per request.
  int64_t page_size = 1;            ///< Paged / blocks: tokens per page (block).
  int64_t block_stride = 1;         ///< Blocks: slots between consecutive block ids.

  /// Slot of the first token of the page (block) holding position p.
  DYNATTN_HD int64_t PageStart(int64_t b, int64_t p) const {
    const int64_t entry = starts[b * table_stride + p / page_size];
    return mode == Mode::kBlocks ? entry * block_stride : entry;
  }

  DYNATTN_HD int64_t Slot(int64_t b, int64_t p) const {
    if (mode == Mode::kOffset) return starts[b] + p;
    return PageStart(b, p) + p % page_size;
  }

  /// out[j] = Slot(b, p0 + j) for j < count, with one division per page instead of per position.
  DYNATTN_HD void Slots(int64_t b, int64_t p0, int count, int64_t* out) const {
    if (mode == Mode::kOffset) {
      for (int j = 0; j < count; ++j) out[j] = starts[b] + p0 + j;
      return;
    }
    for (int j = 0; j < count;) {
      const int64_t within = (p0 + j) % page_size;
      const int64_t first = PageStart(b, p0 + j) + within;
      const int64_t left = count - j, in_page = page_size - within;
      const int64_t run = left < in_page ? left : in_page;
      for (int64_t k = 0; k < run; ++k) out[j + k] = first + k;
      j += static_cast<int>(run);
    }
  }
};

/// Packed request boundaries (all arrays validated).
struct Batch {
  int64_t size = 0;                    ///< B.
  const int64_t* seqstarts = nullptr;  ///< (B+1) query-row offsets.
  const int64_t* kvstarts = nullptr;   ///< (B+1) context-row offsets.
  const int64_t* start_pos = nullptr;  ///< (B) first write position, or null (MHA).
  /// (B) or null: the position of request b's first context key in the whole request (a context
  /// shard's offset). With it, start_pos holds the new tokens' positions in the whole request and
  /// the context holds positions [key_offsets[b], key_offsets[b] + kvlen_b).
  const int64_t* key_offsets = nullptr;
  int64_t decoding_batches = 0;  ///< The first requests, never causally masked.

  DYNATTN_HD int64_t SeqLen(int64_t b) const { return seqstarts[b + 1] - seqstarts[b]; }
  DYNATTN_HD int64_t KvLen(int64_t b) const { return kvstarts[b + 1] - kvstarts[b]; }
  /// Context key number of query row `row` of request b (its position minus the first key's):
  /// kvlen - seqlen + row, the new tokens being the context's last keys; on a context shard it
  /// may lie past the shard's last key (a later shard holds the new tokens) or before its first.
  DYNATTN_HD int64_t QueryKeyNumber(int64_t b, int64_t row) const {
    if (key_offsets != nullptr) return start_pos[b] - key_offsets[b] + row;
    return KvLen(b) - SeqLen(b) + row;
  }
  /// Context key number that new token `t` of request b is written at, or -1 when the call's
  /// context does not hold it (a context shard holds the new tokens of its own positions only).
  DYNATTN_HD int64_t WriteKeyNumber(int64_t b, int64_t t) const {
    const int64_t key =
        key_offsets != nullptr ? start_pos[b] - key_offsets[b] + t : start_pos[b] + t;
    return key >= 0 && key < KvLen(b) ? key : -1;
  }
};

/// Where one request's context keys and values come from: a cache (or MHA's packed K/V tensors
/// seen as an unquantized cache) and the slot map that addresses it.
struct KvSource {
  CacheDesc cache;
  SlotMap slots;
};

/// One validated attention call, as the kernels see it.
struct AttentionProblem {
  Batch batch;
  DType io_type = DType::kF32;  ///< dtype of query, output and mask.
  int num_heads = 0;            ///< Hq.
  int num_kv_heads = 0;         ///< Hkv.
  int group_size = 1;           ///< R = Hq / Hkv query heads per KV head.
  int head_dim = 0;             ///< Dk: elements of a query and key row.
  int value_dim = 0;            ///< Dv: elements of a value and output row.
  int padded_dim = 0;           ///< Dk rounded up to kVirtualLanes (query and key scratch rows).
  int padded_value_dim = 0;     ///< Dv rounded up to kVirtualLanes (value rows, accumulators).
  float score_scale = 1.0f;     ///< softmax_scale, or 1 / sqrt(Dk) when the caller left it 0.
  float soft_cap = 0.0f;        ///< Logit soft-cap: 0 = off, else s = cap * tanh(s0 / cap).
  int64_t window_left = -1;     ///< Sliding window: -1 = off, else keys [i - window_left, i].
  bool is_causal = false;
  const float* alibi_slopes = nullptr;  ///< (Hq) slopes when ALiBi is on, else null.
  const float* sinks = nullptr;         ///< (Hq) attention sinks, or null.
  const void* query = nullptr;          ///< (Tq, Hq, Dk), rows query_row_stride apart.
  void* output = nullptr;               ///< (Tq, Hq, Dv), rows output_row_stride apart.
  int64_t query_row_stride = 0;         ///< Elements between query rows; 0 = dense (Hq * Dk).
  int64_t output_row_stride = 0;        ///< Elements between output rows; 0 = dense (Hq * Dv).
  float* lse = nullptr;                 ///< Optional (Tq, Hq) natural-log log-sum-exp.
  const void* mask = nullptr;           ///< Additive mask or null.
  int64_t mask_head_stride = 0;         ///< 0 for a 2-D mask.
  int64_t mask_row_stride = 0;          ///< Padded last dim of the mask.
  KvSource kv;

  /// Element offset of (packed row, query head) in the query / the output.
  DYNATTN_HD int64_t QueryOffset(int64_t token, int head) const {
    return token * (query_row_stride > 0 ? query_row_stride : int64_t{num_heads} * head_dim) +
           int64_t{head} * head_dim;
  }
  DYNATTN_HD int64_t OutputOffset(int64_t token, int head) const {
    return token * (output_row_stride > 0 ? output_row_stride : int64_t{num_heads} * value_dim) +
           int64_t{head} * value_dim;
  }

  /// True when request b's query row i may only see keys j <= kvlen - seqlen + i (spec §5.3:
  /// the causal mask is bottom-right aligned, decodes are never masked, and ALiBi carries its own
  /// causal -inf, §5.5). A sliding window limits every row the same way (its keys are
  /// [i - window_left, i]).
  DYNATTN_HD bool BottomRightLimited(int64_t b) const {
    return alibi_slopes != nullptr || window_left >= 0 ||
           (is_causal && batch.SeqLen(b) > 1 && b >= batch.decoding_batches);
  }
  /// Position of query row `row` of request b in key numbers: kvlen - seqlen + row (bottom-right),
  /// moved by the context's key offset on a shard. ALiBi's distance is measured from it.
  DYNATTN_HD int64_t QueryPosition(int64_t b, int64_t row) const {
    return batch.QueryKeyNumber(b, row);
  }
  /// The last key (inclusive) that query row `row` of request b sees: the bottom-right causal
  /// limit kvlen - seqlen + row when limited (at most the last context key; below 0 when a shard's
  /// keys all come after the query), else the last context key.
  DYNATTN_HD int64_t LastVisibleKey(int64_t b, int64_t row) const {
    const int64_t last = batch.KvLen(b) - 1;
    if (!BottomRightLimited(b)) return last;
    const int64_t position = QueryPosition(b, row);
    return position < last ? position : last;
  }
  /// The first key that query row `row` of request b sees: 0, or max(0, i - window_left) under a
  /// sliding window. Keys before it are neither read nor counted.
  DYNATTN_HD int64_t FirstVisibleKey(int64_t b, int64_t row) const {
    return WindowStart(QueryPosition(b, row), window_left);
  }
  /// First key of a window of `window_left` keys left of position `position` (0 when off).
  DYNATTN_HD static int64_t WindowStart(int64_t position, int64_t window_left) {
    if (window_left < 0 || position <= window_left) return 0;
    return position - window_left;
  }
};

/// One validated cache write (KeyValueCache step 1): new token t of request b goes to
/// position start_pos[b] + t.
struct WriteProblem {
  Batch batch;
  DType io_type = DType::kF32;
  const void* current_key = nullptr;  ///< (Tq, Hkv, Dk).
  /// (Tq, Hkv, Dv), or null when the values are the keys' first Dv elements (value_from_key):
  /// only the key plane is written.
  const void* current_value = nullptr;
  KvSource kv;
  int64_t key_row_stride = 0;    ///< Elements between current_key rows; 0 = dense (Hkv * D).
  int64_t value_row_stride = 0;  ///< Elements between current_value rows; 0 = dense.

  /// Element offset of (new token, KV head) in current_key (plane 0) or current_value (1).
  DYNATTN_HD int64_t SourceOffset(int plane, int64_t token, int head) const {
    const int64_t stride = plane == 0 ? key_row_stride : value_row_stride;
    const int dim = plane == 0 ? kv.cache.head_dim : ValueDim(kv.cache);
    const int64_t dense = int64_t{kv.cache.num_kv_heads} * dim;
    return token * (stride > 0 ? stride : dense) + int64_t{head} * dim;
  }
};

/// One validated gather (KeyValueCache step 2).
struct GatherProblem {
  Batch batch;
  DType io_type = DType::kF32;
  int num_repeat = 1;
  void* key = nullptr;    ///< (kvstarts[B], Hkv * num_repeat, Dk).
  void* value = nullptr;  ///< (kvstarts[B], Hkv * num_repeat, Dv).
  KvSource kv;
  int64_t key_row_stride = 0;    ///< Elements between key rows; 0 = dense (Hkv * R * D).
  int64_t value_row_stride = 0;  ///< Elements between value rows; 0 = dense.

  /// Element offset of (context row, output head) in key (plane 0) or value (1).
  DYNATTN_HD int64_t OutputOffset(int plane, int64_t row, int head) const {
    const int64_t stride = plane == 0 ? key_row_stride : value_row_stride;
    const int dim = plane == 0 ? kv.cache.head_dim : ValueDim(kv.cache);
    const int64_t dense = int64_t{kv.cache.num_kv_heads} * num_repeat * dim;
    return row * (stride > 0 ? stride : dense) + int64_t{head} * dim;
  }
};

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_PROBLEM_H_
