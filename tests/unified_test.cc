// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention against the float64 reference (its definition: paged MultiHeadCacheAttention),
// on the design document's 4-request step and on random mixed steps (shared prefixes, permuted
// and large block ids, empty contexts, multi-token decodes) on every compiled SIMD target; the
// planner's one-path-per-pair coverage; bitwise determinism across thread counts and request
// order; validation that leaves everything untouched; and sliding windows with sinks against
// paged MultiHeadCacheAttention (a lone decode bit for bit).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/plan_unified.h"
#include "reference/reference.h"
#include "src/unified/unified_call.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;
using dynattn_ref::MakeI64;

int CasesPerTarget() {
  if (const char* env = std::getenv("DYNATTN_TEST_CASES")) return std::atoi(env);
  return 40;
}

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

/// Token ranges [first, last) of each request of a case.
std::vector<std::pair<int64_t, int64_t>> TokenRanges(const Case& c) {
  const Array& qsl = c.inputs.at("query_start_loc");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t b = 0; b + 1 < qsl.numel(); ++b) {
    ranges.emplace_back(qsl.data<int64_t>()[b], qsl.data<int64_t>()[b + 1]);
  }
  return ranges;
}

/// Rows [first, last) of every request of `c`, requests in reverse order.
Array ReverseRows(const Case& c, const Array& rows) {
  Array out = rows;
  const int64_t tokens = rows.shape.empty() ? 0 : rows.shape[0];
  const size_t row_bytes = tokens == 0 ? 0 : rows.bytes.size() / static_cast<size_t>(tokens);
  size_t cursor = 0;
  const auto ranges = TokenRanges(c);
  for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
    const size_t bytes = static_cast<size_t>(it->second - it->first) * row_bytes;
    std::copy_n(rows.bytes.begin() + it->first * row_bytes, bytes, out.bytes.begin() + cursor);
    cursor += bytes;
  }
  return out;
}

/// The same step with its requests in reverse order (same cache, same block ids).
Case ReverseRequests(const Case& c) {
  Case r = c;
  const auto ranges = TokenRanges(c);
  const int64_t count = static_cast<int64_t>(ranges.size());
  std::vector<int64_t> qsl{0}, context;
  const Array& table = c.inputs.at("block_table");
  const int64_t width = table.shape[1];
  std::vector<int64_t> rows;
  for (int64_t b = count - 1; b >= 0; --b) {
    qsl.push_back(qsl.back() + ranges[b].second - ranges[b].first);
    context.push_back(c.inputs.at("context_lens").data<int64_t>()[b]);
    for (int64_t j = 0; j < width; ++j) rows.push_back(table.data<int64_t>()[b * width + j]);
  }
  r.inputs["query_start_loc"] = MakeI64({count + 1}, qsl);
  r.inputs["context_lens"] = MakeI64({count}, context);
  r.inputs["block_table"] = MakeI64(table.shape, rows);
  for (const char* name : {"query", "current_key", "current_value"}) {
    r.inputs[name] = ReverseRows(c, c.inputs.at(name));
  }
  return r;
}

/// Output rows of `c`'s requests equal those of its reversed twin, bit for bit.
bool SameRowsReversed(const Case& c, const Array& forward, const Array& reversed) {
  std::string why;
  const bool same = SameBytes(ReverseRows(c, forward), reversed, &why);
  if (!same) MESSAGE(why);
  return same;
}

/// The same step as MultiHeadCacheAttention in paged mode (one page per block).
Case AsPagedMhca(const Case& c) {
  Case m = c;
  m.op = "multi_head_cache_attention";
  const auto ranges = TokenRanges(c);
  const int64_t count = static_cast<int64_t>(ranges.size());
  const int64_t* context = c.inputs.at("context_lens").data<int64_t>();
  std::vector<int64_t> kvstarts{0}, pages;
  int64_t max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t queries = ranges[b].second - ranges[b].first;
    kvstarts.push_back(kvstarts.back() + context[b] + queries);
    max_seqlen = std::max(max_seqlen, queries);
    max_kvlen = std::max(max_kvlen, context[b] + queries);
  }
  const Array& table = c.inputs.at("block_table");
  for (int64_t i = 0; i < table.numel(); ++i) {
    pages.push_back(table.data<int64_t>()[i] * c.attrs.block_size);
  }
  auto& in = m.inputs;
  in["seqstarts"] = in.at("query_start_loc");
  in["start_pos"] = in.at("context_lens");
  for (const char* name : {"query_start_loc", "context_lens", "block_table"}) in.erase(name);
  in["kvstarts"] = MakeI64({count + 1}, kvstarts);
  in["cachestarts"] = MakeI64(table.shape, pages);
  in["decoding_batches"] = dynattn_ref::ScalarI64(0);
  in["max_seqlen"] = dynattn_ref::ScalarI64(max_seqlen);
  in["max_kvlen"] = dynattn_ref::ScalarI64(max_kvlen);
  m.attrs.cache_mode = 1;
  m.attrs.page_size = c.attrs.block_size;
  return m;
}

