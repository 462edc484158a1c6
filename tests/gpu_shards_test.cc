// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// A distributed engine's shares on the CUDA device: context shards (`key_offsets`, sinks on one
// shard; MultiHeadCacheAttention and unified attention) write the CPU's cache bytes rank after
// rank, each rank's output and LSE are within the tolerance of its float64 reference, and the
// ranks' parts merge to the whole call's reference; head shards with their share of the ALiBi
// slopes (`alibi_slopes`) match the whole call's reference for their heads.

#include <cuda_runtime.h>  // on the emulator: defines DYNATTN_CUDA_EMULATOR, declares cuda_emu
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/gpu_device.h"
#include "tests/support/run_case.h"
#include "tests/support/shards.h"

namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_test::LibResult;

void CheckWithin(const dynattn_ref::AttnResult& ref, const LibResult& lib, const char* what) {
  const std::string error = dynattn_ref::CheckAttention(ref, lib.attn_output);
  CHECK_MESSAGE(error.empty(), what, ": ", error);
  const std::string lse_error = dynattn_ref::CheckLse(ref, lib.lse);
  CHECK_MESSAGE(lse_error.empty(), what, " lse: ", lse_error);
}

/// Cases small enough for the emulator, with ALiBi pinned on or off.
dynattn_ref::GenOptions SmallCases(int alibi) {
  dynattn_ref::GenOptions options;
  options.max_batch = 3;
  options.max_context = 150;
  options.pins.alibi = alibi;
  return options;
}

TEST_SUITE("gpu") {
  TEST_CASE("context shards on the device: the CPU's cache bytes, merged to the whole call") {
    const int cases = dynattn_test::Reduced() ? 2 : 8;
    for (int i = 0; i < cases; ++i) {
      const uint64_t seed = dynattn_test::BaseSeed() + 9700 + static_cast<uint64_t>(i);
      dynattn_ref::GenOptions options = SmallCases(i % 3 == 0);
      options.pins.t1 = 0;  // the parts are merged in fp32
      Case whole;
      if (i % 2 == 0) {
        options.pins.cache_mode = 0;  // a shard moves each request's offset
        options.pins.mask_rank = 0;   // a mask's columns are the whole call's context rows
        whole = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
      } else {
        whole = dynattn_ref::RandomUnifiedCase(seed, options);
      }
      std::mt19937_64 rng(seed);
      const int ranks = 2 + i % 2;
      const auto cuts = dynattn_test::DrawCuts(whole, ranks, &rng);
      INFO("seed " << seed << ", " << ranks << " context shards: " << whole.description);
      Array cpu_cache = whole.inputs.at("cache"), gpu_cache = cpu_cache, cpu_scale, gpu_scale;
      const bool quantized = whole.inputs.count("scale") != 0;
      if (quantized) cpu_scale = gpu_scale = whole.inputs.at("scale");
      std::vector<LibResult> parts;
      for (int rank = 0; rank < ranks; ++rank) {
        Case shard = dynattn_test::ContextShard(whole, cuts, rank, rank == 0);
        shard.inputs["cache"] = cpu_cache;
        if (quantized) shard.inputs["scale"] = cpu_scale;
        const LibResult cpu =
            dynattn_test::RunLibrary(shard, dynattn::RunOptions{.num_threads = 1});
        REQUIRE_MESSAGE(cpu.status.ok(), "CPU: ", cpu.status.message());
        shard.inputs["cache"] = gpu_cache;
        if (quantized) shard.inputs["scale"] = gpu_scale;
        const dynattn_ref::AttnResult ref = dynattn_test::Reference(shard);
        parts.push_back(dynattn_test::RunOnDevice(shard));
        const LibResult& gpu = parts.back();
        REQUIRE_MESSAGE(gpu.status.ok(), "CUDA: ", gpu.status.message());
        std::string why;
        CHECK_MESSAGE(dynattn_test::SameBytes(cpu.cache, gpu.cache, &why), "rank ", rank,
                      " cache: ", why);
        CheckWithin(ref, gpu, "CUDA rank");
        cpu_cache = cpu.cache;
        gpu_cache = gpu.cache;
        if (quantized) {
          cpu_scale = cpu.scale;
          gpu_scale = gpu.scale;
        }
      }
      if (whole.inputs.at("query").shape[0] == 0) continue;
      Array merged, merged_lse;
      REQUIRE(dynattn_test::MergeParts(parts, &merged, &merged_lse).ok());
      const dynattn_ref::AttnResult ref = dynattn_test::Reference(whole);
      const std::string error = dynattn_ref::CheckAttention(ref, merged);
      CHECK_MESSAGE(error.empty(), "merged: ", error);
    }
  }

  TEST_CASE("head shards on the device with their share of the ALiBi slopes") {
    const int cases = dynattn_test::Reduced() ? 1 : 4;
    for (int i = 0; i < cases; ++i) {
      const uint64_t seed = dynattn_test::BaseSeed() + 9800 + static_cast<uint64_t>(i);
      const Case whole = dynattn_ref::RandomCase("multi_head_attention", seed, SmallCases(1));
      const dynattn_ref::AttnResult whole_ref = dynattn_test::Reference(whole);
      INFO("seed " << seed << ": " << whole.description);
      int64_t first_head = 0;
      const Case shard = dynattn_test::HeadShard(whole, 1, 2, &first_head);
      const LibResult gpu = dynattn_test::RunOnDevice(shard);
      REQUIRE_MESSAGE(gpu.status.ok(), "CUDA: ", gpu.status.message());
      CheckWithin(dynattn_test::Reference(shard), gpu, "CUDA head shard");
      // The shard's reference is the whole call's for those heads (up to the float32 rounding of
      // the slopes the shard is given).
      const dynattn_ref::AttnResult shard_ref = dynattn_test::Reference(shard);
      const int64_t d = whole.attrs.head_dim, heads = shard.attrs.num_heads;
      const int64_t rows = static_cast<int64_t>(whole_ref.vmax.size());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t e = 0; e < d; ++e) {
            const double a = shard_ref.out[(r * heads + h) * d + e];
            const double b = whole_ref.out[(r * whole.attrs.num_heads + first_head + h) * d + e];
            REQUIRE(std::fabs(a - b) <= 1e-6 * std::max(1.0, whole_ref.vmax[r]));
          }
        }
      }
    }
  }
}

}  // namespace
