// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The work items every backend runs, and the planner of MultiHeadAttention and
// MultiHeadCacheAttention (unified attention's is core/plan_unified.h). A plan depends on shapes
// only (never on the thread count, the SIMD target or the backend), which is what makes results
// bitwise reproducible: the same tiles and splits, reduced in the same order.

#ifndef DYNATTN_CORE_PLAN_H_
#define DYNATTN_CORE_PLAN_H_

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace dynattn::internal {

/// Query rows per work item (times the GQA group size gives the query vectors of a tile).
inline constexpr int kRowTile = 32;
/// Keys per context split; a multiple of kKeyTile. Long contexts of few requests become several
/// work items so that every core has work; their states merge exactly afterwards.
inline constexpr int64_t kSplitKeys = 1024;

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

/// KeyValueCache's gather: context rows [begin, end) of one request, one parallel piece.
struct GatherPiece {
  int64_t request = 0;
  int64_t begin = 0, end = 0;
};

/// The work of one MultiHeadAttention or MultiHeadCacheAttention call.
struct AttentionPlan {
  std::vector<WorkItem> items;    ///< Independent; any order, any thread.
  std::vector<MergeTask> merges;  ///< Run after all items; independent of each other.
  int64_t num_states = 0;         ///< Partial states the split items write.
};

/// Tiles every request's query rows, and splits each tile's visible context.
AttentionPlan PlanAttention(const AttentionProblem& problem);

/// Cuts every request's context into pieces of at most kGatherRows rows.
std::vector<GatherPiece> PlanGather(const Batch& batch);
inline constexpr int64_t kGatherRows = 64;

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_PLAN_H_
