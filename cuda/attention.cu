// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: attention on the device: request work items (prefill tiles, decode splits),
// unified attention's shared items, and the exact merges of split or multi-part query vectors.
//
// Why it looks like this:
// * One CUDA block per work item, the same items the CPU plans (core/plan.h,
//   core/plan_unified.h), so partial states land exactly where the CPU's do and the same
//   merge tasks combine them.
// * A block walks its item's keys once per pass in tiles of up to 32 keys. Each tile's keys and
//   values are decoded once (core/codec.h, the exact T1(T3(q * s)) of the spec; fp8 bytes times
//   the plane's tensor scale) into shared memory and then used by all the pass's query vectors:
//   the GQA group of the KV head times the row tile (or the readers of a shared segment). A
//   decode item (few vectors) thus reads its K/V once for all query heads of the KV head; a
//   prefill tile with more vectors than fit in one pass re-reads its keys per pass (from L2), as
//   every tiled attention does.
// * A warp owns a query vector at a time: lane j scores key j of the tile (key rows padded to an
//   odd stride, so the lanes hit distinct banks), the online softmax reduces across the warp, and
//   lanes take the head dimension for the P.V accumulation, so any head_dim works.
// * The running (max, sum, accumulator) live in shared memory, fp32, natural exp. Hidden keys
//   (past the causal limit, outside the window, an -inf score) get weight -0 and are never
//   multiplied, so a fully masked row ends with sum 0: output 0 and log-sum-exp -inf, and a NaN
//   or infinite value there never reaches the row. Every other key's weight multiplies its value,
//   also when it underflowed to +0: NaN inputs propagate as IEEE arithmetic has them (maxima
//   through MaxOrNaN, since fmaxf drops a NaN).
// * A query vector sees keys [first_key, last_key] (sliding window, causal limit). A pass loads
//   only the tiles that some vector of the pass sees, so a window's keys are all a decode reads.
// * Scores follow the one order of every backend: scale, soft-cap, ALiBi, mask. Attention sinks
//   enter once, where a query vector's output is finally normalised (StoreRow: a direct write or
//   the end of a merge), never in a partial state.

#include <algorithm>
#include <cmath>
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
using internal::AddRn;
using internal::DecodePlaneElement;
using internal::DivRn;
using internal::LoadActivationOf;
using internal::MaxOrNaN;
using internal::MulRn;
using internal::StateFloats;
using internal::StoreActivationOf;

/// The exp of the merges (core/softmax_state.h): CUDA's expf.
struct ExpF {
  __device__ float operator()(float x) const { return expf(x); }
};

using internal::AttentionProblem;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxTileKeys = 32;  ///< One key per lane.
constexpr int kMaxPassVectors = 128;
/// Shared memory an attend block aims to stay under (two blocks per SM on sm_80), unless the head
/// size needs more.
constexpr size_t kTargetSharedBytes = 100 * 1024;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

/// Shared-memory shape of the attend kernel, chosen once per call from the head sizes.
struct Layout {
  int tile_keys = kMaxTileKeys;        ///< Keys per tile (<= 32).
  int pass_vectors = kMaxPassVectors;  ///< Query vectors per pass.
  int key_stride = 0;                  ///< Floats between key rows: head_dim made odd.
  size_t bytes = 0;                    ///< Dynamic shared memory.

  /// The largest passes (up to 32 keys, up to `max_vectors` query vectors, at most 128) that
  /// fit in `budget` bytes: small for decode items (more blocks per SM), larger for prefill
  /// tiles and shared segments (fewer passes over their keys).
  static Layout For(int head_dim, int value_dim, int max_vectors, size_t budget) {
    Layout l;
    l.key_stride = head_dim % 2 == 0 ? head_dim + 1 : head_dim;
    l.pass_vectors = 1;
    while (l.pass_vectors < max_vectors && l.pass_vectors < kMaxPassVectors) l.pass_vectors *= 2;
    for (;;) {
      l.bytes = Bytes(l, head_dim, value_dim);
      if (l.bytes <= budget) return l;
      if (l.pass_vectors > kWarps) {
        l.pass_vectors /= 2;
      } else if (l.tile_keys > 1) {
        l.tile_keys /= 2;
      } else if (l.pass_vectors > 1) {
        l.pass_vectors /= 2;
      } else {
        return l;  // caller checks bytes against the budget
      }
    }
  }

