// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The aliasing rule: a buffer a call writes may not overlap another input or output of the call
// (MultiHeadCacheAttention, KeyValueCache, a planned Run, unified attention). The error names the
// written buffer and the one it overlaps, and nothing is written.

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "dynattn/plan.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"
#include "tests/support/validation_case.h"

namespace dynattn_test {
namespace {

/// `status` is the aliasing error naming `written` first and `other` after it.
void ExpectAliasing(const dynattn::Status& status, const std::string& written,
                    const std::string& other) {
  INFO(status.message());
  CHECK(status.code() == dynattn::StatusCode::kInvalidArgument);
  CHECK(status.message().rfind(written + ": overlaps ", 0) == 0);
  CHECK(status.message().find(" " + other + " (rule: ") != std::string::npos);
}

/// A view of `count` int64 values copied to the start of `host`'s bytes (offsets stored inside
/// another buffer of the call, as a careless caller's arena would).
dynattn::TensorView IndexInside(Array* host, const Array& index) {
  REQUIRE(host->bytes.size() >= index.bytes.size());
  std::memcpy(host->bytes.data(), index.bytes.data(), index.bytes.size());
  dynattn::TensorView view = ViewOf(const_cast<Array&>(index));
  view.data = host->bytes.data();
  return view;
}

TEST_SUITE("validation") {
  TEST_CASE("a buffer the call writes may not overlap another input or output") {
    Case c = BaseCase(kMhca, 0);
    Array out = MakeArray(Dt::kF16, {4, 4, 8});
    std::memset(out.bytes.data(), 0xFF, out.bytes.size());
    const dynattn::MultiHeadCacheAttentionAttrs attrs = MhcaAttrs(c);
    REQUIRE(dynattn::MultiHeadCacheAttention(attrs, MhcaArgs(c, &out)).ok());
    Array cache_before, scale_before;
    // Each mutation lays one buffer over another; nothing may be written, and the error names
    // the written buffer and the one it overlaps.
    const auto expect = [&](const std::function<void(dynattn::MultiHeadCacheAttentionArgs*)>& bad,
                            const char* written, const char* other) {
      std::memset(out.bytes.data(), 0xFF, out.bytes.size());
      dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
      bad(&args);
      const Array poisoned = out;
      cache_before = c.inputs["cache"];
      scale_before = c.inputs["scale"];
      ExpectAliasing(dynattn::MultiHeadCacheAttention(attrs, args), written, other);
      std::string why;
      CHECK_MESSAGE(SameBytes(out, poisoned, &why), why);
      CHECK_MESSAGE(SameBytes(c.inputs["cache"], cache_before, &why), why);
      CHECK_MESSAGE(SameBytes(c.inputs["scale"], scale_before, &why), why);
    };
    expect([&](auto* a) { a->kvstarts = IndexInside(&out, c.inputs["kvstarts"]); }, "attn_output",
           "kvstarts");
    expect([&](auto* a) { a->seqstarts = IndexInside(&out, c.inputs["seqstarts"]); }, "attn_output",
           "seqstarts");
    // cachestarts inside the cache slots the write phase overwrites.
    expect(
        [&](auto* a) { a->cachestarts = IndexInside(&c.inputs["cache"], c.inputs["cachestarts"]); },
        "cache", "cachestarts");
    expect([&](auto* a) { a->attn_output.data = c.inputs["cache"].bytes.data(); }, "attn_output",
           "cache");
    expect([&](auto* a) { a->attn_output.data = a->query.data; }, "attn_output", "query");
    expect([&](auto* a) { a->attn_output.data = static_cast<char*>(a->current_value.data) + 2; },
           "attn_output", "current_value");
    expect([&](auto* a) { a->scale.data = c.inputs["cache"].bytes.data() + 64; }, "scale", "cache");
  }

  TEST_CASE("KeyValueCache refuses a key output laid over its value output") {
    Case c = BaseCase("key_value_cache", 0);
    Array key = MakeArray(Dt::kF16, {8, 2, 8});
    dynattn::KeyValueCacheArgs a;
    Tensors& in = c.inputs;
    for (auto [view, name] : {std::pair{&a.current_key, "current_key"},
                              {&a.current_value, "current_value"},
                              {&a.seqstarts, "seqstarts"},
                              {&a.kvstarts, "kvstarts"},
                              {&a.cachestarts, "cachestarts"},
                              {&a.start_pos, "start_pos"},
                              {&a.max_seqlen, "max_seqlen"},
                              {&a.max_kvlen, "max_kvlen"},
                              {&a.cache, "cache"},
                              {&a.scale, "scale"}}) {
      *view = ViewOf(in[name]);
    }
    a.key = ViewOf(key);
    a.value = ViewOf(key);
    dynattn::KeyValueCacheAttrs attrs;
    attrs.cache = CacheAttrsOf(c.attrs);
    const Array cache_before = in["cache"];
    ExpectAliasing(dynattn::KeyValueCache(attrs, a), "key", "value");
    std::string why;
    CHECK_MESSAGE(SameBytes(in["cache"], cache_before, &why), why);
  }

  TEST_CASE("a Run checks its own tensors for overlap; a plan may leave outputs unallocated") {
    Case c = BaseCase(kMhca, 0);
    Array out = MakeArray(Dt::kF16, {4, 4, 8});
    const dynattn::MultiHeadCacheAttentionAttrs attrs = MhcaAttrs(c);
    dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
    args.attn_output.data = nullptr;  // planned before it is allocated
    dynattn::Plan plan;
    REQUIRE(dynattn::PlanMultiHeadCacheAttention(attrs, args, &plan).ok());
    dynattn::Context context;
    const Array cache_before = c.inputs["cache"];
    const dynattn::Status unallocated = dynattn::RunMultiHeadCacheAttention(plan, args, &context);
    CHECK(unallocated.message() == "attn_output: data is null");
    dynattn::MultiHeadCacheAttentionArgs over_query = args;
    over_query.attn_output.data = args.query.data;
    ExpectAliasing(dynattn::RunMultiHeadCacheAttention(plan, over_query, &context), "attn_output",
                   "query");
    std::string why;
    CHECK_MESSAGE(SameBytes(c.inputs["cache"], cache_before, &why), why);
    args.attn_output.data = out.bytes.data();
    CHECK(dynattn::RunMultiHeadCacheAttention(plan, args, &context).ok());
  }

  TEST_CASE("unified attention refuses an lse laid over attn_output or an index tensor") {
    // A random step whose lse has room for query_start_loc (the seed is the test's, plus k).
    Case c;
    for (uint64_t k = 0;; ++k) {
      c = dynattn_ref::RandomUnifiedCase(BaseSeed() + 77 + k);
      const int64_t lse_bytes = c.inputs.at("query").shape[0] * c.attrs.num_heads * 4;
      if (lse_bytes >= static_cast<int64_t>(c.inputs.at("query_start_loc").bytes.size())) break;
    }
    REQUIRE(RunLibrary(c).status.ok());
    // Through the public call: lse inside attn_output, then query_start_loc inside lse.
    Array out = MakeArray(c.inputs.at("query").dt, c.inputs.at("query").shape);
    const int64_t tokens = c.inputs.at("query").shape[0];
    Array lse = MakeArray(Dt::kF32, {tokens, c.attrs.num_heads});
    dynattn::BlockCache cache;
    const dynattn::TensorView scale =
        c.inputs.count("scale") ? ViewOf(c.inputs["scale"]) : dynattn::TensorView{};
    const int kv_heads = c.attrs.num_kv_heads > 0 ? c.attrs.num_kv_heads : c.attrs.num_heads;
    const dynattn::Status made =
        dynattn::MakePmxBlockCache(ViewOf(c.inputs["cache"]), scale, CacheAttrsOf(c.attrs),
                                   kv_heads, c.attrs.head_dim, c.attrs.block_size, &cache);
    REQUIRE_MESSAGE(made.ok(), made.message());
    dynattn::UnifiedAttentionArgs a;
    a.query = ViewOf(c.inputs["query"]);
    a.current_key = ViewOf(c.inputs["current_key"]);
    a.current_value = ViewOf(c.inputs["current_value"]);
    a.query_start_loc = ViewOf(c.inputs["query_start_loc"]);
    a.context_lens = ViewOf(c.inputs["context_lens"]);
    a.block_table = ViewOf(c.inputs["block_table"]);
    a.cache = &cache;
    a.attn_output = ViewOf(out);
    a.lse = ViewOf(lse);
    dynattn::UnifiedAttentionAttrs attrs;
    attrs.num_heads = c.attrs.num_heads;
    attrs.num_kv_heads = c.attrs.num_kv_heads;
    attrs.head_dim = c.attrs.head_dim;
    attrs.is_alibi = c.attrs.is_alibi != 0;
    dynattn::UnifiedAttentionArgs bad = a;
    bad.lse.data = out.bytes.data();
    ExpectAliasing(dynattn::UnifiedAttention(attrs, bad), "attn_output", "lse");
    bad = a;
    bad.query_start_loc = IndexInside(&lse, c.inputs["query_start_loc"]);
    ExpectAliasing(dynattn::UnifiedAttention(attrs, bad), "lse", "query_start_loc");
    CHECK(dynattn::UnifiedAttention(attrs, a).ok());
  }
}

}  // namespace
}  // namespace dynattn_test
