// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The dispatch table's CUDA rows (src/dispatch.h): one per cache element type, each calling the
// launchers instantiated for its type.
//
// Why it looks like this: validation, planning and the index tensors stay on the host (the plans
// are core/'s, the same as the CPU's, so partial states and merges line up exactly), while every
// data tensor of the call is already in device memory. Each entry therefore copies the index
// arrays and the plan it needs into the Context's device workspace (one grow-only buffer, so a
// steady stream of steps calls cudaMalloc only when a plan outgrows it), rebases the problem's
// pointers to those copies, enqueues the kernels on the Context's stream and waits for that
// stream, as the CPU row returns when its work is done. Every CUDA error comes back as a Status.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/softmax_state.h"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "src/device_slot.h"
#include "src/dispatch.h"

namespace dynattn::internal {

/// The CUDA part of a Context.
struct DeviceWorkspace {
  cudaStream_t stream = nullptr;  ///< The Context's stream (null: the default stream).
  char* buffer = nullptr;         ///< Index copies, plan copies and partial states of a call.
  size_t capacity = 0;
  std::vector<SharedItem> shared;  ///< Host copies of unified shared items, rebased per call.
};

void ReleaseDeviceWorkspace(DeviceWorkspace* workspace) {
  if (workspace->buffer != nullptr) cudaFree(workspace->buffer);  // nobody to report to
  delete workspace;
}

namespace {

DeviceWorkspace* WorkspaceOf(ContextState* context) {
  const DeviceSlot slot = DeviceSlotOf(context);
  if (*slot.workspace == nullptr) {
    *slot.workspace = new DeviceWorkspace;
    (*slot.workspace)->stream = static_cast<cudaStream_t>(slot.cuda_stream);
  }
  return *slot.workspace;
}

/// One call's use of the device workspace: host arrays to copy and room to reserve, laid out back
/// to back, then placed and copied by Commit.
class Staging {
 public:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  /// Room for `count` T's, filled from `host` unless it is null; kNone (a null pointer after
  /// Commit) when there is nothing to hold.
  template <typename T>
  size_t Add(const T* host, int64_t count) {
    if (count <= 0) return kNone;
    const size_t offset = size_;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    size_ += (bytes + kAlign - 1) / kAlign * kAlign;
    if (host != nullptr) copies_[num_copies_++] = Copy{host, offset, bytes};
    return offset;
  }

  /// Bytes laid out so far.
  size_t size() const { return size_; }

  /// Grows `workspace` to at least `bytes` (the reserve step does before a Run writes).
  static Status Grow(DeviceWorkspace* workspace, size_t bytes) {
    if (workspace->capacity >= bytes) return Status::Ok();
    if (workspace->buffer != nullptr) DYNATTN_CUDA_RETURN_IF_ERROR(cudaFree(workspace->buffer));
    workspace->buffer = nullptr;
    workspace->capacity = 0;
    DYNATTN_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace->buffer, bytes));
    workspace->capacity = bytes;
    return Status::Ok();
  }

  /// Grows the workspace when needed (never once reserved) and enqueues the copies on its stream.
  Status Commit(DeviceWorkspace* workspace) {
    DYNATTN_RETURN_IF_ERROR(Grow(workspace, size_));
    base_ = workspace->buffer;
    for (int i = 0; i < num_copies_; ++i) {
      const Copy& c = copies_[i];
      DYNATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base_ + c.offset, c.host, c.bytes,
                                                   cudaMemcpyHostToDevice, workspace->stream));
    }
    return Status::Ok();
  }

  template <typename T>
  T* At(size_t offset) const {
    return offset == kNone ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }

 private:
  static constexpr size_t kAlign = 256;
  struct Copy {
    const void* host;
    size_t offset, bytes;
  };
  std::array<Copy, 16> copies_{};
  int num_copies_ = 0;
  size_t size_ = 0;
  char* base_ = nullptr;
};

/// Per-head host arrays of an attention problem that its kernels read (ALiBi slopes, attention
/// sinks): null for a cache-I/O problem.
struct HeadArrays {
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  int heads = 0;
};

HeadArrays HeadArraysOf(const AttentionProblem& p) {
  return HeadArrays{p.alibi_slopes, p.sinks, p.num_heads};
}

