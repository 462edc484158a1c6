// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "core/plan.h"

#include <algorithm>
#include <tuple>

namespace dynattn::internal {
namespace {

/// Keys [0, n) that some row of the tile [row_begin, row_end) of request b may see.
int64_t VisibleKeys(const AttentionProblem& p, int64_t b, int64_t row_end) {
  const int64_t kvlen = p.batch.KvLen(b);
  if (!p.BottomRightLimited(b)) return kvlen;
  return std::clamp<int64_t>(p.QueryPosition(b, row_end - 1) + 1, 0, kvlen);
}

/// The first key some row of the tile starting at row_begin may see (its first row has the
/// earliest sliding window), rounded down to a key tile so that tiles keep their places; at most
/// `visible`.
int64_t FirstPlannedKey(const AttentionProblem& p, int64_t b, int64_t row_begin, int64_t visible) {
  const int64_t first = p.FirstVisibleKey(b, row_begin) / kKeyTile * kKeyTile;
  return std::min(first, visible);
}

/// A tile's visible keys [first, visible) are cut at the multiples of kSplitKeys (the same split
/// boundaries with or without a sliding window); splits wholly before the window are left out.
void PlanTile(const AttentionProblem& p, int64_t b, int32_t row_begin, int32_t row_end,
              AttentionPlan* plan) {
  const int64_t visible = VisibleKeys(p, b, row_end);
  const int64_t first = FirstPlannedKey(p, b, row_begin, visible);
  const int64_t first_split = first / kSplitKeys;
  const int32_t splits = static_cast<int32_t>(
      std::max<int64_t>(1, (visible + kSplitKeys - 1) / kSplitKeys - first_split));
  const int64_t vectors = int64_t{p.group_size} * (row_end - row_begin);
  for (int32_t g = 0; g < p.num_kv_heads; ++g) {
    const int64_t state_index = plan->num_states;
    for (int32_t s = 0; s < splits; ++s) {
      WorkItem item;
      item.request = b;
      item.kv_head = g;
      item.row_begin = row_begin;
      item.row_end = row_end;
      item.key_begin = std::max(first, (first_split + s) * kSplitKeys);
      item.key_end = std::min(visible, (first_split + s + 1) * kSplitKeys);
      item.num_splits = splits;
      item.state_index = state_index + s * vectors;
      plan->items.push_back(item);
    }
    if (splits > 1) {
      plan->merges.push_back(MergeTask{b, g, row_begin, row_end, splits, state_index});
      plan->num_states += splits * vectors;
    }
  }
}

/// Items in order of decreasing work. Ties keep the order PlanTile made them in (request, row
/// tile, KV head, split), so the plan is the same on every run without a stable sort's buffer.
bool LongerFirst(const WorkItem& x, const WorkItem& y) {
  const int64_t x_work = (x.key_end - x.key_begin) * (x.row_end - x.row_begin);
  const int64_t y_work = (y.key_end - y.key_begin) * (y.row_end - y.row_begin);
  if (x_work != y_work) return x_work > y_work;
  return std::tie(x.request, x.row_begin, x.kv_head, x.key_begin) <
         std::tie(y.request, y.row_begin, y.kv_head, y.key_begin);
}

}  // namespace

AttentionPlan PlanAttention(const AttentionProblem& p) {
  AttentionPlan plan;
  plan.items.reserve(static_cast<size_t>(p.batch.size * p.num_kv_heads));  // one per decode
  for (int64_t b = 0; b < p.batch.size; ++b) {
    const int64_t seqlen = p.batch.SeqLen(b);
    for (int64_t row = 0; row < seqlen; row += kRowTile) {
      PlanTile(p, b, static_cast<int32_t>(row),
               static_cast<int32_t>(std::min(seqlen, row + kRowTile)), &plan);
    }
  }
  // Longest items first, so the tail of the parallel loop is made of short ones.
  std::sort(plan.items.begin(), plan.items.end(), LongerFirst);
  return plan;
}

std::vector<GatherPiece> PlanGather(const Batch& batch) {
  std::vector<GatherPiece> pieces;
  for (int64_t b = 0; b < batch.size; ++b) {
    const int64_t kvlen = batch.KvLen(b);
    for (int64_t p = 0; p < kvlen; p += kGatherRows) {
      pieces.push_back({b, p, std::min(kvlen, p + kGatherRows)});
    }
  }
  return pieces;
}

}  // namespace dynattn::internal
