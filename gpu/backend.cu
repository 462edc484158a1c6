// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The dispatch table's CUDA rows (kernels arrive with the CUDA module's issue).

#include "src/dispatch.h"

namespace dynattn::internal {

const BackendKernels* CudaKernelsFor(CacheElem) { return nullptr; }

}  // namespace dynattn::internal
