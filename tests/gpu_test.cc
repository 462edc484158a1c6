// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU suite's entry point: one binary of tests/gpu_*_test.cc, which run the golden matrix
// (tests/gpu_golden_test.cc) and the formats and score features of bf16/fp8 caches, windows,
// soft-cap, softmax scale and sinks on the CUDA rows (direct problems and the public ops) on the
// CUDA device, against the CPU, the host codec's bytes and a float64 attention; this file holds
// main and the check that they launched every kernel.
//
// The same files run on a real device (gpu_suite=device) and on the CUDA emulator
// (testing/cuda_emulator, gpu_suite=emulator), which executes the unmodified kernels on the CPU in
// the schedule CUDA_EMU_SCHEDULE names and fails a launch that breaks a CUDA rule. Without a device
// the binary says why on one line and exits 77, which meson counts as skipped; every case checks
// that kernels ran, so it never passes silently.

#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dynattn/cache.h"
#include "tests/support/gpu_device.h"
#include "tests/support/harness.h"

namespace {

using dynattn_test::CudaError;

#ifdef DYNATTN_CUDA_EMULATOR
// Last to run: doctest orders test cases by file (their __FILE__, then their line; main sets no
// other order), and this file's name sorts after every gpu_<topic>_test.cc whose topic begins
// with a letter before 't' (keep it so when adding one). So the cases of those files, the reduced
// matrix (DYNATTN_GPU_REDUCED=1, which compute-sanitizer runs on a device) included, ran before
// this one and launched every kernel the module has: the write, gather and attention kernels of
// each cache element type and the two merges.
TEST_SUITE("gpu") {
  TEST_CASE("the cases above launched every kernel instantiation of the CUDA module") {
    constexpr int64_t kKernels = 3 * dynattn::kNumCacheElems + 2;
    CHECK(cuda_emu::GetStats().kernels == kKernels);
  }
}
#endif

}  // namespace

#ifdef DYNATTN_CUDA_EMULATOR
// CUDA_EMU_SCHEDULE=random without a seed takes the run's base seed, so it replays with it.
const char* ConfigureSchedule() {
  const char* schedule = std::getenv("CUDA_EMU_SCHEDULE");
  if (schedule != nullptr && std::string(schedule) == "random") {
    cuda_emu::SetSchedule(cuda_emu::Schedule::kRandom, dynattn_test::BaseSeed());
  }
  return schedule != nullptr ? schedule : "forward";
}
#endif

int main(int argc, char** argv) {
  dynattn_test::PrintBaseSeed();
#ifdef DYNATTN_CUDA_EMULATOR
  std::printf("emulated schedule: %s\n", ConfigureSchedule());
#endif
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("gpu suite skipped: no usable CUDA device (cudaGetDeviceCount: %s)\n",
                error != cudaSuccess ? CudaError(error).c_str() : "0 devices");
    return dynattn_test::kExitSkipped;
  }
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
    std::printf("gpu suite on %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
  }
  doctest::Context context(argc, argv);
  const int status = context.run();
#ifdef DYNATTN_CUDA_EMULATOR
  const cuda_emu::Stats stats = cuda_emu::GetStats();
  std::printf(
      "emulated: %lld launches of %lld kernels, %lld blocks, %lld threads, %lld fiber "
      "switches\n",
      static_cast<long long>(stats.launches), static_cast<long long>(stats.kernels),
      static_cast<long long>(stats.blocks), static_cast<long long>(stats.threads),
      static_cast<long long>(stats.switches));
#endif
  return status;
}
