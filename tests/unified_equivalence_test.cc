// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Unified attention against what it must equal: paged MultiHeadCacheAttention over the same step
// with sliding windows and sinks (a lone decode, planned as a pure decode is, bit for bit), and
// itself under any thread count and with its requests in reverse order, bit for bit.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/codec.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;
using dynattn_ref::MakeI64;

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

}  // namespace
}  // namespace dynattn_test
