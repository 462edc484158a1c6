// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The three ops against the independent float64 reference (reference/), on random cases
// drawn over the whole attribute matrix, on every compiled SIMD target. Cache and scale bytes and
// KeyValueCache outputs must be bit-exact; attention within the spec's tolerances.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "reference/reference.h"
#include "src/dispatch.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

/// Cases per op per target (DYNATTN_TEST_CASES overrides, e.g. for a long soak).
int CasesPerTarget() {
  if (const char* env = std::getenv("DYNATTN_TEST_CASES")) return std::atoi(env);
  return 40;
}

void CheckKvc(const Case& c, const LibResult& lib) {
  const dynattn_ref::KvcResult ref = dynattn_ref::KeyValueCache(c.attrs, c.inputs);
  std::string why;
  CHECK_MESSAGE(SameBytes(lib.cache, ref.cache, &why), "cache: " << why);
  if (!ref.scale.bytes.empty())
    CHECK_MESSAGE(SameBytes(lib.scale, ref.scale, &why), "scale: " << why);
  CHECK_MESSAGE(SameBytes(lib.key, ref.key, &why), "key: " << why);
  CHECK_MESSAGE(SameBytes(lib.value, ref.value, &why), "value: " << why);
}

void CheckAttentionOutput(const dynattn_ref::AttnResult& ref, const LibResult& lib) {
  double worst = 0;
  const std::string error = dynattn_ref::CheckAttention(ref, lib.attn_output, &worst);
  CHECK_MESSAGE(error.empty(), error);
  const std::string lse_error = dynattn_ref::CheckLse(ref, lib.lse);
  CHECK_MESSAGE(lse_error.empty(), "lse: " << lse_error);
}

void CheckCase(const Case& c, const LibResult& lib) {
  if (c.op == "key_value_cache") return CheckKvc(c, lib);
  if (c.op == "multi_head_attention") {
    return CheckAttentionOutput(dynattn_ref::MultiHeadAttention(c.attrs, c.inputs), lib);
  }
  const dynattn_ref::AttnResult ref = dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
  std::string why;
  CHECK_MESSAGE(SameBytes(lib.cache, ref.cache, &why), "cache: " << why);
  if (!ref.scale.bytes.empty())
    CHECK_MESSAGE(SameBytes(lib.scale, ref.scale, &why), "scale: " << why);
  CheckAttentionOutput(ref, lib);
}

/// Changes a drawn case before it runs (given the case's seed).
using AlterCase = std::function<void(uint64_t seed, Case* c)>;

void RunRandomCases(const std::string& op, uint64_t salt,
                    const dynattn_ref::GenOptions& options = {}, int cases = CasesPerTarget(),
                    const AlterCase& alter = nullptr) {
  ForEachTarget([&](const std::string& target) {
    for (int i = 0; i < cases; ++i) {
      const uint64_t seed = BaseSeed() + salt + static_cast<uint64_t>(i);
      Case c = dynattn_ref::RandomCase(op, seed, options);
      if (alter) alter(seed, &c);
      INFO("target " << target << ", seed " << seed << " (DYNATTN_TEST_SEED=" << BaseSeed()
                     << "): " << c.description);
      const LibResult lib = RunLibrary(c);
      REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
      CheckCase(c, lib);
    }
  });
}

/// Sets a random share (0.05%, 0.5% or 5%) of a quantized case's group scales to +0 or to values
/// under 2^-14 (fp16 subnormals): the fused decode kernel must leave the tiles holding them to the
/// fp16 conversions and its mode-generic loop (NormalProducts does not hold there).
void PlantTinyScales(uint64_t seed, Case* c) {
  const auto found = c->inputs.find("scale");
  if (found == c->inputs.end()) return;
  Array& scale = found->second;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double share = std::vector<double>{0.0005, 0.005, 0.05}[rng() % 3];
  for (int64_t i = 0; i < scale.numel(); ++i) {
    if (uniform(rng) >= share) continue;
    const double tiny = std::ldexp(1.0 + uniform(rng), -16 - static_cast<int>(rng() % 8));
    dynattn_ref::StoreRounded(&scale, i, rng() % 4 == 0 ? 0.0 : tiny);
  }
}