/// Requests with one token none of whose cached blocks another token reads.
std::vector<bool> LoneDecodes(const Case& c) {
  const auto ranges = TokenRanges(c);
  const Array& table = c.inputs.at("block_table");
  const int64_t width = table.shape[1], block = c.attrs.block_size;
  const int64_t* context = c.inputs.at("context_lens").data<int64_t>();
  std::map<int64_t, int64_t> readers;  // block id -> query tokens reading it
  for (size_t b = 0; b < ranges.size(); ++b) {
    const int64_t queries = ranges[b].second - ranges[b].first;
    if (queries == 0) continue;
    for (int64_t j = 0; j < (context[b] + block - 1) / block; ++j) {
      readers[table.data<int64_t>()[b * width + j]] += queries;
    }
  }
  std::vector<bool> lone;
  for (size_t b = 0; b < ranges.size(); ++b) {
    bool alone = ranges[b].second - ranges[b].first == 1;
    for (int64_t j = 0; alone && j < (context[b] + block - 1) / block; ++j) {
      alone = readers[table.data<int64_t>()[b * width + j]] == 1;
    }
    lone.push_back(alone);
  }
  return lone;
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

/// Runs `c` (a unified step, or its paged MultiHeadCacheAttention twin) with a sliding window of
/// `window` keys; any "sinks" input of `c` is passed by name. Outputs start poisoned.
LibResult RunWithWindow(const Case& c, int window, const dynattn::RunOptions& options = {}) {
  dynattn_ref::Tensors in = c.inputs, out;
  const Array& q = in.at("query");
  out["attn_output"] = dynattn_ref::MakeArray(q.dt, q.shape);
  out["lse"] = dynattn_ref::MakeArray(Dt::kF32, {q.shape[0], q.shape[1]});
  for (auto& [name, array] : out) std::fill(array.bytes.begin(), array.bytes.end(), 0xFF);
  const dynattn::TensorLookup lookup = [&](const std::string& name) {
    if (name == "attn_output") return ViewOf(out.at(name));
    if (name == "lse") {
      return c.op == "unified_attention" ? ViewOf(out.at(name)) : dynattn::TensorView{};
    }
    return in.count(name) ? ViewOf(in.at(name)) : dynattn::TensorView{};
  };
  LibResult r;
  if (c.op == "unified_attention") {
    dynattn::BlockCache cache;
    r.status = dynattn::MakePmxBlockCache(lookup("cache"), lookup("scale"), CacheAttrsOf(c.attrs),
                                          static_cast<int>(in.at("current_key").shape[1]),
                                          c.attrs.head_dim, c.attrs.block_size, &cache);
    dynattn::UnifiedAttentionAttrs attrs = UnifiedAttentionAttrsOf(c.attrs);
    attrs.window_left = window;
    if (r.status.ok()) {
      r.status = dynattn::UnifiedAttention(
          attrs, dynattn::UnifiedAttentionArgsByName(lookup, &cache), options);
    }
  } else {
    dynattn::MultiHeadCacheAttentionAttrs attrs;
    attrs.attention = AttentionAttrsOf(c.attrs);
    attrs.attention.window_left = window;
    attrs.cache = CacheAttrsOf(c.attrs);
    r.status = dynattn::MultiHeadCacheAttention(
        attrs, dynattn::MultiHeadCacheAttentionArgsByName(lookup), options);
  }
  r.cache = in.at("cache");
  if (in.count("scale")) r.scale = in.at("scale");
  r.attn_output = out.at("attn_output");
  r.lse = out.at("lse");
  return r;
}

/// Element i of an fp32, fp16 or bf16 array as a double.
double ElementOf(const Array& a, int64_t i) {
  if (a.dt == Dt::kF32) return a.data<float>()[i];
  const uint16_t bits = reinterpret_cast<const uint16_t*>(a.bytes.data())[i];
  return a.dt == Dt::kF16 ? dynattn::internal::F16ToF32(bits) : dynattn::internal::Bf16ToF32(bits);
}

TEST_SUITE("unified") {
  TEST_CASE("sliding windows and sinks: unified attention is paged MultiHeadCacheAttention") {
    dynattn_ref::GenOptions options;
    options.max_context = 2100;
    // The test sets windows and sinks itself: cases drawn without them, so that no cache slot
    // left of a drawn window holds the NaN the generator puts where a call must not read.
    options.serving_features = false;
    const int windows[] = {0, 3, 40, 300, 1100};
    int lone_compared = 0;
    for (int i = 0; i < 30; ++i) {
      const uint64_t seed = BaseSeed() + 17000 + static_cast<uint64_t>(i);
      Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      const int heads = c.attrs.num_heads;
      std::vector<float> sinks(heads);
      for (int h = 0; h < heads; ++h)
        sinks[h] = static_cast<float>((seed * 7 + h * 13) % 11) - 5.0f;
      Array sink_array = dynattn_ref::MakeArray(Dt::kF32, {heads});
      std::copy(sinks.begin(), sinks.end(), sink_array.data<float>());
      if (i % 3 != 2) c.inputs["sinks"] = sink_array;
      const int window = windows[i % std::size(windows)];
      INFO("seed " << seed << ", window " << window << ": " << c.description);
      const LibResult unified = RunWithWindow(c, window);
      const LibResult paged = RunWithWindow(AsPagedMhca(c), window);
      REQUIRE_MESSAGE(unified.status.ok(), unified.status.message());
      REQUIRE_MESSAGE(paged.status.ok(), paged.status.message());
      std::string why;
      CHECK_MESSAGE(SameBytes(unified.cache, paged.cache, &why), "cache: " << why);
      const auto ranges = TokenRanges(c);
      const std::vector<bool> lone = LoneDecodes(c);
      const int64_t row = heads * c.attrs.head_dim;
      for (size_t b = 0; b < ranges.size(); ++b) {
        for (int64_t t = ranges[b].first; t < ranges[b].second; ++t) {
          int bad = 0;
          if (lone[b]) {  // planned as a pure decode plans it: the same bits
            const size_t size =
                unified.attn_output.bytes.size() /
                static_cast<size_t>(std::max<int64_t>(1, c.inputs.at("query").shape[0]));
            bad = !std::equal(unified.attn_output.bytes.begin() + t * size,
                              unified.attn_output.bytes.begin() + (t + 1) * size,
                              paged.attn_output.bytes.begin() + t * size);
          } else {
            for (int64_t e = t * row; e < (t + 1) * row; ++e) {
              const double u = ElementOf(unified.attn_output, e);
              const double m = ElementOf(paged.attn_output, e);
              bad += !(std::fabs(u - m) <= 4e-3 * std::fabs(m) + 2e-3);
            }
          }
          CHECK_MESSAGE(bad == 0,
                        "request " << b << " token " << t << std::string(lone[b] ? " (lone)" : ""));
          for (int h = 0; h < heads; ++h)
            CHECK(std::isfinite(unified.lse.data<float>()[t * heads + h]));
        }
        lone_compared += lone[b];
      }
    }
    CHECK(lone_compared >= 5);
  }

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
    for (int i = 0; i < 12; ++i) {
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

  TEST_CASE("a decode without shared blocks gets the bits of a pure decode step") {
    dynattn_ref::GenOptions options;
    options.max_context = 2100;
    int compared = 0;
    for (int i = 0; i < 200 && compared < 12; ++i) {
      const uint64_t seed = BaseSeed() + 14000 + static_cast<uint64_t>(i);
      const Case c = dynattn_ref::RandomUnifiedCase(seed, options);
      INFO("seed " << seed << ": " << c.description);
      const LibResult unified = RunLibrary(c);
      const LibResult paged = RunLibrary(AsPagedMhca(c));
      REQUIRE_MESSAGE(unified.status.ok(), unified.status.message());
      REQUIRE_MESSAGE(paged.status.ok(), paged.status.message());
      const auto ranges = TokenRanges(c);
      const std::vector<bool> lone = LoneDecodes(c);
      const size_t row = unified.attn_output.bytes.size() /
                         std::max<size_t>(1, static_cast<size_t>(c.inputs.at("query").shape[0]));
      for (size_t b = 0; b < ranges.size(); ++b) {
        if (!lone[b]) continue;
        const auto first = static_cast<size_t>(ranges[b].first) * row;
        CHECK(std::equal(unified.attn_output.bytes.begin() + first,
                         unified.attn_output.bytes.begin() + first + row,
                         paged.attn_output.bytes.begin() + first));
        ++compared;
      }
    }
    CHECK(compared >= 12);
  }

  TEST_CASE("every (query, key) pair has exactly one path") {
    dynattn_ref::GenOptions options;
    options.max_context = 1500;
    for (int i = 0; i < 150; ++i) {
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

  TEST_CASE("same bits for any thread count and any request order") {
    dynattn_ref::GenOptions options;
    options.max_context = 1300;
    options.lane_head_dims = true;
    for (int i = 0; i < 16; ++i) {
      const uint64_t seed = BaseSeed() + 13000 + static_cast<uint64_t>(i);
      const Case c =
          dynattn_ref::RandomUnifiedCase(seed, i % 2 ? options : dynattn_ref::GenOptions{});
      INFO("seed " << seed << ": " << c.description);
      const LibResult one = RunLibrary(c, dynattn::RunOptions{.num_threads = 1});
      REQUIRE_MESSAGE(one.status.ok(), one.status.message());
      for (int threads : {2, 3, 8}) {
        const LibResult many = RunLibrary(c, dynattn::RunOptions{.num_threads = threads});
        std::string why;
        CHECK_MESSAGE(SameBytes(one.attn_output, many.attn_output, &why), threads << ": " << why);
        CHECK_MESSAGE(SameBytes(one.lse, many.lse, &why), threads << ": " << why);
        CHECK_MESSAGE(SameBytes(one.cache, many.cache, &why), threads << ": " << why);
      }
      const Case reversed = ReverseRequests(c);
      const LibResult back = RunLibrary(reversed, dynattn::RunOptions{.num_threads = 2});
      REQUIRE_MESSAGE(back.status.ok(), back.status.message());
      CHECK(SameRowsReversed(c, one.attn_output, back.attn_output));
      CHECK(SameRowsReversed(c, one.lse, back.lse));
    }
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
