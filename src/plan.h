// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Planning: the list of work items of an attention call and where split contexts merge.
// The plan depends on shapes only (never on the thread count or the SIMD target), which is what
// makes results bitwise reproducible: the same tiles and splits, reduced in the same order.

#ifndef DYNATTN_SRC_PLAN_H_
#define DYNATTN_SRC_PLAN_H_

#include <cstdint>
#include <vector>

#include "simd/kernel_abi.h"

namespace dynattn::internal {

/// Query rows per work item (times the GQA group size gives the query vectors of a tile).
inline constexpr int kRowTile = 32;
/// Keys per context split; a multiple of kKeyTile. Long contexts of few requests become several
/// work items so that every core has work; their states merge exactly afterwards.
inline constexpr int64_t kSplitKeys = 1024;

struct AttentionPlan {
  std::vector<WorkItem> items;    ///< Independent; any order, any thread.
  std::vector<MergeTask> merges;  ///< Run after all items; independent of each other.
  int64_t num_states = 0;         ///< Partial states the split items write.
};

/// Tiles every request's query rows, and splits each tile's visible context.
AttentionPlan PlanAttention(const AttentionProblem& problem);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_PLAN_H_
