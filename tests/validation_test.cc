// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Malformed inputs: each must be rejected with a Status that names the input, and leave the
// cache, the scales and every output byte-for-byte as they were.

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/checked_math.h"
#include "dynattn/plan.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "src/validate.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;
using dynattn_ref::MakeArray;
using dynattn_ref::MakeI64;
using dynattn_ref::ScalarI64;
using dynattn_ref::Tensors;

/// Random values in an fp32/fp16 array, from the base seed plus `salt` (a failure names the
/// base seed, see harness.h).
Array RandomActivations(Dt dt, const std::vector<int64_t>& shape, uint64_t salt) {
  Array a = MakeArray(dt, shape);
  std::mt19937_64 rng(BaseSeed() + salt);
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, normal(rng));
  return a;
}

/// A valid MHCA step: request 0 decodes (4 cached tokens + 1), request 1 is a 3-token prompt.
/// Hq = 4, Hkv = 2, D = 8, int8 with groups of 4, fp16 scales, L = 2, layer 1, layout 0.
Case BaseCase(const std::string& op, int cache_mode) {
  Case c;
  c.op = op;
  c.attrs.num_heads = 4;
  c.attrs.head_dim = 8;
  c.attrs.num_kv_heads = 2;
  c.attrs.num_layer = 2;
  c.attrs.layer_idx = 1;
  c.attrs.quant_bit = 8;
  c.attrs.quant_group = 4;
  c.attrs.cache_mode = cache_mode;
  c.attrs.page_size = 4;
  const int64_t max_t = 16;
  Tensors& in = c.inputs;
  in["query"] = RandomActivations(Dt::kF16, {4, 4, 8}, 1);
  in["current_key"] = RandomActivations(Dt::kF16, {4, 2, 8}, 2);
  in["current_value"] = RandomActivations(Dt::kF16, {4, 2, 8}, 3);
  in["seqstarts"] = MakeI64({3}, {0, 1, 4});
  in["kvstarts"] = MakeI64({3}, {0, 5, 8});
  in["start_pos"] = MakeI64({2}, {4, 0});
  in["cachestarts"] = cache_mode == 0 ? MakeI64({2}, {0, 8}) : MakeI64({2, 2}, {0, 4, 8, -1});
  in["decoding_batches"] = ScalarI64(1);
  in["max_seqlen"] = ScalarI64(3);
  in["max_kvlen"] = ScalarI64(5);
  in["cache"] = MakeArray(Dt::kI8, {max_t, 2, 2, 2, 8});
  std::mt19937_64 rng(BaseSeed() + 4);  // a failure names the seed (harness.h)
  for (uint8_t& byte : in["cache"].bytes) {
    byte = static_cast<uint8_t>(static_cast<int>(rng() % 255) - 127);  // int8 codes -127..127
  }
  in["scale"] = RandomActivations(Dt::kF16, {max_t, 2, 2, 2, 2}, 5);
  in["attn_mask"] = RandomActivations(Dt::kF16, {4, 12}, 6);
  if (op == "multi_head_attention") {
    in["key"] = RandomActivations(Dt::kF16, {8, 2, 8}, 7);
    in["value"] = RandomActivations(Dt::kF16, {8, 2, 8}, 8);
    for (const char* unused :
         {"current_key", "current_value", "start_pos", "cachestarts", "cache", "scale"}) {
      in.erase(unused);
    }
  }
  if (op == "key_value_cache") {
    for (const char* unused : {"query", "decoding_batches", "attn_mask"}) in.erase(unused);
  }
  return c;
}

