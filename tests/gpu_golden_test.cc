// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's golden matrix (reference/golden_matrix.h, the cases `dynattn golden` writes,
// with this run's seeds) run on the CPU and then on the CUDA device through the same public API,
// with every data tensor in device memory and the index tensors on the host, as a serving engine
// calls it. Caches, scales and gathered keys/values must match the CPU byte for byte; attention
// outputs must be within the spec's tolerances of the float64 reference.

#include <cuda_runtime.h>  // on the emulator: defines DYNATTN_CUDA_EMULATOR, declares cuda_emu
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "reference/golden_matrix.h"
#include "reference/reference.h"
#include "tests/support/gpu_device.h"
#include "tests/support/run_case.h"

namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_test::LibResult;
using dynattn_test::Reduced;
using dynattn_test::Reference;
using dynattn_test::RunOnDevice;

void CheckSameBytes(const char* what, const Array& cpu, const Array& gpu) {
  std::string why;
  CHECK_MESSAGE(dynattn_test::SameBytes(cpu, gpu, &why), what, " differs from the CPU: ", why);
}

void CheckCase(const dynattn_ref::GoldenSpec& spec) {
  const Case c = dynattn_ref::MakeGoldenCase(spec);
  INFO(c.description);
  // One CPU thread: the bits are the same for any count (the determinism suite), and under
  // ThreadSanitizer (gpu-tsan) the only threads are then the emulated kernels'.
  const LibResult cpu = dynattn_test::RunLibrary(c, dynattn::RunOptions{.num_threads = 1});
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

// What picks a cell's kernels: its activation and cache element types (one instantiation each)
// and whether its contexts are long enough to split (the merge kernels).
std::string KernelKey(const dynattn_ref::GoldenSpec& spec, const Case& c) {
  std::string key = spec.op;
  for (const char* name : {"query", "current_key", "cache"}) {
    auto it = c.inputs.find(name);
    if (it != c.inputs.end())
      key += std::string(" ") + name + ":" + dynattn_ref::DtName(it->second.dt);
  }
  key += " q" + std::to_string(c.attrs.quant_bit);
  if (spec.name.find("_long_") != std::string::npos) key += " long";
  return key;
}

// Every cell of the matrix whose op is `op`, with this run's seeds (reduced: one per kernel key).
void CheckOp(const std::string& op) {
  int cells = 0;
#ifdef DYNATTN_CUDA_EMULATOR
  const int64_t launches_before = cuda_emu::GetStats().launches;
#endif
  std::set<std::string> keys_run;
  for (const dynattn_ref::GoldenSpec& spec : dynattn_ref::GoldenMatrix(dynattn_test::BaseSeed())) {
    if (spec.op != op) continue;
    if (Reduced() && !keys_run.insert(KernelKey(spec, dynattn_ref::MakeGoldenCase(spec))).second) {
      continue;
    }
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
}

}  // namespace
