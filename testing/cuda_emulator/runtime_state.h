// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// State shared by the emulator's runtime API (runtime.cc) and its scheduler (scheduler.cc): the
// emulated device, the last and the sticky error, and the kernels' shared-memory opt-ins.

#ifndef DYNATTN_TESTING_CUDA_EMULATOR_RUNTIME_STATE_H_
#define DYNATTN_TESTING_CUDA_EMULATOR_RUNTIME_STATE_H_

#include <cuda_runtime.h>

#include <string>

namespace cuda_emu::detail {

/// The emulated device's limits (CUDA_EMU_DEVICE: h100, the default, or a100).
const cudaDeviceProp& DeviceProperties();

/// Records a non-sticky error (cudaGetLastError returns and clears it) and its diagnostic.
cudaError_t RecordError(cudaError_t error, const std::string& diagnostic);
/// Records a sticky error: a kernel fault; every later call returns it until ResetDevice.
cudaError_t RecordStickyError(cudaError_t error, const std::string& diagnostic);
/// The sticky error, cudaSuccess when none.
cudaError_t StickyError();

/// The dynamic shared memory a kernel has opted into (0: the default 48 KiB only).
int OptedInSharedBytes(const void* kernel);

}  // namespace cuda_emu::detail

#endif  // DYNATTN_TESTING_CUDA_EMULATOR_RUNTIME_STATE_H_