/// Runs the mutated case and checks rejection, the message, and that nothing was written.
void ExpectRejected(const std::string& op, int mode, const std::string& input,
                    const std::function<void(Case*)>& mutate) {
  Case c = BaseCase(op, mode);
  REQUIRE(RunLibrary(c).status.ok());
  mutate(&c);
  const LibResult r = RunLibrary(c);
  INFO(op << " mode " << mode << ", expected an error about " << input);
  REQUIRE_FALSE(r.status.ok());
  CHECK_MESSAGE(r.status.message().find(input) != std::string::npos, r.status.message());
  std::string why;
  if (c.inputs.count("cache")) CHECK_MESSAGE(SameBytes(r.cache, c.inputs.at("cache"), &why), why);
  if (c.inputs.count("scale")) CHECK_MESSAGE(SameBytes(r.scale, c.inputs.at("scale"), &why), why);
  for (const Array* out : {&r.attn_output, &r.key, &r.value}) {
    for (uint8_t byte : out->bytes) REQUIRE_MESSAGE(byte == 0xFF, "an output was written");
  }
}

void SetI64(Case* c, const char* name, std::vector<int64_t> values) {
  Array& a = c->inputs[name];
  for (size_t i = 0; i < values.size(); ++i) a.data<int64_t>()[i] = values[i];
}

const char* kMhca = "multi_head_cache_attention";

