// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Plan once per step, run once per layer: the API an engine's step loop calls.
//
// A serving step has one set of metadata (request boundaries, positions, page or block tables)
// and runs attention in every layer, each with its own query, fresh K/V, cache and output. So:
//
//   dynattn::Context context;                               // once: threads, scratch, workspace
//   dynattn::Plan plan;
//   Status s = dynattn::PlanMultiHeadCacheAttention(attrs, layer0_args, &plan);   // per step
//   for (each layer) s = dynattn::RunMultiHeadCacheAttention(plan, layer_args, &context);
//
// `Plan*` validates every input (index tensors and data tensors alike), copies the index tensors
// it needs and builds the work plan; it writes nothing. Outputs may be planned before they are
// allocated: at plan time an output view may have a null `data` (its shape, dtype and device are
// what the plan records); Run needs the memory. `Run*` checks that the layer's data
// tensors have exactly the shapes, dtypes and device the plan saw (their pointers may differ;
// the index tensors of its arguments are not read again), then writes the fresh K/V and runs the
// kernels in the caller's Context. Once a Context has run a plan, running plans of that size
// again allocates nothing. Results are bit-identical to the one-shot calls of dynattn/ops.h and
// dynattn/unified.h, which are Plan + Run over a pooled Context.
//
// Layers of one model may differ in their score attributes (gpt-oss: learned sinks per layer and
// 128-token windows on every other layer; Gemma 2/3: local window layers between global ones).
// One plan serves them all: a Run given a `LayerAttrs` uses its window, soft-cap, scale and sinks
// instead of the plan's, with the bits of a one-shot call made with those attributes.
//
//   dynattn::LayerAttrs local = plan.layer_attrs();  // the planned attributes
//   local.window_left = 127;
//   s = dynattn::RunMultiHeadCacheAttention(plan, layer_args, &context, &local);

#ifndef DYNATTN_PLAN_H_
#define DYNATTN_PLAN_H_

#include <cstddef>
#include <memory>

#include "dynattn/export.h"
#include "dynattn/ops.h"
#include "dynattn/status.h"
#include "dynattn/unified.h"

namespace dynattn {

namespace internal {
struct ContextState;
struct PlanState;
struct StateAccess;
}  // namespace internal

/// How a Context runs its calls.
struct ContextOptions {
  /// CPU worker threads (the caller's included): 0 = all cores, else [1, 1024].
  int num_threads = 0;
  /// Opt-in: while a call runs in parallel, pin the caller to the first CPU the process may use
  /// and worker i to the (i+1)-th, restoring each thread's affinity when it leaves (Linux). On
  /// small VMs whose scheduler wakes a worker on its waker's CPU this removes the calls that take
  /// twice as long; results are the same bits either way.
  bool pin_threads = false;
  /// CUDA backend: the `cudaStream_t` its kernels and copies are enqueued on; null = the default
  /// stream. Run returns after the stream has finished the call's work.
  void* cuda_stream = nullptr;
};

/// What runs plans: on the CPU a oneTBB arena of `num_threads`, one scratch per arena slot and the
/// partial-state workspace; on CUDA the stream and a device workspace. Buffers grow to the
/// largest plan run and are kept. Owned by the caller; it runs one call at a time (give each
/// engine thread its own): a Run* while another thread's Run* holds it returns
/// StatusCode::kFailedPrecondition and touches nothing. A Context asking for more threads than
/// the machine has cores raises oneTBB's process-wide worker limit for the duration of each of
/// its parallel loops (tests do, to prove that results do not depend on the thread count).
class DYNATTN_EXPORT Context {
 public:
  explicit Context(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The options it was made with (num_threads resolved: never 0).
  const ContextOptions& options() const;
  /// OK, or why its options were refused (ValidateContextOptions): such a Context runs nothing,
  /// every Run* on it returns this error.
  const Status& status() const;
  /// Host bytes held for partial states and scratch (grows, never shrinks).
  size_t workspace_bytes() const;

 private:
  friend struct internal::StateAccess;
  std::unique_ptr<internal::ContextState> state_;
};

/// Checks `options`: num_threads 0 (all cores) or in [1, 1024]. The C and Python bindings refuse
/// to create a Context with options it refuses; a C++ Context made with them holds the error.
DYNATTN_EXPORT Status ValidateContextOptions(const ContextOptions& options);

/// The score attributes that may change from layer to layer of one planned step. A Run given a
/// LayerAttrs uses all four fields instead of the plan's; everything else (heads, causality,
/// ALiBi, the batch, the cache) stays the plan's. Its fields follow AttentionAttrs' rules.
struct LayerAttrs {
  /// Sliding window: -1 = off, W >= 0 = keys [i - W, i]. A window the plan was not made with is
  /// planned at the first Run that asks for it (kept in the plan, so one plan per step plans each
  /// distinct window once); its Runs read only the blocks that window needs.
  int window_left = -1;
  float logits_soft_cap = 0.0f;  ///< 0 = off, else cap > 0 (s = cap * tanh(s0 / cap)).
  float softmax_scale = 0.0f;    ///< 0 = 1 / sqrt(head_dim), else finite > 0.
  /// Optional fp32 (Hq) attention sinks in host memory, read by the Run (absent = none).
  TensorView sinks;
};

/// A validated, planned step of one op. Move-only; empty until a `Plan*` call succeeds.
class DYNATTN_EXPORT Plan {
 public:
  Plan();
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;

