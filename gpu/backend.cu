// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The dispatch table's CUDA rows (src/dispatch.h): one per cache element type, named "cuda".
//
// Why it looks like this: validation, planning and the index tensors stay on the host (the plans
// are the CPU's, so partial states and merges line up exactly), while every data tensor of the
// call is already in device memory. Each entry therefore copies the host-side index arrays and the
// plan it needs to the device, rebases the problem's pointers to those copies, allocates the
// partial states, launches, and synchronizes before returning, as the CPU row does.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "src/dispatch.h"

namespace dynattn::internal {
namespace {

using gpu::DeviceBuffer;
using gpu::ToDevice;

/// Device copies of a batch's index arrays.
struct DeviceBatch {
  DeviceBuffer<int64_t> seqstarts, kvstarts, start_pos;

  /// `batch` with its arrays replaced by device copies (null arrays stay null).
  Batch Upload(const Batch& batch) {
    const size_t size = static_cast<size_t>(batch.size);
    seqstarts.Upload(batch.seqstarts, size + 1);
    kvstarts.Upload(batch.kvstarts, size + 1);
    start_pos.Upload(batch.start_pos, size);
    Batch out = batch;
    out.seqstarts = seqstarts.data();
    out.kvstarts = kvstarts.data();
    out.start_pos = start_pos.data();
    return out;
  }
};

/// A device copy of a slot map's table: B offsets, or B rows of table_stride entries.
struct DeviceSlots {
  DeviceBuffer<int64_t> starts;

  SlotMap Upload(const SlotMap& map, int64_t batch_size) {
    const int64_t entries =
        map.mode == SlotMap::Mode::kOffset ? batch_size : batch_size * map.table_stride;
    starts.Upload(map.starts, static_cast<size_t>(entries));
    SlotMap out = map;
    out.starts = starts.data();
    return out;
  }
};

/// The device copies an attention call needs besides its plan.
struct DeviceAttention {
  DeviceBatch batch;
  DeviceSlots slots;
  DeviceBuffer<float> alibi_slopes;

