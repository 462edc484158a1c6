// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Device placement and the shared switches of the gpu suite (gpu_device.h).

#include "tests/support/gpu_device.h"

#include <cstdlib>

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;

// The small fp32 inputs the library reads on the host, as an engine passes them.
bool ReadOnHost(const std::string& name) {
  return name == "sinks" || name == "alibi_slopes" || name == "k_scale" || name == "v_scale";
}

}  // namespace

std::string CudaError(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

DevicePlacement::~DevicePlacement() {
  for (const Buffer& buffer : buffers_) cudaFree(buffer.device);
}

dynattn::TensorView DevicePlacement::Place(const std::string& name, Array& array) {
  dynattn::TensorView view = ViewOf(array);
  if (array.dt == Dt::kI64 || ReadOnHost(name)) return view;
  Buffer buffer{&array, nullptr};
  if (!array.bytes.empty()) {
    REQUIRE_CUDA(cudaMalloc(&buffer.device, array.bytes.size()));
    REQUIRE_CUDA(
        cudaMemcpy(buffer.device, array.bytes.data(), array.bytes.size(), cudaMemcpyHostToDevice));
  }
  buffers_.push_back(buffer);
  view.data = buffer.device;
  view.device = dynattn::Device::kCuda;
  return view;
}

void DevicePlacement::Fetch() {
  REQUIRE_CUDA(cudaDeviceSynchronize());
  for (const Buffer& buffer : buffers_) {
    if (buffer.device == nullptr) continue;
    REQUIRE_CUDA(cudaMemcpy(buffer.host->bytes.data(), buffer.device, buffer.host->bytes.size(),
                            cudaMemcpyDeviceToHost));
  }
}

LibResult RunOnDevice(const Case& c) {
  DevicePlacement placement;
  return RunLibrary(c, {}, &placement);
}

dynattn_ref::AttnResult Reference(const Case& c) {
  if (c.op == "multi_head_attention") return dynattn_ref::MultiHeadAttention(c.attrs, c.inputs);
  if (c.op == "unified_attention") return dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  return dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
}

bool Reduced() {
  const char* reduced = std::getenv("DYNATTN_GPU_REDUCED");
  return reduced != nullptr && std::string(reduced) == "1";
}

}  // namespace dynattn_test