TEST_SUITE("validation") {
  TEST_CASE("malformed batches are rejected") {
    ExpectRejected(kMhca, 0, "seqstarts", [](Case* c) { c->inputs["seqstarts"].dt = Dt::kF32; });
    ExpectRejected(kMhca, 0, "seqstarts", [](Case* c) { SetI64(c, "seqstarts", {1, 1, 4}); });
    ExpectRejected(kMhca, 0, "seqstarts", [](Case* c) { SetI64(c, "seqstarts", {0, 3, 1}); });
    ExpectRejected(kMhca, 0, "seqstarts", [](Case* c) { SetI64(c, "seqstarts", {0, 1, 3}); });
    ExpectRejected(kMhca, 0, "kvstarts", [](Case* c) {
      c->inputs["kvstarts"] = MakeI64({2}, {0, 5});
    });
    ExpectRejected(kMhca, 0, "kvstarts", [](Case* c) {
      SetI64(c, "kvstarts", {0, 6, 9});
      c->inputs["max_kvlen"] = ScalarI64(9);
    });
    ExpectRejected(kMhca, 0, "start_pos", [](Case* c) { SetI64(c, "start_pos", {-1, 0}); });
    // start_pos + seqlen would overflow (UBSan caught it); the rule is checked without the sum.
    ExpectRejected(kMhca, 0, "start_pos 9223372036854775807 + seqlen 1", [](Case* c) {
      SetI64(c, "start_pos", {std::numeric_limits<int64_t>::max(), 0});
    });
    ExpectRejected(kMhca, 0, "decoding_batches",
                   [](Case* c) { c->inputs["decoding_batches"] = ScalarI64(3); });
    ExpectRejected(kMhca, 0, "decoding_batches",
                   [](Case* c) { c->inputs["decoding_batches"] = ScalarI64(-1); });
    ExpectRejected(kMhca, 0, "max_seqlen", [](Case* c) { c->inputs["max_seqlen"] = ScalarI64(2); });
    ExpectRejected(kMhca, 0, "max_kvlen", [](Case* c) { c->inputs["max_kvlen"] = ScalarI64(4); });
    ExpectRejected(kMhca, 0, "max_kvlen", [](Case* c) {
      c->inputs["max_kvlen"] = MakeI64({2}, {9, 9});
    });
    ExpectRejected(kMhca, 0, "max_seqlen", [](Case* c) { c->inputs.erase("max_seqlen"); });
    ExpectRejected("multi_head_attention", 0, "kvstarts", [](Case* c) {
      SetI64(c, "kvstarts", {0, 1, 3});
    });
  }

  TEST_CASE("malformed heads and activations are rejected") {
    ExpectRejected(kMhca, 0, "num_kv_heads", [](Case* c) { c->attrs.num_kv_heads = 3; });
    ExpectRejected(kMhca, 0, "num_heads", [](Case* c) { c->attrs.num_heads = 0; });
    ExpectRejected(kMhca, 0, "query", [](Case* c) { c->attrs.head_dim = 16; });
    ExpectRejected(kMhca, 0, "query", [](Case* c) { c->inputs["query"].dt = Dt::kI8; });
    ExpectRejected(kMhca, 0, "current_key", [](Case* c) {
      c->inputs["current_key"] = RandomActivations(Dt::kF32, {4, 2, 8}, 9);
    });
    ExpectRejected(kMhca, 0, "current_value", [](Case* c) {
      c->inputs["current_value"].shape = {4, 1, 16};
    });
    ExpectRejected("multi_head_attention", 0, "key", [](Case* c) {
      c->inputs["key"].shape = {7, 2, 8};
    });
    ExpectRejected("key_value_cache", 0, "current_key",
                   [](Case* c) { c->inputs.erase("current_key"); });
    ExpectRejected("key_value_cache", 0, "num_repeat", [](Case* c) { c->attrs.num_repeat = 0; });
  }

  TEST_CASE("malformed caches and quantization attributes are rejected") {
    ExpectRejected(kMhca, 0, "quant_bit", [](Case* c) { c->attrs.quant_bit = 3; });
    ExpectRejected(kMhca, 0, "quant_group", [](Case* c) { c->attrs.quant_group = 3; });
    ExpectRejected(kMhca, 0, "quant_group", [](Case* c) {
      c->attrs.quant_bit = 4;
      c->attrs.quant_group = 1;
      c->inputs["cache"].shape.back() = 4;
      c->inputs["cache"].bytes.resize(c->inputs["cache"].bytes.size() / 2);
      c->inputs["scale"].shape.back() = 8;
      c->inputs["scale"].bytes.resize(c->inputs["scale"].bytes.size() * 4);
    });
    ExpectRejected(kMhca, 0, "scale", [](Case* c) { c->inputs.erase("scale"); });
    ExpectRejected(kMhca, 0, "scale", [](Case* c) { c->inputs["scale"].shape = {16, 2, 2, 2, 1}; });
    ExpectRejected(kMhca, 0, "scale", [](Case* c) { c->inputs["scale"].dt = Dt::kI8; });
    ExpectRejected(kMhca, 0, "cache", [](Case* c) { c->inputs["cache"].dt = Dt::kF16; });
    ExpectRejected(kMhca, 0, "cache", [](Case* c) {
      c->attrs.num_layer = 3;
      c->attrs.layer_idx = 0;
    });
    ExpectRejected(kMhca, 0, "cache", [](Case* c) { c->attrs.cache_layout = 3; });
    ExpectRejected(kMhca, 0, "layer_idx", [](Case* c) { c->attrs.layer_idx = 2; });
    ExpectRejected(kMhca, 0, "cache_layout", [](Case* c) { c->attrs.cache_layout = 4; });
    ExpectRejected(kMhca, 0, "cache_mode", [](Case* c) { c->attrs.cache_mode = 2; });
    ExpectRejected(kMhca, 1, "page_size", [](Case* c) { c->attrs.page_size = 0; });
  }

  TEST_CASE("the rules shared with the adapters (src/validate.h) hold here, in their words") {
    // Quantization attributes, through the ops and through MakePmxCacheDesc itself.
    ExpectRejected(kMhca, 0, "quant_bit: must be 0, 4 or 8, got 3",
                   [](Case* c) { c->attrs.quant_bit = 3; });
    ExpectRejected(kMhca, 0, "quant_group: must divide head_dim 8, got 3",
                   [](Case* c) { c->attrs.quant_group = 3; });
    Case c = BaseCase(kMhca, 0);
    const dynattn::TensorView cache = ViewOf(c.inputs["cache"]);
    const dynattn::TensorView scale = ViewOf(c.inputs["scale"]);
    const dynattn::CacheAttrs attrs = CacheAttrsOf(c.attrs);
    dynattn::CacheDesc desc;
    REQUIRE(dynattn::MakePmxCacheDesc(cache, scale, attrs, 2, 8, &desc).ok());
    const auto expect = [&](const dynattn::TensorView& k, const dynattn::CacheAttrs& a,
                            int head_dim, const std::string& message) {
      const dynattn::Status st = dynattn::MakePmxCacheDesc(k, scale, a, 2, head_dim, &desc);
      CHECK_MESSAGE(st.message().rfind(message, 0) == 0, st.message() << " (want " << message);
    };
    expect(cache, attrs, 0, "head_dim: must be >= 1, got 0");
    dynattn::CacheAttrs int4 = attrs;
    int4.quant_bit = 4;
    int4.quant_group = 1;
    expect(cache, int4, 8, "quant_group: must be even for int4");
    // Storage of the cache: negative extent, null data, strides that are not row-major.
    dynattn::TensorView bad = cache;
    bad.shape[0] = -1;
    expect(bad, attrs, 8, "cache: has a negative extent (-1, 2, 2, 2, 8)");
    bad = cache;
    bad.data = nullptr;
    expect(bad, attrs, 8, "cache: data is null");
    bad = cache;
    bad.strides[0] += 1;
    expect(bad, attrs, 8, "cache: must be dense row-major");
    // Offsets, shapes in messages and distinct writes.
    ExpectRejected(kMhca, 0, "seqstarts: must start at 0, got 1", [](Case* c) {
      SetI64(c, "seqstarts", {1, 1, 4});
    });
    ExpectRejected(kMhca, 0,
                   "seqstarts: must be non-decreasing (seqstarts[2] = 1 < seqstarts[1] = 3)",
                   [](Case* c) {
                     SetI64(c, "seqstarts", {0, 3, 1});
                   });
    ExpectRejected(kMhca, 0, "kvstarts: entry 2 = 140737488355328 is too large", [](Case* c) {
      SetI64(c, "kvstarts", {0, 5, int64_t{1} << 47});
    });
    ExpectRejected(kMhca, 0, "attn_mask: must have rank 2 or 3, got shape (48,)",
                   [](Case* c) { c->inputs["attn_mask"].shape = {48}; });
    ExpectRejected(kMhca, 0, "both write slot 4 (rule: write slots must be distinct)", [](Case* c) {
      SetI64(c, "cachestarts", {0, 2});
    });
  }

  TEST_CASE("slots out of range, unusable pages and clashing writes are rejected") {
    ExpectRejected(kMhca, 0, "cachestarts", [](Case* c) { SetI64(c, "cachestarts", {0, 14}); });
    ExpectRejected(kMhca, 0, "cachestarts", [](Case* c) { SetI64(c, "cachestarts", {-1, 8}); });
    ExpectRejected(kMhca, 0, "cachestarts", [](Case* c) { SetI64(c, "cachestarts", {0, 2}); });
    ExpectRejected(kMhca, 0, "cachestarts", [](Case* c) {
      c->inputs["cachestarts"] = MakeI64({2, 1}, {0, 8});
    });
    ExpectRejected(kMhca, 1, "cachestarts", [](Case* c) {
      SetI64(c, "cachestarts", {0, -1, 8, -1});
    });
    ExpectRejected(kMhca, 1, "cachestarts", [](Case* c) {
      SetI64(c, "cachestarts", {0, 4, 14, -1});
    });
    ExpectRejected(kMhca, 1, "cachestarts", [](Case* c) {
      c->inputs["cachestarts"] = MakeI64({2, 1}, {0, 8});
    });
    ExpectRejected(kMhca, 1, "cachestarts", [](Case* c) {
      SetI64(c, "cachestarts", {0, 8, 8, -1});
    });
    ExpectRejected("key_value_cache", 1, "cachestarts", [](Case* c) {
      c->inputs["cachestarts"] = MakeI64({2}, {0, 8});
    });
  }

  TEST_CASE("malformed masks and outputs are rejected") {
    ExpectRejected(kMhca, 0, "attn_mask", [](Case* c) { c->inputs["attn_mask"].shape = {4, 6}; });
    ExpectRejected(kMhca, 0, "attn_mask", [](Case* c) {
      c->inputs["attn_mask"].shape = {2, 4, 6};
    });
    ExpectRejected(kMhca, 0, "attn_mask", [](Case* c) { c->inputs["attn_mask"].shape = {3, 16}; });
    ExpectRejected(kMhca, 0, "attn_mask", [](Case* c) { c->inputs["attn_mask"].shape = {48}; });
    ExpectRejected(kMhca, 0, "attn_mask", [](Case* c) { c->inputs["attn_mask"].dt = Dt::kI8; });
    ExpectRejected("multi_head_attention", 0, "attn_mask", [](Case* c) {
      c->inputs["attn_mask"].shape = {4, 2, 6};
    });
  }

  TEST_CASE("views that are not dense, on a device, or null are rejected without writes") {
    Case c = BaseCase("multi_head_attention", 0);
    Array out = MakeArray(Dt::kF16, {4, 4, 8});
    std::memset(out.bytes.data(), 0xFF, out.bytes.size());
    dynattn::MultiHeadAttentionArgs args;
    args.query = ViewOf(c.inputs["query"]);
    args.key = ViewOf(c.inputs["key"]);
    args.value = ViewOf(c.inputs["value"]);
    args.seqstarts = ViewOf(c.inputs["seqstarts"]);
    args.kvstarts = ViewOf(c.inputs["kvstarts"]);
    args.decoding_batches = ViewOf(c.inputs["decoding_batches"]);
    args.max_seqlen = ViewOf(c.inputs["max_seqlen"]);
    args.max_kvlen = ViewOf(c.inputs["max_kvlen"]);
    args.attn_output = ViewOf(out);
    dynattn::AttentionAttrs attrs;
    attrs.num_heads = 4;
    attrs.head_dim = 8;
    attrs.num_kv_heads = 2;
    REQUIRE(dynattn::MultiHeadAttention(attrs, args).ok());
    std::memset(out.bytes.data(), 0xFF, out.bytes.size());
    const auto expect_error = [&](dynattn::MultiHeadAttentionArgs bad, const char* input,
                                  dynattn::StatusCode code) {
      const dynattn::Status s = dynattn::MultiHeadAttention(attrs, bad);
      CHECK(s.code() == code);
      CHECK_MESSAGE(s.message().find(input) != std::string::npos, s.message());
      for (uint8_t byte : out.bytes) REQUIRE(byte == 0xFF);
    };
    dynattn::MultiHeadAttentionArgs bad = args;
    bad.query.strides[0] = 31;  // rows may be further apart than dense, never closer
    expect_error(bad, "query", dynattn::StatusCode::kInvalidArgument);
    bad = args;
    bad.query.strides[2] = 2;  // a row's elements are dense
    expect_error(bad, "query", dynattn::StatusCode::kInvalidArgument);
    bad = args;
    bad.kvstarts.strides[0] = 2;  // index tensors are dense
    expect_error(bad, "kvstarts", dynattn::StatusCode::kInvalidArgument);
    bad = args;
    bad.key.device = dynattn::Device::kCuda;
    expect_error(bad, "key", dynattn::StatusCode::kUnsupported);
    bad = args;
    bad.value.data = nullptr;
    expect_error(bad, "value", dynattn::StatusCode::kInvalidArgument);
    bad = args;
    bad.attn_output = dynattn::TensorView{};
    expect_error(bad, "attn_output", dynattn::StatusCode::kInvalidArgument);
    bad = args;
    bad.attn_output.shape[1] = 2;
    expect_error(bad, "attn_output", dynattn::StatusCode::kInvalidArgument);
    // An empty mask (no elements) is no mask (spec §5.4): same bits, and nothing reads it (the
    // one-shot call used to hand its pointer to the kernels; found by the fuzzer under ASan).
    {
      Array no_mask_out = out;
      REQUIRE(dynattn::MultiHeadAttention(attrs, args).ok());
      no_mask_out = out;
      std::memset(out.bytes.data(), 0xFF, out.bytes.size());
      std::vector<uint16_t> one_element(1);
      dynattn::MultiHeadAttentionArgs empty_mask = args;
      empty_mask.attn_mask =
          dynattn::TensorView::Dense(one_element.data(), dynattn::DType::kF16, {4, 0});
      REQUIRE(dynattn::MultiHeadAttention(attrs, empty_mask).ok());
      std::string why;
      CHECK_MESSAGE(SameBytes(out, no_mask_out, &why), why);
      std::memset(out.bytes.data(), 0xFF, out.bytes.size());
    }
    bad = args;  // an index tensor one byte off its element alignment (found by the fuzzer)
    std::vector<int64_t> room(8);
    std::memcpy(reinterpret_cast<char*>(room.data()) + 4, c.inputs["kvstarts"].bytes.data(), 24);
    bad.kvstarts.data = reinterpret_cast<char*>(room.data()) + 4;
    expect_error(bad, "kvstarts: data must be aligned to its element size",
                 dynattn::StatusCode::kInvalidArgument);
    for (int threads : {-1, 1 << 20}) {
      dynattn::RunOptions options;
      options.num_threads = threads;
      const dynattn::Status s = dynattn::MultiHeadAttention(attrs, args, options);
      CHECK_MESSAGE(s.message().find("num_threads") == 0, s.message());
      for (uint8_t byte : out.bytes) REQUIRE(byte == 0xFF);
    }
    // A rank past kMaxRank is refused before anything reads the shape (an attn_mask of rank 7
    // used to be read past its last extent and taken as absent).
    for (int rank : {7, 64, std::numeric_limits<int>::max()}) {
      bad = args;
      bad.attn_mask = args.query;
      bad.attn_mask.rank = rank;
      const dynattn::Status s = dynattn::MultiHeadAttention(attrs, bad);
      CHECK(s.message() == "attn_mask: rank must be <= 6");
      for (uint8_t byte : out.bytes) REQUIRE(byte == 0xFF);
    }
  }

  TEST_CASE("a scale view's rank is checked before its shape is read") {
    Array cache = MakeArray(Dt::kI8, {8, 1, 2, 2, 8});
    Array scale = MakeArray(Dt::kF16, {8, 1, 2, 2, 1});
    dynattn::CacheAttrs attrs;
    attrs.quant_bit = 8;
    dynattn::TensorView bad_scale = ViewOf(scale);
    bad_scale.rank = 64;
    dynattn::CacheDesc desc;
    const dynattn::Status s =
        dynattn::MakePmxCacheDesc(ViewOf(cache), bad_scale, attrs, 2, 8, &desc);
    CHECK(s.message() == "scale: rank must be <= 6");
  }

  TEST_CASE("element counts of huge or empty shapes neither overflow nor wrap") {
    const int64_t huge = int64_t{1} << 62;
    const dynattn::TensorView empty =
        dynattn::TensorView::Dense(nullptr, dynattn::DType::kF32, {0, huge, huge});
    CHECK(empty.NumElements() == 0);
    CHECK(empty.IsDense());
    const dynattn::TensorView too_big =
        dynattn::TensorView::Dense(nullptr, dynattn::DType::kF32, {huge, huge});
    CHECK(too_big.NumElements() == std::numeric_limits<int64_t>::max());
    CHECK(too_big.NumBytes() == SIZE_MAX);
    CHECK(!dynattn::internal::CheckStorage("query", too_big).ok());
    dynattn::TensorView past_rank = empty;
    past_rank.rank = std::numeric_limits<int>::max();
    CHECK(past_rank.NumElements() == 0);
    CHECK(!past_rank.IsDense());
  }

  TEST_CASE("checked arithmetic refuses what does not fit, in one place") {
    using dynattn::internal::CheckedElementCount;
    int64_t out = 0;
    CHECK_FALSE(dynattn::internal::CheckedMul(int64_t{1} << 32, int64_t{1} << 31, &out));
    CHECK(dynattn::internal::CheckedMul(int64_t{1} << 31, int64_t{1} << 31, &out));
    CHECK(out == int64_t{1} << 62);
    CHECK_FALSE(dynattn::internal::CheckedAdd(std::numeric_limits<int64_t>::max(), 1, &out));
    CHECK_FALSE(dynattn::internal::CheckedProduct({1 << 30, 1 << 30, 1 << 30}, &out));
    const int64_t wraps[] = {int64_t{1} << 62, int64_t{1} << 62, 0};
    CHECK(CheckedElementCount(wraps, 3) == 0);  // a zero extent, wherever it is
    CHECK(CheckedElementCount(wraps, 2) == -1);
    const int64_t negative[] = {4, -1};
    CHECK(CheckedElementCount(negative, 2) == -1);
  }
}

