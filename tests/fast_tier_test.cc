// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fast tier (precision=fast) against the float64 reference's two answers, on random cases
// over int8 and int4 caches, on every compiled SIMD target: decode steps must give the fast
// tier's own answer (integer key scores from the quantized query) within the exact tolerances,
// that answer must lie within the documented fast bound of the exact one, and mixed steps must
// give one tier's answer per (row, head). Over fp16 and bf16 caches, where the CPU has the bf16
// dot products, decode outputs must lie within the documented bound of the exact answer and
// outside the exact tolerance often enough to show the fast kernel ran. Plans name the tier; the
// bits do not depend on threads.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/harness.h"
#include "tests/support/plan_layers.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::AttnResult;
using dynattn_ref::Case;

/// The reference of an attention case (MHCA or unified attention).
AttnResult ReferenceOf(const Case& c) {
  if (c.op == "unified_attention") return dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  return dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
}

/// `ref` with the fast tier's answer in place of the exact one (and no alternative).
AttnResult FastAnswer(AttnResult ref) {
  ref.out = ref.fast_out;
  ref.lse = ref.fast_lse;
  ref.fast_out.clear();
  ref.fast_lse.clear();
  return ref;
}

/// `ref` with only the exact answer.
AttnResult ExactAnswer(AttnResult ref) {
  ref.fast_out.clear();
  ref.fast_lse.clear();
  return ref;
}

/// Decode steps (one new token per request, GQA <= 8: the fused decode kernel) asking for the
/// fast tier over an int8 (elem 2) or int4 (elem 3) cache in groups of `group` of a D of `dim`.
dynattn_ref::GenOptions FastDecodes(int elem, int dim, int group) {
  dynattn_ref::GenOptions options;
  options.max_context = 400;
  options.lane_head_dims = true;
  options.pins.step = 1;
  options.pins.cache_elem = elem;
  options.pins.head_dim = dim;
  options.pins.quant_group = group;
  options.pins.precision = 1;
  return options;
}

/// The (D, G) pairs the fast kernel takes: groups of 32 up to a whole row.
const std::vector<std::pair<int, int>>& FastShapes() {
  static const std::vector<std::pair<int, int>> shapes = {
      {32, 32}, {64, 32}, {64, 64}, {128, 32}, {128, 64}, {128, 128}, {256, 128}, {96, 32}};
  return shapes;
}

/// Scales every query element of `c` by `factor`: large factors make the softmax sharp.
void ScaleQueries(Case* c, double factor) {
  Array& query = c->inputs.at("query");
  for (int64_t i = 0; i < query.numel(); ++i) {
    dynattn_ref::StoreRounded(&query, i, dynattn_ref::LoadAsDouble(query, i) * factor);
  }
}

/// How far the reference's fast answer lies from its exact one, as a share of the documented
/// bound (<= 1 when the bound holds), over the computed (row, head) pairs.
double FastBoundRatio(const AttnResult& ref) {
  const size_t rows = ref.fast_bound.size();
  const size_t d = rows == 0 ? 0 : ref.out.size() / rows;
  double worst = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (!ref.computed.empty() && ref.computed[r] == 0) continue;
    for (size_t x = 0; x < d; ++x) {
      const double gap = std::fabs(ref.fast_out[r * d + x] - ref.out[r * d + x]);
      if (gap == 0) continue;
      worst = std::max(worst, ref.fast_bound[r] > 0 ? gap / ref.fast_bound[r] : INFINITY);
    }
  }
  return worst;
}

