// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention against the float64 reference (its definition: paged MultiHeadCacheAttention)
// on the design document's 4-request step and on random mixed steps (shared prefixes, permuted
// and large block ids, empty contexts, multi-token decodes, long prompts) on every compiled SIMD
// target, and the same bits on AVX2 and AVX-512; the planner's one-path-per-pair coverage; and
// validation that names the input and leaves everything untouched.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/plan_unified.h"
#include "reference/reference.h"
#include "src/unified/unified_call.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;
using dynattn_ref::MakeI64;

/// Random steps per target unless DYNATTN_TEST_CASES says otherwise.
constexpr int kDefaultCases = 40;

int CasesPerTarget() {
  if (const char* env = std::getenv("DYNATTN_TEST_CASES")) return std::atoi(env);
  return kDefaultCases;
}

/// `cases` (a test's own count at kDefaultCases) scaled as DYNATTN_TEST_CASES scales that
/// default, at least 1: the sanitizer build's 20 halve the long tests too.
int ScaledCases(int cases) { return std::max(1, cases * CasesPerTarget() / kDefaultCases); }

/// Library result against the reference: cache and scale bytes exact, output and lse in bounds.
void CheckAgainstReference(const Case& c, const LibResult& lib) {
  REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
  const dynattn_ref::AttnResult ref = dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  std::string why;
  CHECK_MESSAGE(SameBytes(lib.cache, ref.cache, &why), "cache: " << why);
  if (c.attrs.quant_bit != 0)
    CHECK_MESSAGE(SameBytes(lib.scale, ref.scale, &why), "scale: " << why);
  const std::string out = dynattn_ref::CheckAttention(ref, lib.attn_output);
  CHECK_MESSAGE(out.empty(), out);
  const std::string lse = dynattn_ref::CheckLse(ref, lib.lse);
  CHECK_MESSAGE(lse.empty(), lse);
}

/// The planner's view of a case (validated by the library's own validator).
struct PlannedCase {
  Case c;
  dynattn::BlockCache cache;
  dynattn::UnifiedAttentionArgs args;
  dynattn::internal::UnifiedCall call;
  Array output, lse;
};

void Plan(const Case& source, PlannedCase* p) {
  p->c = source;
  auto& in = p->c.inputs;
  const Array& q = in.at("query");
  p->output = dynattn_ref::MakeArray(q.dt, q.shape);
  p->lse = dynattn_ref::MakeArray(Dt::kF32, {q.shape[0], q.shape[1]});
  const dynattn::TensorView scale =
      in.count("scale") ? ViewOf(in.at("scale")) : dynattn::TensorView{};
  REQUIRE(dynattn::MakePmxBlockCache(ViewOf(in.at("cache")), scale, CacheAttrsOf(p->c.attrs),
                                     static_cast<int>(in.at("current_key").shape[1]),
                                     p->c.attrs.head_dim, p->c.attrs.block_size, &p->cache)
              .ok());
  const dynattn::TensorLookup lookup = [&](const std::string& name) {
    if (name == "attn_output") return ViewOf(p->output);
    if (name == "lse") return ViewOf(p->lse);
    return in.count(name) ? ViewOf(in.at(name)) : dynattn::TensorView{};
  };
  p->args = dynattn::UnifiedAttentionArgsByName(lookup, &p->cache);
  dynattn::UnifiedAttentionAttrs attrs{.num_heads = p->c.attrs.num_heads,
                                       .num_kv_heads = p->c.attrs.num_kv_heads,
                                       .head_dim = p->c.attrs.head_dim,
                                       .is_alibi = p->c.attrs.is_alibi != 0};
  const dynattn::Status status =
      dynattn::internal::ValidateUnifiedAttention(attrs, p->args, &p->call);
  REQUIRE_MESSAGE(status.ok(), status.message());
}

