// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Non-finite inputs follow IEEE arithmetic (docs/numerics.md, "Non-finite inputs"): NaN and
// infinities planted in random steps of every attention op (decode, prefill, split contexts,
// unified parts and their merges) give the rows float64 IEEE softmax gives, NaN for NaN and the
// same infinity for an infinity, on every SIMD target; keys a row does not see (causality, window,
// an -inf mask entry) never reach it, whatever they hold; fully masked rows stay exactly 0.

#include "tests/support/non_finite.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

dynattn_ref::AttnResult Reference(const Case& c) {
  if (c.op == "multi_head_attention") return dynattn_ref::MultiHeadAttention(c.attrs, c.inputs);
  if (c.op == "unified_attention") return dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  return dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
}

/// How the planted values showed in the reference's rows, over many cases.
struct Seen {
  int nan_rows = 0, inf_rows = 0, finite_rows = 0, zero_rows = 0;

  void Add(const dynattn_ref::AttnResult& ref) {
    const size_t vectors = ref.must_be_zero.size();
    const size_t d = vectors == 0 ? 0 : ref.out.size() / vectors;
    for (size_t v = 0; v < vectors; ++v) {
      bool nan = false, inf = false;
      for (size_t e = 0; e < d; ++e) {
        nan |= std::isnan(ref.out[v * d + e]);
        inf |= std::isinf(ref.out[v * d + e]);
      }
      nan_rows += nan;
      inf_rows += inf && !nan;
      finite_rows += !nan && !inf;
      zero_rows += ref.must_be_zero[v];
    }
  }
};

/// Runs a planted case on every target against the reference; returns the reference.
dynattn_ref::AttnResult CheckPlanted(const Case& c, const std::string& planted) {
  const dynattn_ref::AttnResult ref = Reference(c);
  ForEachTarget([&](const std::string& target) {
    INFO(c.description, " ", planted, " on ", target);
    const LibResult lib = RunLibrary(c);
    REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
    CHECK(dynattn_ref::CheckAttention(ref, lib.attn_output) == "");
    if (c.op == "unified_attention") CHECK(dynattn_ref::CheckLse(ref, lib.lse) == "");
  });
  return ref;
}

Case RandomOf(const std::string& op, uint64_t seed, const dynattn_ref::GenOptions& options) {
  return op == "unified_attention" ? dynattn_ref::RandomUnifiedCase(seed, options)
                                   : dynattn_ref::RandomCase(op, seed, options);
}

/// One request of MHA, fp32, causal: `tokens` new tokens over `context` keys (the last `tokens`
/// of them the new ones), Hq query heads sharing one KV head, D 16; values from `seed`.
Case OneRequest(int tokens, int context, int hq, bool with_mask, uint64_t seed) {
  Case c;
  c.op = "multi_head_attention";
  c.attrs.num_heads = hq;
  c.attrs.num_kv_heads = 1;
  c.attrs.head_dim = 16;
  c.attrs.is_causal = 1;
  c.attrs.non_finite = true;
  c.description = "one request of " + std::to_string(tokens) + " tokens over " +
                  std::to_string(context) + " keys, " + std::to_string(hq) + " heads";
  auto random = [state = seed](int64_t n) mutable {
    std::vector<double> x(n);
    for (double& v : x) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<double>(state >> 40) / (1 << 24) * 2 - 1;
    }
    return x;
  };
  auto floats = [&](std::vector<int64_t> shape) {
    dynattn_ref::Array a = dynattn_ref::MakeArray(Dt::kF32, shape);
    const std::vector<double> x = random(a.numel());
    for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, x[i]);
    return a;
  };
  c.inputs["query"] = floats({tokens, hq, 16});
  c.inputs["key"] = floats({context, 1, 16});
  c.inputs["value"] = floats({context, 1, 16});
  c.inputs["seqstarts"] = dynattn_ref::MakeI64({2}, {0, tokens});
  c.inputs["kvstarts"] = dynattn_ref::MakeI64({2}, {0, context});
  c.inputs["decoding_batches"] = dynattn_ref::ScalarI64(0);
  c.inputs["max_seqlen"] = dynattn_ref::ScalarI64(tokens);
  c.inputs["max_kvlen"] = dynattn_ref::ScalarI64(context);
  if (with_mask) c.inputs["attn_mask"] = dynattn_ref::MakeArray(Dt::kF32, {tokens, context});
  return c;
}

/// Whether element e of output vector (row, head) is NaN.
bool IsNaNAt(const dynattn_ref::Array& out, int64_t row, int head, int hq, int e) {
  return std::isnan(dynattn_ref::LoadAsDouble(out, (row * hq + head) * 16 + e));
}