  /// True until a Plan* call has filled it.
  bool empty() const { return state_ == nullptr; }
  /// The op it plans: "KeyValueCache", "MultiHeadAttention", "MultiHeadCacheAttention" or
  /// "UnifiedAttention" (null when empty).
  const char* op() const;
  /// The dispatch-table row that runs it, e.g. "cpu/int8" or "cuda/f16" (null when empty).
  const char* backend() const;
  /// The numerics tier its kernels run: kFast only where the call asked for it and this CPU has
  /// a fast kernel for it, else kExact (always kExact for KeyValueCache and empty plans).
  Precision precision() const;
  /// Partial-state bytes a Context needs to run it (0 when no context is split).
  size_t workspace_bytes() const;
  /// Unified plans: what the planner made of the step. Null for the other ops.
  const UnifiedStepSummary* unified_summary() const;
  /// The attention attributes it was planned with, as a Run's LayerAttrs (its sinks view the
  /// plan's own copy). Default LayerAttrs for an empty plan and for KeyValueCache plans.
  LayerAttrs layer_attrs() const;

 private:
  friend struct internal::StateAccess;
  std::unique_ptr<internal::PlanState> state_;
};

/// Validates a KeyValueCache call and plans it (writes nothing).
DYNATTN_EXPORT Status PlanKeyValueCache(const KeyValueCacheAttrs& attrs,
                                        const KeyValueCacheArgs& args, Plan* plan);
/// Writes the new tokens of `args` into its cache and gathers the contexts, as planned.
DYNATTN_EXPORT Status RunKeyValueCache(const Plan& plan, const KeyValueCacheArgs& args,
                                       Context* context);

/// Validates a MultiHeadAttention call and plans it.
DYNATTN_EXPORT Status PlanMultiHeadAttention(const AttentionAttrs& attrs,
                                             const MultiHeadAttentionArgs& args, Plan* plan);
/// Attention of `args`' query over its key and value, as planned (with `layer`'s attributes
/// when given).
DYNATTN_EXPORT Status RunMultiHeadAttention(const Plan& plan, const MultiHeadAttentionArgs& args,
                                            Context* context, const LayerAttrs* layer = nullptr);

/// Validates a MultiHeadCacheAttention call and plans it (writes nothing).
DYNATTN_EXPORT Status PlanMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                                  const MultiHeadCacheAttentionArgs& args,
                                                  Plan* plan);
/// Writes the new K/V of `args` into its cache, then attends over the contexts, as planned
/// (with `layer`'s attributes when given).
DYNATTN_EXPORT Status RunMultiHeadCacheAttention(const Plan& plan,
                                                 const MultiHeadCacheAttentionArgs& args,
                                                 Context* context,
                                                 const LayerAttrs* layer = nullptr);

/// Validates a unified-attention step and plans its three paths (writes nothing); the plan's
/// `unified_summary()` is what DescribeUnifiedStep reports.
DYNATTN_EXPORT Status PlanUnifiedAttention(const UnifiedAttentionAttrs& attrs,
                                           const UnifiedAttentionArgs& args, Plan* plan);
/// Writes the fresh K/V of `args` into its block cache, then runs the planned step (with
/// `layer`'s attributes when given).
DYNATTN_EXPORT Status RunUnifiedAttention(const Plan& plan, const UnifiedAttentionArgs& args,
                                          Context* context, const LayerAttrs* layer = nullptr);

}  // namespace dynattn

#endif  // DYNATTN_PLAN_H_
