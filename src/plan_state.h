// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What a public Plan holds: the validated problems of one op with their index arrays copied (so a
// plan outlives the caller's metadata tensors), the work plan core/ made of them, the row of the
// dispatch table that runs it, and the metadata of every data tensor the planning call passed,
// against which each Run checks its own tensors before it reads or writes anything.

#ifndef DYNATTN_SRC_PLAN_STATE_H_
#define DYNATTN_SRC_PLAN_STATE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/plan.h"
#include "core/plan_unified.h"
#include "dynattn/plan.h"
#include "dynattn/unified.h"
#include "src/dispatch.h"

namespace dynattn::internal {

enum class OpKind : uint8_t {
  kKeyValueCache,
  kMultiHeadAttention,
  kMultiHeadCacheAttention,
  kUnifiedAttention
};

/// Copies of the caller's index arrays; each source array is copied once.
class IndexCopies {
 public:
  /// A plan-owned copy of source[0, count) (null for a null source).
  template <typename T>
  const T* Own(const T* source, int64_t count);

 private:
  std::vector<std::pair<const void*, std::vector<char>>> arrays_;
};

/// A data tensor of the planning call (its metadata; Run takes the data anew).
struct PlannedTensor {
  const char* name = nullptr;
  TensorView view;
};

/// Where a call's cache comes from, as the plan saw it.
struct PlannedCache {
  bool raw = false;   ///< A caller-built CacheDesc (or BlockCache) rather than PMX tensors.
  TensorView tensor;  ///< PMX cache tensor (raw = false).
  TensorView scale;   ///< PMX scale tensor (raw = false, quantized caches).
  CacheDesc desc;     ///< The descriptor of the planning call.
  /// > 0: value_from_key's Dv. A Run's cache_desc is read as the planning call's was: its value
  /// plane is its key plane (ValuesFromKeys).
  int values_from_keys = 0;
};

/// The work of a window a Run asked for that the step was not planned with (LayerAttrs).
struct WindowPlan {
  int64_t window_left = -1;
  AttentionPlan attention;  ///< MultiHeadAttention and MultiHeadCacheAttention plans.
  UnifiedPlan unified;      ///< Unified plans.
};

/// What a KeyValueCache plan holds of its own: the writes, then the gather of every context.
struct KeyValueCacheWork {
  WriteProblem write;
  GatherProblem gather;
  std::vector<GatherPiece> gather_pieces;
};

/// What a MultiHeadAttention plan holds of its own: the problem and core/'s work items.
struct AttentionWork {
  AttentionProblem attention;
  AttentionPlan plan;
};

/// What a MultiHeadCacheAttention plan holds of its own: the new tokens' writes, then attention.
struct CacheAttentionWork : AttentionWork {
  WriteProblem write;
};

/// What a unified-attention plan holds of its own: the writes, the step and its three paths.
struct UnifiedWork {
  WriteProblem write;
  AttentionProblem attention;
  UnifiedStep step;
  UnifiedPlan plan;
  bool sharded = false;      ///< A context shard's step: request tiles (shard_plan), not `plan`.
  AttentionPlan shard_plan;  ///< The plan of a context shard's step.
  UnifiedStepSummary summary;
  BlockCache block_cache;  ///< The block geometry the plan addresses.
};

/// One alternative per OpKind, in its order: a plan's op is the alternative it holds.
using OpWork = std::variant<KeyValueCacheWork, AttentionWork, CacheAttentionWork, UnifiedWork>;

struct PlanState {
  OpWork work;  ///< The op's problems and work (each op's plan fills its alternative).
  const BackendKernels* kernels = nullptr;
  IndexCopies index;
  std::vector<float> alibi_slopes;
  std::vector<float> sinks;
  std::vector<PlannedTensor> tensors;
  PlannedCache cache;
  size_t workspace_floats = 0;
  /// The attributes the step was planned with (its sinks view `sinks`).
  LayerAttrs planned_layer;
  /// Windows other than the planned one, planned at their first Run and kept. Runs on different
  /// Contexts may share a plan, hence the lock (taken only by Runs with such a window).
  mutable std::mutex window_mutex;
  mutable std::vector<std::unique_ptr<WindowPlan>> window_plans;

  /// The op this is a plan of.
  OpKind op() const { return static_cast<OpKind>(work.index()); }

  /// Copies the batch's and slot map's arrays (and the ALiBi slopes and sinks) of the work's
  /// problems into the plan and points the problems at the copies.
  void OwnIndexArrays();

  /// Fails unless `view` matches the planned tensor `name` (presence, dtype, shape, device) and
  /// passes the storage checks.
  Status CheckTensor(const char* name, const TensorView& view) const;

  /// The cache descriptor of a Run: the planned one moved onto the run's PMX tensors, or the
  /// run's own descriptor once its geometry matches the plan's.
  Status RunCache(const TensorView& tensor, const TensorView& scale, const CacheDesc* desc,
                  CacheDesc* out) const;

  /// The attention work of `window_left`: the planned work, or that window's (planned once).
  const AttentionPlan& AttentionPlanFor(const AttentionWork& work, int64_t window_left) const;
  /// The unified work of `window_left`: the planned work, or that window's (planned once).
  const UnifiedPlan& UnifiedPlanFor(const UnifiedWork& work, int64_t window_left) const;
  /// The request-tiled plan of a context shard's unified step under `window_left`.
  const AttentionPlan& ShardPlanFor(const UnifiedWork& work, int64_t window_left) const;
};

static_assert(
    std::is_same_v<
        std::variant_alternative_t<static_cast<size_t>(OpKind::kMultiHeadCacheAttention), OpWork>,
        CacheAttentionWork> &&
        std::variant_size_v<OpWork> == static_cast<size_t>(OpKind::kUnifiedAttention) + 1,
    "OpWork's alternatives follow OpKind's order");

/// The state of `plan` when it is a plan of `op`, else an error.
Status PlanOf(const Plan& plan, OpKind op, const PlanState** state);

template <typename T>
const T* IndexCopies::Own(const T* source, int64_t count) {
  if (source == nullptr) return nullptr;
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  for (const auto& [from, copy] : arrays_) {
    if (from == source && copy.size() >= bytes) return reinterpret_cast<const T*>(copy.data());
  }
  const char* first = reinterpret_cast<const char*>(source);
  arrays_.emplace_back(source, std::vector<char>(first, first + bytes));
  return reinterpret_cast<const T*>(arrays_.back().second.data());
}

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_PLAN_STATE_H_
