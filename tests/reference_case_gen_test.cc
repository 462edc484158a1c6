// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Checks that the random case generator (reference/case_gen.h) yields deterministic, valid cases
// across the attribute matrix, small ones included, that the reference accepts every one of them
// and every golden case, and that MultiHeadCacheAttention is KeyValueCache then
// MultiHeadAttention on them. If these fail, the oracle's inputs are wrong, so nothing else can
// be trusted.

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "reference/case_gen.h"
#include "reference/golden_matrix.h"
#include "reference/reference.h"
#include "tests/support/harness.h"

namespace dynattn_ref {
namespace {

const std::vector<std::string> kOps = {"key_value_cache", "multi_head_attention",
                                       "multi_head_cache_attention"};

std::vector<int64_t> Ints(const Array& array) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < array.numel(); ++i) {
    values.push_back(static_cast<int64_t>(LoadAsDouble(array, i)));
  }
  return values;
}

bool SameTensors(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, array] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.dt != array.dt || it->second.shape != array.shape ||
        it->second.bytes != array.bytes) {
      return false;
    }
  }
  return true;
}

auto AttrFields(const Attrs& a) {
  return std::tie(a.num_heads, a.head_dim, a.is_causal, a.is_alibi, a.num_kv_heads, a.num_layer,
                  a.layer_idx, a.quant_bit, a.quant_group, a.num_repeat, a.cache_mode,
                  a.cache_layout, a.page_size, a.block_size, a.window_left, a.logits_soft_cap,
                  a.softmax_scale, a.cache_dtype);
}

bool SameAttrs(const Attrs& a, const Attrs& b) { return AttrFields(a) == AttrFields(b); }

bool IsFloat(Dt dt) { return IsActivationDt(dt); }

// Records which corners of the attribute matrix a case exercises.
using Coverage = std::set<std::string>;

void CheckRequests(const Case& c, Coverage* seen) {
  const std::vector<int64_t> seqstarts = Ints(c.inputs.at("seqstarts"));
  const std::vector<int64_t> kvstarts = Ints(c.inputs.at("kvstarts"));
  REQUIRE(seqstarts.size() == kvstarts.size());
  REQUIRE(c.inputs.at("seqstarts").shape.size() == 1);
  int64_t max_seqlen = 0, max_kvlen = 0;
  const bool cache_op = c.op != "multi_head_attention";
  const std::vector<int64_t> start_pos =
      cache_op ? Ints(c.inputs.at("start_pos")) : std::vector<int64_t>(seqstarts.size() - 1, 0);
  REQUIRE(start_pos.size() + 1 == seqstarts.size());
  for (size_t b = 0; b + 1 < seqstarts.size(); ++b) {
    const int64_t seqlen = seqstarts[b + 1] - seqstarts[b], kvlen = kvstarts[b + 1] - kvstarts[b];
    CHECK(seqlen >= 0);
    CHECK(kvlen >= seqlen);
    if (cache_op) CHECK(kvlen == start_pos[b] + seqlen);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, kvlen);
    if (kvlen == 0) seen->insert("empty request");
    if (seqlen == 0 && kvlen > 0) seen->insert("idle request");
    if (seqlen > 1 && kvlen > seqlen) seen->insert("chunked prefill");
    if (seqlen > 1 && kvlen == seqlen) seen->insert("prefill");
  }
  if (seqstarts.size() == 1) seen->insert("B=0");
  CHECK(c.inputs.at("max_seqlen").shape.empty());
  CHECK(c.inputs.at("max_kvlen").shape.empty());
  CHECK(LoadAsDouble(c.inputs.at("max_seqlen"), 0) >= max_seqlen);
  CHECK(LoadAsDouble(c.inputs.at("max_kvlen"), 0) >= max_kvlen);
}

