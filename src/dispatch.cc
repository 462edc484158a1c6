// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/dispatch.h"

#include <string>

#include "src/execute.h"

namespace dynattn::internal {
namespace {

/// The CPU row: the executor picks the Highway table of the element type per call.
constexpr BackendKernels kCpuKernels = {"cpu", &WriteNewTokens, &GatherContext, &RunAttention,
                                        &RunUnified};

}  // namespace

const BackendKernels* KernelsFor(Device device, CacheElem elem) {
  if (device == Device::kCpu) return &kCpuKernels;
  return CudaKernelsFor(elem);
}

Status NoBackend(const char* input, Device device) {
  return Status::Unsupported(input, std::string("is in ") + DeviceName(device) +
                                        " memory, and this libdynattn was built without that "
                                        "backend (meson -Dcuda=enabled with nvcc installed)");
}

}  // namespace dynattn::internal
