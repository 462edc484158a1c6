// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the ops' Plan* and Run* functions share (src/ops/*.cc): starting a plan on its dispatch
// row, recording the planning call's tensors, and checking a Run's plan and context.

#ifndef DYNATTN_SRC_OPS_OP_PLANS_H_
#define DYNATTN_SRC_OPS_OP_PLANS_H_

#include <initializer_list>
#include <memory>
#include <vector>

#include "src/plan_state.h"

namespace dynattn::internal {

/// A new plan of `op` run by the dispatch row of `cache`'s device and element type; fails when
/// this library has no backend for that device (`input` names the tensor that lives there).
Status StartPlan(OpKind op, const CacheDesc& cache, const char* input,
                 std::unique_ptr<PlanState>* state);

/// Records the planning call's data tensors, which each Run checks its own against.
void RecordTensors(std::initializer_list<PlannedTensor> tensors, PlanState* state);

/// Records where the cache came from: PMX tensors (`scale` only when `quantized`) or `raw`.
void RecordCache(const TensorView& tensor, const TensorView& scale, bool quantized,
                 const CacheDesc* raw, const CacheDesc& desc, PlanState* state);

/// Plans an attention problem (MHA, MHCA) with core/'s planner and sizes its workspace.
void PlanAttentionWork(PlanState* state);

/// int32 index tensors (what vLLM and FlashInfer pass) as int64 views of copies made at plan
/// time: validation and planning read int64, and a plan keeps its own copies of the index
/// tensors either way, so an int32 input costs one conversion per plan and nothing per Run.
class WidenedIndex {
 public:
  /// `t` itself unless it is a present, dense, host int32 tensor, which becomes an int64 view of
  /// a copy owned by this object (errors in `t` are left for the validators to name).
  TensorView operator()(const TensorView& t);

 private:
  std::vector<std::vector<int64_t>> copies_;
};

/// The plan of `op` and a usable context, or the error naming which is wrong.
Status CheckRun(const Plan& plan, OpKind op, const Context* context, const PlanState** state);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_OPS_OP_PLANS_H_
