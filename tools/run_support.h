// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The pieces of the `run` command that every op's call shares (output allocation, tensor lookup
// by spec name, cache attributes), so that an op can live in a file of its own (unified_run.cc)
// and still follow exactly the same rules as the others. Internal to the tool.

#ifndef DYNATTN_TOOLS_RUN_SUPPORT_H_
#define DYNATTN_TOOLS_RUN_SUPPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dynattn/cache.h"
#include "dynattn/named_args.h"
#include "dynattn/status.h"
#include "dynattn/types.h"
#include "tools/npy.h"

namespace dynattn::cli::run_support {

/// Tensors by spec name.
using Arrays = std::map<std::string, NpyArray>;
/// Attribute values by name, defaults filled in.
using Attributes = std::map<std::string, int>;

/// Allocates a zeroed output `name`, refusing sizes this machine cannot hold.
Status AllocateOutput(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      Arrays* outputs);

/// Views of the outputs, else of the inputs, by spec name; absent when neither has it.
TensorLookup Lookup(Arrays& inputs, Arrays* outputs);

/// (Tq, Hq, D) of the query when it is rank 3, else an empty output the library will reject.
std::vector<int64_t> AttentionOutputShape(const NpyArray& query);

/// The PMX cache attributes among `attributes`.
CacheAttrs MakeCacheAttrs(const Attributes& attributes);

}  // namespace dynattn::cli::run_support

#endif  // DYNATTN_TOOLS_RUN_SUPPORT_H_
