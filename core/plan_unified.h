// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The unified-attention planner (spec unified-and-ksana §6.1-§6.4): which path computes every
// (query token, key) pair of a mixed step, as work items for the kernels.
//
// * Causal: each request's fresh keys (positions >= context) against its own tokens, in row tiles
//   (block-diagonal, never a T x T mask).
// * Shared: cached blocks read by more than one query token. Blocks that every one of the same
//   readers holds at consecutive logical positions form a segment; a segment's keys are decoded
//   once per tile for all its readers (up to kSharedReaders tokens per work item).
// * Unique: cached blocks read by one query token (a decode's own blocks), gathered by id.
// Cache paths read positions < context only, except that a decode's last unique run also takes
// the decode's own fresh key (then it has no causal item), so every pair has exactly one path
// (`CheckCoverage` proves it; debug builds run it on every call). A decode without shared blocks
// is thus planned exactly as a pure decode step plans it, and gets the same bits.
//
// Sliding window (window_left >= 0): a token at position i reads keys [i - window_left, i] only.
// A request reads its cached blocks from the one holding its first token's window start; blocks
// before it are neither planned, read nor counted, and each item starts at the first key tile
// one of its tokens sees.
//
// Every token's parts are listed in logical key order (shared segments and unique runs as its
// request reads them, then its causal splits) and merged in that order, so a token's bits depend
// on its own request and on which of its blocks are shared, never on thread count or on the
// order of requests. The plan depends on shapes and block ids only.

#ifndef DYNATTN_CORE_PLAN_UNIFIED_H_
#define DYNATTN_CORE_PLAN_UNIFIED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan.h"

namespace dynattn::internal {

/// Query tokens of one shared work item: their query vectors and running states stay in L2.
inline constexpr int kSharedReaders = 64;

/// A validated unified step, as the planner sees it.
struct UnifiedStep {
  int64_t num_requests = 0;
  const int64_t* query_start_loc = nullptr;  ///< (B+1).
  const int64_t* context_lens = nullptr;     ///< (B).
  const int64_t* block_table = nullptr;      ///< (B, table_stride).
  int64_t table_stride = 0;
  int64_t block_size = 1;
  int64_t block_stride = 1;
  int num_kv_heads = 1;
  int group_size = 1;
  int64_t window_left = -1;  ///< Sliding window: -1 = off, else keys [i - window_left, i].

  int64_t QueryLen(int64_t b) const { return query_start_loc[b + 1] - query_start_loc[b]; }
  int64_t Tokens() const { return query_start_loc[num_requests]; }
  /// Cached blocks [0, n) of request b's context (none when it has no query token).
  int64_t ContextBlocks(int64_t b) const {
    if (QueryLen(b) == 0) return 0;
    return (context_lens[b] + block_size - 1) / block_size;
  }
  /// The first key query token i of request b sees: its sliding window's start (0 when off).
  int64_t FirstKey(int64_t b, int64_t i) const {
    return AttentionProblem::WindowStart(context_lens[b] + i, window_left);
  }
  /// The first cached block request b reads: the one holding its first token's window start, or
  /// ContextBlocks(b) when that window starts past the cached context.
  int64_t FirstContextBlock(int64_t b) const {
    const int64_t first = FirstKey(b, 0);
    return first >= context_lens[b] ? ContextBlocks(b) : first / block_size;
  }
  int64_t Block(int64_t b, int64_t j) const { return block_table[b * table_stride + j]; }
};

/// Which path a piece of work belongs to.
enum class UnifiedPath : uint8_t { kCausal, kShared, kUnique };

/// The plan of one step. Shared items point into `segment_blocks` and `readers`, so a plan must
/// not be copied while they are in use (it is moved or used in place).
struct UnifiedPlan {
  std::vector<WorkItem> request_items;  ///< Causal and unique items (the attend kernel).
  std::vector<UnifiedPath> request_paths;
  std::vector<SharedItem> shared_items;  ///< Shared items (the attend_shared kernel).
  std::vector<int64_t> segment_blocks;   ///< Block ids of all segments, back to back.
  std::vector<SharedReader> readers;     ///< Readers of all shared items, back to back.
  std::vector<int64_t> part_begin;       ///< (T+1): token t's parts are [part_begin[t], ...+1]).
  std::vector<PartRef> parts;
  int64_t num_states = 0;
  int64_t num_shared_blocks = 0;
  int64_t num_unique_blocks = 0;

  UnifiedPlan() = default;
  UnifiedPlan(const UnifiedPlan&) = delete;
  UnifiedPlan& operator=(const UnifiedPlan&) = delete;
  UnifiedPlan(UnifiedPlan&&) = default;
  UnifiedPlan& operator=(UnifiedPlan&&) = default;
};

/// Plans a validated step.
UnifiedPlan PlanUnified(const UnifiedStep& step);

/// The most query vectors (GQA group size times query rows, or times readers) of any request item
/// and shared item: what a kernel's per-item scratch is sized for (at least 1).
int MaxQueryVectors(int group_size, const std::vector<WorkItem>& items,
                    const std::vector<SharedItem>& shared);

/// Counts, for every (token, KV head, key position), how many work items of `plan` cover it, as
/// the kernels interpret the items, and returns "" when every position 0..p of every token is
/// covered exactly once and nothing else is, else a description of the first violation.
std::string CheckCoverage(const UnifiedStep& step, const UnifiedPlan& plan);

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_PLAN_UNIFIED_H_