void CheckAttentionInputs(const Case& c, Coverage* seen) {
  const Attrs& a = c.attrs;
  const std::vector<int64_t> seqstarts = Ints(c.inputs.at("seqstarts"));
  const int64_t rows = seqstarts.back(), context = Ints(c.inputs.at("kvstarts")).back();
  const int64_t hkv = a.num_kv_heads == 0 ? a.num_heads : a.num_kv_heads;
  const Array& query = c.inputs.at("query");
  CHECK(query.shape == std::vector<int64_t>{rows, a.num_heads, a.head_dim});
  CHECK(a.num_heads % hkv == 0);
  const int64_t decoding = Ints(c.inputs.at("decoding_batches"))[0];
  CHECK(c.inputs.at("decoding_batches").shape.empty());
  CHECK((decoding >= 0 && decoding + 1 <= static_cast<int64_t>(seqstarts.size())));
  for (int64_t b = 0; b < decoding; ++b) CHECK(seqstarts[b + 1] - seqstarts[b] == 1);
  if (decoding > 0) seen->insert("decoding");
  if (hkv < a.num_heads) seen->insert("gqa");
  if (a.is_alibi) seen->insert(a.num_heads % 2 == 1 ? "alibi odd Hq" : "alibi");
  seen->insert("causal=" + std::to_string(a.is_causal));
  if (a.window_left >= 0) seen->insert(a.window_left == 0 ? "window 0" : "window");
  if (a.window_left > Ints(c.inputs.at("max_kvlen"))[0]) seen->insert("window past the context");
  if (a.logits_soft_cap > 0) seen->insert("soft_cap");
  if (a.softmax_scale > 0) seen->insert("softmax_scale");
  if (c.inputs.count("sinks")) {
    CHECK(c.inputs.at("sinks").shape == std::vector<int64_t>{a.num_heads});
    seen->insert("sinks");
  }
  const auto mask = c.inputs.find("attn_mask");
  if (mask == c.inputs.end()) return;
  const std::vector<int64_t>& shape = mask->second.shape;
  CHECK(mask->second.dt == query.dt);
  REQUIRE((shape.size() == 2 || shape.size() == 3));
  if (shape.size() == 3) CHECK(shape[0] == a.num_heads);
  CHECK(shape[shape.size() - 2] == rows);
  CHECK((shape.back() >= context && shape.back() <= context + 17));
  seen->insert("mask rank " + std::to_string(shape.size()));
}

void CheckCacheInputs(const Case& c, Coverage* seen) {
  const Attrs& a = c.attrs;
  const Array& key = c.inputs.at("current_key");
  const int64_t rows = Ints(c.inputs.at("seqstarts")).back(), hkv = key.shape.at(1);
  const int64_t d = key.shape.at(2);
  const int64_t batches = static_cast<int64_t>(Ints(c.inputs.at("start_pos")).size());
  CHECK(key.shape == std::vector<int64_t>{rows, hkv, a.head_dim});
  CHECK(c.inputs.at("current_value").shape == key.shape);
  if (c.op == "multi_head_cache_attention") {
    CHECK(hkv == (a.num_kv_heads ? a.num_kv_heads : a.num_heads));
  }
  CHECK((a.layer_idx >= 0 && a.layer_idx < a.num_layer));
  const Array& cache = c.inputs.at("cache");
  REQUIRE(cache.shape.size() == 5);
  const int64_t max_t = cache.shape[a.cache_layout];
  const int64_t stored = a.quant_bit == 4 ? d / 2 : d;
  CHECK(cache.shape == detail::CacheShape(a.cache_layout, a.num_layer, max_t, hkv, stored));
  CHECK(c.inputs.count("scale") == (a.quant_bit != 0 ? 1u : 0u));
  if (a.quant_bit != 0) {
    CHECK(cache.dt == Dt::kI8);
    CHECK(d % a.quant_group == 0);
    if (a.quant_bit == 4) CHECK(a.quant_group % 2 == 0);
    CHECK(c.inputs.at("scale").shape ==
          detail::CacheShape(a.cache_layout, a.num_layer, max_t, hkv, d / a.quant_group));
    seen->insert(std::string("scale ") + DtName(c.inputs.at("scale").dt));
  } else {
    CHECK((IsFloat(cache.dt) || IsFp8Dt(cache.dt)));
    CHECK(a.cache_dtype == (cache.dt == Dt::kF8E4M3   ? "fp8_e4m3"
                            : cache.dt == Dt::kF8E5M2 ? "fp8_e5m2"
                                                      : ""));
    CHECK(c.inputs.count("k_scale") == c.inputs.count("v_scale"));
    if (c.inputs.count("k_scale")) {
      CHECK(IsFp8Dt(cache.dt));
      seen->insert("k_scale");
    }
    seen->insert(std::string("cache ") + DtName(cache.dt));
    for (int64_t i = 0; i < cache.numel(); ++i) {
      if (std::isnan(LoadAsDouble(cache, i))) seen->insert("NaN garbage in cache");
    }
  }
  const std::vector<int64_t>& table = c.inputs.at("cachestarts").shape;
  CHECK(table.size() == static_cast<size_t>(a.cache_mode + 1));
  CHECK(table.at(0) == batches);
  seen->insert("quant_bit " + std::to_string(a.quant_bit));
  seen->insert("layout " + std::to_string(a.cache_layout));
  seen->insert("mode " + std::to_string(a.cache_mode));
  seen->insert("layers " + std::to_string(a.num_layer));
  if (a.cache_mode == 1) seen->insert("page_size " + std::to_string(a.page_size));
}

