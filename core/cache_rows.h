// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Where a cache row and its group scales live, and which request owns a packed row: the
// addressing every backend's kernels share (DYNATTN_HD, see core/host_device.h).

#ifndef DYNATTN_CORE_CACHE_ROWS_H_
#define DYNATTN_CORE_CACHE_ROWS_H_

#include <cstddef>
#include <cstdint>

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

/// First byte of row (slot, head) of a plane whose elements are `elem`.
DYNATTN_HD char* RowAddress(const CachePlane& plane, CacheElem elem, int64_t slot, int head) {
  return static_cast<char*>(plane.data) +
         ByteOffset(elem, slot * plane.slot_stride + head * plane.head_stride);
}

/// First group scale of row (slot, head) of a plane (null for unquantized caches).
DYNATTN_HD char* ScaleAddress(const CachePlane& plane, bool scale_is_f16, int64_t slot, int head) {
  if (plane.scale == nullptr) return nullptr;
  return static_cast<char*>(plane.scale) +
         (slot * plane.scale_slot_stride + head * plane.scale_head_stride) * (scale_is_f16 ? 2 : 4);
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
