// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn run unified_attention`: the one op of the tool that is not a PMX op. It reads a PMX
// cache tensor as a block cache (MakePmxBlockCache) and addresses it through a block table, so
// its attribute handling and outputs (an optional log-sum-exp) differ from the three PMX ops'.

#ifndef DYNATTN_TOOLS_UNIFIED_RUN_H_
#define DYNATTN_TOOLS_UNIFIED_RUN_H_

#include "dynattn/ops.h"
#include "dynattn/status.h"
#include "tools/run_support.h"

namespace dynattn::cli {

/// Allocates attn_output (and lse when `return_lse` is 1), builds the block cache of the `cache`
/// and `scale` inputs and runs UnifiedAttention; the cache and scale inputs are updated in place.
Status CallUnifiedAttention(const run_support::Attributes& attributes, const RunOptions& options,
                            run_support::Arrays& inputs, run_support::PendingOutputs* pending,
                            run_support::Arrays* outputs);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_UNIFIED_RUN_H_
