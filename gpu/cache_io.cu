// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the two KeyValueCache steps on the device: quantize and store new tokens, and
// gather context rows back into activations (repeated num_repeat times per KV head).
//
// Why it looks like this: a row is the unit of the cache format (its group scales depend on the
// whole group), so one thread encodes or decodes one (row, KV head, plane) with the
// __host__ __device__ codec of codec.cuh, which the host tests compare bit for bit with the CPU
// library. These steps move each byte once; their cost is the memory traffic, not the threads'
// arithmetic, so nothing finer-grained is needed.

#include <cstdint>

#include "gpu/codec.cuh"
#include "gpu/common.cuh"
#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "gpu/launch.cuh"

namespace dynattn::gpu {
namespace {

constexpr int kThreads = 128;

/// One thread per (packed token, KV head, plane): encodes the new row into its slot.
template <CacheElem kElem>
__global__ void WriteTokensKernel(internal::WriteProblem p, int64_t tokens) {
  const CacheDesc& cache = p.kv.cache;
  const int heads = cache.num_kv_heads;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= tokens * heads * 2) return;
  const int plane_index = static_cast<int>(index % 2);
  const int head = static_cast<int>((index / 2) % heads);
  const int64_t t = index / 2 / heads;
  const int64_t b = OwnerOf(p.batch.seqstarts, p.batch.size, t);
  const int64_t position = p.batch.start_pos[b] + (t - p.batch.seqstarts[b]);
  const int64_t slot = SlotOf(p.kv.slots, b, position);
  const CachePlane& plane = plane_index == 0 ? cache.key : cache.value;
  const bool io_f16 = p.io_type == DType::kF16;
  const bool scale_f16 = cache.scale_type == ScaleType::kF16;
  const int dim = cache.head_dim;
  const void* src = plane_index == 0 ? p.current_key : p.current_value;
  const int64_t first = (t * heads + head) * dim;
  const auto load = [&](int d) { return LoadActivation(src, first + d, io_f16); };
  EncodeRow(load, kElem, dim, cache.quant_group, scale_f16, io_f16, RowAt(plane, kElem, slot, head),
            ScaleAt(plane, scale_f16, slot, head));
}

/// One thread per (packed context row, KV head, plane): decodes the row once and stores it
/// num_repeat times.
template <CacheElem kElem>
__global__ void GatherKernel(internal::GatherProblem p, int64_t rows) {
  const CacheDesc& cache = p.kv.cache;
  const int heads = cache.num_kv_heads;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * heads * 2) return;
  const int plane_index = static_cast<int>(index % 2);
  const int head = static_cast<int>((index / 2) % heads);
  const int64_t row = index / 2 / heads;
  const int64_t b = OwnerOf(p.batch.kvstarts, p.batch.size, row);
  const int64_t slot = SlotOf(p.kv.slots, b, row - p.batch.kvstarts[b]);
  const CachePlane& plane = plane_index == 0 ? cache.key : cache.value;
  const bool io_f16 = p.io_type == DType::kF16;
  const bool scale_f16 = cache.scale_type == ScaleType::kF16;
  const int dim = cache.head_dim;
  const char* src = RowAt(plane, kElem, slot, head);
  const char* scale = ScaleAt(plane, scale_f16, slot, head);
  void* out = plane_index == 0 ? p.key : p.value;
  const int out_heads = heads * p.num_repeat;
  for (int d = 0; d < dim; ++d) {
    const float x = DecodeElement(src, scale, d, kElem, cache.quant_group, scale_f16, io_f16);
    for (int r = 0; r < p.num_repeat; ++r) {
      StoreActivation(x, out, (row * out_heads + head * p.num_repeat + r) * dim + d, io_f16);
    }
  }
}

unsigned Blocks(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

}  // namespace

void LaunchWriteTokens(const internal::WriteProblem& p, int64_t tokens) {
  const int64_t threads = tokens * p.kv.cache.num_kv_heads * 2;
  if (threads == 0) return;
  switch (p.kv.cache.elem) {
    case CacheElem::kF32:
      DYNATTN_LAUNCH(WriteTokensKernel<CacheElem::kF32>, Blocks(threads), kThreads, 0)(p, tokens);
      break;
    case CacheElem::kF16:
      DYNATTN_LAUNCH(WriteTokensKernel<CacheElem::kF16>, Blocks(threads), kThreads, 0)(p, tokens);
      break;
    case CacheElem::kInt8:
      DYNATTN_LAUNCH(WriteTokensKernel<CacheElem::kInt8>, Blocks(threads), kThreads, 0)(p, tokens);
      break;
    case CacheElem::kInt4:
      DYNATTN_LAUNCH(WriteTokensKernel<CacheElem::kInt4>, Blocks(threads), kThreads, 0)(p, tokens);
      break;
  }
  DYNATTN_CUDA_CHECK(cudaGetLastError());
}

void LaunchGatherContext(const internal::GatherProblem& p, int64_t rows) {
  const int64_t threads = rows * p.kv.cache.num_kv_heads * 2;
  if (threads == 0) return;
  switch (p.kv.cache.elem) {
    case CacheElem::kF32:
      DYNATTN_LAUNCH(GatherKernel<CacheElem::kF32>, Blocks(threads), kThreads, 0)(p, rows);
      break;
    case CacheElem::kF16:
      DYNATTN_LAUNCH(GatherKernel<CacheElem::kF16>, Blocks(threads), kThreads, 0)(p, rows);
      break;
    case CacheElem::kInt8:
      DYNATTN_LAUNCH(GatherKernel<CacheElem::kInt8>, Blocks(threads), kThreads, 0)(p, rows);
      break;
    case CacheElem::kInt4:
      DYNATTN_LAUNCH(GatherKernel<CacheElem::kInt4>, Blocks(threads), kThreads, 0)(p, rows);
      break;
  }
  DYNATTN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dynattn::gpu
