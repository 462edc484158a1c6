// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Where a cache row and its group scales live, and which request owns a packed row: the
// addressing every backend's kernels share (DYNATTN_HD, see core/host_device.h).

#ifndef DYNATTN_CORE_CACHE_ROWS_H_
#define DYNATTN_CORE_CACHE_ROWS_H_

#include <cstddef>
#include <cstdint>

#include "core/codec.h"
#include "core/host_device.h"
#include "dynattn/cache.h"

namespace dynattn::internal {

/// Bytes from a plane's start to its element `offset` (int4 offsets count nibbles).
DYNATTN_HD int64_t ByteOffset(CacheElem elem, int64_t offset) {
  switch (elem) {
    case CacheElem::kF32:
      return offset * 4;
    case CacheElem::kF16:
    case CacheElem::kBF16:
      return offset * 2;
    case CacheElem::kInt8:
    case CacheElem::kF8E4M3:
    case CacheElem::kF8E5M2:
      return offset;
    case CacheElem::kInt4:
      return offset / 2;
  }
  return offset;
}

/// Elements of a value row: head_dim_v, or head_dim when it is 0.
DYNATTN_HD int ValueDim(const CacheDesc& cache) {
  return cache.head_dim_v > 0 ? cache.head_dim_v : cache.head_dim;
}

/// The cache as its value rows see it: head_dim is the value rows' size. The codecs and row
/// helpers read a row's size (and its group count) from head_dim, so the value plane's rows go
/// through them as this view.
DYNATTN_HD CacheDesc ValueView(const CacheDesc& cache) {
  CacheDesc view = cache;
  view.head_dim = ValueDim(cache);
  view.head_dim_v = 0;
  return view;
}

/// Bytes of one cached row (the K or V of one slot and head) and of its group scales.
struct RowBytes {
  size_t row = 0, scales = 0;
};

DYNATTN_HD RowBytes RowBytesOf(const CacheDesc& cache) {
  RowBytes bytes;
  bytes.row = static_cast<size_t>(ByteOffset(cache.elem, cache.head_dim));
  if (cache.elem == CacheElem::kInt8 || cache.elem == CacheElem::kInt4) {
    bytes.scales = static_cast<size_t>(cache.head_dim / cache.quant_group) *
                   (cache.scale_type == ScaleType::kF16 ? 2 : 4);
  }
  return bytes;
}

/// Elements from a plane's start to its slot `slot` (of head 0, element 0): CachePlane's tiles.
DYNATTN_HD int64_t SlotOffset(const CachePlane& plane, int64_t slot) {
  if (plane.slots_per_tile <= 0) return slot * plane.slot_stride;
  return slot / plane.slots_per_tile * plane.tile_stride +
         slot % plane.slots_per_tile * plane.slot_stride;
}

/// Elements between consecutive elements of a row (1 unless the plane is dimension-major).
DYNATTN_HD int64_t DimStride(const CachePlane& plane) {
  return plane.dim_stride > 1 ? plane.dim_stride : 1;
}

/// First byte of row (slot, head) of a plane whose elements are `elem`.
DYNATTN_HD char* RowAddress(const CachePlane& plane, CacheElem elem, int64_t slot, int head) {
  return static_cast<char*>(plane.data) +
         ByteOffset(elem, SlotOffset(plane, slot) + head * plane.head_stride);
}

/// Element d of row (slot, head), for an unquantized plane (any dim_stride): the byte where it
/// starts. (Quantized rows are contiguous: RowAddress, and the codec finds element d.)
DYNATTN_HD char* ElementAddress(const CachePlane& plane, CacheElem elem, int64_t slot, int head,
                                int d) {
  return RowAddress(plane, elem, slot, head) + ByteOffset(elem, d * DimStride(plane));
}

/// First group scale of row (slot, head) of a plane (null for unquantized caches).
DYNATTN_HD char* ScaleAddress(const CachePlane& plane, bool scale_is_f16, int64_t slot, int head) {
  if (plane.scale == nullptr) return nullptr;
  return static_cast<char*>(plane.scale) +
         (slot * plane.scale_slot_stride + head * plane.scale_head_stride) * (scale_is_f16 ? 2 : 4);
}

/// Element d of row (slot, head) of `plane`, decoded as the codec reads it (DecodeElement): one
/// element at a time, as the CUDA kernels read rows, for any dim_stride.
DYNATTN_HD float DecodePlaneElement(const CachePlane& plane, CacheElem elem, int64_t slot, int head,
                                    int d, int group, bool scale_is_f16, DType io) {
  if (DimStride(plane) > 1) {  // unquantized: element d is found by its address alone
    return DecodeElement(ElementAddress(plane, elem, slot, head, d), nullptr, 0, elem, group,
                         scale_is_f16, io, plane.tensor_scale);
  }
  return DecodeElement(RowAddress(plane, elem, slot, head),
                       ScaleAddress(plane, scale_is_f16, slot, head), d, elem, group, scale_is_f16,
                       io, plane.tensor_scale);
}

/// The request owning packed row t of offsets `starts` (size + 1 non-decreasing entries): the
/// largest b with starts[b] <= t, so an empty request owns no row.
DYNATTN_HD int64_t OwnerOfRow(const int64_t* starts, int64_t size, int64_t t) {
  int64_t lo = 0, hi = size + 1;  // the first index with starts[index] > t lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (starts[mid] > t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo - 1;
}

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_CACHE_ROWS_H_
