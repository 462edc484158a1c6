// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fuzz input format (fuzz/fuzz_input.h): its extension (bf16 activations, bf16/fp8 caches,
// window, soft-cap, softmax scale, sinks and fp8 scales) survives Encode/Decode, and inputs written
// before the extension existed keep their bytes and their meaning. (Built into the tool's test
// binary: the seed corpus maker and the replay tool are tools too.)

#include "fuzz/fuzz_input.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/harness.h"

namespace {

using dynattn_fuzz::CacheChoice;
using dynattn_fuzz::Call;
using dynattn_fuzz::Decode;
using dynattn_fuzz::Encode;
using dynattn_fuzz::Op;

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

Call DecodeString(const std::string& bytes) {
  return Decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A random call of `op` that uses none of the extension: tensors present or not, small shapes.
Call RandomBaseCall(Op op, std::mt19937_64& rng) {
  Call call;
  call.op = op;
  call.flags = dynattn_fuzz::Flags::Decode(static_cast<uint8_t>(rng() & 0x1F));
  for (int i = 0; i < dynattn_fuzz::kNumAttrs; ++i) {
    *dynattn_fuzz::AttrAt(&call.attrs, i) = static_cast<int64_t>(rng() % 300) - 20;
  }
  const std::vector<dynattn_fuzz::TensorSpec> all = dynattn_fuzz::AllTensors(op);
  for (size_t k = 0; k < all.size(); ++k) {
    const dynattn_fuzz::TensorSpec& spec = all[k];
    dynattn_fuzz::TensorInput t;
    const bool extra = k >= dynattn_fuzz::OpTensors(op).size();
    t.present = !extra && rng() % 4 != 0;
    if (t.present) {
      t.rank = static_cast<int>(rng() % 4);
      for (int d = 0; d < t.rank; ++d) t.shape[d] = static_cast<int64_t>(rng() % 40);
      if (spec.role == dynattn_fuzz::Role::kIndex) {
        for (int i = 0; i < static_cast<int>(rng() % 5); ++i) {
          t.index_values.push_back(static_cast<int64_t>(rng() % 1000) - 3);
        }
      }
    }
    call.tensors.push_back(t);
  }
  return call;
}

TEST_SUITE("cli") {
  TEST_CASE("fuzz input: a call without the extension encodes as before it existed") {
    std::mt19937_64 rng(dynattn_test::BaseSeed());
    for (int i = 0; i < 200; ++i) {
      const Op op = static_cast<Op>(i % dynattn_fuzz::kNumOps);
      const Call call = RandomBaseCall(op, rng);
      const std::string bytes = Encode(call);
      // Nothing follows the op's own tensors: the all-default extension is left out, and a
      // decoder reading past the end sees zeros, which mean "off".
      const Call back = DecodeString(bytes);
      CHECK(Encode(back) == bytes);
      CHECK_FALSE(back.ext.bf16);
      CHECK(back.ext.cache == CacheChoice::kDefault);
      CHECK(back.ext.window_left == -1);
      CHECK(Bits(back.ext.logits_soft_cap) == 0);
      CHECK(Bits(back.ext.softmax_scale) == 0);
      REQUIRE(back.tensors.size() == dynattn_fuzz::AllTensors(op).size());
      for (size_t k = dynattn_fuzz::OpTensors(op).size(); k < back.tensors.size(); ++k) {
        CHECK_FALSE(back.tensors[k].present);
      }
    }
  }

  TEST_CASE("fuzz input: every extension field survives Encode and Decode") {
    std::mt19937_64 rng(dynattn_test::BaseSeed() + 1);
    const float reals[] = {0.0f, 1.0f, 30.0f, NAN, -INFINITY, 0.3f, -7.25f, 1e-45f, 3.4e38f};
    for (int i = 0; i < 200; ++i) {
      const Op op = static_cast<Op>(1 + i % 3);  // the ops that take sinks
      Call call = RandomBaseCall(op, rng);
      call.ext.bf16 = rng() & 1;
      call.ext.cache = static_cast<CacheChoice>(rng() % 4);
      call.ext.window_left = static_cast<int64_t>(rng() % 2 ? rng() % 100 : rng()) - 1;
      call.ext.logits_soft_cap = reals[rng() % std::size(reals)];
      call.ext.softmax_scale = reals[rng() % std::size(reals)];
      const size_t first_extra = dynattn_fuzz::OpTensors(op).size();
      const std::vector<dynattn_fuzz::TensorSpec> specs = dynattn_fuzz::AllTensors(op);
      // A distributed rank's inputs (key_offsets, key_counts, lse) share one presence bit.
      const bool shard = rng() % 3 != 0;
      for (size_t k = first_extra; k < call.tensors.size(); ++k) {
        dynattn_fuzz::TensorInput& t = call.tensors[k];
        const std::string name = specs[k].name;
        const bool shared = name == "key_offsets" || name == "key_counts" || name == "lse";
        t.present = shared ? shard : rng() % 3 != 0;
        if (!t.present) continue;
        t.rank = static_cast<int>(rng() % 2);
        t.shape[0] = static_cast<int64_t>(rng() % 9);
        t.mutation = static_cast<dynattn_fuzz::Mutation>(rng() % 3);
        for (int v = 0; v < static_cast<int>(rng() % 5); ++v) {
          if (specs[k].role == dynattn_fuzz::Role::kIndex) {
            t.index_values.push_back(static_cast<int64_t>(rng() % 1000) - 3);
          } else if (specs[k].role != dynattn_fuzz::Role::kLse) {
            t.real_values.push_back(reals[rng() % std::size(reals)]);
          }
        }
      }
      const Call back = DecodeString(Encode(call));
      CAPTURE(i);
      CHECK(back.ext.bf16 == call.ext.bf16);
      CHECK(back.ext.cache == call.ext.cache);
      CHECK(back.ext.window_left == call.ext.window_left);
      CHECK(Bits(back.ext.logits_soft_cap) == Bits(call.ext.logits_soft_cap));
      CHECK(Bits(back.ext.softmax_scale) == Bits(call.ext.softmax_scale));
      REQUIRE(back.tensors.size() == call.tensors.size());
      for (size_t k = first_extra; k < call.tensors.size(); ++k) {
        const dynattn_fuzz::TensorInput &want = call.tensors[k], &got = back.tensors[k];
        CHECK(got.present == want.present);
        if (!want.present) continue;
        CHECK(got.rank == want.rank);
        CHECK(got.mutation == want.mutation);
        if (want.rank > 0) CHECK(got.shape[0] == want.shape[0]);
        // Trailing zero values may be left out (missing bytes read as 0): compare by bits up to
        // the decoded count, the rest must be +0.
        REQUIRE(got.index_values.size() <= want.index_values.size());
        for (size_t v = 0; v < want.index_values.size(); ++v) {
          CHECK((v < got.index_values.size() ? got.index_values[v] : 0) == want.index_values[v]);
        }
        REQUIRE(got.real_values.size() <= want.real_values.size());
        for (size_t v = 0; v < want.real_values.size(); ++v) {
          const float value = v < got.real_values.size() ? got.real_values[v] : 0.0f;
          CHECK(Bits(value) == Bits(want.real_values[v]));
        }
      }
    }
  }

  TEST_CASE("fuzz input: any bytes decode, the extension included") {
    std::mt19937_64 rng(dynattn_test::BaseSeed() + 2);
    for (int i = 0; i < 2000; ++i) {
      std::string bytes(rng() % 300, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      const Call call = DecodeString(bytes);
      CHECK(call.tensors.size() == dynattn_fuzz::AllTensors(call.op).size());
      CHECK(static_cast<int>(call.ext.cache) < 4);
      // Re-encoding a decoded call gives a call that decodes the same way.
      const Call again = DecodeString(Encode(call));
      CHECK(Encode(again) == Encode(call));
    }
  }
}

}  // namespace
