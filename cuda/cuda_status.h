// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// CUDA runtime errors as the library's Status: a failed call (a broken device, an exhausted
// memory, a launch the device refuses) reaches the caller as StatusCode::kDeviceError naming the
// call and CUDA's error, never as an abort.

#ifndef DYNATTN_CUDA_CUDA_STATUS_H_
#define DYNATTN_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include <string>

#include "dynattn/status.h"

namespace dynattn::gpu {

/// The Status of `error` returned by the runtime call `what`. A failed call also leaves its error
/// as the runtime's last error; it is consumed here, so that the next launch check (which reads
/// cudaGetLastError) reports its own launch, not this call.
inline Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  static_cast<void>(cudaGetLastError());
  return Status::DeviceError(std::string(what) + ": " + cudaGetErrorName(error) + " (" +
                             cudaGetErrorString(error) + ")");
}

}  // namespace dynattn::gpu

/// Returns the call's error as a Status from the enclosing function unless it succeeded.
#define DYNATTN_CUDA_RETURN_IF_ERROR(call) \
  DYNATTN_RETURN_IF_ERROR(::dynattn::gpu::CudaStatus((call), #call))

#endif  // DYNATTN_CUDA_CUDA_STATUS_H_
