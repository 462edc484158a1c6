// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CUDA emulator's own suite (placeholder while it is being built).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include "gpu/launch.cuh"

namespace {
__global__ void ReverseLanes(int* out) {
  const int lane = threadIdx.x % 32;
  out[threadIdx.x] = __shfl_sync(0xFFFFFFFFu, lane, 31 - lane);
}
}  // namespace

TEST_SUITE("emulator") {
  TEST_CASE("shuffle") {
    int* device = nullptr;
    REQUIRE(cudaMalloc(&device, 64 * sizeof(int)) == cudaSuccess);
    DYNATTN_LAUNCH(ReverseLanes, 1, 64, 0)(device);
    int host[64];
    REQUIRE(cudaMemcpy(host, device, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < 64; ++i) CHECK(host[i] == 31 - i % 32);
    cudaFree(device);
  }
}
