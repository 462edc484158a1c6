// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The dispatch table: one row per (backend, cache element type). A call runs on the backend where
// its tensors live (the cache descriptor's `device`, which validation has checked every data
// tensor against); the plan comes from the same planner for every backend (plan.h,
// unified/plan_unified.h). The CPU row is the oneTBB executor over the Highway kernels
// (execute.cc); the CUDA row is gpu/, present only when the `cuda` feature is built.

#ifndef DYNATTN_SRC_DISPATCH_H_
#define DYNATTN_SRC_DISPATCH_H_

#include "dynattn/ops.h"
#include "simd/kernel_abi.h"
#include "src/plan.h"
#include "src/unified/plan_unified.h"

namespace dynattn::internal {

/// Everything a call runs, for one backend and one cache element type. The problems hold the
/// caller's pointers: device pointers for a CUDA row, whose entries copy the host-side index
/// arrays and plans they need to the device themselves.
struct BackendKernels {
  const char* name;  ///< "cpu", "cuda".
  /// KeyValueCache step 1 (also MHCA and unified attention): quantize and store new tokens.
  void (*write_new_tokens)(const WriteProblem&, const RunOptions&);
  /// KeyValueCache step 2: dequantize every request's context into the key/value outputs.
  void (*gather_context)(const GatherProblem&, const RunOptions&);
  /// MHA and MHCA: the plan's work items, then the merge of split contexts.
  void (*run_attention)(const AttentionProblem&, const AttentionPlan&, const RunOptions&);
  /// Unified attention: shared and request items, then every token's merge.
  void (*run_unified)(const AttentionProblem&, const UnifiedPlan&, const RunOptions&);
};

/// The row for (device, elem), or null when that backend is not built into this library.
const BackendKernels* KernelsFor(Device device, CacheElem elem);

/// The CUDA rows: defined by gpu/ when the `cuda` feature is built, else by src/no_cuda.cc
/// (always null).
const BackendKernels* CudaKernelsFor(CacheElem elem);

/// The error for a call whose tensors are on a device this library has no backend for.
Status NoBackend(const char* input, Device device);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_DISPATCH_H_