/// Whether every element of output vector (row, head) is NaN.
bool RowIsNaN(const dynattn_ref::Array& out, int64_t row, int head, int hq) {
  bool all = true;
  for (int e = 0; e < 16; ++e) all &= IsNaNAt(out, row, head, hq, e);
  return all;
}

bool RowIsFinite(const dynattn_ref::Array& out, int64_t row, int head, int hq) {
  bool all = true;
  for (int e = 0; e < 16; ++e) {
    all &= std::isfinite(dynattn_ref::LoadAsDouble(out, (row * hq + head) * 16 + e));
  }
  return all;
}

}  // namespace

TEST_SUITE("non_finite") {
  TEST_CASE("NaN and infinities in random steps give float64 IEEE rows on every target") {
    dynattn_ref::GenOptions options;
    options.max_batch = 4;
    options.max_seqlen = 12;
    options.max_context = 120;
    dynattn_ref::GenOptions long_context;  // decode splits and their merges
    long_context.max_batch = 2;
    long_context.max_seqlen = 2;
    long_context.max_context = 2500;
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      Seen seen;
      for (uint64_t seed = 1; seed <= 36; ++seed) {
        Case c = RandomOf(op, 7100 + seed, seed % 6 == 0 ? long_context : options);
        const std::string planted = PlantNonFinite(seed, &c);
        seen.Add(CheckPlanted(c, planted));
      }
      // The cases have teeth: planted values made rows NaN, and others that do not see them
      // stayed finite (or exactly 0).
      INFO(op, ": ", seen.nan_rows, " NaN rows, ", seen.inf_rows, " infinite, ", seen.finite_rows,
           " finite, ", seen.zero_rows, " zero");
      CHECK(seen.nan_rows > 20);
      CHECK(seen.finite_rows > seen.nan_rows);
      CHECK(seen.zero_rows > 0);
    }
  }

  TEST_CASE("a NaN value reaches only the rows that see its key, in a block of rows") {
    // 8 query rows x 4 heads share one KV head: the tiled prefill path scores them as blocks of
    // vectors; 2 rows x 4 heads is one fused decode block. Rows before the NaN key (causal) must
    // not multiply it, though others in their block do; a NaN value element makes that element
    // of the rows that see it NaN.
    for (const int tokens : {2, 8}) {
      Case c = OneRequest(tokens, 40, 4, false, 11 + tokens);
      const int nan_key = 40 - tokens + 1;  // seen by new rows 1 .. tokens - 1
      dynattn_ref::StoreRounded(&c.inputs["value"], nan_key * 16 + 3, kNaN);
      CheckPlanted(c, "value row " + std::to_string(nan_key));
      ForEachTarget([&](const std::string& target) {
        INFO(c.description, " on ", target);
        const LibResult lib = RunLibrary(c);
        REQUIRE(lib.status.ok());
        for (int head = 0; head < 4; ++head) {
          CHECK(RowIsFinite(lib.attn_output, 0, head, 4));
          for (int row = 1; row < tokens; ++row) {  // element 3 alone: sum_j p_j v_j[3]
            for (int e = 0; e < 16; ++e)
              CHECK(IsNaNAt(lib.attn_output, row, head, 4, e) == (e == 3));
          }
        }
      });
    }
  }

  TEST_CASE("an -inf mask entry hides a key whose logit is NaN or +inf; +inf in the mask is NaN") {
    for (const float planted : {kNaN, kInf}) {
      Case c = OneRequest(3, 20, 2, true, 5);
      dynattn_ref::StoreRounded(&c.inputs["key"], 18 * 16 + 2, planted);  // key 18: row 1 sees it
      dynattn_ref::Array& mask = c.inputs["attn_mask"];
      dynattn_ref::StoreRounded(&mask, 1 * 20 + 18, -kInf);  // row 1 hides it
      dynattn_ref::StoreRounded(&mask, 2 * 20 + 4, kInf);    // row 2: +inf score, inf - inf
      for (int j = 0; j < 20; ++j) dynattn_ref::StoreRounded(&mask, 0 * 20 + j, -kInf);  // row 0
      const dynattn_ref::AttnResult ref = CheckPlanted(c, "key 18, mask rows 0-2");
      CHECK(ref.must_be_zero[0] == 1);  // row 0, head 0: fully masked
      ForEachTarget([&](const std::string& target) {
        INFO("planted ", planted, " on ", target);
        const LibResult lib = RunLibrary(c);
        REQUIRE(lib.status.ok());
        for (int head = 0; head < 2; ++head) {
          for (int e = 0; e < 16; ++e) {
            CHECK(dynattn_ref::LoadAsDouble(lib.attn_output, head * 16 + e) == 0.0);
          }
          CHECK(RowIsFinite(lib.attn_output, 1, head, 2));
          CHECK(RowIsNaN(lib.attn_output, 2, head, 2));
        }
      });
    }
  }
}

}  // namespace dynattn_test
