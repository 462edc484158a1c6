// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The launchers of the CUDA kernels (cache_io.cu, attention.cu), one instantiation per cache
// element type: the dispatch table's CUDA rows (backend.cu) pick theirs, and nothing below
// switches on the element type. Every problem passed here is already rebased by backend.cu: all
// of its pointers, index arrays included, are device pointers. Each launcher enqueues its kernels
// on `stream` and returns the launch's Status.

#ifndef DYNATTN_CUDA_KERNELS_H_
#define DYNATTN_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "core/plan.h"
#include "core/problem.h"
#include "dynattn/status.h"

namespace dynattn::gpu {

/// Quantizes and stores packed query rows [0, tokens) of the new keys and values.
template <CacheElem kElem>
Status LaunchWriteTokens(const internal::WriteProblem& p, int64_t tokens, cudaStream_t stream);
/// Dequantizes packed context rows [0, rows) (kvstarts[B]) into the key/value outputs.
template <CacheElem kElem>
Status LaunchGatherContext(const internal::GatherProblem& p, int64_t rows, cudaStream_t stream);

/// The attention work of one call: `num_shared` shared items (unified attention) and `num_items`
/// request items, one CUDA block each; split items and shared items write partial states.
struct AttendWork {
  const internal::SharedItem* shared = nullptr;  ///< Device copies (readers, blocks rebased).
  int64_t num_shared = 0;
  const internal::WorkItem* items = nullptr;
  int64_t num_items = 0;
  float* states = nullptr;  ///< num_states x StateFloats(padded_value_dim).
  int max_vectors = 1;      ///< Most query vectors of any item (sizes the shared memory).
};
template <CacheElem kElem>
Status LaunchAttend(const internal::AttentionProblem& p, const AttendWork& work,
                    cudaStream_t stream);

/// Merges the split states of `count` MergeTasks into their output rows.
Status LaunchMergeSplits(const internal::AttentionProblem& p, const internal::MergeTask* tasks,
                         int64_t count, const float* states, cudaStream_t stream);
/// Merges, for tokens [0, tokens), the parts parts[part_begin[t], part_begin[t + 1]) (tokens
/// with no part were written directly) into their output rows.
Status LaunchMergeParts(const internal::AttentionProblem& p, const int64_t* part_begin,
                        const internal::PartRef* parts, int64_t tokens, const float* states,
                        cudaStream_t stream);

}  // namespace dynattn::gpu

#endif  // DYNATTN_CUDA_KERNELS_H_
