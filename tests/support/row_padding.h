// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Row-strided activations for any test call: a Placement that puts the row-stridable tensors
// (query, current_key, current_value, key, value, attn_output) into rows wider than dense, the
// gaps filled with NaN bytes, as column slices of a fused QKV projection are laid out.

#ifndef DYNATTN_TESTS_SUPPORT_ROW_PADDING_H_
#define DYNATTN_TESTS_SUPPORT_ROW_PADDING_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "tests/support/run_case.h"

namespace dynattn_test {

/// Places each row-stridable rank-3 tensor in rows `pad` elements wider than its dense rows
/// (through `inner` when given, e.g. onto a device), and the rest as `inner` (or host memory)
/// does. Fetch copies the rows back into the caller's arrays and records every tensor whose gap
/// bytes changed (the call wrote outside its rows).
class RowPadding : public Placement {
 public:
  explicit RowPadding(int64_t pad, Placement* inner = nullptr) : pad_(pad), inner_(inner) {}

  dynattn::TensorView Place(const std::string& name, Array& array) override;
  void Fetch() override;

  /// Names of the tensors whose gaps were written (empty when none).
  const std::vector<std::string>& gaps_written() const { return gaps_written_; }
  /// How many tensors were given padded rows.
  int padded() const { return static_cast<int>(padded_.size()); }

 private:
  struct Padded {
    std::string name;
    Array* original = nullptr;
    Array wide;  ///< (rows, row + pad) of the original's dtype.
  };
  int64_t pad_;
  Placement* inner_;
  std::deque<Padded> padded_;  ///< Stable addresses: `inner_` keeps pointers to `wide`.
  std::vector<std::string> gaps_written_;
};

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_ROW_PADDING_H_