  /// Slots, key and value tiles, the pass's queries and accumulators, maxes and sums, and each
  /// warp's probabilities.
  static size_t Bytes(const Layout& l, int head_dim, int value_dim) {
    const size_t floats = static_cast<size_t>(l.tile_keys) * (l.key_stride + value_dim) +
                          static_cast<size_t>(l.pass_vectors) * (head_dim + value_dim + 2) +
                          kWarps * 32;
    return static_cast<size_t>(l.tile_keys) * sizeof(int64_t) + floats * sizeof(float);
  }
};

/// One query vector of a work item (QueryRow of cpu/softmax-inl.h).
struct VectorRef {
  int64_t request;
  int64_t token;      ///< Packed query row.
  int head;           ///< Query head.
  int64_t first_key;  ///< First visible key (the sliding window's start; else 0).
  int64_t last_key;   ///< Last visible key of the item's key sequence (inclusive).
  int64_t origin;     ///< The query's position in key numbers (ALiBi: key - origin).
};

/// Vector `index` of a request item: head h = index / rows of the group, row index % rows.
__device__ VectorRef RequestVector(const AttentionProblem& p, const internal::WorkItem& w,
                                   int index) {
  const int rows = w.row_end - w.row_begin;
  const int64_t b = w.request;
  const int64_t row = w.row_begin + index % rows;
  VectorRef r;
  r.request = b;
  r.token = p.batch.seqstarts[b] + row;
  r.head = w.kv_head * p.group_size + index / rows;
  r.first_key = p.FirstVisibleKey(b, row);
  r.last_key = p.LastVisibleKey(b, row);
  r.origin = p.QueryPosition(b, row);
  return r;
}

