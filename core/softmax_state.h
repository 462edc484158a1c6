// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The partial softmax state and its merge: the one rule behind split contexts, unified
// attention's parts, the CUDA merges and the public MergeStates.
//
// A part that attended to keys K holds m = max_{j in K} s_j, l = sum exp(s_j - m) and
// a = sum exp(s_j - m) v_j (s_j the finished scores). Parts of one query vector merge exactly:
//   M = max over the non-empty parts of m_k,   w_k = MergeWeight(m_k, M),
//   l = sum_k w_k l_k,   a = sum_k w_k a_k,   output = a / l,   LSE = M + log(l).
// An empty part (it saw no key: m = -inf, l = 0) is skipped, so a merge never forms
// exp(-inf - -inf) = NaN; no non-empty part at all gives output 0 and LSE -inf. The part holding
// M gets weight exactly 1, so merging a single part copies it. A NaN part (a NaN score, or
// inf - inf) makes M, and so the merged state, NaN (MaxOrNaN), as IEEE arithmetic would.
//
// What each user chooses is the arithmetic and the order: the CPU kernels merge in float with the
// target-independent exp of cpu/softmax-inl.h, CUDA in float with expf, MergeStates in double;
// splits and unified parts merge in the plan's key order, MergeStates in an order fixed by the
// parts' values (so that any permutation of its inputs gives the same bits).

#ifndef DYNATTN_CORE_SOFTMAX_STATE_H_
#define DYNATTN_CORE_SOFTMAX_STATE_H_

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace dynattn::internal {

/// Floats in one partial softmax state as the kernels store it: m, l, then the accumulator a
/// padded to `padded_dim`.
DYNATTN_HD int64_t StateFloats(int padded_dim) { return 2 + padded_dim; }

/// The larger of `a` and `b`, NaN when either is NaN: the running maxima propagate a NaN score
/// (std::max, fmaxf and x86's max instructions each drop it in some operand order).
template <typename T>
DYNATTN_HD T MaxOrNaN(T a, T b) {
  return (a > b || a != a) ? a : b;
}

/// True for a part that saw no key (m = -inf): every merge skips it.
template <typename T>
DYNATTN_HD bool IsEmptyPart(T part_max) {
  return part_max == static_cast<T>(-INFINITY);
}

/// The weight w_k of a non-empty part with max `part_max` in a merge whose max is `merged_max`:
/// exactly 1 for the part holding the max, else exp(part_max - merged_max) with the caller's exp.
template <typename T, typename Exp>
DYNATTN_HD T MergeWeight(T part_max, T merged_max, const Exp& exp) {
  return part_max == merged_max ? static_cast<T>(1) : exp(part_max - merged_max);
}

/// A finished state with an attention sink folded in: the sink adds exp(sink) to the
/// denominator and nothing to the numerator, once per query vector, after every part has merged.
template <typename T>
struct SinkFolded {
  T max;        ///< max(m, sink).
  T sum;        ///< l * acc_scale + exp(sink - max).
  T acc_scale;  ///< Factor on the accumulator: exp(m - max) (0 for an empty state).
};

/// Folds sink value `sink` into a finished (m, l): output = acc * acc_scale / sum and
/// LSE = max + log(sum). A state that saw no key (m = -inf) gives output 0 and LSE = sink; a NaN
/// state stays NaN.
template <typename T, typename Exp>
DYNATTN_HD SinkFolded<T> FoldSink(T max, T sum, T sink, const Exp& exp) {
  if (IsEmptyPart(max)) return {sink, static_cast<T>(1), static_cast<T>(0)};
  const T merged = MaxOrNaN(max, sink);
  const T acc_scale = MergeWeight(max, merged, exp);
  const T sink_weight = MergeWeight(sink, merged, exp);
  return {merged, sum * acc_scale + sink_weight, acc_scale};
}

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_SOFTMAX_STATE_H_
