// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The plan/run pipeline every op runs: PlanOp (Plan*), RunOp (Run*) and PlanAndRun (the one-shot
// call), generic over the op's Args. Each op says only what is its own, in its OpTraits
// (src/ops/<op>.cc): how it validates, which cache picks its dispatch row, what it plans, what a
// Run does once the pipeline has checked the plan, the context, the tensors and their aliasing.

#ifndef DYNATTN_SRC_OPS_PLAN_RUN_H_
#define DYNATTN_SRC_OPS_PLAN_RUN_H_

#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

#include "src/context.h"
#include "src/op_fields.h"
#include "src/ops/op_pipeline.h"
#include "src/plan_state.h"
#include "src/validate.h"

namespace dynattn::internal {

/// What one op adds to the pipeline, specialized in its src/ops/<op>.cc for its Args; the first
/// five come from its OpDeclaration base:
///   Attrs, Call                the op's attributes and its validated call (src/validate.h)
///   Work                       its alternative of OpWork (src/plan_state.h)
///   kKind                      its OpKind
///   Validate(attrs, args, &call)
///   kPlacedBy                  the input named when no backend serves its cache
///   kCacheTensors              whether a PMX cache tensor (args.cache, .scale) may come with it
///   Quantized(attrs)           whether a PMX cache of the planning call has a scale tensor
///   CacheOf(call, args)        the cache descriptor that picks the dispatch row
///   Plan(attrs, call, args, work, state)   the op's work into the started plan's (empty) Work
///   Run(state, work, args, layer, context)   the op's steps once the pipeline checked the Run
template <class Args>
struct OpTraits;

/// The part of an op's traits that is a list of names: its types, its OpKind, its validator.
template <class AttrsT, class CallT, class WorkT, OpKind kKindV, auto kValidate>
struct OpDeclaration {
  using Attrs = AttrsT;
  using Call = CallT;
  using Work = WorkT;
  static constexpr OpKind kKind = kKindV;
  static constexpr auto Validate = kValidate;
};

/// Whether the call's PMX cache tensors take part in the aliasing rule (a raw CacheDesc is
/// trusted).
template <class Args>
bool PmxCacheOf(const Args& args) {
  if constexpr (OpTraits<Args>::kCacheTensors) {
    return args.cache_desc == nullptr;
  } else {
    return false;
  }
}

/// The numerics tier an op's attributes ask for (KeyValueCache computes no attention).
inline Precision RequestedPrecision(const KeyValueCacheAttrs&) { return Precision::kExact; }
/// MultiHeadAttention on given keys and values always runs the exact tier: its inputs are the
/// caller's activations, which no fast kernel reads (its plan says exact).
inline Precision RequestedPrecision(const AttentionAttrs&) { return Precision::kExact; }
inline Precision RequestedPrecision(const MultiHeadCacheAttentionAttrs& a) {
  return a.attention.precision;
}
inline Precision RequestedPrecision(const UnifiedAttentionAttrs& a) { return a.precision; }

/// Plan* of every op: validate, check aliasing, start the plan on its dispatch row, let the op
/// plan its work, record the tensors a Run is checked against.
template <class Args>
Status PlanOp(const typename OpTraits<Args>::Attrs& attrs, const Args& caller_args, Plan* plan) {
  using Op = OpTraits<Args>;
  if (plan == nullptr) return Status::Invalid("plan", "must not be null");
  WidenedIndex widen;
  Args args = caller_args;
  WidenIndexTensors(&widen, &args);
  typename Op::Call call;
  DYNATTN_RETURN_IF_ERROR(Op::Validate(attrs, args, &call));
  DYNATTN_RETURN_IF_ERROR(CheckOpAliasing(caller_args, PmxCacheOf(caller_args),
                                          Op::Quantized(attrs), CallPhase::kPlan));
  std::unique_ptr<PlanState> state;
  DYNATTN_RETURN_IF_ERROR(
      StartPlan(Op::CacheOf(call, args), RequestedPrecision(attrs), Op::kPlacedBy, &state));
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(Op::kKind), OpWork>,
                               typename Op::Work>,
                "an op's Work is OpWork's alternative of its OpKind");
  Op::Plan(attrs, call, args, &state->work.template emplace<typename Op::Work>(), state.get());
  RecordTensors(DataTensorsOf(args), state.get());
  StateAccess::Reset(plan, std::move(state));
  return Status::Ok();
}

/// Run* of every op: the plan and context, the lease of the context, the Run's tensors against
/// the plan's and the aliasing rule, then the op's steps.
template <class Args>
Status RunOp(const Plan& plan, const Args& args, Context* context, const LayerAttrs* layer) {
  using Op = OpTraits<Args>;
  const PlanState* state = nullptr;
  DYNATTN_RETURN_IF_ERROR(CheckRun(plan, Op::kKind, context, &state));
  ContextLease lease(StateOf(*context));
  DYNATTN_RETURN_IF_ERROR(lease.status());
  DYNATTN_RETURN_IF_ERROR(CheckTensors(*state, DataTensorsOf(args)));
  DYNATTN_RETURN_IF_ERROR(CheckOpAliasing(args, PmxCacheOf(args), state->cache.scale.present(),
                                          CallPhase::kRun, layer));
  return Op::Run(*state, std::get<typename Op::Work>(state->work), args, layer, StateOf(*context));
}

/// A one-shot call of every op: plan, then run on a pooled Context with the planned attributes.
template <class Args>
Status PlanAndRun(const typename OpTraits<Args>::Attrs& attrs, const Args& args,
                  const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(ValidateRunOptions(options));
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(PlanOp(attrs, args, &plan));
  PooledContext context(options.num_threads, options.pin_threads);
  return RunOp(plan, args, context.get(), nullptr);
}

}  // namespace dynattn::internal

/// Defines Plan<Op> and the one-shot <Op> of an op (declared in dynattn/plan.h and
/// dynattn/dynattn.h) over the pipeline; `Attrs` is its attributes' type.
#define DYNATTN_DEFINE_PLAN_AND_CALL(Op, Attrs)                                    \
  Status Plan##Op(const Attrs& attrs, const Op##Args& args, Plan* plan) {          \
    return internal::PlanOp(attrs, args, plan);                                    \
  }                                                                                \
  Status Op(const Attrs& attrs, const Op##Args& args, const RunOptions& options) { \
    return internal::PlanAndRun(attrs, args, options);                             \
  }

/// Defines Plan<Op>, Run<Op> (with per-layer attributes) and the one-shot <Op> of an attention
/// op.
#define DYNATTN_DEFINE_ATTENTION_ENTRY_POINTS(Op, Attrs)                   \
  DYNATTN_DEFINE_PLAN_AND_CALL(Op, Attrs)                                  \
  Status Run##Op(const Plan& plan, const Op##Args& args, Context* context, \
                 const LayerAttrs* layer) {                                \
    return internal::RunOp(plan, args, context, layer);                    \
  }

#endif  // DYNATTN_SRC_OPS_PLAN_RUN_H_
