// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the two KeyValueCache steps on the device: quantize and store new tokens, and
// gather context rows back into activations (repeated num_repeat times per KV head), for every
// cache format (fp32, fp16, bf16, int8, int4, fp8 e4m3/e5m2 with the plane's per-tensor scale) and
// every activation type (fp32, fp16, bf16).
//
// Why it looks like this: a row is the unit of the cache format (its group scales depend on the
// whole group), so one thread encodes or decodes one (row, KV head, plane) with the
// __host__ __device__ codec of core/codec.h, which the host tests compare bit for bit with the CPU
// library. These steps move each byte once; their cost is the memory traffic, not the threads'
// arithmetic, so nothing finer-grained is needed.

#include <cstdint>

#include "core/cache_rows.h"
#include "core/codec.h"
#include "core/problem.h"
#include "core/softmax_state.h"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "cuda/launch.cuh"

namespace dynattn::gpu {
namespace {

// core/'s shared rules, used unqualified by the kernels below.
using internal::EncodeRow;
using internal::LoadActivationOf;
using internal::OwnerOfRow;
using internal::RowAddress;
using internal::ScaleAddress;
using internal::StoreActivationOf;

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
  const int64_t b = OwnerOfRow(p.batch.seqstarts, p.batch.size, t);
  const int64_t position = p.batch.WriteKeyNumber(b, t - p.batch.seqstarts[b]);
  if (position < 0) return;  // another context shard holds this new token
  const int64_t slot = p.kv.slots.Slot(b, position);
  if (plane_index == 1 && p.current_value == nullptr) return;  // values read from the keys
  const CachePlane& plane = plane_index == 0 ? cache.key : cache.value;
  const bool io_f16 = p.io_type == DType::kF16;
  const bool scale_f16 = cache.scale_type == ScaleType::kF16;
  const int dim = plane_index == 0 ? cache.head_dim : internal::ValueDim(cache);
  const void* src = plane_index == 0 ? p.current_key : p.current_value;
  const int64_t first = p.SourceOffset(plane_index, t, head);
  const auto load = [&](int d) { return LoadActivationOf(src, first + d, p.io_type); };
  if (internal::DimStride(plane) > 1) {  // a dimension-major (so unquantized) row, element-wise
    for (int d = 0; d < dim; ++d) {
      const auto element = [&](int) { return load(d); };
      EncodeRow(element, kElem, 1, 1, scale_f16, io_f16,
                internal::ElementAddress(plane, kElem, slot, head, d), nullptr, plane.tensor_scale);
    }
    return;
  }
  EncodeRow(load, kElem, dim, cache.quant_group, scale_f16, io_f16,
            RowAddress(plane, kElem, slot, head), ScaleAddress(plane, scale_f16, slot, head),
            plane.tensor_scale);
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
  const int64_t b = OwnerOfRow(p.batch.kvstarts, p.batch.size, row);
  const int64_t slot = p.kv.slots.Slot(b, row - p.batch.kvstarts[b]);
  const CachePlane& plane = plane_index == 0 ? cache.key : cache.value;
  const bool scale_f16 = cache.scale_type == ScaleType::kF16;
  const int dim = plane_index == 0 ? cache.head_dim : internal::ValueDim(cache);
  void* out = plane_index == 0 ? p.key : p.value;
  for (int d = 0; d < dim; ++d) {
    const float x = internal::DecodePlaneElement(plane, kElem, slot, head, d, cache.quant_group,
                                                 scale_f16, p.io_type);
    for (int r = 0; r < p.num_repeat; ++r) {
      StoreActivationOf(x, out, p.OutputOffset(plane_index, row, head * p.num_repeat + r) + d,
                        p.io_type);
    }
  }
}

unsigned Blocks(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

}  // namespace

template <CacheElem kElem>
Status LaunchWriteTokens(const internal::WriteProblem& p, int64_t tokens, cudaStream_t stream) {
  const int64_t threads = tokens * p.kv.cache.num_kv_heads * 2;
  if (threads == 0) return Status::Ok();
  DYNATTN_LAUNCH(WriteTokensKernel<kElem>, Blocks(threads), kThreads, 0, stream)(p, tokens);
  return CudaStatus(cudaGetLastError(), "WriteTokensKernel launch");
}

template <CacheElem kElem>
Status LaunchGatherContext(const internal::GatherProblem& p, int64_t rows, cudaStream_t stream) {
  const int64_t threads = rows * p.kv.cache.num_kv_heads * 2;
  if (threads == 0) return Status::Ok();
  DYNATTN_LAUNCH(GatherKernel<kElem>, Blocks(threads), kThreads, 0, stream)(p, rows);
  return CudaStatus(cudaGetLastError(), "GatherKernel launch");
}

#define DYNATTN_INSTANTIATE_CACHE_IO(elem)                                                       \
  template Status LaunchWriteTokens<elem>(const internal::WriteProblem&, int64_t, cudaStream_t); \
  template Status LaunchGatherContext<elem>(const internal::GatherProblem&, int64_t, cudaStream_t)
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kF32);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kF16);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kInt8);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kInt4);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kBF16);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kF8E4M3);
DYNATTN_INSTANTIATE_CACHE_IO(CacheElem::kF8E5M2);
#undef DYNATTN_INSTANTIATE_CACHE_IO

}  // namespace dynattn::gpu
