// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Step builders for the plan/run tests: a reference case's tensors as one layer of a step (inputs
// copied, outputs poisoned), its arguments bound by name, and the checks that a planned Run gave
// the one-shot call's bits.

#ifndef DYNATTN_TESTS_SUPPORT_PLAN_LAYERS_H_
#define DYNATTN_TESTS_SUPPORT_PLAN_LAYERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "tests/support/run_case.h"

namespace dynattn_test {

/// One layer's tensors for a case: copies of its inputs (the cache is written) and poisoned
/// outputs (every byte 0xFF: NaN), bound by name.
struct Layer {
  dynattn_ref::Tensors tensors;
  dynattn::BlockCache block_cache;  ///< Unified cases.

  explicit Layer(const Case& c);
  /// The layer's tensors by name (absent when it has none of that name), where `placement`
  /// puts them once PlaceOn was called (host memory before).
  dynattn::TensorLookup Lookup();
  /// Puts the layer's tensors where `placement` says (e.g. device memory), the unified block
  /// cache included; bind the arguments after this, and Fetch from `placement` after the Run.
  void PlaceOn(Placement* placement, const Case& c);

 private:
  void MakeBlockCache(const Case& c);
  Placement* placement_ = nullptr;
  std::map<std::string, dynattn::TensorView> placed_;
};

/// The library's attributes of a case's op.
dynattn::KeyValueCacheAttrs KvcAttrs(const Case& c);
dynattn::MultiHeadCacheAttentionAttrs MhcaAttrs(const Case& c);
dynattn::UnifiedAttentionAttrs UnifiedAttrs(const Case& c);

/// A layer's arguments, bound once (binding by name allocates: it is the caller's part).
struct BoundArgs {
  std::string op;
  dynattn::KeyValueCacheArgs kvc;
  dynattn::MultiHeadAttentionArgs mha;
  dynattn::MultiHeadCacheAttentionArgs mhca;
  dynattn::UnifiedAttentionArgs unified;

  BoundArgs(const Case& c, Layer* layer);
  /// Plans the bound op with the case's attributes.
  dynattn::Status MakePlan(const Case& c, dynattn::Plan* plan) const;
  /// Every index tensor of the bound op.
  std::vector<dynattn::TensorView*> IndexTensors();
  /// Runs `plan` on the bound tensors (with `layer`'s attributes when given).
  dynattn::Status Run(const dynattn::Plan& plan, dynattn::Context* context,
                      const dynattn::LayerAttrs* layer = nullptr) const;
};

/// Plans `c` on `layer`'s tensors.
dynattn::Status PlanLayer(const Case& c, Layer* layer, dynattn::Plan* plan);
/// Runs `plan` on `layer`'s tensors.
dynattn::Status RunLayer(const Case& c, Layer* layer, const dynattn::Plan& plan,
                         dynattn::Context* context);

/// Another layer of the same step: the same metadata and cache history, the activations negated
/// (their sign bits flipped), so every output differs from the first layer's.
Case NextLayer(const Case& c);

/// Checks the outputs (and the written cache) of `layer` against the one-shot call on `c`.
void CheckSameAsOneShot(const Case& c, Layer* layer);

/// A random case of each op (KeyValueCache, MHA, MHCA, unified) from seeds seed..seed+3.
std::vector<Case> CasesOfEveryOp(uint64_t seed);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_PLAN_LAYERS_H_
