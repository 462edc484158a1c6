// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CUDA emulator's own suite (testing/cuda_emulator): small kernels, written as cuda/ writes
// them, that show each CUDA rule the emulator enforces being enforced, with the diagnostic it
// gives, and each CUDA operation it provides giving CUDA's result. The gpu suite then relies on it.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cuda/launch.cuh"
#include "tests/support/sanitizers.h"

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A device array of `count` T, freed at scope exit.
template <class T>
class Device {
 public:
  explicit Device(size_t count) : count_(count) {
    REQUIRE(cudaMalloc(&data_, count * sizeof(T)) == cudaSuccess);
  }
  ~Device() { cudaFree(data_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  T* get() const { return data_; }
  std::vector<T> Fetch() const {
    std::vector<T> host(count_);
    REQUIRE(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t count_;
};

/// The launch failed: the sticky error is `expected` and the diagnostic holds every `part`.
/// Clears the sticky error for the next test.
void ExpectLaunchError(cudaError_t expected, const std::vector<std::string>& parts) {
  const std::string diagnostic = cuda_emu::LastDiagnostic();
  INFO("diagnostic: ", diagnostic);
  CHECK(cudaDeviceSynchronize() == expected);
  for (const std::string& part : parts) CHECK(diagnostic.find(part) != std::string::npos);
  cuda_emu::ResetDevice();
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

std::string Line(int line) { return "emulator_test.cc:" + std::to_string(line); }

/// Runs `body` in a child process; returns what it wrote to stderr and how it ended.
std::string InChild(const std::function<void()>& body, int* status) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  close(pipe_fds[0]);
  waitpid(child, status, 0);
  return text;
}

// ---------------------------------------------------------------------------------------------
// Kernels

__global__ void ShuffleAll(int* out, int width) {
  const int lane = threadIdx.x % 32;
  const int value = 100 + lane;
  int* row = out + threadIdx.x * 8;
  row[0] = __shfl_sync(kFull, value, 5, width);
  row[1] = __shfl_up_sync(kFull, value, 3, width);
  row[2] = __shfl_down_sync(kFull, value, 3, width);
  row[3] = __shfl_xor_sync(kFull, value, 1, width);
  row[4] = static_cast<int>(__ballot_sync(kFull, lane % 3 == 0));
  row[5] = __any_sync(kFull, lane == 7);
  row[6] = __all_sync(kFull, lane < 31);
  row[7] = __shfl_xor_sync(kFull, static_cast<int>(lane * 2.5f), 16, width);
}

// Thread t reads what thread t + 1 wrote: right only with the barrier.
__global__ void Rotate(const int* in, int* out, bool with_barrier) {
  DYNATTN_DYNAMIC_SHARED(int, staged);
  staged[threadIdx.x] = in[threadIdx.x];
  if (with_barrier) __syncthreads();
  // Without the barrier, a shuffle still switches fibers, so the other threads run meanwhile.
  const int other = (threadIdx.x + 1) % blockDim.x;
  if (!with_barrier) __syncwarp();
  out[threadIdx.x] = staged[other];
}

// Each records the line of the synchronising call it reaches (same line, so the diagnostics'
// line numbers can be checked).
// clang-format off
__global__ void DivergentBarriers(int* lines) {
  if (threadIdx.x < 32) {
    lines[0] = __LINE__; __syncthreads();
  } else {
    lines[1] = __LINE__; __syncthreads();
  }
}

__global__ void BarrierAfterExit(int* line) {
  if (threadIdx.x == 5) return;
  line[0] = __LINE__; __syncthreads();
}

__global__ void WarpOp(int* line, unsigned mask) {
  line[0] = __LINE__; line[1] = __shfl_xor_sync(mask, 1, 1);
}

__global__ void Deadlock(int* lines) {
  if (threadIdx.x == 0) {
    lines[0] = __LINE__; __syncwarp();
  } else {
    lines[1] = __LINE__; __syncthreads();
  }
}
// clang-format on

__global__ void ReadLaneOutsideMask(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000FFFFu, 1, 20);
}

__global__ void SharedIsNan(int* out) {
  DYNATTN_DYNAMIC_SHARED(float, shared);
  out[threadIdx.x] = std::isnan(shared[threadIdx.x]) ? 1 : 0;
}

__global__ void WriteAt(unsigned char* data, int64_t index) {
  if (threadIdx.x == 0) data[index] = 1;
}

__global__ void WriteShared(int64_t index) {
  DYNATTN_DYNAMIC_SHARED(unsigned char, shared);
  if (threadIdx.x == 0) shared[index] = 1;
}

struct Pointers {
  int64_t count;
  const int64_t* indices;
  float* output;
};

__global__ void UsePointers(Pointers p) {
  if (threadIdx.x < p.count) p.output[threadIdx.x] = static_cast<float>(p.indices[threadIdx.x]);
}

// The last writer wins: forward order ends with the last thread of the last block.
__global__ void LastWriter(int* out) {
  out[0] = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
}

// ---------------------------------------------------------------------------------------------
// Expected values

int ShuffleSource(int op, int lane, int width) {
  const int base = lane & ~(width - 1);
  switch (op) {
    case 0:
      return base + 5 % width;
    case 1:
      return lane - 3 >= base ? lane - 3 : lane;
    case 2:
      return lane + 3 < base + width ? lane + 3 : lane;
    default: {
      const int source = lane ^ 1;
      return source < base + width ? source : lane;
    }
  }
}

}  // namespace

TEST_SUITE("emulator") {
  TEST_CASE("shuffles, ballots and votes give CUDA's results for widths 32, 16 and 4") {
    for (const int width : {32, 16, 4}) {
      CAPTURE(width);
      Device<int> out(64 * 8);
      DYNATTN_LAUNCH(ShuffleAll, 1, 64, 0, nullptr)(out.get(), width);
      REQUIRE(cudaGetLastError() == cudaSuccess);
      const std::vector<int> got = out.Fetch();
      unsigned ballot = 0;
      for (int lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
      for (int t = 0; t < 64; ++t) {
        const int lane = t % 32;
        CAPTURE(t);
        for (int op = 0; op < 4; ++op)
          CHECK(got[t * 8 + op] == 100 + ShuffleSource(op, lane, width));
        CHECK(static_cast<unsigned>(got[t * 8 + 4]) == ballot);
        CHECK(got[t * 8 + 5] == 1);
        CHECK(got[t * 8 + 6] == 0);
        const int xor16 = lane ^ 16;
        const int source = xor16 < (lane & ~(width - 1)) + width ? xor16 : lane;
        CHECK(got[t * 8 + 7] == static_cast<int>(source * 2.5f));
      }
    }
  }

  TEST_CASE("a missing __syncthreads changes the result with the schedule; with it, none does") {
    const int n = 64;
    std::vector<int> input(n);
    for (int i = 0; i < n; ++i) input[i] = 7 * i + 1;
    Device<int> in(n), out(n);
    REQUIRE(cudaMemcpy(in.get(), input.data(), n * sizeof(int), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    std::set<std::vector<int>> without;
    for (const auto schedule : {cuda_emu::Schedule::kForward, cuda_emu::Schedule::kReverse,
                                cuda_emu::Schedule::kRandom}) {
      cuda_emu::SetSchedule(schedule, 42);
      DYNATTN_LAUNCH(Rotate, 1, n, n * sizeof(int), nullptr)(in.get(), out.get(), true);
      const std::vector<int> got = out.Fetch();
      for (int i = 0; i < n; ++i) CHECK(got[i] == input[(i + 1) % n]);
      DYNATTN_LAUNCH(Rotate, 1, n, n * sizeof(int), nullptr)(in.get(), out.get(), false);
      without.insert(out.Fetch());
    }
    cuda_emu::SetSchedule(cuda_emu::Schedule::kForward);
    CHECK(without.size() > 1);
  }

  TEST_CASE("threads at different __syncthreads fail the launch, naming both lines") {
    Device<int> lines(2);
    DYNATTN_LAUNCH(DivergentBarriers, 1, 64, 0, nullptr)(lines.get());
    cuda_emu::ResetDevice();  // to read the lines the threads reached
    const std::vector<int> at = lines.Fetch();
    DYNATTN_LAUNCH(DivergentBarriers, 1, 64, 0, nullptr)(lines.get());
    ExpectLaunchError(cudaErrorLaunchFailure,
                      {"DivergentBarriers", "different __syncthreads()", Line(at[0]), Line(at[1])});
  }

  TEST_CASE("a thread that exits before its block's __syncthreads fails the launch") {
    Device<int> line(1);
    DYNATTN_LAUNCH(BarrierAfterExit, 1, 64, 0, nullptr)(line.get());
    const std::string diagnostic = cuda_emu::LastDiagnostic();
    cuda_emu::ResetDevice();
    const int at = line.Fetch()[0];
    CHECK(diagnostic.find("exited") != std::string::npos);
    CHECK(diagnostic.find("thread (5,0,0)") != std::string::npos);
    CHECK(diagnostic.find(Line(at)) != std::string::npos);
  }

  TEST_CASE("a warp mask must name the caller and only lanes that exist") {
    Device<int> line(2);
    // 48 threads: warp 1 has lanes 0-15 only.
    DYNATTN_LAUNCH(WarpOp, 1, 48, 0, nullptr)(line.get(), kFull);
    ExpectLaunchError(cudaErrorLaunchFailure,
                      {"__shfl_xor_sync", "names lane 16, which does not exist", "48 threads"});
    DYNATTN_LAUNCH(WarpOp, 1, 32, 0, nullptr)(line.get(), 0x0000FFFFu);
    ExpectLaunchError(cudaErrorLaunchFailure, {"does not name the calling lane"});
    DYNATTN_LAUNCH(WarpOp, 1, 32, 0, nullptr)(line.get(), kFull);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(line.Fetch()[1] == 1);
  }

  TEST_CASE("a shuffle that reads a lane outside its mask fails the launch") {
    Device<int> out(32);
    DYNATTN_LAUNCH(ReadLaneOutsideMask, 1, 32, 0, nullptr)(out.get());
    ExpectLaunchError(cudaErrorLaunchFailure, {"reads lane 20", "0x0000ffff"});
  }

  TEST_CASE("a deadlock names where each group of threads waits") {
    Device<int> lines(2);
    DYNATTN_LAUNCH(Deadlock, 1, 64, 0, nullptr)(lines.get());
    cuda_emu::ResetDevice();
    const std::vector<int> at = lines.Fetch();
    DYNATTN_LAUNCH(Deadlock, 1, 64, 0, nullptr)(lines.get());
    ExpectLaunchError(cudaErrorLaunchFailure,
                      {"deadlock", "1 thread(s) wait at __syncwarp at " + Line(at[0]),
                       "63 thread(s) wait at __syncthreads() at " + Line(at[1])});
  }

  TEST_CASE("dynamic shared memory: 48 KiB by default, more after the opt-in, within the device") {
    Device<int> out(32);
    const size_t big = 100 * 1024;
    DYNATTN_LAUNCH(SharedIsNan, 1, 32, big, nullptr)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cuda_emu::LastDiagnostic().find("opt-in above 48 KiB") != std::string::npos);
    CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
    REQUIRE(cudaFuncSetAttribute(&SharedIsNan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big)) == cudaSuccess);
    DYNATTN_LAUNCH(SharedIsNan, 1, 32, big, nullptr)(out.get());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    for (const int nan : out.Fetch()) CHECK(nan == 1);  // shared memory starts as NaN bytes
    int optin = 0;
    REQUIRE(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) ==
            cudaSuccess);
    CHECK(optin == 232448);  // H100
    CHECK(cudaFuncSetAttribute(&SharedIsNan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               optin + 1) == cudaErrorInvalidValue);
  }

  TEST_CASE("device memory starts as NaN bytes; copies check both ends") {
    Device<float> data(10);
    for (const float x : data.Fetch()) CHECK(std::isnan(x));
    std::vector<float> host(11, 1.0f);
    CHECK(cudaMemcpy(data.get(), host.data(), 11 * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaErrorInvalidValue);
    CHECK(cuda_emu::LastDiagnostic().find("runs outside its device allocation") !=
          std::string::npos);
    CHECK(cudaMemcpy(host.data(), data.get(), 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaMemset(data.get() + 8, 0, 3 * sizeof(float)) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(data.get(), host.data(), 10 * sizeof(float), cudaMemcpyDefault) ==
          cudaSuccess);
    CHECK(data.Fetch()[9] == 1.0f);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // the failed calls set the last error
    CHECK(cudaGetLastError() == cudaSuccess);
  }

  TEST_CASE("a host pointer or a freed allocation in a kernel argument's field fails the launch") {
    std::vector<int64_t> host_indices = {3, 1, 2};
    Device<int64_t> indices(3);
    Device<float> output(3);
    REQUIRE(cudaMemcpy(indices.get(), host_indices.data(), 3 * sizeof(int64_t),
                       cudaMemcpyHostToDevice) == cudaSuccess);
    DYNATTN_LAUNCH(UsePointers, 1, 32, 0, nullptr)(Pointers{3, indices.get(), output.get()});
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(output.Fetch() == std::vector<float>{3, 1, 2});
    DYNATTN_LAUNCH(UsePointers, 1, 32, 0, nullptr)(Pointers{3, host_indices.data(), output.get()});
    ExpectLaunchError(cudaErrorIllegalAddress,
                      {"UsePointers", "argument 0, field 1", "in no live device allocation"});
    float* freed = nullptr;
    REQUIRE(cudaMalloc(&freed, 12) == cudaSuccess);
    REQUIRE(cudaFree(freed) == cudaSuccess);
    DYNATTN_LAUNCH(UsePointers, 1, 32, 0, nullptr)(Pointers{3, indices.get(), freed});
    ExpectLaunchError(cudaErrorIllegalAddress, {"argument 0, field 2"});
    CHECK(cudaFree(freed) == cudaErrorInvalidDevicePointer);
  }

  TEST_CASE("launch configurations outside the device's limits are rejected") {
    Device<int> out(1);
    DYNATTN_LAUNCH(LastWriter, 1, 2048, 0, nullptr)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    DYNATTN_LAUNCH(LastWriter, 0, 32, 0, nullptr)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    DYNATTN_LAUNCH(LastWriter, dim3(1, 70000), 32, 0, nullptr)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  }

  TEST_CASE("the schedule orders threads and blocks: forward, reverse, seeded random") {
    Device<int> out(1);
    const auto last = [&](cuda_emu::Schedule schedule, uint64_t seed) {
      cuda_emu::SetSchedule(schedule, seed);
      DYNATTN_LAUNCH(LastWriter, 8, 64, 0, nullptr)(out.get());
      return out.Fetch()[0];
    };
    CHECK(last(cuda_emu::Schedule::kForward, 0) == 8 * 64 - 1);
    CHECK(last(cuda_emu::Schedule::kReverse, 0) == 0);
    std::set<int> random;
    for (uint64_t seed = 1; seed <= 8; ++seed)
      random.insert(last(cuda_emu::Schedule::kRandom, seed));
    CHECK(random.size() > 1);
    CHECK(last(cuda_emu::Schedule::kRandom, 5) == last(cuda_emu::Schedule::kRandom, 5));
    cuda_emu::SetSchedule(cuda_emu::Schedule::kForward);
  }

  TEST_CASE("statistics count launches, blocks and threads; a failed launch is sticky") {
    cuda_emu::ResetStats();
    Device<int> out(1);
    DYNATTN_LAUNCH(LastWriter, 3, 96, 0, nullptr)(out.get());
    const cuda_emu::Stats stats = cuda_emu::GetStats();
    CHECK(stats.launches == 1);
    CHECK(stats.blocks == 3);
    CHECK(stats.threads == 3 * 96);
    CHECK(stats.switches >= 3 * 96);
    Device<int> line(2);
    DYNATTN_LAUNCH(WarpOp, 1, 32, 0, nullptr)(line.get(), 0x0000FFFFu);
    void* more = nullptr;
    CHECK(cudaMalloc(&more, 16) == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    cuda_emu::ResetDevice();
  }

#ifndef DYNATTN_TEST_ASAN  // AddressSanitizer reports these first, at the writing line
  TEST_CASE("a write into the slack behind an allocation is found by its canary") {
    Device<unsigned char> data(100);  // 256-byte aligned: bytes 100-255 are slack
    DYNATTN_LAUNCH(WriteAt, 1, 32, 0, nullptr)(data.get(), 130);
    ExpectLaunchError(cudaErrorIllegalAddress, {"WriteAt", "30 bytes past the end",
                                                "a device allocation (100 bytes", "red zone"});
    DYNATTN_LAUNCH(WriteShared, 1, 32, 20, nullptr)(int64_t{21});
    ExpectLaunchError(cudaErrorLaunchFailure,
                      {"1 bytes past the end", "dynamic shared memory (20 bytes", "red zone"});
  }
#endif

  TEST_CASE("an access beyond the slack hits a guard page, and the report says whose") {
    int status = 0;
    std::string text = InChild(
        [] {
          unsigned char* data = nullptr;
          cudaMalloc(&data, 100);
          DYNATTN_LAUNCH(WriteAt, 1, 32, 0, nullptr)(data, 300);  // 44 bytes into the guard page
        },
        &status);
    INFO(text);
    CHECK(WIFSIGNALED(status));
    CHECK(text.find("200 bytes past the end of a device allocation (100 bytes") !=
          std::string::npos);
    CHECK(text.find("kernel WriteAt") != std::string::npos);

    text = InChild(
        [] {
          DYNATTN_LAUNCH(WriteShared, 1, 32, 64, nullptr)
          (int64_t{-4096});
        },
        &status);
    CHECK(WIFSIGNALED(status));
    CHECK(text.find("before the block's dynamic shared memory (64 bytes") != std::string::npos);
  }

  TEST_CASE("host code cannot read device memory outside copies") {
    int status = 0;
    const std::string text = InChild(
        [] {
          float* data = nullptr;
          cudaMalloc(&data, 64);
          volatile float x = data[3];
          (void)x;
        },
        &status);
    INFO(text);
    CHECK(WIFSIGNALED(status));
    CHECK(text.find("host code read device memory outside cudaMemcpy") != std::string::npos);
  }
}
