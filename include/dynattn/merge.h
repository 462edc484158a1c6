// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Merging partial attention results (spec: shared/spec/unified-and-ksana.md §1.4, §3, §6.5).
//
// Attention over a key set split into parts can be computed part by part and merged exactly.
// Each part of each (token, head) row is given either
// * unnormalised: accumulator A = sum_j exp(s_j - m) v_j, max m, sum l = sum_j exp(s_j - m); or
// * normalised: output v = A / l and natural-log log-sum-exp lse = m + ln l (FlashAttention's
//   softmax_lse, vLLM's merge_attn_states).
// An empty part is (A = 0, m = -inf, l = 0), or (v = 0, lse = -inf); merging it changes nothing,
// and a row whose parts are all empty gives output 0 and lse -inf, never NaN.
//
// FlashInfer reports base-2 log-sum-exp: convert with `LseFromBase2` before merging and
// `LseToBase2` after.

#ifndef DYNATTN_MERGE_H_
#define DYNATTN_MERGE_H_

#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn {

/// ln(2): natural-log lse = base-2 lse * kLn2.
inline constexpr double kLn2 = 0.69314718055994530942;

/// A base-2 log-sum-exp (FlashInfer) as the natural-log one libdynattn uses.
inline float LseFromBase2(float lse2) { return static_cast<float>(lse2 * kLn2); }
/// A natural-log log-sum-exp as base 2.
inline float LseToBase2(float lse) { return static_cast<float>(lse / kLn2); }

/// Parts to merge: K parts of T rows of H heads of D elements, part-major, all fp32 and dense.
/// Give either `out` and `lse` (normalised form), or `acc`, `max` and `sum` (unnormalised form).
struct MergeStatesArgs {
  TensorView out;         ///< (K, T, H, D): normalised part outputs.
  TensorView lse;         ///< (K, T, H): natural-log log-sum-exp of each part.
  TensorView acc;         ///< (K, T, H, D): unnormalised accumulators.
  TensorView max;         ///< (K, T, H): running maxima.
  TensorView sum;         ///< (K, T, H): sums of exp(s - max).
  TensorView merged_out;  ///< Out (T, H, D) fp32: the normalised output over all parts.
  TensorView merged_lse;  ///< Optional out (T, H) fp32: natural-log log-sum-exp over all parts.
};

/// Merges the parts of every row. Exact algebra (no approximation beyond rounding), and the same
/// bits for any order of the K parts: each row's parts are merged in an order fixed by their
/// values, not by their index. Errors name the input and the rule; nothing is written on error.
Status MergeStates(const MergeStatesArgs& args);

}  // namespace dynattn

#endif  // DYNATTN_MERGE_H_
