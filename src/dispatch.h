// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The dispatch table: one row per (backend, cache element type), filled once. A call runs on the
// backend where its tensors live (the cache descriptor's `device`, which validation has checked
// every data tensor against); its plan comes from core/'s planners, the same for every backend.
// A row's entries are the functions that run: a CPU row holds the Highway kernels of its element
// type for the SIMD target resolved when the table was filled (src/cpu_backend.cc), a CUDA row the
// launchers instantiated for its element type (cuda/backend.cu, present only when the `cuda`
// feature is built). Nothing below a row switches on the element type again; adding a cache
// format or a backend is adding rows.

#ifndef DYNATTN_SRC_DISPATCH_H_
#define DYNATTN_SRC_DISPATCH_H_

#include <vector>

#include "core/plan.h"
#include "core/plan_unified.h"
#include "cpu/kernel_table.h"
#include "dynattn/status.h"

namespace dynattn::internal {

struct ContextState;

/// Everything a call runs, for one backend and one cache element type. The problems hold the
/// caller's pointers: device pointers for a CUDA row, whose entries copy the host-side index
/// arrays and plans they need to the device themselves. Each entry returns when its work is done.
/// The problems and plan of one Run (those present): what its `reserve` step sizes.
struct RunReservation {
  const WriteProblem* write = nullptr;
  const GatherProblem* gather = nullptr;
  const AttentionProblem* attention = nullptr;
  const AttentionPlan* attention_plan = nullptr;  ///< MHA and MHCA.
  const UnifiedPlan* unified_plan = nullptr;      ///< Unified attention.
};

struct BackendKernels {
  const char* name = nullptr;  ///< "<backend>/<element type>", e.g. "cpu/int8".
  Device device = Device::kCpu;
  CacheElem elem = CacheElem::kF32;
  /// The numerics tier of its attention entries.
  Precision precision = Precision::kExact;
  /// The row of the same format in the fast tier, where one is built (a call asking for
  /// Precision::kFast runs it; other such calls run this row): the CPU's int8 and int4 rows, and
  /// its fp16 and bf16 rows where it has AVX512_BF16.
  const BackendKernels* fast = nullptr;
  CpuKernels cpu = {};      ///< CPU rows: the Highway kernels of `elem` (unused by CUDA rows).
  const char* target = "";  ///< CPU rows: the Highway target of `cpu`, e.g. "AVX2".
  /// Step 0 of every Run: allocates all the Context memory the Run's steps use (CPU scratch and
  /// partial states; CUDA workspace), so that nothing fails to allocate once a step has written
  /// the cache or an output.
  Status (*reserve)(const BackendKernels&, const RunReservation&, ContextState*) = nullptr;
  /// KeyValueCache step 1 (also MHCA and unified attention): quantize and store new tokens.
  Status (*write_new_tokens)(const BackendKernels&, const WriteProblem&, ContextState*) = nullptr;
  /// KeyValueCache step 2: dequantize every request's context into the key/value outputs.
  Status (*gather_context)(const BackendKernels&, const GatherProblem&,
                           const std::vector<GatherPiece>&, ContextState*) = nullptr;
  /// MHA and MHCA: the plan's work items, then the merge of split contexts.
  Status (*run_attention)(const BackendKernels&, const AttentionProblem&, const AttentionPlan&,
                          ContextState*) = nullptr;
  /// Unified attention: shared and request items, then every token's merge.
  Status (*run_unified)(const BackendKernels&, const AttentionProblem&, const UnifiedPlan&,
                        ContextState*) = nullptr;
};

/// The row for (device, elem), or null when that backend is not built into this library.
const BackendKernels* KernelsFor(Device device, CacheElem elem);

/// The row a call over `cache` asking for `precision` runs: KernelsFor's row, or its fast twin
/// where the call asks for the fast tier, one is built and its kernel covers the cache
/// (FastCovers).
const BackendKernels* KernelsFor(Device device, const CacheDesc& cache, Precision precision);

/// Fills the CPU rows again for the Highway target chosen now. For tests that force a target
/// (hwy::SetSupportedTargetsForTest); never call it while a call is running.
void RefillCpuRows();

/// The CPU row of `elem` with `kernels` (src/cpu_backend.cc).
BackendKernels CpuRow(CacheElem elem, const CpuKernels& kernels);

/// The CUDA rows: defined by cuda/ when the `cuda` feature is built, else by src/no_cuda.cc
/// (always null).
const BackendKernels* CudaKernelsFor(CacheElem elem);

/// The error for a call whose tensors are on a device this library has no backend for.
Status NoBackend(const char* input, Device device);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_DISPATCH_H_
