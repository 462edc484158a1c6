// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU backend (dispatch.h's CPU row): the Highway kernel table of the cache's element type
// (for the target chosen at the time of the call) and oneTBB parallelism over independent pieces
// of work, each with per-worker scratch.

#ifndef DYNATTN_SRC_EXECUTE_H_
#define DYNATTN_SRC_EXECUTE_H_

#include "dynattn/ops.h"
#include "simd/kernel_abi.h"
#include "src/plan.h"
#include "src/unified/plan_unified.h"

namespace dynattn::internal {

/// The CPU kernel table for caches of `elem` (the dispatch table's CPU row).
CpuKernels CpuKernelsFor(CacheElem elem);

/// KeyValueCache step 1: quantize and store every new token.
void WriteNewTokens(const WriteProblem& problem, const RunOptions& options);
/// KeyValueCache step 2: dequantize every request's context into the key/value outputs.
void GatherContext(const GatherProblem& problem, const RunOptions& options);
/// Attention over the plan's work items, then the merge of split contexts.
void RunAttention(const AttentionProblem& problem, const AttentionPlan& plan,
                  const RunOptions& options);
/// Unified attention: every shared and request item of `plan`, then every token's merge.
void RunUnified(const AttentionProblem& problem, const UnifiedPlan& plan,
                const RunOptions& options);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_EXECUTE_H_
