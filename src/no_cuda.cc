// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Built instead of gpu/ when the `cuda` feature is off: the dispatch table has no CUDA rows.

#include "src/dispatch.h"

namespace dynattn::internal {

const BackendKernels* CudaKernelsFor(CacheElem) { return nullptr; }

}  // namespace dynattn::internal