/// Vector `index` of a shared item: head h = index / readers of the group, reader index % readers.
__device__ VectorRef SharedVector(const AttentionProblem& p, const internal::SharedItem& s,
                                  int index) {
  const internal::SharedReader& reader = s.readers[index % s.num_readers];
  VectorRef r;
  r.request = reader.request;
  r.token = reader.token;
  r.head = s.kv_head * p.group_size + index / s.num_readers;
  // Segment keys count from the segment's first position, as `origin` does: the window of the
  // token at segment position `origin` starts at segment key origin - window_left.
  r.first_key = AttentionProblem::WindowStart(reader.origin, p.window_left);
  r.last_key = reader.visible - 1;
  r.origin = reader.origin;
  return r;
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int o = 16; o > 0; o /= 2) x = MaxOrNaN(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

/// Natural-log log-sum-exp of a finished state: max + ln(sum), -inf when it saw no key (sum 0).
__device__ __forceinline__ float LogSumExp(float max, float sum) {
  return sum != 0.0f ? max + static_cast<float>(log(static_cast<double>(sum))) : -INFINITY;
}

/// The weight of a key the vector does not see: -0, which expf never makes.
__device__ __forceinline__ bool IsHiddenWeight(float p) {
  return p == 0.0f && copysignf(1.0f, p) < 0.0f;
}

/// Writes output row (token, head) = acc / sum (0 when sum is 0), lanes over d, and its LSE: the
/// final normalisation of a query vector, so the head's attention sink (if any) is folded in
/// here, once.
__device__ void StoreRow(const AttentionProblem& p, int64_t token, int head, const float* acc,
                         float max, float sum, int lane) {
  float acc_scale = 1.0f;
  if (p.sinks != nullptr) {
    const internal::SinkFolded<float> folded = internal::FoldSink(max, sum, p.sinks[head], ExpF());
    max = folded.max;
    sum = folded.sum;
    acc_scale = folded.acc_scale;
  }
  const int64_t first = p.OutputOffset(token, head);
  for (int d = lane; d < p.value_dim; d += 32) {
    const float a = p.sinks != nullptr ? MulRn(acc[d], acc_scale) : acc[d];
    StoreActivationOf(sum != 0.0f ? DivRn(a, sum) : 0.0f, p.output, first + d, p.io_type);
  }
  if (p.lse != nullptr && lane == 0) p.lse[token * p.num_heads + head] = LogSumExp(max, sum);
}

/// Keys [begin, end) of an item that a pass loads.
struct KeyRange {
  int64_t begin, end;
};

/// The keys that a pass of `n` vectors (from `first_vector`) must load: the tiles of
/// [item_begin, item_end) holding a key some vector sees, on the item's tile grid. Every thread
/// computes the same range.
template <typename VectorOf>
__device__ __forceinline__ KeyRange PassKeys(const VectorOf& vector_of, int first_vector, int n,
                                             int64_t item_begin, int64_t item_end, int tile_keys) {
  int64_t lo = item_end, hi = item_begin - 1;
  for (int v = 0; v < n; ++v) {
    const VectorRef r = vector_of(first_vector + v);
    lo = r.first_key < lo ? r.first_key : lo;
    hi = r.last_key > hi ? r.last_key : hi;
  }
  const int64_t skipped = lo > item_begin ? (lo - item_begin) / tile_keys * tile_keys : 0;
  return KeyRange{item_begin + skipped, hi + 1 < item_end ? hi + 1 : item_end};
}

/// A raw score s0 = scale * q.k after the optional logit soft-cap (tanhf keeps a NaN).
__device__ __forceinline__ float CappedScore(const AttentionProblem& p, float dot) {
  const float s0 = MulRn(dot, p.score_scale);
  if (!(p.soft_cap > 0.0f)) return s0;
  return MulRn(p.soft_cap, tanhf(DivRn(s0, p.soft_cap)));
}

/// Blocks of the attend kernel an SM should hold at once (decode items, whose shared memory is
/// small): lets ptxas use up to 65536 / (5 * 128) = 102 registers, which the kernel needs since the
/// window, soft-cap and sinks came in; below that it spilled on sm_90.
constexpr int kAttendBlocksPerSm = 5;

/// One block per item: blocks [0, num_shared) run shared items, the rest request items.
template <CacheElem kElem>
__global__ void __launch_bounds__(kThreads, kAttendBlocksPerSm)
    AttendKernel(AttentionProblem p, AttendWork work, Layout layout) {
  DYNATTN_DYNAMIC_SHARED(unsigned char, smem);
  const int dim = p.head_dim, dim_v = p.value_dim;
  const int tile_keys = layout.tile_keys, ks = layout.key_stride, pass = layout.pass_vectors;
  int64_t* slots = reinterpret_cast<int64_t*>(smem);
  float* keys = reinterpret_cast<float*>(slots + tile_keys);
  float* values = keys + static_cast<size_t>(tile_keys) * ks;
  float* queries = values + static_cast<size_t>(tile_keys) * dim_v;
  float* acc = queries + static_cast<size_t>(pass) * dim;
  float* maxes = acc + static_cast<size_t>(pass) * dim_v;
  float* sums = maxes + pass;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* probs = sums + pass + warp * 32;

  const bool is_shared = blockIdx.x < work.num_shared;
  const internal::SharedItem* s = is_shared ? &work.shared[blockIdx.x] : nullptr;
  const internal::WorkItem* w = is_shared ? nullptr : &work.items[blockIdx.x - work.num_shared];
  internal::SlotMap map = p.kv.slots;
  int64_t map_request, state_index;
  int kv_head, vectors;
  bool write_states;
  if (is_shared) {
    map.mode = internal::SlotMap::Mode::kBlocks;
    map.starts = s->blocks;
    map.table_stride = 0;
    map.page_size = s->block_size;
    map.block_stride = s->block_stride;
    map_request = 0;
    kv_head = s->kv_head;
    vectors = p.group_size * s->num_readers;
    write_states = true;
    state_index = s->state_index;
  } else {
    map_request = w->request;
    kv_head = w->kv_head;
    vectors = p.group_size * (w->row_end - w->row_begin);
    write_states = w->num_splits != 1;
    state_index = w->state_index;
  }
  const auto vector_ref = [&](int index) {
    return is_shared ? SharedVector(p, *s, index) : RequestVector(p, *w, index);
  };
  const bool scale_f16 = p.kv.cache.scale_type == ScaleType::kF16;
  const int group = p.kv.cache.quant_group;
  const CachePlane& key_plane = p.kv.cache.key;
  const CachePlane& value_plane = p.kv.cache.value;
  const int64_t state_floats = StateFloats(p.padded_value_dim);

  for (int c0 = 0; c0 < vectors; c0 += pass) {
    const int n = min(pass, vectors - c0);
    // Each warp loads and resets the vectors it owns (v % kWarps == warp) for the whole pass.
    for (int v = warp; v < n; v += kWarps) {
      const VectorRef r = vector_ref(c0 + v);
      const int64_t first = p.QueryOffset(r.token, r.head);
      for (int d = lane; d < dim; d += 32) {
        queries[v * dim + d] = LoadActivationOf(p.query, first + d, p.io_type);
      }
      for (int d = lane; d < dim_v; d += 32) acc[v * dim_v + d] = 0.0f;
      if (lane == 0) {
        maxes[v] = -INFINITY;
        sums[v] = 0.0f;
      }
    }
    // The item's key range is read again per pass (not held across the tile loop: registers).
    const KeyRange keys_of_pass =
        PassKeys(vector_ref, c0, n, is_shared ? s->key_begin : w->key_begin,
                 is_shared ? s->key_end : w->key_end, tile_keys);
    const int64_t key_end = keys_of_pass.end;
    for (int64_t key0 = keys_of_pass.begin; key0 < key_end; key0 += tile_keys) {
      const int count = static_cast<int>(min(static_cast<int64_t>(tile_keys), key_end - key0));
      // Not needed for correctness: the slots were last read while decoding, which the barrier
      // before scoring closed (removing it changes no result in any schedule, and TSan finds no
      // race). Kept because without it ptxas (CUDA 13.0) spills 28 B in the int4 kernel on sm_90.
      __syncthreads();
      if (static_cast<int>(threadIdx.x) < count) {
        slots[threadIdx.x] = map.Slot(map_request, key0 + threadIdx.x);
      }
      __syncthreads();
      for (int i = threadIdx.x; i < tile_keys * dim; i += kThreads) {
        const int j = i / dim, d = i % dim;
        keys[j * ks + d] = j < count ? DecodePlaneElement(key_plane, kElem, slots[j], kv_head, d,
                                                          group, scale_f16, p.io_type)
                                     : 0.0f;
      }
      for (int i = threadIdx.x; i < tile_keys * dim_v; i += kThreads) {
        const int j = i / dim_v, d = i % dim_v;
        values[j * dim_v + d] = j < count
                                    ? DecodePlaneElement(value_plane, kElem, slots[j], kv_head, d,
                                                         group, scale_f16, p.io_type)
                                    : 0.0f;
      }
      __syncthreads();
      for (int v = warp; v < n; v += kWarps) {
        const VectorRef r = vector_ref(c0 + v);
        const int64_t key = key0 + lane;
        float score = -INFINITY;
        if (lane < count && key >= r.first_key && key <= r.last_key) {
          const float* q = queries + v * dim;
          const float* k = keys + lane * ks;
          float dot = 0.0f;
          for (int d = 0; d < dim; ++d) dot = fmaf(q[d], k[d], dot);
          score = CappedScore(p, dot);
          if (p.alibi_slopes != nullptr) {
            score = AddRn(score, MulRn(p.alibi_slopes[r.head], static_cast<float>(key - r.origin)));
          }
          if (p.mask != nullptr) {
            const int64_t column = p.batch.kvstarts[r.request] + key;
            const float mask = LoadActivationOf(
                p.mask, r.head * p.mask_head_stride + r.token * p.mask_row_stride + column,
                p.io_type);
            // An -inf entry hides the key, whatever its logit (NaN or +inf included).
            score = mask == -INFINITY ? -INFINITY : AddRn(score, mask);
          }
        }
        const float old_max = maxes[v];
        const float new_max = MaxOrNaN(old_max, WarpMax(score));
        if (new_max == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
        const float weight = score == -INFINITY ? -0.0f : expf(score - new_max);
        const float alpha = old_max == new_max ? 1.0f : expf(old_max - new_max);
        const float tile_sum = WarpSum(weight);
        probs[lane] = weight;
        __syncwarp();  // probs are written; every lane has also read maxes[v]
        float* a = acc + v * dim_v;
        for (int d = lane; d < dim_v; d += 32) {
          float sum = a[d] * alpha;
          for (int j = 0; j < count; ++j) {
            const float pj = probs[j];
            if (!IsHiddenWeight(pj)) sum = fmaf(pj, values[j * dim_v + d], sum);
          }
          a[d] = sum;
        }
        if (lane == 0) {
          maxes[v] = new_max;
          sums[v] = sums[v] * alpha + tile_sum;
        }
        __syncwarp();  // every lane has read probs before the next vector rewrites them
      }
    }
    __syncwarp();  // lane 0's maxes/sums, also when the pass had no key tile (only resets)
    for (int v = warp; v < n; v += kWarps) {
      const float max = maxes[v], sum = sums[v];
      const float* a = acc + v * dim_v;
      if (write_states) {
        float* state = work.states + (state_index + c0 + v) * state_floats;
        if (lane == 0) {
          state[0] = max;
          state[1] = sum;
        }
        for (int d = lane; d < p.padded_value_dim; d += 32) state[2 + d] = d < dim_v ? a[d] : 0.0f;
      } else {
        const VectorRef r = vector_ref(c0 + v);
        StoreRow(p, r.token, r.head, a, max, sum, lane);
      }
    }
    __syncthreads();  // the next pass reuses the vectors' storage
  }
}

/// Merges `count` states (state k at states + first(k) * state_floats) in order into the output
/// row (token, head); a warp, lanes over d. Empty states (max -inf) are skipped.
template <typename First>
__device__ void MergeInto(const AttentionProblem& p, const float* states, int count,
                          const First& first, int64_t token, int head, float* acc, int lane) {
  const int64_t state_floats = StateFloats(p.padded_value_dim);
  float max = -INFINITY;
  for (int k = 0; k < count; ++k) max = MaxOrNaN(max, states[first(k) * state_floats]);
  for (int d = lane; d < p.value_dim; d += 32) acc[d] = 0.0f;
  float sum = 0.0f;
  if (max != -INFINITY) {
    for (int k = 0; k < count; ++k) {
      const float* state = states + first(k) * state_floats;
      if (internal::IsEmptyPart(state[0])) continue;
      const float weight = internal::MergeWeight(state[0], max, ExpF());
      sum = AddRn(sum, MulRn(state[1], weight));
      for (int d = lane; d < p.value_dim; d += 32) acc[d] = fmaf(weight, state[2 + d], acc[d]);
    }
  }
  StoreRow(p, token, head, acc, max, sum, lane);  // acc[d] is lane d % 32's alone: no barrier
}

/// One block per merge task, a warp per query vector.
__global__ void __launch_bounds__(kThreads)
    MergeSplitsKernel(AttentionProblem p, const internal::MergeTask* tasks, const float* states) {
  DYNATTN_DYNAMIC_SHARED(unsigned char, smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* acc = reinterpret_cast<float*>(smem) + static_cast<size_t>(warp) * p.value_dim;
  const internal::MergeTask& task = tasks[blockIdx.x];
  const int rows = task.row_end - task.row_begin;
  const int vectors = p.group_size * rows;
  for (int index = warp; index < vectors; index += kWarps) {
    const auto first = [&](int s) {
      return task.state_index + static_cast<int64_t>(s) * vectors + index;
    };
    const int64_t token = p.batch.seqstarts[task.request] + task.row_begin + index % rows;
    MergeInto(p, states, task.num_splits, first, token, task.kv_head * p.group_size + index / rows,
              acc, lane);
  }
}

/// One block per query token, a warp per query head.
__global__ void __launch_bounds__(kThreads)
    MergePartsKernel(AttentionProblem p, const int64_t* part_begin, const internal::PartRef* parts,
                     const float* states) {
  DYNATTN_DYNAMIC_SHARED(unsigned char, smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* acc = reinterpret_cast<float*>(smem) + static_cast<size_t>(warp) * p.value_dim;
  const int64_t token = blockIdx.x;
  const int64_t begin = part_begin[token], end = part_begin[token + 1];
  if (end == begin) return;  // written directly by its only item
  const internal::PartRef* refs = parts + begin;
  for (int head = warp; head < p.num_heads; head += kWarps) {
    const auto first = [&](int k) { return refs[k].first + head * refs[k].head_stride; };
    MergeInto(p, states, static_cast<int>(end - begin), first, token, head, acc, lane);
  }
}

/// The device's opt-in shared memory per block.
Status SharedBudget(size_t* bytes) {
  int device = 0, optin = 0;
  DYNATTN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  DYNATTN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  *bytes = static_cast<size_t>(optin);
  return Status::Ok();
}

/// Dynamic shared memory of the merge kernels: one value-row accumulator per warp.
Status MergeBytes(const AttentionProblem& p, size_t* bytes) {
  *bytes = static_cast<size_t>(kWarps) * p.value_dim * sizeof(float);
  if (*bytes > 48 * 1024) {
    DYNATTN_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        &MergeSplitsKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(*bytes)));
    DYNATTN_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        &MergePartsKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(*bytes)));
  }
  return Status::Ok();
}

}  // namespace