/// Runs `c` and checks it gives the fast tier's answer; returns whether it is also outside the
/// exact tier's tolerance (so that the fast kernel, not the exact one, must have run).
bool CheckFastDecode(const Case& c) {
  const LibResult lib = RunLibrary(c);
  REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
  const AttnResult ref = ReferenceOf(c);
  REQUIRE(!ref.fast_out.empty());
  const AttnResult fast = FastAnswer(ref);
  const std::string error = dynattn_ref::CheckAttention(fast, lib.attn_output);
  CHECK_MESSAGE(error.empty(), error);
  const std::string lse = dynattn_ref::CheckLse(fast, lib.lse);
  CHECK_MESSAGE(lse.empty(), "lse: " << lse);
  CHECK_MESSAGE(FastBoundRatio(ref) <= 1, "the fast answer leaves the documented bound");
  return !dynattn_ref::CheckAttention(ExactAnswer(ref), lib.attn_output).empty();
}

/// Runs `c`, a fast call over an fp16 or bf16 cache, and checks the plan's tier (fast where the
/// bf16 dot products run), the output within the documented bound of the exact answer, its lse,
/// and an exact plan's output: the exact call's bits. Returns whether the output lies outside the
/// exact tier's tolerance (so that a bf16 kernel, not the exact one, must have run).
bool CheckBf16Call(const Case& c, bool bf16_dots) {
  Layer layer(c);
  dynattn::Plan plan;
  REQUIRE(PlanLayer(c, &layer, &plan).ok());
  CHECK(plan.precision() == (bf16_dots ? dynattn::Precision::kFast : dynattn::Precision::kExact));
  const LibResult lib = RunLibrary(c);
  REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
  const AttnResult ref = ReferenceOf(c);
  REQUIRE(ref.fast_within_bound);
  CHECK_MESSAGE(FastBoundRatio(ref) <= 1, "the bf16 scores leave the documented bound");
  const std::string error = dynattn_ref::CheckAttention(ref, lib.attn_output);
  CHECK_MESSAGE(error.empty(), error);
  const std::string lse = dynattn_ref::CheckLse(ref, lib.lse);
  CHECK_MESSAGE(lse.empty(), "lse: " << lse);
  const bool exact = dynattn_ref::CheckAttention(ExactAnswer(ref), lib.attn_output).empty();
  if (!bf16_dots) {  // the exact kernels ran: the exact tier's bits
    Case exact_call = c;
    exact_call.attrs.precision = "";
    const LibResult exact_lib = RunLibrary(exact_call);
    REQUIRE(exact_lib.status.ok());
    std::string why;
    CHECK_MESSAGE(SameBytes(lib.attn_output, exact_lib.attn_output, &why), why);
  }
  return !exact;
}

/// CheckBf16Call on every target over fp16 and bf16 caches, head sizes `dims` and three cases
/// each (the second with a sharper softmax), case i drawn with options_of(elem, dim, i).
template <class OptionsOf>
void CheckBf16Cases(const std::vector<int>& dims, uint64_t seeds, const OptionsOf& options_of) {
  ForEachTarget([&](const std::string& target) {
    const bool bf16_dots = Bf16DotsRun();
    int outside_exact = 0, cases = 0;
    for (const int elem : {1, 4}) {  // fp16, bf16
      for (const int dim : dims) {
        for (int i = 0; i < 3; ++i) {
          const uint64_t seed = BaseSeed() + seeds + 1000 * elem + 10 * dim + i;
          Case c =
              dynattn_ref::RandomCase("multi_head_cache_attention", seed, options_of(elem, dim, i));
          if (i == 1) ScaleQueries(&c, 8.0);
          INFO("target " << target << ", seed " << seed << ": " << c.description);
          outside_exact += CheckBf16Call(c, bf16_dots);
          ++cases;
        }
      }
    }
    // bf16 products move fp32 and fp16 outputs far outside the exact tolerance.
    if (bf16_dots) CHECK(outside_exact * 4 >= cases);
  });
}

