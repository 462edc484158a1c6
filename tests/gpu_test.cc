// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU suite: the golden matrix (tests/reference/golden_matrix.h, the cases `dynattn golden`
// writes, with this run's seeds) run on the CPU and then on the CUDA device through the same
// public API, with every data tensor in device memory and the index tensors on the host, as a
// serving engine calls it. Caches, scales and gathered keys/values must match the CPU byte for
// byte; attention outputs must be within the spec's tolerances of the float64 reference.
//
// The same file runs on a real device (gpu_suite=device) and on the CUDA emulator
// (gpu/emulator, gpu_suite=emulator), which executes the unmodified kernels on the CPU in the
// schedule CUDA_EMU_SCHEDULE names and fails a launch that breaks a CUDA rule. Without a device
// the binary says why on one line and exits 77, which meson counts as skipped; every case checks
// that kernels ran, so it never passes silently.

#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/reference/golden_matrix.h"
#include "tests/reference/reference.h"
#include "tests/support/run_case.h"

namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_ref::Dt;
using dynattn_test::LibResult;

std::string CudaError(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

#define REQUIRE_CUDA(call)                                                                   \
  do {                                                                                       \
    const cudaError_t cuda_status = (call);                                                  \
    REQUIRE_MESSAGE(cuda_status == cudaSuccess, #call, " failed: ", CudaError(cuda_status)); \
  } while (false)

// Data tensors (every dtype but int64) in device memory; index tensors (int64) stay on the
// host. Outputs arrive poisoned (0xFF bytes, NaN in floats) from RunLibrary and are copied as
// such, so an element the device never writes shows up after Fetch.
class DevicePlacement : public dynattn_test::Placement {
 public:
  DevicePlacement() = default;
  DevicePlacement(const DevicePlacement&) = delete;
  DevicePlacement& operator=(const DevicePlacement&) = delete;
  ~DevicePlacement() override {
    for (const Buffer& buffer : buffers_) cudaFree(buffer.device);
  }

  dynattn::TensorView Place(const std::string&, Array& array) override {
    dynattn::TensorView view = dynattn_test::ViewOf(array);
    if (array.dt == Dt::kI64) return view;
    Buffer buffer{&array, nullptr};
    if (!array.bytes.empty()) {
      REQUIRE_CUDA(cudaMalloc(&buffer.device, array.bytes.size()));
      REQUIRE_CUDA(cudaMemcpy(buffer.device, array.bytes.data(), array.bytes.size(),
                              cudaMemcpyHostToDevice));
    }
    buffers_.push_back(buffer);
    view.data = buffer.device;
    view.device = dynattn::Device::kCuda;
    return view;
  }

  void Fetch() override {
    REQUIRE_CUDA(cudaDeviceSynchronize());
    for (const Buffer& buffer : buffers_) {
      if (buffer.device == nullptr) continue;
      REQUIRE_CUDA(cudaMemcpy(buffer.host->bytes.data(), buffer.device, buffer.host->bytes.size(),
                              cudaMemcpyDeviceToHost));
    }
  }

 private:
  struct Buffer {
    Array* host;
    void* device;
  };
  std::vector<Buffer> buffers_;
};

LibResult RunOnDevice(const Case& c) {
  DevicePlacement placement;
  return dynattn_test::RunLibrary(c, {}, &placement);
}

void CheckSameBytes(const char* what, const Array& cpu, const Array& gpu) {
  std::string why;
  CHECK_MESSAGE(dynattn_test::SameBytes(cpu, gpu, &why), what, " differs from the CPU: ", why);
}

// The float64 reference of an attention case (unified attention included).
dynattn_ref::AttnResult Reference(const Case& c) {
  if (c.op == "multi_head_attention") return dynattn_ref::MultiHeadAttention(c.attrs, c.inputs);
  if (c.op == "unified_attention") return dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  return dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
}

void CheckCase(const dynattn_ref::GoldenSpec& spec) {
  const Case c = dynattn_ref::MakeGoldenCase(spec);
  INFO(c.description);
  // One CPU thread: the bits are the same for any count (the determinism suite), and under
  // ThreadSanitizer (gpu-tsan) the only threads are then the emulated kernels'.
  const LibResult cpu = dynattn_test::RunLibrary(c, dynattn::RunOptions{1});
  REQUIRE_MESSAGE(cpu.status.ok(), "CPU: ", cpu.status.message());
  const LibResult gpu = RunOnDevice(c);
  REQUIRE_MESSAGE(gpu.status.ok(), "CUDA: ", gpu.status.message());
  CheckSameBytes("cache", cpu.cache, gpu.cache);
  CheckSameBytes("scale", cpu.scale, gpu.scale);
  if (c.op == "key_value_cache") {
    CheckSameBytes("key", cpu.key, gpu.key);
    CheckSameBytes("value", cpu.value, gpu.value);
    return;
  }
  const dynattn_ref::AttnResult ref = Reference(c);
  const std::string cpu_error = dynattn_ref::CheckAttention(ref, cpu.attn_output);
  CHECK_MESSAGE(cpu_error.empty(), "CPU attn_output: ", cpu_error);
  const std::string gpu_error = dynattn_ref::CheckAttention(ref, gpu.attn_output);
  CHECK_MESSAGE(gpu_error.empty(), "CUDA attn_output: ", gpu_error);
  if (c.op == "unified_attention") {
    const std::string lse_error = dynattn_ref::CheckLse(ref, gpu.lse);
    CHECK_MESSAGE(lse_error.empty(), "CUDA lse: ", lse_error);
  }
}

// Every cell of the matrix whose op is `op`, with this run's seeds.
void CheckOp(const std::string& op) {
  int cells = 0;
#ifdef DYNATTN_CUDA_EMULATOR
  const int64_t launches_before = cuda_emu::GetStats().launches;
#endif
  for (const dynattn_ref::GoldenSpec& spec : dynattn_ref::GoldenMatrix(dynattn_test::BaseSeed())) {
    if (spec.op != op) continue;
    CAPTURE(spec.name);
    CheckCase(spec);
    ++cells;
  }
  CHECK(cells > 0);
#ifdef DYNATTN_CUDA_EMULATOR
  const cuda_emu::Stats stats = cuda_emu::GetStats();
  MESSAGE(op, ": ", cells, " cases, ", stats.launches - launches_before, " kernel launches");
  CHECK(stats.launches - launches_before > 0);  // the device path really ran
#endif
}

TEST_SUITE("gpu") {
  TEST_CASE("key_value_cache on the device writes the CPU's cache, scale, key and value") {
    CheckOp("key_value_cache");
  }
  TEST_CASE("multi_head_attention on the device is within tolerance of the reference") {
    CheckOp("multi_head_attention");
  }
  TEST_CASE("multi_head_cache_attention on the device: CPU's cache bytes, reference's output") {
    CheckOp("multi_head_cache_attention");
  }
  TEST_CASE("unified_attention on the device: CPU's cache bytes, reference's output and lse") {
    CheckOp("unified_attention");
  }
#ifdef DYNATTN_CUDA_EMULATOR
  TEST_CASE("a launch the device refuses comes back as a Status naming the kernel") {
    Case c;
    for (uint64_t seed = dynattn_test::BaseSeed() + 77;
         c.inputs.empty() || c.inputs.at("query").shape[0] == 0;
         ++seed) {  // a step with new tokens, so that the write kernel launches
      c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
    }
    DevicePlacement placement;
    cuda_emu::FailNextLaunches(1);
    const LibResult r = dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &placement);
    cuda_emu::FailNextLaunches(0);
    CHECK(r.status.code() == dynattn::StatusCode::kDeviceError);
    CHECK(r.status.message() ==
          "CUDA error: WriteTokensKernel launch: cudaErrorLaunchOutOfResources (too many resources "
          "requested for launch)");
    // The device is usable again (the error was not sticky): the next call succeeds.
    DevicePlacement again;
    CHECK(dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &again).status.ok());
  }
#endif
}

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
  std::printf("emulated: %lld launches, %lld blocks, %lld threads, %lld fiber switches\n",
              static_cast<long long>(stats.launches), static_cast<long long>(stats.blocks),
              static_cast<long long>(stats.threads), static_cast<long long>(stats.switches));
#endif
  return status;
}
