// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the gpu suite's files (tests/gpu_*_test.cc) share to run a reference case on the CUDA
// device, or on the CUDA emulator that stands in for one: the placement of a case's data tensors
// in device memory, CUDA errors as messages, the float64 reference of an attention case, and the
// switch to the reduced matrix.

#ifndef DYNATTN_TESTS_SUPPORT_GPU_DEVICE_H_
#define DYNATTN_TESTS_SUPPORT_GPU_DEVICE_H_

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {

/// A CUDA error as "name: description".
std::string CudaError(cudaError_t error);

/// Requires `call` to return cudaSuccess; a failure names the call and its error.
#define REQUIRE_CUDA(call)                                                \
  do {                                                                    \
    const cudaError_t cuda_status = (call);                               \
    REQUIRE_MESSAGE(cuda_status == cudaSuccess, #call,                    \
                    " failed: ", ::dynattn_test::CudaError(cuda_status)); \
  } while (false)

// Data tensors (every dtype but int64) in device memory; index tensors (int64) and the inputs
// read on the host (sinks, alibi_slopes, k_scale, v_scale) stay on the host. Outputs arrive
// poisoned (0xFF bytes, NaN in floats) from RunLibrary and are copied as such, so an element the
// device never writes shows up after Fetch.
class DevicePlacement : public Placement {
 public:
  DevicePlacement() = default;
  DevicePlacement(const DevicePlacement&) = delete;
  DevicePlacement& operator=(const DevicePlacement&) = delete;
  ~DevicePlacement() override;

  dynattn::TensorView Place(const std::string& name, Array& array) override;
  void Fetch() override;

 private:
  struct Buffer {
    Array* host;
    void* device;
  };
  std::vector<Buffer> buffers_;
};

/// Runs `c` through the library with its data tensors on the device (DevicePlacement).
LibResult RunOnDevice(const Case& c);

/// The float64 reference of an attention case (unified attention included).
dynattn_ref::AttnResult Reference(const Case& c);

/// DYNATTN_GPU_REDUCED=1: the reduced matrix that compute-sanitizer runs on a device (its checks
/// cost 10-100x a plain run): one golden cell per kernel key, and fewer random trials.
bool Reduced();

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_GPU_DEVICE_H_
