// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Checks the float64 reference against the worked examples of the PMX ops spec (docs/numerics.md),
// bit-exact where the spec is: fp16 rounding, int8/int4 quantization, cache addressing and slot
// mapping, the order of writes and reads, decode attention, ALiBi, the causal rule, masks, GQA,
// and the tolerances CheckAttention applies. If these fail, the oracle itself is wrong, so
// nothing else can be trusted.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/reference_inputs.h"

namespace dynattn_ref {
namespace {

using detail::CacheOffset;
using detail::Dequantize;
using detail::GroupQuant;
using detail::QuantizeGroup;
using detail::RoundTo;

const double kInf = std::numeric_limits<double>::infinity();

// The §2.1 worked-example group (fp16 values).
const std::vector<double> kExampleGroup = {0.5, -1.25, 3.0, 0.0, 2.0, -0.75, 1.0, 0.0999755859375};

std::vector<double> AllValues(const Array& array) {
  std::vector<double> values(array.numel());
  for (int64_t i = 0; i < array.numel(); ++i) values[i] = LoadAsDouble(array, i);
  return values;
}

std::vector<double> DequantizeAll(const GroupQuant& quant, Dt t1, Dt t3) {
  std::vector<double> values;
  for (int q : quant.q) values.push_back(Dequantize(q, quant.stored, t1, t3));
  return values;
}

// The attention output of (row, head) as a vector.
std::vector<double> OutRow(const AttnResult& result, int64_t row, int64_t head, int64_t hq,
                           int64_t d) {
  const auto begin = result.out.begin() + (row * hq + head) * d;
  return std::vector<double>(begin, begin + d);
}

// |got - want| <= tolerance element-wise.
void CheckClose(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], " want ", want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tolerance);
  }
}

}  // namespace

