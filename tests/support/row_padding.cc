// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/row_padding.h"

#include <cstring>

namespace dynattn_test {
namespace {

bool RowStridable(const std::string& name) {
  return name == "query" || name == "current_key" || name == "current_value" || name == "key" ||
         name == "value" || name == "attn_output";
}

constexpr uint8_t kGapByte = 0xFF;  // NaN in every float type: a gap that is read shows

}  // namespace

dynattn::TensorView RowPadding::Place(const std::string& name, Array& array) {
  if (!RowStridable(name) || array.shape.size() != 3 || array.bytes.empty()) {
    return inner_ != nullptr ? inner_->Place(name, array) : ViewOf(array);
  }
  const int64_t rows = array.shape[0], row = array.shape[1] * array.shape[2];
  const int64_t width = row + pad_;
  const size_t size = array.bytes.size() / static_cast<size_t>(rows * row);
  Padded& p = padded_.emplace_back();
  p.name = name;
  p.original = &array;
  p.wide = dynattn_ref::MakeArray(array.dt, {rows, width});
  std::memset(p.wide.bytes.data(), kGapByte, p.wide.bytes.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(p.wide.bytes.data() + r * width * size, array.bytes.data() + r * row * size,
                row * size);
  }
  dynattn::TensorView view = inner_ != nullptr ? inner_->Place(name, p.wide) : ViewOf(p.wide);
  view.rank = 3;
  for (int i = 0; i < 3; ++i) view.shape[i] = array.shape[i];
  view.strides[0] = width;
  view.strides[1] = array.shape[2];
  view.strides[2] = 1;
  return view;
}

void RowPadding::Fetch() {
  if (inner_ != nullptr) inner_->Fetch();
  for (Padded& p : padded_) {
    Array& array = *p.original;
    const int64_t rows = array.shape[0], row = array.shape[1] * array.shape[2];
    const int64_t width = row + pad_;
    const size_t size = array.bytes.size() / static_cast<size_t>(rows * row);
    bool gap_written = false;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* wide_row = p.wide.bytes.data() + r * width * size;
      std::memcpy(array.bytes.data() + r * row * size, wide_row, row * size);
      for (size_t i = row * size; i < width * size; ++i) gap_written |= wide_row[i] != kGapByte;
    }
    if (gap_written) gaps_written_.push_back(p.name);
  }
}

}  // namespace dynattn_test
