// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "dynattn/types.h"

#include <cstdint>
#include <iterator>

#include "core/checked_math.h"

namespace dynattn {

// Extent products saturate at INT64_MAX (internal::SaturatingMul): a shape whose product does not
// fit is refused as too large by validation, never wrapped into a small one.
using internal::SaturatingMul;

namespace {

/// Each DType's size and name, in enumerator order.
struct DTypeInfo {
  size_t bytes;
  const char* name;
};
constexpr DTypeInfo kDTypes[] = {
    {4, "float32"}, {2, "float16"},  {1, "int8"},          {8, "int64"},
    {4, "int32"},   {2, "bfloat16"}, {1, "float8_e4m3fn"}, {1, "float8_e5m2"},
};
static_assert(std::size(kDTypes) == static_cast<size_t>(DType::kF8E5M2) + 1);

const DTypeInfo* InfoOf(DType dtype) {
  const size_t index = static_cast<size_t>(dtype);
  return index < std::size(kDTypes) ? &kDTypes[index] : nullptr;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = InfoOf(dtype);
  return info != nullptr ? info->bytes : 0;
}

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = InfoOf(dtype);
  return info != nullptr ? info->name : "?";
}

TensorView TensorView::Dense(const void* data, DType dtype, int rank, const int64_t* shape,
                             Device device) {
  TensorView view;
  view.data = const_cast<void*>(data);
  view.dtype = dtype;
  view.rank = rank;
  view.device = device;
  if (rank > kMaxRank) return view;  // not representable: validation names the rank
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    view.shape[i] = shape[i];
    view.strides[i] = stride;
    stride = SaturatingMul(stride, shape[i]);
  }
  return view;
}

TensorView TensorView::Dense(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                             Device device) {
  return Dense(data, dtype, static_cast<int>(shape.size()), shape.begin(), device);
}

int64_t TensorView::NumElements() const {
  if (rank < 0 || rank > kMaxRank) return 0;  // absent, or a rank validation rejects
  for (int i = 0; i < rank; ++i) {
    if (shape[i] <= 0) return 0;  // empty (a negative extent is validation's to name)
  }
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n = SaturatingMul(n, shape[i]);
  return n;
}

bool TensorView::IsDense() const {
  if (rank == 0) return true;
  if (!IsRowStrided()) return false;
  int64_t row = 1;
  for (int i = 1; i < rank; ++i) row = SaturatingMul(row, shape[i]);
  return shape[0] <= 1 || strides[0] == row;
}

bool TensorView::IsRowStrided() const {
  if (rank < 1 || rank > kMaxRank) return false;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 1; --i) {
    if (shape[i] > 1 && strides[i] != stride) return false;
    stride = SaturatingMul(stride, shape[i]);
  }
  return shape[0] <= 1 || strides[0] >= stride;
}

const char* DeviceName(Device device) { return device == Device::kCpu ? "CPU" : "CUDA"; }

const char* PrecisionName(Precision precision) {
  return precision == Precision::kFast ? "fast" : "exact";
}

}  // namespace dynattn
