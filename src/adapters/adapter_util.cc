// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Checks and the row-layout -> BlockCache step shared by every adapter. Why: one place decides
// which dtypes, ranks and shapes an engine tensor may have, so every adapter reports a broken
// rule the same way ("<input>: <rule>").

#include "src/adapters/adapter_util.h"

#include <string>

namespace dynattn {
namespace adapters_internal {
namespace {

using internal::CheckStorage;

/// `t.data` advanced by `elems` elements of `bits` bits.
void* Advance(const TensorView& t, int64_t elems, int64_t bits) {
  return static_cast<char*>(t.data) + elems * bits / 8;
}

/// One plane's data and scale pointers and strides.
CachePlane PlaneOf(const RowLayout& l, int64_t offset, const TensorView& data,
                   const TensorView* scale, int64_t row, int64_t bits, int64_t scale_row) {
  CachePlane p;
  p.data = Advance(data, offset * row, bits);
  p.slot_stride = l.token * row;
  p.head_stride = l.head * row;
  if (scale != nullptr) {
    p.scale = Advance(*scale, offset * scale_row, DTypeSize(scale->dtype) * 8);
    p.scale_slot_stride = l.token * scale_row;
    p.scale_head_stride = l.head * scale_row;
  }
  return p;
}

}  // namespace

std::string Str(int64_t v) { return std::to_string(v); }

Status CheckIndexTensor(const char* name, const TensorView& t, int rank, const int64_t* shape) {
  if (!t.present()) return Status::Invalid(name, "is required");
  if (t.dtype != DType::kI64 && t.dtype != DType::kI32) {
    return Status::Invalid(name, std::string("must be int32 or int64, got ") + DTypeName(t.dtype));
  }
  if (t.rank != rank) {
    return Status::Invalid(name, "must have rank " + Str(rank) + ", got shape " + ShapeString(t));
  }
  for (int i = 0; i < rank; ++i) {
    if (shape[i] >= 0 && t.shape[i] != shape[i]) {
      return Status::Invalid(
          name, "dim " + Str(i) + " must be " + Str(shape[i]) + ", got shape " + ShapeString(t));
    }
  }
  if (t.device != Device::kCpu) return Status::Unsupported(name, "must be in CPU memory");
  return CheckStorage(name, t);
}

Status CheckFormat(const CacheFormat& f, int64_t head_dim) {
  return internal::CheckQuantization(f.quant_bit, f.quant_group, head_dim);
}

Status CheckDataTensor(const char* name, const TensorView& t, const CacheFormat& f, int rank) {
  if (!t.present()) return Status::Invalid(name, "is required");
  const DType d = t.dtype;
  if (f.quant_bit == 0 && d != DType::kF32 && d != DType::kF16 && d != DType::kBF16 &&
      d != DType::kF8E4M3 && d != DType::kF8E5M2) {
    return Status::Invalid(name,
                           std::string("must be float32, float16, bfloat16 or fp8 (e4m3fn, e5m2) "
                                       "when quant_bit is 0, got ") +
                               DTypeName(d));
  }
  if (f.quant_bit != 0 && t.dtype != DType::kI8) {
    return Status::Invalid(
        name, "must be int8 when quant_bit is " + Str(f.quant_bit) + ", got " + DTypeName(t.dtype));
  }
  if (t.rank != rank) {
    return Status::Invalid(name, "must have rank " + Str(rank) + ", got shape " + ShapeString(t));
  }
  return CheckStorage(name, t);
}

int64_t HeadDimOf(const TensorView& data, const CacheFormat& f) {
  const int64_t last = data.shape[data.rank - 1];
  return f.quant_bit == 4 ? 2 * last : last;
}

Status CheckScaleTensor(const char* name, const TensorView& scale, const TensorView& data,
                        const CacheFormat& f, int64_t head_dim) {
  if (f.quant_bit == 0) {
    if (scale.present()) return Status::Invalid(name, "must be absent when quant_bit is 0");
    return Status::Ok();
  }
  if (!scale.present()) {
    return Status::Invalid(name, "is required when quant_bit is " + Str(f.quant_bit));
  }
  if (scale.dtype != DType::kF16 && scale.dtype != DType::kF32) {
    return Status::Invalid(
        name, std::string("must be float16 or float32, got ") + DTypeName(scale.dtype));
  }
  bool same = scale.rank == data.rank && scale.shape[scale.rank - 1] == head_dim / f.quant_group;
  for (int i = 0; same && i + 1 < data.rank; ++i) same = scale.shape[i] == data.shape[i];
  if (!same) {
    return Status::Invalid(name, "must have shape " + ShapeString(data) + " with last dim " +
                                     Str(head_dim / f.quant_group) +
                                     " (head_dim / quant_group), got " + ShapeString(scale));
  }
  return CheckStorage(name, scale);
}

void FillBlockCache(const RowLayout& layout, const PlaneTensors& t, const CacheFormat& f,
                    int num_kv_heads, int64_t head_dim, int64_t head_dim_v, int block_size,
                    int64_t num_blocks, BlockCache* out) {
  const bool quantized = f.quant_bit != 0;
  const int64_t bits = internal::CacheElemBits(f.quant_bit, t.key->dtype);
  const int64_t groups = quantized ? head_dim / f.quant_group : 0;
  const int64_t value_groups = quantized ? head_dim_v / f.quant_group : 0;
  BlockCache bc;
  CacheDesc& d = bc.cache;
  d.elem = internal::CacheElemOf(f.quant_bit, t.key->dtype);
  d.scale_type = quantized && t.key_scale->dtype == DType::kF32 ? ScaleType::kF32 : ScaleType::kF16;
  d.quant_group = quantized ? f.quant_group : static_cast<int>(head_dim);
  d.num_kv_heads = num_kv_heads;
  d.head_dim = static_cast<int>(head_dim);
  d.head_dim_v = head_dim_v != head_dim ? static_cast<int>(head_dim_v) : 0;
  d.key = PlaneOf(layout, layout.key_offset, *t.key, quantized ? t.key_scale : nullptr, head_dim,
                  bits, groups);
  d.value = PlaneOf(layout, layout.value_offset, *t.value, quantized ? t.value_scale : nullptr,
                    head_dim_v, bits, value_groups);
  d.device = t.key->device;
  bc.block_size = block_size;
  bc.block_stride = layout.block / layout.token;
  bc.num_blocks = num_blocks;
  d.num_slots = num_blocks > 0 ? (num_blocks - 1) * bc.block_stride + block_size : 0;
  *out = bc;
}

}  // namespace adapters_internal
}  // namespace dynattn
