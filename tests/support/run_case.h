// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Runs a reference test case (tests/reference/case_gen.h) through the library's public API:
// builds TensorViews over copies of the case's arrays, poisons every output first (so an element
// the library forgets to write shows up as NaN), and hands back what the call produced.

#ifndef DYNATTN_TESTS_SUPPORT_RUN_CASE_H_
#define DYNATTN_TESTS_SUPPORT_RUN_CASE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/reference/case_gen.h"

namespace dynattn_test {

using dynattn_ref::Array;
using dynattn_ref::Case;

/// What one library call produced.
struct LibResult {
  dynattn::Status status;
  Array cache, scale;  ///< In/out cache and scale after the call (KVC, MHCA).
  Array key, value;    ///< KVC outputs.
  Array attn_output;   ///< MHA, MHCA, unified output.
  Array lse;           ///< Unified attention's log-sum-exp.
};

/// A dense view of a reference array.
dynattn::TensorView ViewOf(Array& array);

/// The library's attribute structs for a reference case's attributes.
dynattn::CacheAttrs CacheAttrsOf(const dynattn_ref::Attrs& attrs);
dynattn::AttentionAttrs AttentionAttrsOf(const dynattn_ref::Attrs& attrs);

/// Runs `c` through the op it names ("unified_attention" too: PMX cache through
/// MakePmxBlockCache, attrs.block_size, log-sum-exp requested).
LibResult RunLibrary(const Case& c, const dynattn::RunOptions& options = {});

/// Runs `body` once per Highway target compiled into the library and supported here, with that
/// target forced; restores the default afterwards.
void ForEachTarget(const std::function<void(const std::string& target_name)>& body);

/// Byte-for-byte equality, with the first differing byte in `why`.
bool SameBytes(const Array& a, const Array& b, std::string* why);

/// A fresh base seed per run (from DYNATTN_TEST_SEED when set, so failures reproduce).
uint64_t BaseSeed();

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_RUN_CASE_H_