/// Where a problem's index arrays go in a Staging (the device twin of a plan's IndexCopies), with
/// its per-head arrays.
struct StagedIndex {
  size_t seqstarts = Staging::kNone, kvstarts = Staging::kNone, start_pos = Staging::kNone;
  size_t key_offsets = Staging::kNone;
  size_t slots = Staging::kNone, alibi = Staging::kNone, sinks = Staging::kNone;

  StagedIndex(const Batch& batch, const SlotMap& map, const HeadArrays& heads, Staging* staging) {
    seqstarts = staging->Add(batch.seqstarts, batch.size + 1);
    kvstarts = staging->Add(batch.kvstarts, batch.size + 1);
    start_pos = staging->Add(batch.start_pos, batch.start_pos ? batch.size : 0);
    key_offsets = staging->Add(batch.key_offsets, batch.key_offsets ? batch.size : 0);
    const int64_t entries =
        map.mode == SlotMap::Mode::kOffset ? batch.size : batch.size * map.table_stride;
    slots = staging->Add(map.starts, entries);
    alibi = staging->Add(heads.alibi_slopes, heads.alibi_slopes ? heads.heads : 0);
    sinks = staging->Add(heads.sinks, heads.sinks ? heads.heads : 0);
  }

  /// The batch and slot map pointed at their device copies.
  void Rebase(const Staging& staging, Batch* batch, SlotMap* map) const {
    batch->seqstarts = staging.At<int64_t>(seqstarts);
    batch->kvstarts = staging.At<int64_t>(kvstarts);
    batch->start_pos = staging.At<int64_t>(start_pos);
    batch->key_offsets = staging.At<int64_t>(key_offsets);
    map->starts = staging.At<int64_t>(slots);
  }

  /// An attention problem's index arrays, ALiBi slopes and sinks pointed at their device copies.
  void Rebase(const Staging& staging, AttentionProblem* p) const {
    Rebase(staging, &p->batch, &p->kv.slots);
    p->alibi_slopes = staging.At<float>(alibi);
    p->sinks = staging.At<float>(sinks);
  }
};

/// Where an MHA/MHCA run's arrays go in a Staging.
struct AttentionStaging {
  StagedIndex index;
  size_t items, merges, states;

  AttentionStaging(const AttentionProblem& problem, const AttentionPlan& plan, Staging* staging)
      : index(problem.batch, problem.kv.slots, HeadArraysOf(problem), staging),
        items(staging->Add(plan.items.data(), static_cast<int64_t>(plan.items.size()))),
        merges(staging->Add(plan.merges.data(), static_cast<int64_t>(plan.merges.size()))),
        states(staging->Add<float>(nullptr,
                                   plan.num_states * StateFloats(problem.padded_value_dim))) {}
};

/// Where a unified run's arrays go in a Staging.
struct UnifiedStaging {
  StagedIndex index;
  size_t blocks, readers, shared_items, items, part_begin, parts, states;

  UnifiedStaging(const AttentionProblem& problem, const UnifiedPlan& plan, Staging* staging)
      : index(problem.batch, problem.kv.slots, HeadArraysOf(problem), staging) {
    const auto count = [](const auto& v) { return static_cast<int64_t>(v.size()); };
    blocks = staging->Add(plan.segment_blocks.data(), count(plan.segment_blocks));
    readers = staging->Add(plan.readers.data(), count(plan.readers));
    // Shared items are copied from the workspace's host vector once rebased (see CudaRunUnified).
    shared_items = staging->Add<SharedItem>(nullptr, count(plan.shared_items));
    items = staging->Add(plan.request_items.data(), count(plan.request_items));
    part_begin = staging->Add(plan.part_begin.data(), count(plan.part_begin));
    parts = staging->Add(plan.parts.data(), count(plan.parts));
    states = staging->Add<float>(nullptr, plan.num_states * StateFloats(problem.padded_value_dim));
  }
};

