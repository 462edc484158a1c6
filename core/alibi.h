// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// ALiBi slopes (spec pmx-ops §5.5). Computed once per call on the host; every backend reads the
// same array (AttentionProblem::alibi_slopes), so the slopes exist in one place.

#ifndef DYNATTN_CORE_ALIBI_H_
#define DYNATTN_CORE_ALIBI_H_

#include <vector>

namespace dynattn::internal {

/// The slopes of `num_heads` heads: with n the largest power of two <= num_heads, head h < n gets
/// 2^(-8 (h + 1) / n) and the others 2^(-4 (2 (h - n) + 1) / n), rounded once to float.
std::vector<float> AlibiSlopes(int num_heads);

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_ALIBI_H_