/// The MHCA call of BaseCase as views over `c`'s arrays (outputs poisoned by the caller).
dynattn::MultiHeadCacheAttentionArgs MhcaArgs(Case& c, Array* out) {
  dynattn::MultiHeadCacheAttentionArgs a;
  Tensors& in = c.inputs;
  a.query = ViewOf(in["query"]);
  a.current_key = ViewOf(in["current_key"]);
  a.current_value = ViewOf(in["current_value"]);
  a.seqstarts = ViewOf(in["seqstarts"]);
  a.kvstarts = ViewOf(in["kvstarts"]);
  a.cachestarts = ViewOf(in["cachestarts"]);
  a.start_pos = ViewOf(in["start_pos"]);
  a.decoding_batches = ViewOf(in["decoding_batches"]);
  a.max_seqlen = ViewOf(in["max_seqlen"]);
  a.max_kvlen = ViewOf(in["max_kvlen"]);
  a.cache = ViewOf(in["cache"]);
  a.scale = ViewOf(in["scale"]);
  a.attn_output = ViewOf(*out);
  return a;
}

dynattn::MultiHeadCacheAttentionAttrs MhcaAttrs(const Case& c) {
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = AttentionAttrsOf(c.attrs);
  attrs.cache = CacheAttrsOf(c.attrs);
  return attrs;
}

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

  TEST_CASE("window, soft-cap, softmax scale, sinks and fp8 scales are checked before writes") {
    Case c = BaseCase(kMhca, 0);
    Array out = MakeArray(Dt::kF16, {4, 4, 8});
    const dynattn::MultiHeadCacheAttentionAttrs good = MhcaAttrs(c);
    std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    float k_scale = 0.25f;
    Array fp8_cache = MakeArray(Dt::kI8, {16, 2, 2, 2, 8});
    const auto sinks_view = [&] {
      return dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF32, {4});
    };
    const auto scalar = [](float* value) {
      return dynattn::TensorView::Dense(value, dynattn::DType::kF32, {});
    };
    // fp8 cache of the same geometry: quant_bit 0, no scale tensor.
    const auto fp8_args = [&](dynattn::MultiHeadCacheAttentionArgs* a) {
      a->cache = ViewOf(fp8_cache);
      a->cache.dtype = dynattn::DType::kF8E4M3;
      a->scale = dynattn::TensorView{};
    };
    dynattn::MultiHeadCacheAttentionAttrs fp8_attrs = good;
    fp8_attrs.cache.quant_bit = 0;
    const auto expect = [&](const dynattn::MultiHeadCacheAttentionAttrs& attrs,
                            const std::function<void(dynattn::MultiHeadCacheAttentionArgs*)>& bad,
                            const std::string& input, const std::string& rule) {
      std::memset(out.bytes.data(), 0xFF, out.bytes.size());
      dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
      bad(&args);
      const Array cache_before = c.inputs["cache"], fp8_before = fp8_cache;
      const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
      INFO("expected " << input << ": " << rule << ", got: " << status.message());
      REQUIRE_FALSE(status.ok());
      CHECK(status.message().rfind(input + ":", 0) == 0);
      CHECK(status.message().find(rule) != std::string::npos);
      for (uint8_t byte : out.bytes) REQUIRE_MESSAGE(byte == 0xFF, "attn_output was written");
      std::string why;
      CHECK_MESSAGE(SameBytes(c.inputs["cache"], cache_before, &why), why);
      CHECK_MESSAGE(SameBytes(fp8_cache, fp8_before, &why), why);
    };
    const auto with = [&](const std::function<void(dynattn::AttentionAttrs*)>& change) {
      dynattn::MultiHeadCacheAttentionAttrs attrs = good;
      change(&attrs.attention);
      return attrs;
    };
    const auto none = [](dynattn::MultiHeadCacheAttentionArgs*) {};
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    expect(with([](auto* a) { a->window_left = -2; }), none, "window_left", "-1 (off) or >= 0");
    expect(with([](auto* a) { a->logits_soft_cap = -1.0f; }), none, "logits_soft_cap", "> 0");
    expect(with([&](auto* a) { a->logits_soft_cap = inf; }), none, "logits_soft_cap", "finite");
    expect(with([&](auto* a) { a->softmax_scale = nan; }), none, "softmax_scale", "finite");
    expect(with([](auto* a) { a->softmax_scale = -0.5f; }), none, "softmax_scale", "> 0");
    expect(
        good,
        [&](auto* a) {
          a->sinks = dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF32, {3});
        },
        "sinks", "shape (num_heads = 4,)");
    expect(
        good,
        [&](auto* a) {
          a->sinks = dynattn::TensorView::Dense(sinks.data(), dynattn::DType::kF16, {4});
        },
        "sinks", "float32");
    sinks[2] = nan;
    expect(
        good, [&](auto* a) { a->sinks = sinks_view(); }, "sinks", "entry 2 is not finite");
    sinks[2] = 2.0f;
    expect(
        good, [&](auto* a) { a->k_scale = scalar(&k_scale); }, "k_scale",
        "only taken by an fp8 cache");
    expect(
        fp8_attrs,
        [&](auto* a) {
          fp8_args(a);
          a->scale = ViewOf(c.inputs["scale"]);
        },
        "scale", "must be absent for an fp8 cache");
    for (float bad : {0.0f, -1.0f, inf, nan}) {
      k_scale = bad;
      expect(
          fp8_attrs,
          [&](auto* a) {
            fp8_args(a);
            a->k_scale = scalar(&k_scale);
          },
          "k_scale", "finite and > 0");
      expect(
          fp8_attrs,
          [&](auto* a) {
            fp8_args(a);
            a->v_scale = scalar(&k_scale);
          },
          "v_scale", "finite and > 0");
    }
    k_scale = 0.25f;
    expect(
        fp8_attrs,
        [&](auto* a) {
          fp8_args(a);
          a->k_scale = dynattn::TensorView::Dense(&k_scale, dynattn::DType::kF16, {});
        },
        "k_scale", "float32 scalar");
    // A raw descriptor's own fp8 scale is checked too.
    dynattn::CacheDesc raw;
    REQUIRE(dynattn::MakePmxCacheDesc(
                [&] {
                  dynattn::TensorView v = ViewOf(fp8_cache);
                  v.dtype = dynattn::DType::kF8E5M2;
                  return v;
                }(),
                {}, fp8_attrs.cache, 2, 8, &raw)
                .ok());
    raw.value.tensor_scale = -2.0f;
    expect(
        fp8_attrs,
        [&](auto* a) {
          a->cache = dynattn::TensorView{};
          a->scale = dynattn::TensorView{};
          a->cache_desc = &raw;
        },
        "v_scale", "finite and > 0");
    // The valid forms pass: sinks, a window, a cap, a scale; an fp8 cache with its scales.
    dynattn::MultiHeadCacheAttentionArgs args = MhcaArgs(c, &out);
    args.sinks = sinks_view();
    CHECK(dynattn::MultiHeadCacheAttention(with([](auto* a) {
                                             a->window_left = 0;
                                             a->logits_soft_cap = 30.0f;
                                             a->softmax_scale = 0.125f;
                                           }),
                                           args)
              .ok());
    args = MhcaArgs(c, &out);
    fp8_args(&args);
    args.k_scale = scalar(&k_scale);
    CHECK(dynattn::MultiHeadCacheAttention(fp8_attrs, args).ok());
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