TEST_SUITE("reference") {
  TEST_CASE("fp16 conversion rounds once, to nearest even") {
    CHECK(F16Bits(1.0) == 0x3C00);
    CHECK(F16Bits(1.0 + std::ldexp(1.0, -11)) == 0x3C00);                         // tie -> even
    CHECK(F16Bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);  // one rounding
    CHECK(F16Bits(65520.0) == 0x7C00);
    CHECK(F16Value(0x7BFF) == 65504.0);
    CHECK(F16Value(0x00A8) == 168 * std::ldexp(1.0, -24));
  }

  TEST_CASE("int8 quantization of the fp16 worked example (2.1)") {
    const GroupQuant quant = QuantizeGroup(kExampleGroup, Dt::kF16, Dt::kF16, 8);
    CHECK(quant.scale == 0.02362060546875);
    CHECK(quant.stored == 0.02362060546875);
    std::vector<double> quotients;
    for (double x : kExampleGroup) quotients.push_back(RoundTo(Dt::kF16, x / quant.scale));
    CHECK(quotients ==
          std::vector<double>{21.171875, -52.90625, 127.0, 0, 84.6875, -31.75, 42.34375, 4.234375});
    CHECK(quant.q == std::vector<int>{21, -53, 127, 0, 85, -32, 42, 4});
    CHECK(DequantizeAll(quant, Dt::kF16, Dt::kF16) ==
          std::vector<double>{0.49609375, -1.251953125, 3.0, 0, 2.0078125, -0.755859375, 0.9921875,
                              0.094482421875});
  }

  TEST_CASE("ties round half to even after the T1 quotient (2.1)") {
    for (Dt t1 : {Dt::kF16, Dt::kF32}) {
      const GroupQuant quant = QuantizeGroup({63.5, 0.25, 0.75, 1.25}, t1, Dt::kF16, 8);
      CHECK(quant.scale == 0.5);
      CHECK(quant.q == std::vector<int>{127, 0, 2, 2});
    }
  }

  TEST_CASE("eps floor and all-zero groups (2.1)") {
    const GroupQuant zero16 = QuantizeGroup({0, 0, 0, 0}, Dt::kF16, Dt::kF16, 8);
    CHECK(zero16.q == std::vector<int>{0, 0, 0, 0});
    CHECK(F16Bits(zero16.stored) == 0x00A8);  // 168 * 2^-24
    const GroupQuant tiny16 = QuantizeGroup({RoundTo(Dt::kF16, 1e-4), 0}, Dt::kF16, Dt::kF16, 8);
    CHECK(tiny16.scale == 168 * std::ldexp(1.0, -24));
    CHECK(tiny16.q[0] == 10);  // fp16(1e-4 / eps) = 9.984375 -> 10
    const GroupQuant zero32 = QuantizeGroup({0, 0}, Dt::kF32, Dt::kF32, 4);
    CHECK(zero32.scale == static_cast<double>(1e-5f));
    CHECK(zero32.q == std::vector<int>{0, 0});
  }

  TEST_CASE("fp32 input with fp16 scale quantizes with the unrounded scale (2.1 step 5)") {
    const GroupQuant quant = QuantizeGroup({1.0, RoundTo(Dt::kF32, 0.3)}, Dt::kF32, Dt::kF16, 8);
    CHECK(quant.scale == static_cast<double>(1.0f / 127.0f));
    CHECK(quant.stored == RoundTo(Dt::kF16, quant.scale));
    CHECK(quant.stored != quant.scale);
    CHECK(quant.q == std::vector<int>{127, 38});
    // Dequantization multiplies in the scale dtype (fp16) before casting to fp32.
    CHECK(Dequantize(38, quant.stored, Dt::kF32, Dt::kF16) == RoundTo(Dt::kF16, 38 * quant.stored));
  }

  TEST_CASE("int4 worked example and nibble packing (2.2)") {
    const GroupQuant quant = QuantizeGroup(kExampleGroup, Dt::kF16, Dt::kF16, 4);
    CHECK(quant.stored == 0.428466796875);
    CHECK(quant.q == std::vector<int>{1, -3, 7, 0, 5, -2, 2, 0});
    CHECK(DequantizeAll(quant, Dt::kF16, Dt::kF16) ==
          std::vector<double>{0.428466796875, -1.28515625, 3.0, 0, 2.142578125, -0.85693359375,
                              0.85693359375, 0});
    CHECK(detail::PackNibbles(1, -3) == 0xD1);
    CHECK(detail::DecodeNibble(0x08, 0) == -8);
    CHECK(detail::DecodeNibble(0x80, 1) == -8);
    CHECK(detail::DecodeNibble(0xF7, 0) == 7);
    CHECK(detail::DecodeNibble(0xF7, 1) == -1);
  }

  TEST_CASE("KeyValueCache stores the worked examples byte-exactly (2.1, 2.2)") {
    const Array x = FloatArray(Dt::kF16, {1, 1, 8}, kExampleGroup);
    for (int bits : {8, 4}) {
      CAPTURE(bits);
      Attrs attrs;
      attrs.quant_bit = bits;
      attrs.quant_group = 8;
      const int64_t bytes_per_head = bits == 8 ? 8 : 4;
      Tensors in = OneRequestKvc(x, x, 0, 0, MakeArray(Dt::kI8, {1, 1, 2, 1, bytes_per_head}));
      in["scale"] = MakeArray(Dt::kF16, {1, 1, 2, 1, 1});
      const KvcResult result = KeyValueCache(attrs, in);
      const std::vector<uint8_t> key_bytes(result.cache.bytes.begin(),
                                           result.cache.bytes.begin() + bytes_per_head);
      if (bits == 8) {
        CHECK(key_bytes == std::vector<uint8_t>{21, 256 - 53, 127, 0, 85, 256 - 32, 42, 4});
        CHECK(LoadAsDouble(result.scale, 0) == 0.02362060546875);
        CHECK(AllValues(result.key)[1] == -1.251953125);
      } else {
        CHECK(key_bytes == std::vector<uint8_t>{0xD1, 0x07, 0xE5, 0x02});
        CHECK(LoadAsDouble(result.scale, 1) == 0.428466796875);  // the value's scale
        CHECK(AllValues(result.value) == std::vector<double>{0.428466796875, -1.28515625, 3.0, 0,
                                                             2.142578125, -0.85693359375,
                                                             0.85693359375, 0});
      }
    }
  }

  TEST_CASE("int4 reads accept nibble 0x8 as -8") {
    Attrs attrs;
    attrs.quant_bit = 4;
    attrs.quant_group = 2;
    Array cache = MakeArray(Dt::kI8, {1, 1, 2, 1, 1});
    cache.bytes = {0x8F, 0x80};  // key: (-1, -8), value: (0, -8)
    Tensors in =
        OneRequestKvc(MakeArray(Dt::kF32, {0, 1, 2}), MakeArray(Dt::kF32, {0, 1, 2}), 1, 0, cache);
    in["scale"] = FloatArray(Dt::kF32, {1, 1, 2, 1, 1}, {0.5, 0.25});
    const KvcResult result = KeyValueCache(attrs, in);
    CHECK(AllValues(result.key) == std::vector<double>{-0.5, -4.0});
    CHECK(AllValues(result.value) == std::vector<double>{0.0, -2.0});
  }

  TEST_CASE("cache addressing example (3.2)") {
    const int64_t want[] = {407, 527, 647, 727}, want_scale[] = {203, 263, 323, 363};
    for (int layout = 0; layout < 4; ++layout) {
      CAPTURE(layout);
      CHECK(CacheOffset(layout, 5, 1, 1, 2, 3, 3, 16, 3, 4) == want[layout]);
      CHECK(CacheOffset(layout, 5, 1, 1, 2, 3 / 2, 3, 16, 3, 4 / 2) == want_scale[layout]);
      // KeyValueCache puts (slot 5, layer 1, value, head 2, d 3) there: int8 with G = 2.
      Attrs attrs;
      attrs.num_layer = 3;
      attrs.layer_idx = 1;
      attrs.quant_bit = 8;
      attrs.quant_group = 2;
      attrs.cache_layout = layout;
      std::vector<double> value(12, 0.0);
      value[2 * 4 + 3] = 1.27;
      Tensors in =
          OneRequestKvc(MakeArray(Dt::kF32, {1, 3, 4}), FloatArray(Dt::kF32, {1, 3, 4}, value), 0,
                        5, MakeArray(Dt::kI8, detail::CacheShape(layout, 3, 16, 3, 4)));
      in["scale"] = MakeArray(Dt::kF32, detail::CacheShape(layout, 3, 16, 3, 2));
      const KvcResult result = KeyValueCache(attrs, in);
      CHECK(LoadAsDouble(result.cache, want[layout]) == 127);
      CHECK(LoadAsDouble(result.scale, want_scale[layout]) == RoundTo(Dt::kF32, 1.27f / 127.0f));
    }
  }

  TEST_CASE("slot mapping example, P = 4 (3.1)") {
    const Array offsets = MakeI64({1}, {100});
    const Array pages = MakeI64({1, 4}, {12, 4, 28, -1});
    const std::vector<int64_t> paged_slots = {12, 13, 14, 15, 4, 5, 6, 7, 28};
    for (int64_t p = 0; p < 9; ++p) {
      CHECK(detail::SlotOf(offsets, 0, 4, 0, p) == 100 + p);
      CHECK(detail::SlotOf(pages, 1, 4, 0, p) == paged_slots[p]);
    }
    // End to end: slot s of the fp32 cache initially holds key 1000 + s; writes p = 6, 7, 8.
    Attrs attrs;
    attrs.cache_mode = 1;
    attrs.page_size = 4;
    Array cache = MakeArray(Dt::kF32, {32, 1, 2, 1, 1});
    for (int64_t s = 0; s < 32; ++s) StoreRounded(&cache, s * 2, 1000 + s);
    const Array key = FloatArray(Dt::kF32, {3, 1, 1}, {-1, -2, -3});
    Tensors in = OneRequestKvc(key, key, 6, 0, cache);
    in["cachestarts"] = pages;
    const KvcResult result = KeyValueCache(attrs, in);
    CHECK(AllValues(result.key) ==
          std::vector<double>{1012, 1013, 1014, 1015, 1004, 1005, -1, -2, -3});
    CHECK(LoadAsDouble(result.cache, 28 * 2) == -3);
  }

  TEST_CASE("mixed step of the 11.1 example: writes and reads per request") {
    // fp32 cache, D = 1: slot s initially holds key 1000 + s; new keys are -1 (batch 0), -2..-4.
    Array cache = MakeArray(Dt::kF32, {80, 1, 2, 1, 1});
    for (int64_t s = 0; s < 80; ++s) StoreRounded(&cache, s * 2, 1000 + s);
    const Array key = FloatArray(Dt::kF32, {4, 1, 1}, {-1, -2, -3, -4});
    Tensors in = OneRequestKvc(key, key, 0, 0, cache);
    in["seqstarts"] = MakeI64({3}, {0, 1, 4});
    in["kvstarts"] = MakeI64({3}, {0, 5, 8});
    in["start_pos"] = MakeI64({2}, {4, 0});
    in["cachestarts"] = MakeI64({2}, {0, 64});
    in["max_seqlen"] = ScalarI64(3);
    in["max_kvlen"] = ScalarI64(5);
    const KvcResult result = KeyValueCache(Attrs{}, in);
    CHECK(AllValues(result.key) == std::vector<double>{1000, 1001, 1002, 1003, -1, -2, -3, -4});
    CHECK(LoadAsDouble(result.cache, 4 * 2) == -1);
    CHECK(LoadAsDouble(result.cache, 66 * 2) == -4);
  }

  TEST_CASE("paged step of the 11.4 example (P = 128, layout 3)") {
    const Array table = MakeI64({2, 3}, {0, 256, -1, 128, -1, -1});
    CHECK(detail::SlotOf(table, 1, 128, 0, 130) == 258);
    CHECK(detail::SlotOf(table, 1, 128, 0, 127) == 127);
    CHECK(detail::SlotOf(table, 1, 128, 0, 128) == 256);
    CHECK(detail::SlotOf(table, 1, 128, 1, 4) == 132);
    const int64_t l = 1, h = 2, hkv = 4, max_t = 512, d = 8;
    CHECK(CacheOffset(3, 258, l, 0, h, 0, 2, max_t, hkv, d) ==
          ((l * 2 + 0) * hkv + h) * max_t * d + 258 * d);
  }

  TEST_CASE("all writes happen before any read (3.1 ordering)") {
    // Request 0 (idle: nothing new) reads slot 3, which request 1 writes in the same step, so it
    // must already see the new value.
    Attrs attrs;
    attrs.cache_mode = 1;
    attrs.page_size = 1;
    Tensors in;
    in["current_key"] = FloatArray(Dt::kF32, {1, 1, 1}, {7});
    in["current_value"] = in["current_key"];
    in["seqstarts"] = MakeI64({3}, {0, 0, 1});
    in["kvstarts"] = MakeI64({3}, {0, 1, 2});
    in["start_pos"] = MakeI64({2}, {1, 0});
    in["cachestarts"] = MakeI64({2, 1}, {3, 3});
    in["max_seqlen"] = ScalarI64(1);
    in["max_kvlen"] = ScalarI64(1);
    in["cache"] = MakeArray(Dt::kF32, {4, 1, 2, 1, 1});
    CHECK(AllValues(KeyValueCache(attrs, in).key) == std::vector<double>{7, 7});
  }

  TEST_CASE("decode attention example (11.2)") {
    const Array query = FloatArray(Dt::kF32, {1, 1, 2}, {1, 1});
    const Array key = FloatArray(Dt::kF32, {2, 1, 2}, {1, 0, 0, 2});
    const Array value = FloatArray(Dt::kF32, {2, 1, 2}, {1, 0, 0, 1});
    const AttnResult plain =
        MultiHeadAttention(AttentionAttrs(1, 2, 1), OneRequestMha(query, key, value, 1));
    CheckClose(plain.out, {0.330238, 0.669762}, 1e-6);
    CHECK(plain.vmax == std::vector<double>{1.0});

    // ALiBi with Hq = 8: head 0 has slope 1/2; the query sits at absolute position 1.
    Attrs alibi = AttentionAttrs(8, 2, 1);
    alibi.is_alibi = 1;
    const Array query8 = FloatArray(Dt::kF32, {1, 8, 2}, std::vector<double>(16, 1.0));
    const AttnResult biased = MultiHeadAttention(alibi, OneRequestMha(query8, key, value, 1));
    CheckClose(OutRow(biased, 0, 0, 8, 2), {0.230213, 0.769787}, 1e-6);

    // The same through MultiHeadCacheAttention: k0/v0 already cached, k1/v1 new.
    Attrs fused = alibi;
    fused.quant_bit = 0;
    Array cache = MakeArray(Dt::kF32, {2, 1, 2, 1, 2});
    for (int i = 0; i < 2; ++i) {
      StoreRounded(&cache, i, LoadAsDouble(key, i));
      StoreRounded(&cache, 2 + i, LoadAsDouble(value, i));
    }
    Tensors in = OneRequestKvc(FloatArray(Dt::kF32, {1, 1, 2}, {0, 2}),
                               FloatArray(Dt::kF32, {1, 1, 2}, {0, 1}), 1, 0, cache);
    in["query"] = query8;
    in["decoding_batches"] = ScalarI64(1);
    const AttnResult cached = MultiHeadCacheAttention(fused, in);
    CHECK(cached.out == biased.out);
  }

  TEST_CASE("ALiBi slopes (5.5)") {
    std::vector<double> want8;
    for (int h = 1; h <= 8; ++h) want8.push_back(std::ldexp(1.0, -h));
    CHECK(detail::AlibiSlopes(8) == want8);
    std::vector<double> want12 = want8;
    for (double e : {-0.5, -1.5, -2.5, -3.5}) want12.push_back(std::exp2(e));
    CHECK(detail::AlibiSlopes(12) == want12);
    CHECK(detail::AlibiSlopes(1) == std::vector<double>{std::ldexp(1.0, -8)});
  }

  TEST_CASE("causal rule is bottom-right and skips decoding batches (5.3)") {
    // q = k = 0 makes every visible key equally likely; one-hot values reveal which are visible.
    std::vector<double> one_hot(25, 0.0);
    for (int j = 0; j < 5; ++j) one_hot[j * 5 + j] = 1;
    const Array query = MakeArray(Dt::kF32, {3, 1, 5});
    const Array key = MakeArray(Dt::kF32, {5, 1, 5});
    const Array value = FloatArray(Dt::kF32, {5, 1, 5}, one_hot);
    const AttnResult causal =
        MultiHeadAttention(AttentionAttrs(1, 5, 0), OneRequestMha(query, key, value, 0));
    const double third = 1.0 / 3;
    CheckClose(OutRow(causal, 0, 0, 1, 5), {third, third, third, 0, 0}, 1e-15);
    CheckClose(OutRow(causal, 1, 0, 1, 5), {0.25, 0.25, 0.25, 0.25, 0}, 1e-15);
    CheckClose(OutRow(causal, 2, 0, 1, 5), {0.2, 0.2, 0.2, 0.2, 0.2}, 1e-15);
    const AttnResult decoding =
        MultiHeadAttention(AttentionAttrs(1, 5, 0), OneRequestMha(query, key, value, 1));
    CheckClose(OutRow(decoding, 0, 0, 1, 5), {0.2, 0.2, 0.2, 0.2, 0.2}, 1e-15);
  }

  TEST_CASE("ALiBi bias is causal even without is_causal (5.5)") {
    std::vector<double> one_hot(25, 0.0);
    for (int j = 0; j < 5; ++j) one_hot[j * 5 + j] = 1;
    Attrs attrs = AttentionAttrs(1, 5, 0);
    attrs.is_causal = 0;
    attrs.is_alibi = 1;
    const AttnResult result = MultiHeadAttention(
        attrs, OneRequestMha(MakeArray(Dt::kF32, {2, 1, 5}), MakeArray(Dt::kF32, {5, 1, 5}),
                             FloatArray(Dt::kF32, {5, 1, 5}, one_hot), 0));
    const double m = std::ldexp(1.0, -8);  // Hq = 1
    for (int64_t row = 0; row < 2; ++row) {
      std::vector<double> want(5, 0.0);
      double sum = 0;
      for (int j = 0; j <= 3 + row; ++j) sum += want[j] = std::exp(m * (j - 3 - row));
      for (double& w : want) w /= sum;
      CheckClose(OutRow(result, row, 0, 1, 5), want, 1e-15);
    }
  }

  TEST_CASE("fully masked rows are exactly zero; padding is never read (5.4, 5.6)") {
    const Array query = FloatArray(Dt::kF32, {2, 2, 1}, {1, 1, 1, 1});
    const Array key = FloatArray(Dt::kF32, {2, 1, 1}, {1, 2});
    const Array value = FloatArray(Dt::kF32, {2, 1, 1}, {3, -5});
    Tensors in = OneRequestMha(query, key, value, 0);
    const double nan = std::nan("");
    // Rank 3, padded to 3 columns (NaN padding); head 1 row 0 fully masked.
    in["attn_mask"] = FloatArray(Dt::kF32, {2, 2, 3},
                                 {0, -kInf, nan, 0, 0, nan,  //
                                  -kInf, -kInf, nan, 0, 0, nan});
    Attrs attrs = AttentionAttrs(2, 1, 1);
    attrs.is_causal = 0;
    const AttnResult result = MultiHeadAttention(attrs, in);
    CHECK(result.must_be_zero == std::vector<uint8_t>{0, 1, 0, 0});
    CHECK(result.out[0] == 3.0);  // only key 0 visible
    CHECK(result.out[1] == 0.0);
    CHECK(result.vmax == std::vector<double>{5.0, 5.0});
    StoreRounded(&in["attn_mask"], 1, nan);  // NaN inside the read block is rejected
    CHECK_THROWS_AS(MultiHeadAttention(attrs, in), std::invalid_argument);
  }

  TEST_CASE("GQA: repeated KeyValueCache heads equal grouped attention (11.3)") {
    const int64_t d = 3, rows = 5;
    std::vector<double> k(rows * 2 * d), v(rows * 2 * d), q(rows * 8 * d);
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(1.0 + i), v[i] = std::cos(2.0 * i);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.5 * i);
    Tensors kvc =
        OneRequestKvc(FloatArray(Dt::kF32, {rows, 2, d}, k), FloatArray(Dt::kF32, {rows, 2, d}, v),
                      0, 0, MakeArray(Dt::kF32, {rows, 1, 2, 2, d}));
    Attrs kvc_attrs;
    const KvcResult grouped = KeyValueCache(kvc_attrs, kvc);
    kvc_attrs.num_repeat = 4;
    const KvcResult repeated = KeyValueCache(kvc_attrs, kvc);
    REQUIRE(repeated.key.shape == std::vector<int64_t>{rows, 8, d});
    const std::vector<double> k2 = AllValues(grouped.key), k8 = AllValues(repeated.key);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < 8; ++o) {
        for (int64_t i = 0; i < d; ++i) {
          CHECK(k8[(r * 8 + o) * d + i] == k2[(r * 2 + o / 4) * d + i]);
        }
      }
    }
    const Array query = FloatArray(Dt::kF32, {rows, 8, d}, q);
    const AttnResult gqa = MultiHeadAttention(AttentionAttrs(8, d, 2),
                                              OneRequestMha(query, grouped.key, grouped.value, 0));
    const AttnResult mha = MultiHeadAttention(
        AttentionAttrs(8, d, 0), OneRequestMha(query, repeated.key, repeated.value, 0));
    CHECK(gqa.out == mha.out);
    const AttnResult head5 = MultiHeadAttention(
        AttentionAttrs(8, d, 2), OneRequestMha(query, grouped.key, grouped.value, 0), {5});
    CHECK(OutRow(head5, 3, 5, 8, d) == OutRow(gqa, 3, 5, 8, d));
    CHECK(std::isnan(head5.out[0]));
  }

  TEST_CASE("CheckAttention applies the 12 tolerances") {
    AttnResult ref;
    ref.out = {1.0, 0.0, 0.0, 0.0};  // (Tq 1, Hq 2, D 2); head 1 must be zero
    ref.vmax = {2.0};
    ref.must_be_zero = {0, 1};
    double ratio = 0;
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {1.0 + 1e-5, 0, 0, 0}), &ratio) ==
          "");
    CHECK(ratio == doctest::Approx(0.5).epsilon(1e-3));
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {1.0 + 3e-5, 0, 0, 0}), &ratio) !=
          "");
    CHECK(ratio == doctest::Approx(1.5).epsilon(1e-3));
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {1, 0, 1e-30, 0}))
              .find("must-be-zero") != std::string::npos);
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {1, std::nan(""), 0, 0}))
              .find("non-finite") != std::string::npos);
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {2, 2, 1}, {1, 0, 0, 0})) != "");
    // fp16: bound = 1e-2 * 1 + 5e-4 * max(4, 2) = 0.012 at element 0, 0.002 at element 1.
    CHECK(CheckAttention(ref, FloatArray(Dt::kF16, {1, 2, 2}, {1.01, 0.0019, 0, 0})) == "");
    CHECK(CheckAttention(ref, FloatArray(Dt::kF16, {1, 2, 2}, {1.0, 0.0025, 0, 0})) != "");
    ref.computed = {0, 1};  // head 0 not computed: skipped
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {5, 0, 0, 0})) == "");
    ref.computed = {1, 1};
    ref.out[0] = std::nan("");  // a NaN answer (Attrs::non_finite): NaN is the only match
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {std::nan(""), 0, 0, 0})) == "");
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {5, 0, 0, 0})).find("non-finite") !=
          std::string::npos);
    ref.out[0] = kInf;  // an infinite answer: that infinity
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {kInf, 0, 0, 0})) == "");
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {-kInf, 0, 0, 0})) != "");
    CHECK(CheckAttention(ref, FloatArray(Dt::kF32, {1, 2, 2}, {std::nan(""), 0, 0, 0})) != "");
  }
}

}  // namespace dynattn_ref
