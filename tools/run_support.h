// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The pieces of the `run` command that every op's call shares (output allocation, tensor lookup
// by spec name, cache attributes), so that an op can live in a file of its own (unified_run.cc)
// and still follow exactly the same rules as the others. Internal to the tool.

#ifndef DYNATTN_TOOLS_RUN_SUPPORT_H_
#define DYNATTN_TOOLS_RUN_SUPPORT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dynattn/cache.h"
#include "dynattn/named_args.h"
#include "dynattn/plan.h"
#include "dynattn/status.h"
#include "dynattn/types.h"
#include "tools/npy.h"

namespace dynattn::cli::run_support {

/// Tensors by spec name.
using Arrays = std::map<std::string, NpyArray>;
/// Attribute values by name, defaults filled in: integers and flags (`at`), reals (`Real`:
/// logits_soft_cap, softmax_scale) and names (`Name`: cache_dtype, "" when not given; precision).
struct Attributes {
  std::map<std::string, int> ints;
  std::map<std::string, float> reals;
  std::map<std::string, std::string> names;

  /// The integer attribute `name` (throws std::out_of_range for an unknown one, like map::at).
  int at(const std::string& name) const { return ints.at(name); }
  /// The real attribute `name`.
  float Real(const std::string& name) const { return reals.at(name); }
  /// The name attribute `name`.
  const std::string& Name(const std::string& name) const { return names.at(name); }
};

/// A call's outputs before they exist: their shapes, as views with no memory (null data), which
/// the library validates and plans the call against; the outputs are allocated only once the
/// plan is accepted. So an invalid input costs no output memory whatever shapes it implies, and
/// a valid one that needs more memory than the machine has fails as such (exit 1), after
/// validation.
class PendingOutputs {
 public:
  /// Declares output `name` of `dtype` and `shape`.
  void Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  /// Views of the pending outputs (null data), else of `inputs`, by spec name; absent when
  /// neither has it.
  TensorLookup Lookup(Arrays& inputs) const;
  /// Allocates every pending output, zeroed, into `outputs`.
  Status Allocate(Arrays* outputs);
  /// True when Allocate failed for want of memory (not because of an input).
  bool out_of_memory() const { return out_of_memory_; }

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  std::vector<Pending> pending_;
  bool out_of_memory_ = false;
};

/// Plans a call against pending outputs.
using PlanCall = std::function<Status(const TensorLookup& tensors, Plan* plan)>;
/// Runs the plan on the allocated outputs.
using RunCall = std::function<Status(const Plan& plan, const TensorLookup& tensors, Context*)>;

/// The order of every `run`: plan against `pending` (the library validates everything), then
/// allocate the outputs, then run on a Context of `options.num_threads`.
Status PlanAllocateRun(const RunOptions& options, Arrays& inputs, PendingOutputs* pending,
                       Arrays* outputs, const PlanCall& plan_call, const RunCall& run_call);

/// Views of the outputs, else of the inputs, by spec name; absent when neither has it.
TensorLookup Lookup(Arrays& inputs, Arrays* outputs);

/// (Tq, Hq, Dv) of the query when it is rank 3 (Dv: head_dim_v, or the query's D when it is 0),
/// else an empty output the library will reject.
std::vector<int64_t> AttentionOutputShape(const NpyArray& query, int head_dim_v = 0);
// With `return_lse`, a pending float32 (T, Hq) `lse` output (an empty shape for a query that is
// not rank 3: the library rejects the query).
void AddLseIfAsked(const Attributes& attributes, const NpyArray& query, PendingOutputs* pending);

/// The PMX cache attributes among `attributes`.
CacheAttrs MakeCacheAttrs(const Attributes& attributes);

/// Copies the score attributes (window_left, logits_soft_cap, softmax_scale) and the numerics tier
/// (precision: "exact" or "fast", checked when parsed) into `attrs` (an AttentionAttrs or a
/// UnifiedAttentionAttrs).
template <typename AttentionLikeAttrs>
void SetScoreAttrs(const Attributes& attributes, AttentionLikeAttrs* attrs) {
  attrs->window_left = attributes.at("window_left");
  attrs->logits_soft_cap = attributes.Real("logits_soft_cap");
  attrs->softmax_scale = attributes.Real("softmax_scale");
  attrs->precision = attributes.Name("precision") == "fast" ? Precision::kFast : Precision::kExact;
}

}  // namespace dynattn::cli::run_support

#endif  // DYNATTN_TOOLS_RUN_SUPPORT_H_