template <CacheElem kElem>
Status LaunchAttend(const AttentionProblem& p, const AttendWork& work, cudaStream_t stream) {
  if (work.num_shared + work.num_items == 0) return Status::Ok();
  size_t budget = 0;
  DYNATTN_RETURN_IF_ERROR(SharedBudget(&budget));
  Layout layout =
      Layout::For(p.head_dim, p.value_dim, work.max_vectors, std::min(budget, kTargetSharedBytes));
  if (layout.bytes > kTargetSharedBytes) {
    layout = Layout::For(p.head_dim, p.value_dim, work.max_vectors, budget);
  }
  if (layout.bytes > budget) {
    return CudaStatus(cudaErrorInvalidConfiguration, "head_dim too large for shared memory");
  }
  DYNATTN_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(&AttendKernel<kElem>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(layout.bytes)));
  const int64_t blocks = work.num_shared + work.num_items;
  DYNATTN_LAUNCH(AttendKernel<kElem>, static_cast<unsigned>(blocks), kThreads, layout.bytes, stream)
  (p, work, layout);
  return CudaStatus(cudaGetLastError(), "AttendKernel launch");
}

template Status LaunchAttend<CacheElem::kF32>(const AttentionProblem&, const AttendWork&,
                                              cudaStream_t);
template Status LaunchAttend<CacheElem::kF16>(const AttentionProblem&, const AttendWork&,
                                              cudaStream_t);