/// The design document's step (spec unified-and-ksana §1.7): block size 4, query lengths
/// [8, 4, 1, 1], context lengths [0, 4, 6, 4], tables [0,1], [4,2], [3,5], [3,6]; the cached
/// context written by a reference history step.
Case DesignDocStep() {
  dynattn_ref::GenOptions options;
  Case c = dynattn_ref::RandomUnifiedCase(1, options);  // for its attribute plumbing only
  c.attrs = dynattn_ref::Attrs{};
  c.attrs.num_heads = 4;
  c.attrs.num_kv_heads = 2;
  c.attrs.head_dim = 16;
  c.attrs.block_size = 4;
  c.attrs.quant_bit = 8;
  c.attrs.quant_group = 8;
  const int64_t blocks = 7, block = 4, hkv = 2, d = 16;
  auto& in = c.inputs;
  in.clear();
  in["query_start_loc"] = MakeI64({5}, {0, 8, 12, 13, 14});
  in["context_lens"] = MakeI64({4}, {0, 4, 6, 4});
  in["block_table"] = MakeI64({4, 2}, {0, 1, 4, 2, 3, 5, 3, 6});
  uint64_t state = 12345;
  auto values = [&](std::vector<int64_t> shape) {
    Array a = dynattn_ref::MakeArray(Dt::kF32, shape);
    for (int64_t i = 0; i < a.numel(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      dynattn_ref::StoreRounded(&a, i, static_cast<double>(state >> 40) / (1 << 23) - 1.0);
    }
    return a;
  };
  in["query"] = values({14, 4, d});
  in["current_key"] = values({14, hkv, d});
  in["current_value"] = values({14, hkv, d});
  // History: S1 wrote positions 0..3 (block 4), S2 positions 0..5 (blocks 3, 5), S3 positions
  // 4..3 of nothing beyond the shared block 3 (written by S2).
  dynattn_ref::Tensors history;
  history["cache"] = dynattn_ref::MakeArray(
      Dt::kI8, dynattn_ref::detail::CacheShape(0, 1, blocks * block, hkv, d));
  history["scale"] = dynattn_ref::MakeArray(
      Dt::kF16, dynattn_ref::detail::CacheShape(0, 1, blocks * block, hkv, d / 8));
  history["cachestarts"] = MakeI64({4, 2}, {0, 4, 16, 8, 12, 20, 12, 24});
  history["seqstarts"] = MakeI64({5}, {0, 0, 4, 10, 10});
  history["kvstarts"] = MakeI64({5}, {0, 0, 4, 10, 14});
  history["start_pos"] = MakeI64({4}, {0, 0, 0, 4});
  history["max_seqlen"] = dynattn_ref::ScalarI64(6);
  history["max_kvlen"] = dynattn_ref::ScalarI64(6);
  history["current_key"] = values({10, hkv, d});
  history["current_value"] = values({10, hkv, d});
  dynattn_ref::Attrs kvc = c.attrs;
  kvc.cache_mode = 1;
  kvc.page_size = 4;
  dynattn_ref::KvcResult written = dynattn_ref::KeyValueCache(kvc, history);
  in["cache"] = written.cache;
  in["scale"] = written.scale;
  c.op = "unified_attention";
  c.description = "design document step (unified-and-ksana §1.7)";
  return c;
}

/// Runs a broken copy of the design-document step and checks the error names `input` and that
/// the cache, scale and outputs are untouched.
void ExpectRejected(Case c, const char* input, const std::string& phrase) {
  const LibResult lib = RunLibrary(c);
  INFO("expected an error about " << input << " (" << phrase << ")");
  REQUIRE_FALSE(lib.status.ok());
  const std::string& message = lib.status.message();
  CHECK_MESSAGE(message.rfind(std::string(input) + ": ", 0) == 0, message);
  CHECK_MESSAGE(message.find(phrase) != std::string::npos, message);
  std::string why;
  CHECK_MESSAGE(SameBytes(lib.cache, c.inputs.at("cache"), &why), "cache written: " << why);
  CHECK_MESSAGE(SameBytes(lib.scale, c.inputs.at("scale"), &why), "scale written: " << why);
  for (uint8_t byte : lib.attn_output.bytes) REQUIRE(byte == 0xFF);
  for (uint8_t byte : lib.lse.bytes) REQUIRE(byte == 0xFF);
}

void SetTable(Case* c, int64_t index, int64_t value) {
  c->inputs.at("block_table").data<int64_t>()[index] = value;
}

TEST_SUITE("unified") {
  TEST_CASE("bad input is refused by name, and nothing is written") {
    const Case good = DesignDocStep();
    Case c = good;
    SetTable(&c, 5, 7);  // S2's second block: id 7 of 7 blocks
    ExpectRejected(c, "block_table", "outside [0, 7)");
    c = good;
    SetTable(&c, 7, 5);  // S3 writes into block 5, which S2 reads as context (slot 0)
    ExpectRejected(c, "block_table", "reads as context");
    c = good;
    SetTable(&c, 3, 1);  // S1 writes block 1, as S0 does: slot clash
    ExpectRejected(c, "block_table", "both write slot");
    ExpectRejected(c, "block_table", "(rule: write slots must be distinct)");
    c = good;
    SetTable(&c, 5, 3);  // S2 uses block 3 twice
    ExpectRejected(c, "block_table", "twice");
    c = good;
    c.inputs["block_table"] = MakeI64({4, 1}, {0, 4, 3, 3});
    ExpectRejected(c, "block_table", "needs 2 blocks");
    c = good;
    c.inputs["query_start_loc"] = MakeI64({5}, {0, 8, 12, 13, 13});
    ExpectRejected(c, "query_start_loc", "must equal the query tokens");
    c = good;
    c.inputs["query_start_loc"] = MakeI64({5}, {0, 8, 7, 13, 14});
    ExpectRejected(c, "query_start_loc", "non-decreasing");
    // The offset rules shared with seqstarts and the engines' indptrs (src/validate.h).
    c.inputs["query_start_loc"] = MakeI64({5}, {1, 8, 12, 13, 14});
    ExpectRejected(c, "query_start_loc", "must start at 0, got 1");
    c.inputs["query_start_loc"] = MakeI64({5}, {0, 8, 12, 13, int64_t{1} << 47});
    ExpectRejected(c, "query_start_loc", "entry 4 = 140737488355328 is too large");
    c = good;
    c.inputs["context_lens"] = MakeI64({4}, {0, 4, -1, 4});
    ExpectRejected(c, "context_lens", "must be in [0");
    c = good;
    c.inputs["context_lens"] = MakeI64({3}, {0, 4, 6});
    ExpectRejected(c, "context_lens", "entries");
    c = good;
    c.attrs.num_kv_heads = 3;
    ExpectRejected(c, "num_kv_heads", "must divide");
    c = good;
    c.inputs["current_value"] = dynattn_ref::MakeArray(Dt::kF32, {14, 2, 8});
    ExpectRejected(c, "current_value", "shape");
  }

  TEST_CASE("the design document's 4-request step") {
    const Case c = DesignDocStep();
    ForEachTarget([&](const std::string& target) {
      INFO("target " << target);
      CheckAgainstReference(c, RunLibrary(c));
    });
    PlannedCase p;
    Plan(c, &p);
    const auto plan = dynattn::internal::PlanUnified(p.call.step);
    CHECK(dynattn::internal::CheckCoverage(p.call.step, plan).empty());
    // Block 4 (S1's context, 4 readers) and block 3 (S2 and S3) are shared; block 5 (S2's own
    // positions 4, 5) is unique; block 6 holds only S3's fresh token, so no cache path reads it.
    CHECK(plan.num_shared_blocks == 2);
    CHECK(plan.num_unique_blocks == 1);
    dynattn::UnifiedStepSummary summary;
    dynattn::UnifiedAttentionAttrs attrs{.num_heads = 4, .num_kv_heads = 2, .head_dim = 16};
    REQUIRE(dynattn::DescribeUnifiedStep(attrs, p.args, &summary).ok());
    CHECK(summary.phase == "csu");
    CHECK(summary.query_len == 14);
    CHECK(summary.num_shared_blocks == 2);
    CHECK(summary.num_unique_blocks == 1);
    CHECK(summary.num_logits == 4);
  }

  TEST_CASE("random mixed steps against the reference, on every target") {
    ForEachTarget([&](const std::string& target) {
      for (int i = 0; i < CasesPerTarget(); ++i) {
        const uint64_t seed = BaseSeed() + 7000 + static_cast<uint64_t>(i);
        const Case c = dynattn_ref::RandomUnifiedCase(seed);
        INFO("target " << target << ", seed " << seed << " (DYNATTN_TEST_SEED=" << BaseSeed()
                       << "): " << c.description);
        CheckAgainstReference(c, RunLibrary(c));
      }
    });
  }

  TEST_CASE("long shared prefixes and split contexts") {
    dynattn_ref::GenOptions options;
    options.max_context = 2500;
    options.max_batch = 5;
    options.lane_head_dims = true;
    for (int i = 0; i < ScaledCases(12); ++i) {
      const uint64_t seed = BaseSeed() + 9000 + static_cast<uint64_t>(i);
      const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      INFO("seed " << seed << ": " << c.description);
      CheckAgainstReference(c, RunLibrary(c));
    }
  }

  TEST_CASE("prompts longer than a context split") {
    dynattn_ref::GenOptions options;
    options.max_batch = 2;
    options.max_seqlen = 1100;
    options.max_context = 64;
    int long_prompts = 0;
    for (int i = 0; i < 400 && long_prompts < 2; ++i) {
      const uint64_t seed = BaseSeed() + 10000 + static_cast<uint64_t>(i);
      const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      const auto ranges = TokenRanges(c);
      const bool long_prompt = std::any_of(ranges.begin(), ranges.end(),
                                           [](const auto& r) { return r.second - r.first > 1024; });
      if (!long_prompt) continue;
      ++long_prompts;
      INFO("seed " << seed << ": " << c.description);
      CheckAgainstReference(c, RunLibrary(c));
    }
    CHECK(long_prompts == 2);
  }

  TEST_CASE("every (query, key) pair has exactly one path") {
    dynattn_ref::GenOptions options;
    options.max_context = 1500;
    for (int i = 0; i < ScaledCases(150); ++i) {
      const uint64_t seed = BaseSeed() + 11000 + static_cast<uint64_t>(i);
      PlannedCase p;
      Plan(dynattn_ref::RandomUnifiedCase(seed, options), &p);
      INFO("seed " << seed << ": " << p.c.description);
      const auto plan = dynattn::internal::PlanUnified(p.call.step);
      const std::string coverage = dynattn::internal::CheckCoverage(p.call.step, plan);
      CHECK_MESSAGE(coverage.empty(), coverage);
    }
  }

  TEST_CASE("the coverage check catches a double-counted key") {
    PlannedCase p;
    Plan(DesignDocStep(), &p);
    auto plan = dynattn::internal::PlanUnified(p.call.step);
    // A decode's cache item that also reads its shared prefix block (positions 0..3 of S2),
    // which the shared path covers already.
    for (auto& w : plan.request_items) {
      if (w.request == 2) w.key_begin = 0;
    }
    CHECK_FALSE(dynattn::internal::CheckCoverage(p.call.step, plan).empty());
    // Upstream's defect (§1.7): S3's fresh key (position 4, block 6) read back from the cache
    // by a second item as well as by its causal item.
    auto plan2 = dynattn::internal::PlanUnified(p.call.step);
    const auto s3 = std::find_if(plan2.request_items.begin(), plan2.request_items.end(),
                                 [](const auto& w) { return w.request == 3; });
    REQUIRE(s3 != plan2.request_items.end());
    CHECK(s3->key_begin == 4);
    CHECK(s3->key_end == 5);
    plan2.request_items.push_back(*s3);
    CHECK_FALSE(dynattn::internal::CheckCoverage(p.call.step, plan2).empty());
  }
}

// A suite (and meson test) of its own, so that a machine without the pair counts it as skipped.
TEST_SUITE("unified_targets") {
  TEST_CASE("AVX2 and AVX-512 give the same bits") {
    if (!HaveAvx2AndAvx512()) {
      SkipTest("AVX2 or AVX-512 not available on this machine; cross-target check not run");
      return;
    }
    dynattn_ref::GenOptions options;
    options.max_context = 1300;
    for (int i = 0; i < 8; ++i) {
      const uint64_t seed = BaseSeed() + 12000 + static_cast<uint64_t>(i);
      const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      INFO("seed " << seed << ": " << c.description);
      std::map<std::string, LibResult> by_target;
      ForEachTarget([&](const std::string& target) { by_target[target] = RunLibrary(c); });
      std::string why;
      CHECK_MESSAGE(SameBytes(by_target["AVX2"].attn_output, by_target["AVX3"].attn_output, &why),
                    why);
      CHECK_MESSAGE(SameBytes(by_target["AVX2"].lse, by_target["AVX3"].lse, &why), why);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