TEST_SUITE("fast") {
  TEST_CASE("fast decodes over int8 and int4 caches give the fast tier's answer on every target") {
    ForEachTarget([](const std::string& target) {
      int outside_exact = 0, cases = 0;
      for (const int elem : {2, 3}) {
        for (const auto& [dim, group] : FastShapes()) {
          for (int i = 0; i < 3; ++i) {
            const uint64_t seed = BaseSeed() + 3000000 + 1000 * elem + 10 * dim + group + i;
            Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed,
                                             FastDecodes(elem, dim, group));
            INFO("target " << target << ", seed " << seed << ": " << c.description);
            outside_exact += CheckFastDecode(c);
            ++cases;
          }
        }
      }
      // fp32 and bf16 activations put the query's int8 grid far outside the exact tolerance.
      CHECK(outside_exact * 4 >= cases);
    });
  }

  // The integer sums are exact and the float64 combine runs the same operations in the same
  // order on every target, VNNI's byte dot products included, and the values take the exact
  // tier's loops, which agree on AVX2 and AVX-512: the outputs are the same bits.
  TEST_CASE("integer key scores give the same bits on AVX2 and AVX-512 (VNNI where present)") {
    if (!HaveAvx2AndAvx512()) return;
    for (const int elem : {2, 3}) {
      for (const auto& [dim, group] : FastShapes()) {
        const uint64_t seed = BaseSeed() + 3070000 + 1000 * elem + 10 * dim + group;
        dynattn_ref::GenOptions options = FastDecodes(elem, dim, group);
        options.max_context = 1500;
        const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
        INFO("seed " << seed << ": " << c.description);
        LibResult avx2, avx3;
        ForEachTarget([&](const std::string& target) {
          if (target == "AVX2") avx2 = RunLibrary(c);
          if (target == "AVX3") avx3 = RunLibrary(c);
        });
        REQUIRE(avx2.status.ok());
        REQUIRE(avx3.status.ok());
        std::string why;
        CHECK_MESSAGE(SameBytes(avx2.attn_output, avx3.attn_output, &why), why);
        CHECK_MESSAGE(SameBytes(avx2.lse, avx3.lse, &why), why);
      }
    }
  }

  TEST_CASE("fast decodes over fp16 and bf16 caches stay within the fast bound on every target") {
    CheckBf16Cases({16, 32, 48, 64, 80, 128, 256}, 3050000, [](int elem, int dim, int i) {
      dynattn_ref::GenOptions options = FastDecodes(elem, dim, 0);
      options.max_context = i == 2 ? 2500 : 300;  // several context splits, merged
      return options;
    });
  }

  // Prompts and chunks (many query vectors per work item) take the tiled bf16 kernel: any head
  // size, masks, ALiBi, windows, soft-caps and sinks drawn, causal diagonals in every tile size.
  TEST_CASE("fast prefills over fp16 and bf16 caches stay within the fast bound on every target") {
    CheckBf16Cases({1, 7, 16, 33, 64, 100, 128, 256}, 3060000, [](int elem, int dim, int i) {
      dynattn_ref::GenOptions options;
      options.max_batch = 3;
      options.max_seqlen = i == 2 ? 150 : 70;  // several tiles and blocks per item
      options.max_context = i == 2 ? 600 : 200;
      options.pins.step = 2;  // prompts and chunks, no decode
      options.pins.cache_elem = elem;
      options.pins.head_dim = dim;
      options.pins.precision = 1;
      return options;
    });
  }

  // A tile with a NaN value takes the exact value loops, whose tests keep it out of the rows
  // that do not see its key; the rows that do see it get NaN in that element alone.
  TEST_CASE("a NaN value in a fast prefill reaches only the rows that see its key") {
    int planted = 0;
    for (int attempt = 0; attempt < 40 && planted < 2; ++attempt) {  // steps of 4 rows or more
      const int elem = planted == 0 ? 1 : 4;  // one fp16 step, then one bf16 step
      dynattn_ref::GenOptions options;
      options.max_batch = 1;
      options.max_seqlen = 90;
      options.max_context = 90;
      options.serving_features = false;
      options.pins = {};
      options.pins.step = 2;
      options.pins.cache_elem = elem;
      options.pins.head_dim = 64;
      options.pins.precision = 1;
      options.pins.alibi = 0;
      options.pins.mask_rank = 0;
      const uint64_t seed = BaseSeed() + 3080000 + attempt;
      Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
      const dynattn_ref::Array& starts = c.inputs.at("seqstarts");
      const int64_t rows = static_cast<int64_t>(dynattn_ref::LoadAsDouble(starts, 1));
      if (rows < 4) continue;
      const int64_t nan_row = rows / 2;  // the new token whose value element 5 is NaN
      ++planted;
      dynattn_ref::Array& current_value = c.inputs.at("current_value");  // (rows, Hkv, D)
      const int64_t hkv = current_value.shape[1];
      const int hq = c.attrs.num_heads, group = static_cast<int>(hq / hkv), d = 64;
      dynattn_ref::StoreRounded(&current_value, nan_row * hkv * d + 5,
                                std::numeric_limits<double>::quiet_NaN());
      ForEachTarget([&](const std::string& target) {
        INFO("target " << target << ", seed " << seed << ": " << c.description);
        const LibResult lib = RunLibrary(c);
        REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
        for (int64_t row = 0; row < rows; ++row) {
          for (int head = 0; head < group; ++head) {  // the query heads of KV head 0
            const bool sees = !c.attrs.is_causal || row >= nan_row;
            for (int e = 0; e < d; ++e) {
              const double x =
                  dynattn_ref::LoadAsDouble(lib.attn_output, (row * hq + head) * d + e);
              CHECK_MESSAGE((std::isnan(x) == (sees && e == 5)),
                            "row " << row << ", head " << head << ", element " << e);
            }
          }
        }
      });
    }
    CHECK(planted == 2);
  }

  TEST_CASE("sharp softmaxes and long contexts keep the fast answer and its bound") {
    ForEachTarget([](const std::string& target) {
      for (const int elem : {2, 3}) {
        for (int i = 0; i < 6; ++i) {
          const auto& [dim, group] = FastShapes()[(3 * i + elem) % FastShapes().size()];
          dynattn_ref::GenOptions options = FastDecodes(elem, dim, group);
          options.max_batch = 3;
          options.max_context = i % 2 == 0 ? 3000 : 400;  // several context splits, merged
          const uint64_t seed = BaseSeed() + 3100000 + 100 * elem + i;
          Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
          ScaleQueries(&c, i % 2 == 0 ? 4.0 : 16.0);
          INFO("target " << target << ", seed " << seed << ": " << c.description);
          CheckFastDecode(c);
        }
      }
    });
  }

  TEST_CASE("mixed steps give one tier's answer per row and head on every target") {
    ForEachTarget([](const std::string& target) {
      for (const int elem : {2, 3, 1, 4}) {  // int8, int4, fp16, bf16
        for (int i = 0; i < 8; ++i) {
          const auto& [dim, group] = FastShapes()[(i + elem) % FastShapes().size()];
          dynattn_ref::GenOptions options = FastDecodes(elem, dim, group);
          options.pins.step = 0;  // prompts, chunks and decodes drawn
          const uint64_t seed = BaseSeed() + 3200000 + 100 * elem + i;
          const Case c = i % 2 == 0
                             ? dynattn_ref::RandomCase("multi_head_cache_attention", seed, options)
                             : dynattn_ref::RandomUnifiedCase(seed, options);
          INFO("target " << target << ", seed " << seed << ": " << c.description);
          const LibResult lib = RunLibrary(c);
          REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
          const AttnResult ref = ReferenceOf(c);
          const std::string error = dynattn_ref::CheckAttention(ref, lib.attn_output);
          CHECK_MESSAGE(error.empty(), error);
          const std::string lse = dynattn_ref::CheckLse(ref, lib.lse);
          CHECK_MESSAGE(lse.empty(), "lse: " << lse);
        }
      }
    });
  }

  TEST_CASE("a fast plan says which tier runs, and its bits do not depend on threads") {
    for (const int elem : {2, 3, 1, 4}) {  // int8, int4, fp16, bf16 (groups unused)
      for (const int group : {8, 16, 32, 64}) {
        dynattn_ref::GenOptions options = FastDecodes(elem, 64, group);
        const uint64_t seed = BaseSeed() + 3300000 + 100 * elem + group;
        const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
        INFO("seed " << seed << ": " << c.description);
        Layer layer(c);
        dynattn::Plan plan;
        REQUIRE(PlanLayer(c, &layer, &plan).ok());
        // Groups of 32 and 64 here: powers of two; fp16 and bf16 where bf16 dots run.
        const bool covered = elem == 1 || elem == 4 ? Bf16DotsRun() : group >= 32;
        CHECK(plan.precision() ==
              (covered ? dynattn::Precision::kFast : dynattn::Precision::kExact));
        dynattn::RunOptions one, two;
        one.num_threads = 1;
        two.num_threads = 2;
        const LibResult a = RunLibrary(c, one), b = RunLibrary(c, two);
        REQUIRE(a.status.ok());
        REQUIRE(b.status.ok());
        std::string why;
        CHECK_MESSAGE(SameBytes(a.attn_output, b.attn_output, &why), why);
        CHECK_MESSAGE(SameBytes(a.lse, b.lse, &why), why);
      }
    }
  }

  TEST_CASE("a unified step runs the fast tier unless its int8 requests share prefix blocks") {
    int with_shared = 0, without = 0;
    for (int i = 0; i < 40 && (with_shared < 2 || without < 2); ++i) {
      dynattn_ref::GenOptions options = FastDecodes(2, 64, 32);
      options.pins.step = 0;
      const uint64_t seed = BaseSeed() + 3400000 + i;
      const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      INFO("seed " << seed << ": " << c.description);
      Layer layer(c);
      dynattn::Plan plan;
      REQUIRE(PlanLayer(c, &layer, &plan).ok());
      REQUIRE(plan.unified_summary() != nullptr);
      const bool shared = plan.unified_summary()->phase.find('s') != std::string::npos;
      (shared ? with_shared : without) += 1;
      CHECK(plan.precision() == (shared ? dynattn::Precision::kExact : dynattn::Precision::kFast));
    }
    CHECK(with_shared >= 1);
    CHECK(without >= 1);
  }

  // fp16 and bf16 caches' shared prefixes take the bf16 tiles too: their steps run fast and hold
  // the fast bound, on every target.
  TEST_CASE("unified steps with shared prefixes over fp16 and bf16 caches run the bf16 kernels") {
    ForEachTarget([](const std::string& target) {
      const bool bf16_dots = Bf16DotsRun();
      int shared_cases = 0, outside_exact = 0;
      for (int i = 0; i < 60 && shared_cases < 8; ++i) {
        const int elem = i % 2 == 0 ? 1 : 4;
        dynattn_ref::GenOptions options = FastDecodes(elem, 16 * (1 + i % 8), 0);
        options.pins.step = 0;
        options.max_context = 300;
        const uint64_t seed = BaseSeed() + 3410000 + i;
        const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
        Layer layer(c);
        dynattn::Plan plan;
        REQUIRE(PlanLayer(c, &layer, &plan).ok());
        if (plan.unified_summary()->phase.find('s') == std::string::npos) continue;
        INFO("target " << target << ", seed " << seed << ": " << c.description);
        outside_exact += CheckBf16Call(c, bf16_dots);
        ++shared_cases;
      }
      CHECK(shared_cases >= 4);
      if (bf16_dots) CHECK(outside_exact * 4 >= shared_cases);
    });
  }
}

}  // namespace
}  // namespace dynattn_test
