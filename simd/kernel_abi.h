// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The plain structs that cross from src/ (validation, planning, dispatch) into the per-target
// kernels of simd/. Everything here is target-independent and already validated: kernels trust
// every index they are given.

#ifndef DYNATTN_SIMD_KERNEL_ABI_H_
#define DYNATTN_SIMD_KERNEL_ABI_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

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
inline int64_t PadToLanes(int64_t n) {
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
  int64_t PageStart(int64_t b, int64_t p) const {
    const int64_t entry = starts[b * table_stride + p / page_size];
    return mode == Mode::kBlocks ? entry * block_stride : entry;
  }

  int64_t Slot(int64_t b, int64_t p) const {
    if (mode == Mode::kOffset) return starts[b] + p;
    return PageStart(b, p) + p % page_size;
  }

  /// out[j] = Slot(b, p0 + j) for j < count, with one division per page instead of per position.
  void Slots(int64_t b, int64_t p0, int count, int64_t* out) const {
    if (mode == Mode::kOffset) {
      for (int j = 0; j < count; ++j) out[j] = starts[b] + p0 + j;
      return;
    }
    for (int j = 0; j < count;) {
      const int64_t within = (p0 + j) % page_size;
      const int64_t first = PageStart(b, p0 + j) + within;
      const int64_t run = std::min<int64_t>(count - j, page_size - within);
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
  int64_t decoding_batches = 0;        ///< The first requests, never causally masked.

  int64_t SeqLen(int64_t b) const { return seqstarts[b + 1] - seqstarts[b]; }
  int64_t KvLen(int64_t b) const { return kvstarts[b + 1] - kvstarts[b]; }
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
  int head_dim = 0;             ///< D.
  int padded_dim = 0;           ///< D rounded up to kVirtualLanes (scratch row length).
  float score_scale = 1.0f;     ///< 1 / sqrt(D).
  bool is_causal = false;
  const float* alibi_slopes = nullptr;  ///< (Hq) slopes when ALiBi is on, else null.
  const void* query = nullptr;          ///< (Tq, Hq, D).
  void* output = nullptr;               ///< (Tq, Hq, D).
  float* lse = nullptr;                 ///< Optional (Tq, Hq) natural-log log-sum-exp.
  const void* mask = nullptr;           ///< Additive mask or null.
  int64_t mask_head_stride = 0;         ///< 0 for a 2-D mask.
  int64_t mask_row_stride = 0;          ///< Padded last dim of the mask.
  KvSource kv;

  /// True when request b's query row i may only see keys j <= kvlen - seqlen + i.
  bool BottomRightLimited(int64_t b) const {
    return alibi_slopes != nullptr ||
           (is_causal && batch.SeqLen(b) > 1 && b >= batch.decoding_batches);
  }
};

/// One unit of parallel work: a request's KV head with all its GQA query heads, a tile of its
/// query rows, and a contiguous range of its keys (one split of the context).
struct WorkItem {
  int64_t request = 0;
  int32_t kv_head = 0;
  int32_t row_begin = 0, row_end = 0;  ///< Query rows [row_begin, row_end) of the request.
  int64_t key_begin = 0, key_end = 0;  ///< Keys [key_begin, key_end) of the request's context.
  int32_t num_splits = 1;   ///< Parts its rows merge from; 1: write the output directly, else
                            ///< write a partial state per query vector.
  int64_t state_index = 0;  ///< First partial state to write; vector h * rows + r (head h of the
                            ///< group, row r of the tile) writes state_index + h * rows + r.
};

/// Unified attention's shared path: a query token that reads a shared segment (a run of cached
/// blocks that each of its readers holds at consecutive logical positions).
struct SharedReader {
  int64_t token = 0;    ///< Packed query row.
  int64_t request = 0;  ///< Its request.
  int64_t visible = 0;  ///< Segment keys [0, visible) are in the token's cached context.
  int64_t origin = 0;   ///< The token's position minus the segment's first logical position.
};

/// Shared-path work: segment keys [key_begin, key_end), one KV head, readers [0, num_readers).
/// The segment's keys are read once for all the readers' query vectors. Vector h * num_readers + r
/// (head h of the group, reader r) writes state state_index + h * num_readers + r.
struct SharedItem {
  const int64_t* blocks = nullptr;  ///< The segment's physical block ids, in key order.
  int64_t block_size = 1;
  int64_t block_stride = 1;
  const SharedReader* readers = nullptr;
  int32_t num_readers = 0;
  int32_t kv_head = 0;
  int64_t key_begin = 0, key_end = 0;
  int64_t state_index = 0;
};

/// Where one part of a query token's attention was left: the state of query head h is at
/// first + h * head_stride.
struct PartRef {
  int64_t first = 0;
  int64_t head_stride = 0;
};

/// A tile whose context was split: its `num_splits` partial states are merged in split order.
struct MergeTask {
  int64_t request = 0;
  int32_t kv_head = 0;
  int32_t row_begin = 0, row_end = 0;
  int32_t num_splits = 0;
  int64_t state_index = 0;  ///< States of split s start at state_index + s * query vectors.
};

/// Floats in one partial softmax state: running max, sum, then the padded accumulator.
inline int64_t StateFloats(int padded_dim) { return 2 + padded_dim; }

/// Per-worker scratch, grown on demand; never shared between threads.
struct Scratch {
  std::vector<float> floats;
  float* Reserve(size_t n) {
    if (floats.size() < n) floats.resize(n);
    return floats.data();
  }
  /// Reserves consecutive parts of the given sizes (in floats), each 64-byte aligned relative to
  /// the first, and returns their starts.
  template <size_t kParts>
  std::array<float*, kParts> Carve(const size_t (&sizes)[kParts]) {
    size_t total = 0;
    for (size_t size : sizes) total += PaddedSize(size);
    float* next = Reserve(total);
    std::array<float*, kParts> parts;
    for (size_t i = 0; i < kParts; ++i) {
      parts[i] = next;
      next += PaddedSize(sizes[i]);
    }
    return parts;
  }

 private:
  static size_t PaddedSize(size_t n) { return (n + 15) / 16 * 16; }
};

/// One validated cache write (KeyValueCache step 1): new token t of request b goes to
/// position start_pos[b] + t.
struct WriteProblem {
  Batch batch;
  DType io_type = DType::kF32;
  const void* current_key = nullptr;    ///< (Tq, Hkv, D).
  const void* current_value = nullptr;  ///< (Tq, Hkv, D).
  KvSource kv;
};

/// One validated gather (KeyValueCache step 2).
struct GatherProblem {
  Batch batch;
  DType io_type = DType::kF32;
  int num_repeat = 1;
  void* key = nullptr;    ///< (kvstarts[B], Hkv * num_repeat, D).
  void* value = nullptr;  ///< Same shape.
  KvSource kv;
};

/// The per-target kernels for one cache element type.
struct CpuKernels {
  /// Quantizes and stores new tokens [token_begin, token_end) (packed query-row indices).
  void (*write_tokens)(const WriteProblem&, int64_t token_begin, int64_t token_end);
  /// Gathers context rows [row_begin, row_end) (packed kvstarts rows) of request b.
  void (*gather_rows)(const GatherProblem&, int64_t b, int64_t row_begin, int64_t row_end,
                      Scratch*);
  /// Runs one work item; writes output rows or partial states.
  void (*attend)(const AttentionProblem&, const WorkItem&, float* states, Scratch*);
  /// Merges the partial states of one split tile and writes its output rows.
  void (*merge)(const AttentionProblem&, const MergeTask&, const float* states, Scratch*);
  /// Runs one shared-path work item of unified attention; writes partial states.
  void (*attend_shared)(const AttentionProblem&, const SharedItem&, float* states, Scratch*);
  /// Merges the parts [parts, parts + count) of one query token, in that order, and writes its
  /// output rows (and log-sum-exp when asked).
  void (*merge_parts)(const AttentionProblem&, int64_t token, const PartRef* parts, int count,
                      const float* states, Scratch*);
};

}  // namespace dynattn::internal

#endif  // DYNATTN_SIMD_KERNEL_ABI_H_
