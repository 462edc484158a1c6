// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The steps of the plan/run pipeline (src/ops/plan_run.h) that several ops share: starting a
// plan on its dispatch row, recording and checking tensors, the write and attention problems of
// a Run, per-layer attributes.

#ifndef DYNATTN_SRC_OPS_OP_PIPELINE_H_
#define DYNATTN_SRC_OPS_OP_PIPELINE_H_

#include <array>
#include <initializer_list>
#include <memory>
#include <vector>

#include "src/context.h"
#include "src/plan_state.h"
#include "src/validate.h"

namespace dynattn::internal {

/// A new plan run by the dispatch row of `cache`'s device and element type in the tier the call
/// asks for (KernelsFor; the op's plan then fills its work); fails when this library has no
/// backend for that device (`input` names the tensor that lives there).
Status StartPlan(const CacheDesc& cache, Precision precision, const char* input,
                 std::unique_ptr<PlanState>* state);

/// A call's data tensors by name (at most five besides the cache): what a plan records and each
/// Run checks its own against.
struct DataTensors {
  std::array<PlannedTensor, 6> tensors;
  int count = 0;
  void Add(const PlannedTensor& tensor) { tensors[count++] = tensor; }
};

/// Records the planning call's data tensors.
void RecordTensors(const DataTensors& tensors, PlanState* state);
/// Checks a Run's data tensors against the recorded ones.
Status CheckTensors(const PlanState& state, const DataTensors& tensors);

/// The planned write problem on a Run's new keys, values (their row strides too) and cache.
WriteProblem WriteFor(const WriteProblem& planned, const TensorView& current_key,
                      const TensorView& current_value, const CacheDesc& cache);
/// The tensors of a Run's attention (`mask` absent where the op has none).
struct RunActivations {
  const TensorView& query;
  const TensorView& output;
  const TensorView& mask;
  const TensorView& lse;  ///< The Run's log-sum-exp output (absent: none is made).
};

/// The planned attention problem on a Run's activations (their row strides too) and cache, its
/// mask only when the plan has one (an empty mask counts as none), and its score attributes the
/// plan's when `layer` is null, else `layer`'s once they pass the rules of AttentionAttrs and
/// `sinks` (sinks are read in place: the Run borrows them). The LSE is left to the op.
Status AttentionFor(const AttentionProblem& planned, const RunActivations& tensors,
                    const CacheDesc& cache, const LayerAttrs* layer, AttentionProblem* attention);

/// Records where the cache came from: PMX tensors (`scale` only when `quantized`) or `raw`.
void RecordCache(const TensorView& tensor, const TensorView& scale, bool quantized,
                 const CacheDesc* raw, const CacheDesc& desc, PlanState* state);

/// Plans `work`'s attention problem (MHA, MHCA) with core/'s planner and sizes the workspace of
/// `state`.
void PlanAttentionWork(AttentionWork* work, PlanState* state);

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

#endif  // DYNATTN_SRC_OPS_OP_PIPELINE_H_