// Checks a case's shapes against the spec and records what it covers.
void CheckCaseShapes(const Case& c, Coverage* seen) {
  const bool cache_op = c.op != "multi_head_attention";
  const Array& activation = c.inputs.at(cache_op ? "current_key" : "query");
  CHECK(IsFloat(activation.dt));
  seen->insert(std::string("T1 ") + DtName(activation.dt));
  seen->insert("D " + std::to_string(activation.shape.at(2)));
  CheckRequests(c, seen);
  if (c.op != "key_value_cache") CheckAttentionInputs(c, seen);
  if (cache_op) CheckCacheInputs(c, seen);
  if (c.op == "multi_head_attention") {
    const int64_t context = Ints(c.inputs.at("kvstarts")).back();
    const int64_t hkv = c.attrs.num_kv_heads ? c.attrs.num_kv_heads : c.attrs.num_heads;
    CHECK(c.inputs.at("key").shape == std::vector<int64_t>{context, hkv, c.attrs.head_dim});
    CHECK(c.inputs.at("value").shape == c.inputs.at("key").shape);
    CHECK(c.inputs.count("cache") == 0);
  }
}

// The reference accepts the case; its own output rounded to T1 passes CheckAttention.
void RunReference(const Case& c, Coverage* seen = nullptr) {
  if (c.op == "key_value_cache") {
    const KvcResult result = KeyValueCache(c.attrs, c.inputs);
    const Array& key = c.inputs.at("current_key");
    CHECK(result.key.shape == std::vector<int64_t>{Ints(c.inputs.at("kvstarts")).back(),
                                                   key.shape[1] * c.attrs.num_repeat,
                                                   key.shape[2]});
    CHECK(result.value.dt == key.dt);
    return;
  }
  const AttnResult result = c.op == "multi_head_attention"
                                ? MultiHeadAttention(c.attrs, c.inputs)
                                : MultiHeadCacheAttention(c.attrs, c.inputs);
  const Array& query = c.inputs.at("query");
  std::vector<int64_t> shape = query.shape;
  if (c.attrs.head_dim_v > 0) shape.back() = c.attrs.head_dim_v;  // rows of Dv values
  Array rounded = MakeArray(query.dt, shape);
  for (int64_t i = 0; i < rounded.numel(); ++i) StoreRounded(&rounded, i, result.out[i]);
  CHECK(CheckAttention(result, rounded) == "");
  for (size_t i = 0; seen != nullptr && i < result.lse.size(); ++i) {
    if (result.must_be_zero[i] && std::isfinite(result.lse[i])) seen->insert("sink-only row");
  }
}

}  // namespace

