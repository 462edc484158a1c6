// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Malformed inputs: each must be rejected with a Status that names the input, and leave the
// cache, the scales and every output byte-for-byte as they were. Batches, heads, caches and
// quantization attributes, slots and pages, masks and outputs, views that are not dense, on a
// device or null; and the checked arithmetic of shapes.

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "src/validate.h"
#include "tests/support/run_case.h"
#include "tests/support/validation_case.h"

namespace dynattn_test {
namespace {

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

  TEST_CASE("value rows of another size (head_dim_v) are checked against every tensor") {
    ExpectRejected("multi_head_attention", 0, "head_dim_v",
                   [](Case* c) { c->attrs.head_dim_v = -1; });
    // The value tensor keeps D = 8 while head_dim_v says 16 (the output has rows of 16).
    ExpectRejected("multi_head_attention", 0, "value", [](Case* c) { c->attrs.head_dim_v = 16; });
    ExpectRejected(kMhca, 0, "current_value", [](Case* c) { c->attrs.head_dim_v = 16; });
    // New values of 16 with a PMX cache, whose keys and values share one row size.
    ExpectRejected(kMhca, 1, "head_dim_v", [](Case* c) {
      c->attrs.head_dim_v = 16;
      c->inputs["current_value"] = RandomActivations(Dt::kF16, {4, 2, 16}, 3);
    });
    ExpectRejected("key_value_cache", 0, "head_dim_v", [](Case* c) {
      c->inputs["current_value"] = RandomActivations(Dt::kF16, {4, 2, 16}, 3);
    });
    ExpectRejected("key_value_cache", 0, "current_value", [](Case* c) {
      c->inputs["current_value"] = RandomActivations(Dt::kF16, {4, 2, 0}, 3);
    });
  }

  TEST_CASE("values read from the keys (value_from_key) refuse a value input and a PMX cache") {
    ExpectRejected("multi_head_attention", 0, "value", [](Case* c) {
      c->attrs.value_from_key = 1;
      c->attrs.head_dim_v = 4;
    });
    ExpectRejected("multi_head_attention", 0, "head_dim_v", [](Case* c) {
      c->attrs.value_from_key = 1;
      c->attrs.head_dim_v = 16;  // more than the keys' 8
      c->inputs.erase("value");
    });
    ExpectRejected(kMhca, 0, "current_value", [](Case* c) { c->attrs.value_from_key = 1; });
    ExpectRejected(kMhca, 1, "value_from_key", [](Case* c) {
      c->attrs.value_from_key = 1;
      c->inputs.erase("current_value");
    });
  }

  TEST_CASE(
      "a precision that is neither exact nor fast is refused by name, in every attention op") {
    for (const char* raw : {"2", "7", "255"}) {
      for (const char* op : {"multi_head_attention", kMhca}) {
        ExpectRejected(op, 0, "precision", [raw](Case* c) { c->attrs.precision = raw; });
      }
    }
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

}  // namespace
}  // namespace dynattn_test
