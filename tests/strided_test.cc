// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Row-strided activations (TensorView::IsRowStrided): every op given its query, new keys and
// values, K/V inputs and outputs as rows wider than dense (column slices of a fused QKV
// projection, the gaps NaN) gives the dense call's bits, on every SIMD target, and writes no gap
// byte; strides the library cannot read are refused by name; a Run's row strides need not be
// its plan's.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "tests/support/plan_layers.h"
#include "tests/support/row_padding.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn::Status;

const char* const kOps[] = {"key_value_cache", "multi_head_attention", "multi_head_cache_attention",
                            "unified_attention"};

Case CaseOf(const std::string& op, uint64_t seed) {
  if (op == "unified_attention") return dynattn_ref::RandomUnifiedCase(seed);
  return dynattn_ref::RandomCase(op, seed);
}

/// Runs `c` densely and with padded rows, and checks the outputs (and the cache) are the same
/// bytes and that no gap was written.
void CheckStridedLikeDense(const Case& c, int64_t pad) {
  INFO(c.op << " pad " << pad << ": " << c.description);
  const LibResult dense = RunLibrary(c);
  REQUIRE_MESSAGE(dense.status.ok(), dense.status.message());
  RowPadding padding(pad);
  const LibResult strided = RunLibrary(c, {}, &padding);
  REQUIRE_MESSAGE(strided.status.ok(), strided.status.message());
  const bool has_rows =
      !c.inputs.at(c.op == "multi_head_attention" ? "query" : "current_key").bytes.empty();
  CHECK((padding.padded() > 0 || !has_rows));
  CHECK_MESSAGE(padding.gaps_written().empty(), "gap written in " << padding.gaps_written()[0]);
  const std::pair<const char*, std::pair<const Array*, const Array*>> outputs[] = {
      {"attn_output", {&dense.attn_output, &strided.attn_output}},
      {"lse", {&dense.lse, &strided.lse}},
      {"key", {&dense.key, &strided.key}},
      {"value", {&dense.value, &strided.value}},
      {"cache", {&dense.cache, &strided.cache}},
      {"scale", {&dense.scale, &strided.scale}}};
  for (const auto& output : outputs) {
    std::string why;
    CHECK_MESSAGE(SameBytes(*output.second.first, *output.second.second, &why),
                  output.first << ": " << why);
  }
}

TEST_SUITE("strided") {
  TEST_CASE("row-strided activations give the dense call's bits and write no gap") {
    for (uint64_t i = 0; i < 12; ++i) {
      for (const char* op : kOps) {
        CheckStridedLikeDense(CaseOf(op, BaseSeed() + 13 * i), i % 3 == 0 ? 1 : 8 * i + 3);
      }
    }
  }

  TEST_CASE("row-strided activations on every SIMD target") {
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      for (const char* op : kOps) CheckStridedLikeDense(CaseOf(op, BaseSeed() + 500), 16);
    });
  }

  TEST_CASE("strides the library cannot read are refused by name") {
    Case c = CaseOf("multi_head_cache_attention", BaseSeed() + 900);
    // Two rows and two heads at least: strides of extents 1 are free.
    for (uint64_t seed = BaseSeed() + 901;
         c.inputs.at("query").shape[0] < 2 || c.inputs.at("query").shape[1] < 2; ++seed) {
      c = CaseOf("multi_head_cache_attention", seed);
    }
    Layer layer(c);
    BoundArgs args(c, &layer);
    dynattn::MultiHeadCacheAttentionAttrs attrs = MhcaAttrs(c);
    const dynattn::TensorView query = args.mhca.query;
    const int64_t row = query.shape[1] * query.shape[2];
    struct Bad {
      const char* input;
      dynattn::TensorView view;
      dynattn::TensorView dynattn::MultiHeadCacheAttentionArgs::*member;
    };
    dynattn::TensorView overlapping_rows = query, strided_heads = query,
                        strided_cache = args.mhca.cache;
    overlapping_rows.strides[0] = row - 1;          // rows would overlap
    strided_heads.strides[1] = query.shape[2] + 1;  // heads not dense within a row
    for (int i = 0; i < strided_cache.rank; ++i) {  // the cache stays dense
      if (strided_cache.shape[i] > 1) {
        strided_cache.strides[i] += 1;
        break;
      }
    }
    const Bad bad[] = {
        {"query", overlapping_rows, &dynattn::MultiHeadCacheAttentionArgs::query},
        {"query", strided_heads, &dynattn::MultiHeadCacheAttentionArgs::query},
        {"cache", strided_cache, &dynattn::MultiHeadCacheAttentionArgs::cache},
    };
    for (const Bad& b : bad) {
      dynattn::MultiHeadCacheAttentionArgs a = args.mhca;
      a.*b.member = b.view;
      const Status s = dynattn::MultiHeadCacheAttention(attrs, a);
      INFO(std::string(b.input) << ": " << s.message());
      CHECK(s.code() == dynattn::StatusCode::kInvalidArgument);
      CHECK(s.message().rfind(std::string(b.input) + ": must be dense row-major", 0) == 0);
    }
  }

  TEST_CASE("a Run's row strides are its own, whatever the plan's were") {
    for (const char* op : kOps) {
      const Case c = CaseOf(op, BaseSeed() + 950);
      INFO(c.op << ": " << c.description);
      Layer planning(c);  // planned on dense tensors (an engine's placeholders, say)
      dynattn::Plan plan;
      REQUIRE(PlanLayer(c, &planning, &plan).ok());
      dynattn::Context context;
      for (const int64_t pad : {5, 0, 12}) {
        Layer layer(c);
        RowPadding padding(pad);
        layer.PlaceOn(&padding, c);
        const Status s = BoundArgs(c, &layer).Run(plan, &context);
        REQUIRE_MESSAGE(s.ok(), s.message());
        padding.Fetch();
        CHECK(padding.gaps_written().empty());
        CheckSameAsOneShot(c, &layer);
      }
    }
  }
}

}  // namespace
}  // namespace dynattn_test
