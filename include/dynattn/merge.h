// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Merging partial attention results (spec: the Unified Attention spec §1.4, §3, §6.5; the rule:
// docs/numerics.md, "The merge rule").
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

#include "dynattn/export.h"
#include "dynattn/ops.h"
#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn {

/// ln(2): natural-log lse = base-2 lse * kLn2.
inline constexpr double kLn2 = 0.69314718055994530942;

/// A base-2 log-sum-exp (FlashInfer) as the natural-log one libdynattn uses.
inline float LseFromBase2(float lse2) { return static_cast<float>(lse2 * kLn2); }
/// A natural-log log-sum-exp as base 2.
inline float LseToBase2(float lse) { return static_cast<float>(lse / kLn2); }

/// Parts to merge: K parts of T rows of H heads of D elements, part-major, all fp32, dense and in
/// CPU memory, with K, T, H, D >= 1. Give either `out` and `lse` (normalised form), or `acc`,
/// `max` and `sum` (unnormalised form), never both.
///
/// Empty parts (no keys) contribute nothing, and their `out` / `acc` values are ignored:
/// * normalised form: `lse` = -inf is empty. `lse` = +inf is also read as empty, because that is
///   what FlashAttention-2 reports for an empty key set (vLLM's merge_attn_states does the same).
/// * unnormalised form: `sum` = 0 is empty, whatever `max` holds (-inf, or a clamp such as
///   -FLT_MAX as upstream Unified Attention uses). `max` = -inf requires `sum` = 0.
///
/// Value rules, each checked on every element (the error names the first offender's index):
/// `out` and `acc` finite; `lse` not NaN; `max` not NaN and not +inf; `sum` finite and >= 0.
/// `max` need not be the true maximum score of a part: any reference m with
/// acc = sum_j exp(s_j - m) v_j and sum = sum_j exp(s_j - m) is exact.
struct MergeStatesArgs {
  TensorView out;         ///< (K, T, H, D): normalised part outputs.
  TensorView lse;         ///< (K, T, H): natural-log log-sum-exp of each part (-inf/+inf: empty).
  TensorView acc;         ///< (K, T, H, D): unnormalised accumulators.
  TensorView max;         ///< (K, T, H): running maxima (-inf: empty).
  TensorView sum;         ///< (K, T, H): sums of exp(s - max), >= 0 (0: empty).
  TensorView merged_out;  ///< Out (T, H, D) fp32: the normalised output over all parts (0 when
                          ///< every part of the row is empty).
  TensorView merged_lse;  ///< Optional out (T, H) fp32: natural-log log-sum-exp over all parts
                          ///< (-inf when every part of the row is empty).
};

/// Merges the parts of every row: with m = max_k m_k over the non-empty parts and
/// w_k = exp(m_k - m), merged_out = sum_k w_k A_k / sum_k w_k l_k and merged_lse = m + ln(sum_k
/// w_k l_k) (the normalised form is the case m_k = lse_k, l_k = 1, A_k = out_k).
///
/// Exact algebra (no approximation beyond rounding): sums are taken in double and rounded to
/// float once. The same bits for any order of the K parts: each row's parts are merged in an
/// order fixed by their values (max or lse, then sum, then the vector, by bits), not by their
/// index; merging an empty part changes no bit. Rows may run in parallel; the result does not
/// depend on the thread count. The outputs must not overlap the inputs or each other.
/// Errors name the input and the rule; nothing is written on error.
DYNATTN_EXPORT Status MergeStates(const MergeStatesArgs& args, const RunOptions& options = {});

}  // namespace dynattn

#endif  // DYNATTN_MERGE_H_