template Status LaunchAttend<CacheElem::kInt8>(const AttentionProblem&, const AttendWork&,
                                               cudaStream_t);
template Status LaunchAttend<CacheElem::kInt4>(const AttentionProblem&, const AttendWork&,
                                               cudaStream_t);
template Status LaunchAttend<CacheElem::kBF16>(const AttentionProblem&, const AttendWork&,
                                               cudaStream_t);
template Status LaunchAttend<CacheElem::kF8E4M3>(const AttentionProblem&, const AttendWork&,
                                                 cudaStream_t);
template Status LaunchAttend<CacheElem::kF8E5M2>(const AttentionProblem&, const AttendWork&,
                                                 cudaStream_t);

Status LaunchMergeSplits(const AttentionProblem& p, const internal::MergeTask* tasks, int64_t count,
                         const float* states, cudaStream_t stream) {
  if (count == 0) return Status::Ok();
  size_t bytes = 0;
  DYNATTN_RETURN_IF_ERROR(MergeBytes(p, &bytes));
  DYNATTN_LAUNCH(MergeSplitsKernel, static_cast<unsigned>(count), kThreads, bytes, stream)
  (p, tasks, states);
  return CudaStatus(cudaGetLastError(), "MergeSplitsKernel launch");
}

Status LaunchMergeParts(const AttentionProblem& p, const int64_t* part_begin,
                        const internal::PartRef* parts, int64_t tokens, const float* states,
                        cudaStream_t stream) {
  if (tokens == 0) return Status::Ok();
  size_t bytes = 0;
  DYNATTN_RETURN_IF_ERROR(MergeBytes(p, &bytes));
  DYNATTN_LAUNCH(MergePartsKernel, static_cast<unsigned>(tokens), kThreads, bytes, stream)
  (p, part_begin, parts, states);
  return CudaStatus(cudaGetLastError(), "MergePartsKernel launch");
}

}  // namespace dynattn::gpu
