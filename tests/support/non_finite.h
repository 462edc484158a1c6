// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// NaN and infinities planted where attention reads them, for the IEEE non-finite rules
// (docs/numerics.md, "Non-finite inputs"): a case so planted is compared with the float64
// reference run with Attrs::non_finite.

#ifndef DYNATTN_TESTS_SUPPORT_NON_FINITE_H_
#define DYNATTN_TESTS_SUPPORT_NON_FINITE_H_

#include <cstdint>
#include <string>

#include "reference/case_gen.h"

namespace dynattn_test {

/// Puts one to three non-finite values into `c`'s inputs, drawn from `seed`: NaN, +inf or -inf in
/// the query, in keys (MHA's `key`, or `current_key` over a float or fp8 cache, which the call
/// writes and reads back) and in read mask entries; NaN in values. Infinite values are left out:
/// where a key's fp32 weight underflows to 0, 0 * inf is NaN while float64's tiny weight keeps
/// the infinity (docs/numerics.md). Quantized caches get none in their new tokens (a NaN group
/// has no defined scale). Sets c->attrs.non_finite and returns what it planted, for messages.
std::string PlantNonFinite(uint64_t seed, dynattn_ref::Case* c);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_NON_FINITE_H_
