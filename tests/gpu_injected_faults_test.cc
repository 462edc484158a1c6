// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's failures injected on the CUDA emulator (testing/cuda_emulator), which only it
// can cause: a kernel launch the device refuses, no visible device, and a cudaMalloc that fails
// before the cache write. Each comes back as a Status and leaves the cache as it was. On a real
// device (gpu_suite=device) this file has no cases.

#include <cuda_runtime.h>  // on the emulator: defines DYNATTN_CUDA_EMULATOR, declares cuda_emu
#include <doctest/doctest.h>

#include <string>

#include "reference/case_gen.h"
#include "tests/support/gpu_device.h"
#include "tests/support/run_case.h"

#ifdef DYNATTN_CUDA_EMULATOR
namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_test::DevicePlacement;
using dynattn_test::LibResult;

TEST_SUITE("gpu") {
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

  TEST_CASE("without a CUDA device a call says so and writes nothing") {
    Case c;
    for (uint64_t seed = dynattn_test::BaseSeed() + 78;
         c.inputs.empty() || c.inputs.at("query").shape[0] == 0; ++seed) {
      c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
    }
    DevicePlacement placement;
    cuda_emu::SetDeviceCount(0);
    const LibResult r = dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &placement);
    cuda_emu::SetDeviceCount(1);
    CHECK(r.status.code() == dynattn::StatusCode::kUnsupported);
    CHECK_MESSAGE(r.status.message().rfind("CUDA: no CUDA device is visible", 0) == 0,
                  r.status.message());
    std::string why;
    CHECK_MESSAGE(dynattn_test::SameBytes(r.cache, c.inputs.at("cache"), &why), why);
    DevicePlacement again;
    CHECK(dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &again).status.ok());
  }

  TEST_CASE("a device allocation failure leaves the cache untouched") {
    // Placement allocates the call's tensors; after the last one, `allowed` more cudaMalloc calls
    // succeed and the rest fail. A Run allocates its whole workspace in its reserve step, before
    // the cache write: with 0 allowed it fails before writing; with 1 it needs no other. (Before
    // the reserve step, the write's staging took the first malloc and the attention's the second,
    // after the cache was written.)
    struct FailingPlacement : DevicePlacement {
      int allowed = 0;
      dynattn::TensorView Place(const std::string& name, Array& array) override {
        cuda_emu::FailMallocsAfter(-1);  // the tensor's own allocation
        dynattn::TensorView view = DevicePlacement::Place(name, array);
        cuda_emu::FailMallocsAfter(allowed);
        return view;
      }
      void Fetch() override {
        cuda_emu::FailMallocsAfter(-1);
        DevicePlacement::Fetch();
      }
    };
    for (const std::string op : {"key_value_cache", "multi_head_cache_attention"}) {
      CAPTURE(op);
      Case c;
      for (uint64_t seed = dynattn_test::BaseSeed() + 91;
           c.inputs.empty() || c.inputs.at("current_key").shape[0] == 0; ++seed) {
        c = dynattn_ref::RandomCase(op, seed);
      }
      for (int allowed : {0, 1}) {
        CAPTURE(allowed);
        FailingPlacement placement;
        placement.allowed = allowed;
        // A thread count no other test uses: a pooled Context of its own, with no workspace yet.
        const int threads = 40 + allowed + (op == "key_value_cache" ? 0 : 2);
        const LibResult r =
            dynattn_test::RunLibrary(c, dynattn::RunOptions{.num_threads = threads}, &placement);
        cuda_emu::FailMallocsAfter(-1);
        if (allowed == 0) {
          CHECK(r.status.code() == dynattn::StatusCode::kDeviceError);
          CHECK(r.status.message().find("cudaErrorMemoryAllocation") != std::string::npos);
        } else {
          CHECK_MESSAGE(r.status.ok(), r.status.message());
        }
        if (!r.status.ok()) CHECK(r.cache.bytes == c.inputs.at("cache").bytes);
      }
    }
  }
}

}  // namespace
#endif  // DYNATTN_CUDA_EMULATOR
