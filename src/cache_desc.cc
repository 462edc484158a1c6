// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// PMX cache tensors -> CacheDesc. The four layouts of spec pmx-ops §3.2 differ only in where the
// slot and head dimensions sit, so each becomes the strides (slot, layer, kv, head) of a row of
// `row` elements; the scale tensor gets the same strides with row = head_dim / quant_group.
// MakePmxBlockCache is the same descriptor cut into blocks.

#include <string>

#include "core/codec.h"
#include "dynattn/cache.h"
#include "dynattn/unified.h"
#include "src/aliasing.h"
#include "src/validate.h"

namespace dynattn {
namespace {

using internal::ShapeString;

struct LayoutStrides {
  int64_t slot, layer, kv, head;
};

/// Strides of layout 0-3 for rows of `row` elements (spec pmx-ops §3.2, stride form).
LayoutStrides StridesOf(int layout, int64_t layers, int64_t heads, int64_t slots, int64_t row) {
  switch (layout) {
    case 0:
      return {layers * 2 * heads * row, 2 * heads * row, heads * row, row};
    case 1:
      return {2 * heads * row, slots * 2 * heads * row, heads * row, row};
    case 2:
      return {heads * row, 2 * slots * heads * row, slots * heads * row, row};
    default:
      return {row, 2 * heads * slots * row, heads * slots * row, slots * row};
  }
}

/// Expected rank-5 shape of layout 0-3.
void ShapeOf(int layout, int64_t layers, int64_t heads, int64_t slots, int64_t row,
             int64_t shape[5]) {
  const int64_t shapes[4][5] = {{slots, layers, 2, heads, row},
                                {layers, slots, 2, heads, row},
                                {layers, 2, slots, heads, row},
                                {layers, 2, heads, slots, row}};
  for (int i = 0; i < 5; ++i) shape[i] = shapes[layout][i];
}

/// What each dimension of layout 0-3 means, for error messages.
constexpr const char* kLegend[4] = {
    "(MaxT, num_layer, 2, num_kv_heads, last dim)", "(num_layer, MaxT, 2, num_kv_heads, last dim)",
    "(num_layer, 2, MaxT, num_kv_heads, last dim)", "(num_layer, 2, num_kv_heads, MaxT, last dim)"};

/// Index of the MaxT dimension in layout 0-3.
int SlotDim(int layout) { return layout; }

Status CheckLayoutShape(const char* name, const TensorView& t, int layout, int64_t layers,
                        int64_t heads, int64_t row) {
  if (t.rank != 5) {
    return Status::Invalid(
        name, "must have rank 5 for a PMX cache layout, got rank " + std::to_string(t.rank));
  }
  int64_t want[5];
  ShapeOf(layout, layers, heads, t.shape[SlotDim(layout)], row, want);
  for (int i = 0; i < 5; ++i) {
    if (t.shape[i] != want[i]) {
      return Status::Invalid(name, "shape " + ShapeString(t.shape, 5) + " does not match layout " +
                                       std::to_string(layout) + ", which needs " +
                                       ShapeString(want, 5) + " " + kLegend[layout]);
    }
  }
  return internal::CheckStorage(name, t);
}

Status CheckCacheDType(const TensorView& cache, int quant_bit) {
  const DType d = cache.dtype;
  if (quant_bit == 0 && d != DType::kF32 && d != DType::kF16 && d != DType::kBF16 &&
      d != DType::kF8E4M3 && d != DType::kF8E5M2) {
    return Status::Invalid(
        "cache",
        std::string("must be float32, float16, bfloat16, float8_e4m3fn or float8_e5m2 when "
                    "quant_bit is 0, got ") +
            DTypeName(d));
  }
  if (quant_bit != 0 && cache.dtype != DType::kI8) {
    return Status::Invalid("cache", std::string("must be int8 when quant_bit is ") +
                                        std::to_string(quant_bit) + ", got " +
                                        DTypeName(cache.dtype));
  }
  return Status::Ok();
}

/// Fills key/value planes (data and strides) of layer `layer` from the tensor base pointers.
void FillPlanes(const CacheAttrs& a, int heads, int64_t slots, int64_t row, void* data,
                int64_t elem_bits, CacheDesc* desc) {
  const LayoutStrides s = StridesOf(a.cache_layout, a.num_layer, heads, slots, row);
  for (int kv = 0; kv < 2; ++kv) {
    CachePlane& plane = kv == 0 ? desc->key : desc->value;
    const int64_t offset = a.layer_idx * s.layer + kv * s.kv;
    plane.data = static_cast<char*>(data) + offset * elem_bits / 8;
    plane.slot_stride = s.slot;
    plane.head_stride = s.head;
  }
}

void FillScalePlanes(const CacheAttrs& a, int heads, int64_t slots, int64_t row, void* data,
                     size_t elem_size, CacheDesc* desc) {
  const LayoutStrides s = StridesOf(a.cache_layout, a.num_layer, heads, slots, row);
  for (int kv = 0; kv < 2; ++kv) {
    CachePlane& plane = kv == 0 ? desc->key : desc->value;
    plane.scale = static_cast<char*>(data) + (a.layer_idx * s.layer + kv * s.kv) * elem_size;
    plane.scale_slot_stride = s.slot;
    plane.scale_head_stride = s.head;
  }
}

}  // namespace

Status MakePmxCacheDesc(const TensorView& cache, const TensorView& scale, const CacheAttrs& a,
                        int num_kv_heads, int head_dim, CacheDesc* desc) {
  if (a.num_layer < 1) {
    return Status::Invalid("num_layer", "must be >= 1, got " + std::to_string(a.num_layer));
  }
  if (a.layer_idx < 0 || a.layer_idx >= a.num_layer) {
    return Status::Invalid("layer_idx",
                           "must be in [0, num_layer = " + std::to_string(a.num_layer) + "), got " +
                               std::to_string(a.layer_idx));
  }
  if (a.cache_layout < 0 || a.cache_layout > 3) {
    return Status::Invalid("cache_layout",
                           "must be 0, 1, 2 or 3, got " + std::to_string(a.cache_layout));
  }
  DYNATTN_RETURN_IF_ERROR(internal::CheckQuantization(a.quant_bit, a.quant_group, head_dim));
  if (!cache.present()) return Status::Invalid("cache", "is required");
  DYNATTN_RETURN_IF_ERROR(internal::CheckStorage("cache", cache));
  DYNATTN_RETURN_IF_ERROR(CheckCacheDType(cache, a.quant_bit));
  const int64_t row = a.quant_bit == 4 ? head_dim / 2 : head_dim;
  DYNATTN_RETURN_IF_ERROR(
      CheckLayoutShape("cache", cache, a.cache_layout, a.num_layer, num_kv_heads, row));
  const int64_t slots = cache.shape[SlotDim(a.cache_layout)];

  CacheDesc d;
  d.elem = internal::CacheElemOf(a.quant_bit, cache.dtype);
  d.quant_group = a.quant_bit == 0 ? head_dim : a.quant_group;
  d.num_kv_heads = num_kv_heads;
  d.head_dim = head_dim;
  d.num_slots = slots;
  // int4 strides count nibbles: the layout formula with head_dim instead of head_dim / 2 bytes.
  const int64_t elem_bits = internal::CacheElemBits(a.quant_bit, cache.dtype);
  FillPlanes(a, num_kv_heads, slots, head_dim, cache.data, elem_bits, &d);
  if (a.quant_bit == 0 && scale.present() && scale.NumElements() != 0) {
    // Nothing would read it: refusing it beats ignoring what the caller believes is used.
    return Status::Invalid("scale", internal::IsFp8(d.elem)
                                        ? "must be absent for an fp8 cache (its per-tensor scales "
                                          "are the k_scale and v_scale inputs)"
                                        : "must be absent when quant_bit is 0 (only int8 and int4 "
                                          "caches have group scales)");
  }
  if (a.quant_bit != 0) {
    if (scale.present()) DYNATTN_RETURN_IF_ERROR(internal::CheckStorage("scale", scale));
    if (!scale.present() || scale.NumElements() == 0) {
      return Status::Invalid("scale",
                             "is required when quant_bit is " + std::to_string(a.quant_bit));
    }
    if (scale.dtype != DType::kF16 && scale.dtype != DType::kF32) {
      return Status::Invalid(
          "scale", std::string("must be float16 or float32, got ") + DTypeName(scale.dtype));
    }
    const int64_t groups = head_dim / a.quant_group;
    DYNATTN_RETURN_IF_ERROR(
        CheckLayoutShape("scale", scale, a.cache_layout, a.num_layer, num_kv_heads, groups));
    if (scale.shape[SlotDim(a.cache_layout)] != slots) {
      return Status::Invalid("scale", "must have the cache's MaxT = " + std::to_string(slots) +
                                          " slots, got " +
                                          std::to_string(scale.shape[SlotDim(a.cache_layout)]));
    }
    // Both are written in place: a scale inside the cache would be overwritten by new tokens
    // (found by the fuzzer through a block cache, whose memory is otherwise trusted).
    DYNATTN_RETURN_IF_ERROR(internal::CheckNoAliasing(
        {internal::WrittenBuffer("scale", scale), internal::WrittenBuffer("cache", cache)}));
    d.scale_type = scale.dtype == DType::kF16 ? ScaleType::kF16 : ScaleType::kF32;
    FillScalePlanes(a, num_kv_heads, slots, groups, scale.data, DTypeSize(scale.dtype), &d);
  }
  d.device = cache.device;
  if (scale.present() && a.quant_bit != 0 && scale.device != cache.device) {
    return Status::Unsupported("scale", "must be in the same memory as cache");
  }
  *desc = d;
  return Status::Ok();
}

const char* CacheElemName(CacheElem elem) {
  switch (elem) {
#define DYNATTN_CACHE_ELEM_NAME(elem, tag, name, row, c_suffix) \
  case CacheElem::elem:                                         \
    return name;
    DYNATTN_CACHE_FORMATS(DYNATTN_CACHE_ELEM_NAME)
#undef DYNATTN_CACHE_ELEM_NAME
  }
  return "?";
}

Status MakePmxBlockCache(const TensorView& cache, const TensorView& scale, const CacheAttrs& attrs,
                         int num_kv_heads, int head_dim, int block_size, BlockCache* out) {
  if (block_size < 1) {
    return Status::Invalid("block_size", "must be >= 1, got " + std::to_string(block_size));
  }
  CacheAttrs offset_attrs = attrs;
  offset_attrs.cache_mode = 0;
  BlockCache result;
  if (cache.present()) DYNATTN_RETURN_IF_ERROR(internal::CheckStorage("cache", cache));
  if (scale.present() && attrs.quant_bit != 0) {
    DYNATTN_RETURN_IF_ERROR(internal::CheckStorage("scale", scale));
  }
  DYNATTN_RETURN_IF_ERROR(
      MakePmxCacheDesc(cache, scale, offset_attrs, num_kv_heads, head_dim, &result.cache));
  if (result.cache.num_slots % block_size != 0) {
    return Status::Invalid("cache", "MaxT = " + std::to_string(result.cache.num_slots) +
                                        " must be a multiple of block_size " +
                                        std::to_string(block_size) +
                                        " (MaxT = num_blocks * block_size)");
  }
  result.block_size = block_size;
  result.block_stride = block_size;
  result.num_blocks = result.cache.num_slots / block_size;
  *out = result;
  return Status::Ok();
}

}  // namespace dynattn
