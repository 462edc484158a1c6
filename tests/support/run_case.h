// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Runs a reference test case (reference/case_gen.h) through the library's public API:
// builds TensorViews over copies of the case's arrays, poisons every output first (so an element
// the library forgets to write shows up as NaN), and hands back what the call produced.

#ifndef DYNATTN_TESTS_SUPPORT_RUN_CASE_H_
#define DYNATTN_TESTS_SUPPORT_RUN_CASE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "tests/support/harness.h"

namespace dynattn_test {

using dynattn_ref::Array;
using dynattn_ref::Case;

/// What one library call produced.
struct LibResult {
  dynattn::Status status;
  Array cache, scale;  ///< In/out cache and scale after the call (KVC, MHCA).
  Array key, value;    ///< KVC outputs.
  Array attn_output;   ///< MHA, MHCA, unified output.
  Array lse;           ///< The attention ops' log-sum-exp (always requested).
};

/// A dense view of a reference array.
dynattn::TensorView ViewOf(Array& array);

/// The library's attribute structs for a reference case's attributes.
dynattn::CacheAttrs CacheAttrsOf(const dynattn_ref::Attrs& attrs);
/// The tier a case asks for: its "precision" attribute ("" or "exact", "fast", or a raw value
/// such as "7" that the library must refuse).
dynattn::Precision PrecisionOf(const dynattn_ref::Attrs& attrs);
dynattn::AttentionAttrs AttentionAttrsOf(const dynattn_ref::Attrs& attrs);
dynattn::UnifiedAttentionAttrs UnifiedAttentionAttrsOf(const dynattn_ref::Attrs& attrs);

/// Where RunLibrary's call finds its tensors. Without one every view is over the host array
/// itself; the GPU suite places the data tensors in device memory through one.
class Placement {
 public:
  virtual ~Placement() = default;
  /// The view the call gets for tensor `name`, whose host copy (an output is already poisoned)
  /// is `array`. Called at most once per name and call; `array` stays put until Fetch.
  virtual dynattn::TensorView Place(const std::string& name, Array& array) = 0;
  /// After the call: copies every placed tensor back into its host array.
  virtual void Fetch() = 0;
};

/// Runs `c` through the op it names ("unified_attention" too: PMX cache through
/// MakePmxBlockCache, attrs.block_size; every attention op with its log-sum-exp), with its tensors
/// where `placement` puts them (host memory when null).
LibResult RunLibrary(const Case& c, const dynattn::RunOptions& options = {},
                     Placement* placement = nullptr);

/// Runs `body` once per Highway target compiled into the library and supported here, with that
/// target forced; restores the target forced before (see ForcedTarget), also when `body` throws.
void ForEachTarget(const std::function<void(const std::string& target_name)>& body);

/// Whether both AVX2 and AVX-512 (Highway's AVX3) are compiled in and supported here: the pair
/// the cross-target comparisons need.
bool HaveAvx2AndAvx512();

/// Whether fast calls over fp16 and bf16 caches run the bf16 dot products here: the CPU has
/// AVX512_BF16 and the kernels dispatch to (or are forced to) the AVX-512 target.
bool Bf16DotsRun();

/// Byte-for-byte equality, with the first differing byte in `why`.
bool SameBytes(const Array& a, const Array& b, std::string* why);

/// Token ranges [first, last) of each request of a unified-attention case (its query_start_loc).
std::vector<std::pair<int64_t, int64_t>> TokenRanges(const Case& c);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_RUN_CASE_H_