  AttentionProblem Upload(const AttentionProblem& p) {
    AttentionProblem out = p;
    out.batch = batch.Upload(p.batch);
    out.kv.slots = slots.Upload(p.kv.slots, p.batch.size);
    alibi_slopes.Upload(p.alibi_slopes, static_cast<size_t>(p.num_heads));
    out.alibi_slopes = alibi_slopes.data();
    return out;
  }
};

/// The most query vectors of any request item and shared item.
int MaxVectors(const AttentionProblem& p, const std::vector<WorkItem>& items,
               const std::vector<SharedItem>& shared) {
  int most = 1;
  for (const WorkItem& w : items) most = std::max(most, p.group_size * (w.row_end - w.row_begin));
  for (const SharedItem& s : shared) most = std::max(most, p.group_size * s.num_readers);
  return most;
}

/// Partial states of a plan, (num_states, StateFloats(padded_dim)) floats.
DeviceBuffer<float> AllocateStates(const AttentionProblem& p, int64_t num_states) {
  return DeviceBuffer<float>(static_cast<size_t>(num_states * StateFloats(p.padded_dim)));
}

void Synchronize() {
  DYNATTN_CUDA_CHECK(cudaGetLastError());
  DYNATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaWriteNewTokens(const WriteProblem& problem, const RunOptions&) {
  const int64_t tokens = problem.batch.seqstarts[problem.batch.size];
  if (tokens == 0) return;
  DeviceBatch batch;
  DeviceSlots slots;
  WriteProblem p = problem;
  p.batch = batch.Upload(problem.batch);
  p.kv.slots = slots.Upload(problem.kv.slots, problem.batch.size);
  gpu::LaunchWriteTokens(p, tokens);
  Synchronize();
}

void CudaGatherContext(const GatherProblem& problem, const RunOptions&) {
  const int64_t rows = problem.batch.kvstarts[problem.batch.size];
  if (rows == 0) return;
  DeviceBatch batch;
  DeviceSlots slots;
  GatherProblem p = problem;
  p.batch = batch.Upload(problem.batch);
  p.kv.slots = slots.Upload(problem.kv.slots, problem.batch.size);
  gpu::LaunchGatherContext(p, rows);
  Synchronize();
}

void CudaRunAttention(const AttentionProblem& problem, const AttentionPlan& plan,
                      const RunOptions&) {
  if (plan.items.empty()) return;
  DeviceAttention copies;
  const AttentionProblem p = copies.Upload(problem);
  const DeviceBuffer<WorkItem> items = ToDevice(plan.items.data(), plan.items.size());
  const DeviceBuffer<MergeTask> merges = ToDevice(plan.merges.data(), plan.merges.size());
  DeviceBuffer<float> states = AllocateStates(problem, plan.num_states);
  gpu::AttendWork work;
  work.items = items.data();
  work.num_items = static_cast<int64_t>(plan.items.size());
  work.states = states.data();
  work.max_vectors = MaxVectors(problem, plan.items, {});
  gpu::LaunchAttend(p, work);
  gpu::LaunchMergeSplits(p, merges.data(), static_cast<int64_t>(plan.merges.size()), states.data());
  Synchronize();
}

void CudaRunUnified(const AttentionProblem& problem, const UnifiedPlan& plan, const RunOptions&) {
  DeviceAttention copies;
  const AttentionProblem p = copies.Upload(problem);
  // Shared items point into the plan's segment_blocks and readers: rebase them to device copies.
  const DeviceBuffer<int64_t> blocks =
      ToDevice(plan.segment_blocks.data(), plan.segment_blocks.size());
  const DeviceBuffer<SharedReader> readers = ToDevice(plan.readers.data(), plan.readers.size());
  std::vector<SharedItem> shared = plan.shared_items;
  for (SharedItem& item : shared) {
    item.blocks = blocks.data() + (item.blocks - plan.segment_blocks.data());
    item.readers = readers.data() + (item.readers - plan.readers.data());
  }
  const DeviceBuffer<SharedItem> shared_items = ToDevice(shared.data(), shared.size());
  const DeviceBuffer<WorkItem> items =
      ToDevice(plan.request_items.data(), plan.request_items.size());
  const DeviceBuffer<int64_t> part_begin = ToDevice(plan.part_begin.data(), plan.part_begin.size());
  const DeviceBuffer<PartRef> parts = ToDevice(plan.parts.data(), plan.parts.size());
  DeviceBuffer<float> states = AllocateStates(problem, plan.num_states);
  gpu::AttendWork work;
  work.shared = shared_items.data();
  work.num_shared = static_cast<int64_t>(shared.size());
  work.items = items.data();
  work.num_items = static_cast<int64_t>(plan.request_items.size());
  work.states = states.data();
  work.max_vectors = MaxVectors(problem, plan.request_items, plan.shared_items);
  gpu::LaunchAttend(p, work);
  const int64_t tokens = static_cast<int64_t>(plan.part_begin.size()) - 1;
  if (tokens > 0 && !plan.parts.empty()) {
    gpu::LaunchMergeParts(p, part_begin.data(), parts.data(), tokens, states.data());
  }
  Synchronize();
}

/// The CUDA row of one element type: the element type is read from the problem's cache at
/// launch, so the four rows share their entries.
constexpr BackendKernels kCudaKernels = {"cuda", &CudaWriteNewTokens, &CudaGatherContext,
                                         &CudaRunAttention, &CudaRunUnified};

}  // namespace

const BackendKernels* CudaKernelsFor(CacheElem elem) {
  switch (elem) {
    case CacheElem::kF32:
    case CacheElem::kF16:
    case CacheElem::kInt8:
    case CacheElem::kInt4:
      return &kCudaKernels;
  }
  return nullptr;
}

}  // namespace dynattn::internal