/// The reserve step: the Context's CUDA part and a workspace for the largest staging of the Run's
/// steps, so that the steps after the cache write allocate nothing.
/// OK when this process has a CUDA driver and a device, else an Unsupported status saying which
/// is missing (a library built with nvcc runs its CPU rows anywhere; CUDA tensors need both).
/// Asked on every Run: the runtime answers from its own state, next to the Run's copies and sync.
Status DeviceAvailable() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  static_cast<void>(cudaGetLastError());  // not the Run's error: this one is reported here
  if (error == cudaSuccess && count > 0) return Status::Ok();
  const std::string why =
      error == cudaErrorInsufficientDriver
          ? "no CUDA driver is installed (or it is older than the runtime)"
      : error == cudaErrorNoDevice || error == cudaSuccess
          ? "no CUDA device is visible"
          : std::string("no usable CUDA device (") + cudaGetErrorString(error) + ")";
  return Status::Unsupported("CUDA", why + ", so tensors in CUDA memory cannot run here (" +
                                         cudaGetErrorName(error) +
                                         "); the CPU rows are unaffected");
}

Status CudaReserve(const BackendKernels&, const RunReservation& r, ContextState* context) {
  DYNATTN_RETURN_IF_ERROR(DeviceAvailable());
  // A non-sticky error left by an earlier call (the caller's own, say) would otherwise be reported
  // by this Run's first launch check, after its kernel has written the cache.
  static_cast<void>(cudaGetLastError());
  DeviceWorkspace* workspace = WorkspaceOf(context);
  size_t bytes = 0;
  const auto most = [&bytes](const Staging& staging) { bytes = std::max(bytes, staging.size()); };
  if (r.write != nullptr) {
    Staging staging;
    const StagedIndex index(r.write->batch, r.write->kv.slots, HeadArrays{}, &staging);
    most(staging);
  }
  if (r.gather != nullptr) {
    Staging staging;
    const StagedIndex index(r.gather->batch, r.gather->kv.slots, HeadArrays{}, &staging);
    most(staging);
  }
  if (r.attention != nullptr && r.attention_plan != nullptr) {
    Staging staging;
    const AttentionStaging layout(*r.attention, *r.attention_plan, &staging);
    most(staging);
  }
  if (r.attention != nullptr && r.unified_plan != nullptr) {
    Staging staging;
    const UnifiedStaging layout(*r.attention, *r.unified_plan, &staging);
    most(staging);
    workspace->shared.reserve(r.unified_plan->shared_items.size());
  }
  return Staging::Grow(workspace, bytes);
}

/// Waits for the call's work on the workspace's stream.
Status Finish(const DeviceWorkspace& workspace) {
  DYNATTN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(workspace.stream));
  return Status::Ok();
}

/// Stages a cache-I/O problem's index arrays, launches `launch(rebased problem, stream)` and waits.
template <typename Problem, typename Launch>
Status RunCacheIo(const Problem& problem, int64_t rows, ContextState* context,
                  const Launch& launch) {
  if (rows == 0) return Status::Ok();
  DeviceWorkspace* workspace = WorkspaceOf(context);
  Staging staging;
  const StagedIndex index(problem.batch, problem.kv.slots, HeadArrays{}, &staging);
  DYNATTN_RETURN_IF_ERROR(staging.Commit(workspace));
  Problem p = problem;
  index.Rebase(staging, &p.batch, &p.kv.slots);
  DYNATTN_RETURN_IF_ERROR(launch(p, workspace->stream));
  return Finish(*workspace);
}

template <CacheElem kElem>
Status CudaWriteNewTokens(const BackendKernels&, const WriteProblem& problem,
                          ContextState* context) {
  const int64_t tokens = problem.batch.seqstarts[problem.batch.size];
  return RunCacheIo(problem, tokens, context, [tokens](const WriteProblem& p, cudaStream_t s) {
    return gpu::LaunchWriteTokens<kElem>(p, tokens, s);
  });
}

template <CacheElem kElem>
Status CudaGatherContext(const BackendKernels&, const GatherProblem& problem,
                         const std::vector<GatherPiece>&, ContextState* context) {
  const int64_t rows = problem.batch.kvstarts[problem.batch.size];
  return RunCacheIo(problem, rows, context, [rows](const GatherProblem& p, cudaStream_t s) {
    return gpu::LaunchGatherContext<kElem>(p, rows, s);
  });
}

