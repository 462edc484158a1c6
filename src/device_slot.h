// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the CUDA backend (cuda/backend.cu) sees of a Context: the stream its calls are enqueued on
// and the slot that holds its device workspace. The rest of a Context (the oneTBB arena, the CPU
// scratch and partial states) stays behind src/context.h, which cuda/ does not include.

#ifndef DYNATTN_SRC_DEVICE_SLOT_H_
#define DYNATTN_SRC_DEVICE_SLOT_H_

namespace dynattn::internal {

struct ContextState;

/// The CUDA backend's part of a Context: defined by cuda/backend.cu (src/no_cuda.cc without it).
struct DeviceWorkspace;
/// Frees a DeviceWorkspace (defined with it). The Context calls it when it is destroyed.
void ReleaseDeviceWorkspace(DeviceWorkspace* workspace);

/// A Context's device side.
struct DeviceSlot {
  void* cuda_stream = nullptr;            ///< ContextOptions::cuda_stream (null: default stream).
  DeviceWorkspace** workspace = nullptr;  ///< Null until the backend creates it on first use.
};

/// The device side of `context` (src/context.cc).
DeviceSlot DeviceSlotOf(ContextState* context);

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_DEVICE_SLOT_H_
