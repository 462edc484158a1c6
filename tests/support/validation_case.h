// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the validation suite's files share (tests/validation_*_test.cc): a small valid step of
// each op whose inputs the tests then break, and its MultiHeadCacheAttention call as views.

#ifndef DYNATTN_TESTS_SUPPORT_VALIDATION_CASE_H_
#define DYNATTN_TESTS_SUPPORT_VALIDATION_CASE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/plan_layers.h"  // MhcaAttrs
#include "tests/support/run_case.h"

namespace dynattn_test {

using dynattn_ref::Dt;
using dynattn_ref::MakeArray;
using dynattn_ref::MakeI64;
using dynattn_ref::ScalarI64;
using dynattn_ref::Tensors;

/// The op most of the validation cases break.
inline constexpr char kMhca[] = "multi_head_cache_attention";

/// Random values in an fp32/fp16 array, from the base seed plus `salt` (a failure names the
/// base seed, see harness.h).
Array RandomActivations(Dt dt, const std::vector<int64_t>& shape, uint64_t salt);

/// A valid MHCA step: request 0 decodes (4 cached tokens + 1), request 1 is a 3-token prompt.
/// Hq = 4, Hkv = 2, D = 8, int8 with groups of 4, fp16 scales, L = 2, layer 1, layout 0.
Case BaseCase(const std::string& op, int cache_mode);

/// The MHCA call of BaseCase as views over `c`'s arrays (outputs poisoned by the caller).
dynattn::MultiHeadCacheAttentionArgs MhcaArgs(Case& c, Array* out);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_VALIDATION_CASE_H_