template <CacheElem kElem>
Status CudaRunAttention(const BackendKernels&, const AttentionProblem& problem,
                        const AttentionPlan& plan, ContextState* context) {
  if (plan.items.empty()) return Status::Ok();
  DeviceWorkspace* workspace = WorkspaceOf(context);
  Staging staging;
  const AttentionStaging layout(problem, plan, &staging);
  DYNATTN_RETURN_IF_ERROR(staging.Commit(workspace));
  AttentionProblem p = problem;
  layout.index.Rebase(staging, &p);
  gpu::AttendWork work;
  work.items = staging.At<WorkItem>(layout.items);
  work.num_items = static_cast<int64_t>(plan.items.size());
  work.states = staging.At<float>(layout.states);
  work.max_vectors = MaxQueryVectors(problem.group_size, plan.items, {});
  DYNATTN_RETURN_IF_ERROR(gpu::LaunchAttend<kElem>(p, work, workspace->stream));
  DYNATTN_RETURN_IF_ERROR(gpu::LaunchMergeSplits(p, staging.At<MergeTask>(layout.merges),
                                                 static_cast<int64_t>(plan.merges.size()),
                                                 work.states, workspace->stream));
  return Finish(*workspace);
}

template <CacheElem kElem>
Status CudaRunUnified(const BackendKernels&, const AttentionProblem& problem,
                      const UnifiedPlan& plan, ContextState* context) {
  DeviceWorkspace* workspace = WorkspaceOf(context);
  const auto count = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  Staging staging;
  const UnifiedStaging layout(problem, plan, &staging);
  // Shared items point into the plan's segment_blocks and readers: their device copies point into
  // the staged copies, so they are rebased first (on the host, in the workspace's own vector,
  // which the reserve step sized), once Commit has placed the workspace.
  std::vector<SharedItem>& shared = workspace->shared;
  shared.assign(plan.shared_items.begin(), plan.shared_items.end());
  DYNATTN_RETURN_IF_ERROR(staging.Commit(workspace));
  for (size_t i = 0; i < shared.size(); ++i) {
    const SharedItem& item = plan.shared_items[i];
    shared[i].blocks =
        staging.At<int64_t>(layout.blocks) + (item.blocks - plan.segment_blocks.data());
    shared[i].readers =
        staging.At<SharedReader>(layout.readers) + (item.readers - plan.readers.data());
  }
  if (!shared.empty()) {
    DYNATTN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.At<SharedItem>(layout.shared_items),
                                                 shared.data(), shared.size() * sizeof(SharedItem),
                                                 cudaMemcpyHostToDevice, workspace->stream));
  }
  AttentionProblem p = problem;
  layout.index.Rebase(staging, &p);
  gpu::AttendWork work;
  work.shared = staging.At<SharedItem>(layout.shared_items);
  work.num_shared = count(shared);
  work.items = staging.At<WorkItem>(layout.items);
  work.num_items = count(plan.request_items);
  work.states = staging.At<float>(layout.states);
  work.max_vectors = MaxQueryVectors(problem.group_size, plan.request_items, plan.shared_items);
  DYNATTN_RETURN_IF_ERROR(gpu::LaunchAttend<kElem>(p, work, workspace->stream));
  const int64_t tokens = count(plan.part_begin) - 1;
  if (tokens > 0 && !plan.parts.empty()) {
    DYNATTN_RETURN_IF_ERROR(gpu::LaunchMergeParts(p, staging.At<int64_t>(layout.part_begin),
                                                  staging.At<PartRef>(layout.parts), tokens,
                                                  work.states, workspace->stream));
  }
  return Finish(*workspace);
}

template <CacheElem kElem>
BackendKernels CudaRow(const char* name) {
  BackendKernels row;
  row.name = name;
  row.device = Device::kCuda;
  row.elem = kElem;
  row.reserve = &CudaReserve;
  row.write_new_tokens = &CudaWriteNewTokens<kElem>;
  row.gather_context = &CudaGatherContext<kElem>;
  row.run_attention = &CudaRunAttention<kElem>;
  row.run_unified = &CudaRunUnified<kElem>;
  return row;
}

}  // namespace

const BackendKernels* CudaKernelsFor(CacheElem elem) {
  static const std::array<BackendKernels, kNumCacheElems> rows = {
#define DYNATTN_CUDA_ROW(elem, tag, name, row, c_suffix) CudaRow<CacheElem::elem>("cuda/" row),
      DYNATTN_CACHE_FORMATS(DYNATTN_CUDA_ROW)
#undef DYNATTN_CUDA_ROW
  };
  for (const BackendKernels& row : rows) {
    if (row.elem == elem) return &row;
  }
  return nullptr;
}

}  // namespace dynattn::internal