/// Cases the fused decode kernel runs: few query rows, D a multiple of 16.
dynattn_ref::GenOptions DecodeShapes() {
  dynattn_ref::GenOptions options;
  options.max_seqlen = 3;
  options.max_context = 400;
  options.lane_head_dims = true;
  return options;
}

TEST_SUITE("ops") {
  TEST_CASE("ForEachTarget restores the target forced before it when a check throws") {
    const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
    REQUIRE(!targets.empty());
    // The outer target is the last one listed, so the first one forced inside differs from it
    // wherever more than one target runs.
    const int64_t outer = targets.back();
    {
      ForcedTarget forced(outer);
      std::vector<std::string> seen;
      CHECK_THROWS_AS(ForEachTarget([&](const std::string& target) {
                        seen.push_back(target);
                        throw std::runtime_error("a failing check");
                      }),
                      std::runtime_error);
      CHECK(seen.size() == 1);
      CHECK(ForcedTarget::Current() == outer);
      CHECK(hwy::SupportedTargets() == outer);
      // And after a full pass, the outer target again.
      ForEachTarget([](const std::string&) {});
      CHECK(hwy::SupportedTargets() == outer);
    }
    CHECK(ForcedTarget::Current() == 0);
    CHECK(hwy::SupportedAndGeneratedTargets() == targets);
  }

  TEST_CASE("the dispatch table runs the kernels of the target ForEachTarget forces") {
    std::vector<std::string> forced;
    ForEachTarget([&](const std::string& target) {
      forced.push_back(target);
      for (const dynattn::CacheElem elem : {dynattn::CacheElem::kF32, dynattn::CacheElem::kF16,
                                            dynattn::CacheElem::kInt8, dynattn::CacheElem::kInt4}) {
        const dynattn::internal::BackendKernels* row =
            dynattn::internal::KernelsFor(dynattn::Device::kCpu, elem);
        REQUIRE(row != nullptr);
        CHECK(std::string(row->target) == target);
      }
    });
    CHECK(forced.size() == hwy::SupportedAndGeneratedTargets().size());
  }

  TEST_CASE("KeyValueCache matches the reference bit for bit on every target") {
    RunRandomCases("key_value_cache", 0);
  }
  TEST_CASE("MultiHeadAttention matches the reference on every target") {
    RunRandomCases("multi_head_attention", 100000);
  }
  TEST_CASE("MultiHeadCacheAttention matches the reference on every target") {
    RunRandomCases("multi_head_cache_attention", 200000);
  }
  TEST_CASE(
      "MultiHeadAttention with values of another size (head_dim_v) matches the reference on "
      "every target") {
    dynattn_ref::GenOptions options;
    options.value_head_dims = true;
    RunRandomCases("multi_head_attention", 1200000, options, 24);
    options = DecodeShapes();  // the fused kernel: Dv also a multiple of 16
    options.value_head_dims = true;
    RunRandomCases("multi_head_attention", 1300000, options, 16);
    options.max_context = 3000;  // several context splits, merged
    RunRandomCases("multi_head_attention", 1400000, options, 4);
  }
  TEST_CASE("long contexts (several context splits, merged) match the reference on every target") {
    dynattn_ref::GenOptions options;
    options.max_batch = 3;
    options.max_seqlen = 24;
    options.max_context = 3000;
    RunRandomCases("multi_head_attention", 600000, options, 6);
    RunRandomCases("multi_head_cache_attention", 700000, options, 6);
    RunRandomCases("key_value_cache", 800000, options, 3);
  }
  TEST_CASE(
      "decode shapes (the fused kernel: few query rows, D a multiple of 16) match the "
      "reference on every target") {
    const dynattn_ref::GenOptions options = DecodeShapes();
    RunRandomCases("multi_head_cache_attention", 900000, options);
    RunRandomCases("multi_head_attention", 1000000, options, 10);
  }
  TEST_CASE(
      "decode shapes over int8 and int4 caches with +0 and tiny group scales among the drawn ones "
      "match the reference on every target") {
    dynattn_ref::GenOptions options = DecodeShapes();
    for (const int elem : {2, 3}) {  // int8, int4
      INFO("cache_elem " << elem);
      options.pins.cache_elem = elem;
      RunRandomCases("multi_head_cache_attention", 1100000 + 1000 * elem, options, 20,
                     PlantTinyScales);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