TEST_SUITE("reference") {
  TEST_CASE("RandomCase is deterministic per seed") {
    for (const std::string& op : kOps) {
      for (uint64_t i = 0; i < 20; ++i) {
        const uint64_t seed = dynattn_test::BaseSeed() + i;
        const Case a = RandomCase(op, seed), b = RandomCase(op, seed);
        INFO("seed " << seed << ": " << a.description);
        CHECK(a.description == b.description);
        CHECK(SameAttrs(a.attrs, b.attrs));
        CHECK(SameTensors(a.inputs, b.inputs));
      }
      const uint64_t seed = dynattn_test::BaseSeed();
      INFO("seeds " << seed << ", " << seed + 1);
      CHECK_FALSE(SameTensors(RandomCase(op, seed).inputs, RandomCase(op, seed + 1).inputs));
    }
  }

  TEST_CASE("RandomCase yields valid cases across the attribute matrix") {
    Coverage seen;
    for (const std::string& op : kOps) {
      for (uint64_t i = 0; i < 200; ++i) {
        const uint64_t seed = dynattn_test::BaseSeed() + 100 + i;
        const Case c = RandomCase(op, seed);
        INFO("seed " << seed << ": " << c.description);
        CHECK(c.op == op);
        CheckCaseShapes(c, &seen);
        try {
          RunReference(c, &seen);
        } catch (const std::exception& e) {
          FAIL(e.what());
        }
      }
    }
    for (const char* want : {"T1 f32",
                             "T1 f16",
                             "D 1",
                             "D 3",
                             "D 7",
                             "D 40",
                             "D 80",
                             "D 256",
                             "empty request",
                             "idle request",
                             "chunked prefill",
                             "prefill",
                             "B=0",
                             "decoding",
                             "gqa",
                             "alibi",
                             "alibi odd Hq",
                             "causal=0",
                             "causal=1",
                             "mask rank 2",
                             "mask rank 3",
                             "quant_bit 0",
                             "quant_bit 4",
                             "quant_bit 8",
                             "scale f16",
                             "scale f32",
                             "cache f16",
                             "cache f32",
                             "NaN garbage in cache",
                             "layout 0",
                             "layout 1",
                             "layout 2",
                             "layout 3",
                             "mode 0",
                             "mode 1",
                             "layers 3",
                             "page_size 1",
                             "page_size 3",
                             "page_size 5",
                             "page_size 128",
                             "T1 bf16",
                             "cache bf16",
                             "cache f8e4m3",
                             "cache f8e5m2",
                             "k_scale",
                             "window",
                             "window 0",
                             "window past the context",
                             "soft_cap",
                             "softmax_scale",
                             "sinks",
                             "sink-only row"}) {
      CAPTURE(want);
      CHECK(seen.count(want) == 1);
    }
  }

  TEST_CASE("small RandomCase cases are small and valid") {
    GenOptions small;
    small.small = true;
    Coverage seen;
    for (const std::string& op : kOps) {
      for (uint64_t i = 0; i < 50; ++i) {
        const uint64_t seed = dynattn_test::BaseSeed() + 300 + i;
        const Case c = RandomCase(op, seed, small);
        INFO("seed " << seed << ": " << c.description);
        CheckCaseShapes(c, &seen);
        CHECK(c.attrs.head_dim <= 16);
        CHECK(Ints(c.inputs.at("seqstarts")).size() <= 4);
        CHECK_NOTHROW(RunReference(c));
      }
    }
  }

  TEST_CASE("MultiHeadCacheAttention = KeyValueCache then MultiHeadAttention (6)") {
    GenOptions options;
    options.pins.t1 = 0;  // bf16 attention reads the fp32 values, KVC outputs them rounded
    for (uint64_t i = 0; i < 30; ++i) {
      const uint64_t seed = dynattn_test::BaseSeed() + 400 + i;
      const Case c = RandomCase("multi_head_cache_attention", seed, i % 2 ? options : GenOptions{});
      if (c.inputs.at("query").dt == Dt::kBF16) continue;
      INFO("seed " << seed << ": " << c.description);
      const AttnResult fused = MultiHeadCacheAttention(c.attrs, c.inputs);
      const KvcResult kvc = KeyValueCache(c.attrs, c.inputs);
      Tensors unfused = c.inputs;
      unfused["key"] = kvc.key;
      unfused["value"] = kvc.value;
      CHECK(MultiHeadAttention(c.attrs, unfused).out == fused.out);
      CHECK(fused.cache.bytes == kvc.cache.bytes);
      CHECK(fused.scale.bytes == kvc.scale.bytes);
    }
  }

  TEST_CASE("golden matrix: unique names, valid cases, each serving feature present") {
    std::set<std::string> names, features;
    for (const GoldenSpec& spec : GoldenMatrix()) {
      CHECK(names.insert(spec.name).second);
      const Case c = MakeGoldenCase(spec);
      INFO(c.description);
      try {
        if (c.op == "key_value_cache") {
          KeyValueCache(c.attrs, c.inputs);
        } else if (c.op == "unified_attention") {
          UnifiedAttention(c.attrs, c.inputs);
        } else {
          RunReference(c);
        }
      } catch (const std::exception& e) {
        FAIL(e.what());
      }
      if (c.attrs.window_left >= 0) features.insert("window " + c.op);
      if (c.attrs.logits_soft_cap > 0) features.insert("soft_cap " + c.op);
      if (c.attrs.softmax_scale > 0) features.insert("softmax_scale " + c.op);
      if (c.inputs.count("sinks")) features.insert("sinks " + c.op);
      if (c.attrs.precision == "fast") features.insert("precision=fast " + c.op);
      if (c.inputs.count("k_scale")) features.insert("k_scale " + c.op);
      if (c.inputs.count("cache"))
        features.insert(std::string("cache ") + DtName(c.inputs.at("cache").dt) + " " + c.op);
      const Array& q = c.inputs.at(c.op == "key_value_cache" ? "current_key" : "query");
      features.insert(std::string("T1 ") + DtName(q.dt) + " " + c.op);
    }
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      for (const char* f :
           {"window ", "soft_cap ", "softmax_scale ", "sinks ", "T1 bf16 ", "precision=fast "}) {
        CHECK(features.count(f + std::string(op)) == 1);
      }
    }
    for (const char* op : {"key_value_cache", "multi_head_cache_attention", "unified_attention"}) {
      for (const char* f : {"cache bf16 ", "cache f8e4m3 ", "cache f8e5m2 ", "k_scale "}) {
        CHECK(features.count(f + std::string(op)) == 1);
      }
    }
  }
}

}  // namespace dynattn_ref
