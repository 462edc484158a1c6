// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the merge suite's files share (tests/merge_*_test.cc): parts of a softmax in both of
// MergeStates' forms, normalised (out, lse) and unnormalised (acc, max, sum), made from random key
// sets split at random; one MergeStates call over them, its outputs poisoned first; bitwise
// comparison.

#ifndef DYNATTN_TESTS_SUPPORT_MERGE_PARTS_H_
#define DYNATTN_TESTS_SUPPORT_MERGE_PARTS_H_

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"

namespace dynattn_test {

using dynattn::DType;
using dynattn::MergeStatesArgs;
using dynattn::Status;
using dynattn::TensorView;

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr double kInfD = std::numeric_limits<double>::infinity();

/// A quiet NaN with a payload no arithmetic produces: what every output holds before a call.
float Poison();

/// K parts of T x H rows of D elements in both forms (each form is filled by the generators).
struct Parts {
  int64_t k = 0, t = 0, h = 0, d = 0;
  std::vector<float> out, lse;       // normalised form
  std::vector<float> acc, max, sum;  // unnormalised form

  int64_t Rows() const { return t * h; }
  void Resize() {
    out.assign(k * Rows() * d, 0.0f);
    acc.assign(k * Rows() * d, 0.0f);
    lse.assign(k * Rows(), -kInf);
    max.assign(k * Rows(), -kInf);
    sum.assign(k * Rows(), 0.0f);
  }
};

/// What one MergeStates call produced.
struct Merged {
  Status status;
  std::vector<float> out, lse;
};

/// MergeStates' two forms of the parts.
enum class Form { kNormalised, kUnnormalised };

/// How the form is named in messages.
const char* FormName(Form form);

/// MergeStates over `p` in `form` (with merged_lse when `with_lse`), its outputs poisoned first.
Merged Merge(Parts& p, Form form, bool with_lse = true);

/// Bitwise equality of two float arrays, with the first difference in `why`.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b, std::string* why);

/// The keys of every row, in double: what the parts were made from.
struct Keys {
  std::vector<std::vector<double>> scores;  // [row][j]
  std::vector<std::vector<double>> values;  // [row][j * D + d]
  std::vector<std::vector<int>> part;       // [row][j]: the part key j went to
};

/// Random rows whose keys are split among `p->k` parts at random (so some parts are empty), and
/// each part's state in both forms, computed in double and rounded to float. Scores are
/// N(offset, sigma) with |offset| <= 4, sigma <= 4, so every |lse| stays below about 25.
Keys RandomParts(std::mt19937_64& rng, Parts* p);

/// A random shape: 1..6 parts, 1..4 tokens, 1..3 heads, head dim 1..9.
void RandomShape(std::mt19937_64& rng, Parts* p);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_MERGE_PARTS_H_
