// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Device-side addressing shared by the CUDA kernels: the slot maps of simd/kernel_abi.h, the
// request owning a packed row, and row pointers into cache planes. The structs of kernel_abi.h
// cross to the device by value (they are plain data); their member functions are host-only, so
// the device twins live here.

#ifndef DYNATTN_GPU_COMMON_CUH_
#define DYNATTN_GPU_COMMON_CUH_

#include <cstdint>

#include "dynattn/cache.h"
#include "gpu/codec.cuh"
#include "simd/kernel_abi.h"

namespace dynattn::gpu {

/// Physical slot of logical position p of request b (SlotMap::Slot).
__device__ __forceinline__ int64_t SlotOf(const internal::SlotMap& m, int64_t b, int64_t p) {
  if (m.mode == internal::SlotMap::Mode::kOffset) return m.starts[b] + p;
  const int64_t entry = m.starts[b * m.table_stride + p / m.page_size];
  const int64_t first = m.mode == internal::SlotMap::Mode::kBlocks ? entry * m.block_stride : entry;
  return first + p % m.page_size;
}

/// The b with starts[b] <= t < starts[b + 1] and the largest such b (std::upper_bound - 1 over
/// starts[0, size]): the request owning packed row t, skipping empty requests.
__device__ __forceinline__ int64_t OwnerOf(const int64_t* starts, int64_t size, int64_t t) {
  int64_t lo = 0, hi = size + 1;  // first index with starts[index] > t lies in [lo, hi]
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

/// internal::StateFloats on the device: max, sum, then the padded accumulator.
__host__ __device__ __forceinline__ int64_t StateFloatsOf(int padded_dim) { return 2 + padded_dim; }

/// The byte offset of an element offset of a cache plane (int4 offsets count nibbles).
__host__ __device__ __forceinline__ int64_t ByteOffset(CacheElem elem, int64_t offset) {
  switch (elem) {
    case CacheElem::kF32:
      return offset * 4;
    case CacheElem::kF16:
      return offset * 2;
    case CacheElem::kInt8:
      return offset;
    case CacheElem::kInt4:
      return offset / 2;
  }
  return offset;
}

/// First byte of row (slot, head) of a plane.
__device__ __forceinline__ char* RowAt(const CachePlane& plane, CacheElem elem, int64_t slot,
                                       int head) {
  return static_cast<char*>(plane.data) +
         ByteOffset(elem, slot * plane.slot_stride + head * plane.head_stride);
}

/// First group scale of row (slot, head) of a plane (null for unquantized caches).
__device__ __forceinline__ char* ScaleAt(const CachePlane& plane, bool scale_is_f16, int64_t slot,
                                         int head) {
  if (plane.scale == nullptr) return nullptr;
  return static_cast<char*>(plane.scale) +
         (slot * plane.scale_slot_stride + head * plane.scale_head_stride) * (scale_is_f16 ? 2 : 4);
}

}  // namespace dynattn::gpu

#endif  // DYNATTN_GPU_COMMON_CUH_
