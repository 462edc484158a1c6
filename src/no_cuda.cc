// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Built instead of cuda/ when the `cuda` feature is off: the dispatch table has no CUDA rows.

#include "src/device_slot.h"
#include "src/dispatch.h"

namespace dynattn::internal {

const BackendKernels* CudaKernelsFor(CacheElem) { return nullptr; }

struct DeviceWorkspace {};
void ReleaseDeviceWorkspace(DeviceWorkspace* workspace) { delete workspace; }

}  // namespace dynattn::internal
