// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The worked examples of spec pmx-ops (§2.1 int8 table, ties, eps floor, all-zero groups, §2.2
// int4, §3.1 slot maps, §3.2 addressing, §11 walk-throughs), through the public API, bit-exact.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/codec.h"
#include "dynattn/dynattn.h"

namespace {

using dynattn::DType;
using dynattn::TensorView;
using dynattn::internal::F16ToF32;
using dynattn::internal::F32ToF16;

/// One token, one KV head, one request: quantizes `x` (as fp16 activations) into a 1-slot cache
/// and reads it back. Returns cache bytes, scale bits and the dequantized key.
struct GroupResult {
  std::vector<int8_t> cache;  // key row (D bytes for int8, D/2 for int4)
  std::vector<uint16_t> scales;
  std::vector<float> key;  // dequantized, as fp16 values
};

GroupResult QuantizeOneRow(const std::vector<float>& x, int quant_bit, int group) {
  const int64_t dim = static_cast<int64_t>(x.size());
  const int64_t row = quant_bit == 4 ? dim / 2 : dim;
  std::vector<uint16_t> current(x.size());
  for (size_t i = 0; i < x.size(); ++i) current[i] = F32ToF16(x[i]);
  const int64_t seqstarts[] = {0, 1}, kvstarts[] = {0, 1}, cachestarts[] = {0}, start_pos[] = {0};
  const int64_t one = 1;
  std::vector<int8_t> cache(2 * row, 0x55);
  std::vector<uint16_t> scale(2 * dim / group, 0x7777);
  std::vector<uint16_t> key(dim), value(dim);
  dynattn::KeyValueCacheArgs args;
  args.current_key = TensorView::Dense(current.data(), DType::kF16, {1, 1, dim});
  args.current_value = args.current_key;
  args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
  args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
  args.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
  args.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
  args.max_seqlen = TensorView::Dense(&one, DType::kI64, {});
  args.max_kvlen = args.max_seqlen;
  args.cache = TensorView::Dense(cache.data(), DType::kI8, {1, 1, 2, 1, row});
  args.scale = TensorView::Dense(scale.data(), DType::kF16, {1, 1, 2, 1, dim / group});
  args.key = TensorView::Dense(key.data(), DType::kF16, {1, 1, dim});
  args.value = TensorView::Dense(value.data(), DType::kF16, {1, 1, dim});
  dynattn::KeyValueCacheAttrs attrs;
  attrs.cache.quant_bit = quant_bit;
  attrs.cache.quant_group = group;
  const dynattn::Status status = dynattn::KeyValueCache(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  GroupResult r;
  r.cache.assign(cache.begin(), cache.begin() + row);
  r.scales.assign(scale.begin(), scale.begin() + dim / group);
  for (uint16_t h : key) r.key.push_back(F16ToF32(h));
  CHECK(std::memcmp(key.data(), value.data(), key.size() * 2) == 0);
  return r;
}

TEST_SUITE("spec_examples") {
  TEST_CASE("§2.1 int8 worked example, fp16, G = 8") {
    const GroupResult r =
        QuantizeOneRow({0.5f, -1.25f, 3.0f, 0.0f, 2.0f, -0.75f, 1.0f, 0.0999755859375f}, 8, 8);
    CHECK(r.cache == std::vector<int8_t>{21, -53, 127, 0, 85, -32, 42, 4});
    CHECK(F16ToF32(r.scales[0]) == 0.02362060546875f);
    CHECK(r.key == std::vector<float>{0.49609375f, -1.251953125f, 3.0f, 0.0f, 2.0078125f,
                                      -0.755859375f, 0.9921875f, 0.094482421875f});
  }

  TEST_CASE("§2.1 ties round half to even after the fp16 quotient (s = 0.5)") {
    const GroupResult r =
        QuantizeOneRow({63.5f, 0.25f, 0.75f, 1.25f, -0.25f, -0.75f, -1.25f, 0.0f}, 8, 8);
    CHECK(F16ToF32(r.scales[0]) == 0.5f);
    CHECK(r.cache == std::vector<int8_t>{127, 0, 2, 2, 0, -2, -2, 0});
  }

  TEST_CASE("§2.1 eps floor and all-zero groups") {
    const GroupResult zero = QuantizeOneRow(std::vector<float>(8, 0.0f), 8, 4);
    CHECK(zero.scales == std::vector<uint16_t>{168, 168});  // fp16(1e-5) = 168 * 2^-24
    CHECK(zero.cache == std::vector<int8_t>(8, 0));
    const float tiny = F16ToF32(2);  // 2^-23: m / 127 is far below eps
    const GroupResult floor = QuantizeOneRow({tiny, -tiny, 0, 0, 0, 0, 0, 0}, 8, 8);
    CHECK(floor.scales[0] == 168);
    CHECK(floor.cache == std::vector<int8_t>(8, 0));
  }

  TEST_CASE("§2.2 int4 worked example: two's complement, element 2k in the low nibble") {
    const GroupResult r =
        QuantizeOneRow({0.5f, -1.25f, 3.0f, 0.0f, 2.0f, -0.75f, 1.0f, 0.0999755859375f}, 4, 8);
    CHECK(F16ToF32(r.scales[0]) == 0.428466796875f);
    const std::vector<uint8_t> bytes(r.cache.begin(), r.cache.end());
    CHECK(bytes == std::vector<uint8_t>{0xD1, 0x07, 0xE5, 0x02});
    CHECK(r.key == std::vector<float>{0.428466796875f, -1.28515625f, 3.0f, 0.0f, 2.142578125f,
                                      -0.85693359375f, 0.85693359375f, 0.0f});
  }

  TEST_CASE("§3.2 addressing example: L=3, l=1, Hkv=3, D=4, MaxT=16, G=2") {
    const int64_t want_cache[] = {407, 527, 647, 727};
    const int64_t want_scale[] = {203, 263, 323, 363};
    std::vector<int8_t> cache(16 * 3 * 2 * 3 * 4);
    std::vector<uint16_t> scale(16 * 3 * 2 * 3 * 2);
    const int64_t shapes[4][5] = {
        {16, 3, 2, 3, 4}, {3, 16, 2, 3, 4}, {3, 2, 16, 3, 4}, {3, 2, 3, 16, 4}};
    for (int layout = 0; layout < 4; ++layout) {
      int64_t scale_shape[5];
      std::copy(shapes[layout], shapes[layout] + 5, scale_shape);
      scale_shape[4] = 2;
      dynattn::CacheAttrs attrs;
      attrs.num_layer = 3;
      attrs.layer_idx = 1;
      attrs.quant_bit = 8;
      attrs.quant_group = 2;
      attrs.cache_layout = layout;
      dynattn::CacheDesc desc;
      REQUIRE(dynattn::MakePmxCacheDesc(
                  TensorView::Dense(cache.data(), DType::kI8, 5, shapes[layout]),
                  TensorView::Dense(scale.data(), DType::kF16, 5, scale_shape), attrs, 3, 4, &desc)
                  .ok());
      const int64_t element = static_cast<int8_t*>(desc.value.data) - cache.data() +
                              5 * desc.value.slot_stride + 2 * desc.value.head_stride + 3;
      const int64_t scale_index = static_cast<uint16_t*>(desc.value.scale) - scale.data() +
                                  5 * desc.value.scale_slot_stride +
                                  2 * desc.value.scale_head_stride + 3 / 2;
      CHECK(element == want_cache[layout]);
      CHECK(scale_index == want_scale[layout]);
    }
  }

  /// Runs KVC (fp32, unquantized, one head, D = 1) over a cache whose slot s holds s + 1000 and
  /// returns the slots written and the gathered key values.
  void SlotExample(int mode, const std::vector<int64_t>& cachestarts,
                   const std::vector<int64_t>& table_shape, int64_t max_t,
                   std::set<int64_t>* written, std::vector<float>* gathered) {
    std::vector<float> cache(max_t * 2);
    for (int64_t s = 0; s < max_t; ++s) cache[2 * s] = cache[2 * s + 1] = 1000.0f + s;
    const std::vector<float> before = cache;
    const float current[] = {-1.0f, -2.0f, -3.0f};
    const int64_t seqstarts[] = {0, 3}, kvstarts[] = {0, 9}, start_pos[] = {6};
    const int64_t max_seqlen = 3, max_kvlen = 9;
    std::vector<float> key(9), value(9);
    dynattn::KeyValueCacheArgs args;
    args.current_key = TensorView::Dense(current, DType::kF32, {3, 1, 1});
    args.current_value = args.current_key;
    args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    args.cachestarts = TensorView::Dense(cachestarts.data(), DType::kI64,
                                         static_cast<int>(table_shape.size()), table_shape.data());
    args.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    args.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
    args.cache = TensorView::Dense(cache.data(), DType::kF32, {max_t, 1, 2, 1, 1});
    args.key = TensorView::Dense(key.data(), DType::kF32, {9, 1, 1});
    args.value = TensorView::Dense(value.data(), DType::kF32, {9, 1, 1});
    dynattn::KeyValueCacheAttrs attrs;
    attrs.cache.cache_mode = mode;
    attrs.cache.page_size = 4;
    REQUIRE(dynattn::KeyValueCache(attrs, args).ok());
    for (int64_t s = 0; s < max_t; ++s) {
      if (cache[2 * s] != before[2 * s]) written->insert(s);
    }
    *gathered = key;
  }

  TEST_CASE("§3.1 slot example, offset and paged modes (P = 4)") {
    std::set<int64_t> written;
    std::vector<float> key;
    SlotExample(0, {100}, {1}, 110, &written, &key);
    CHECK(written == std::set<int64_t>{106, 107, 108});
    CHECK(key == std::vector<float>{1100, 1101, 1102, 1103, 1104, 1105, -1, -2, -3});
    written.clear();
    SlotExample(1, {12, 4, 28, -1}, {1, 4}, 32, &written, &key);
    CHECK(written == std::set<int64_t>{6, 7, 28});
    CHECK(key == std::vector<float>{1012, 1013, 1014, 1015, 1004, 1005, -1, -2, -3});
  }

  /// MHA of one request (seqlen 1, kvlen 2) with `heads` identical heads, D = 2, fp32.
  std::vector<float> DecodeByHand(int heads, bool alibi) {
    std::vector<float> query, key, value;
    for (int h = 0; h < heads; ++h) query.insert(query.end(), {1.0f, 1.0f});
    for (const std::vector<float>& k : {std::vector<float>{1, 0}, std::vector<float>{0, 2}}) {
      for (int h = 0; h < heads; ++h) key.insert(key.end(), k.begin(), k.end());
    }
    for (const std::vector<float>& v : {std::vector<float>{1, 0}, std::vector<float>{0, 1}}) {
      for (int h = 0; h < heads; ++h) value.insert(value.end(), v.begin(), v.end());
    }
    const int64_t seqstarts[] = {0, 1}, kvstarts[] = {0, 2}, zero = 0, one = 1, two = 2;
    std::vector<float> out(heads * 2);
    dynattn::MultiHeadAttentionArgs args;
    args.query = TensorView::Dense(query.data(), DType::kF32, {1, heads, 2});
    args.key = TensorView::Dense(key.data(), DType::kF32, {2, heads, 2});
    args.value = TensorView::Dense(value.data(), DType::kF32, {2, heads, 2});
    args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    args.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&one, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&two, DType::kI64, {});
    args.attn_output = TensorView::Dense(out.data(), DType::kF32, {1, heads, 2});
    dynattn::AttentionAttrs attrs;
    attrs.num_heads = heads;
    attrs.head_dim = 2;
    attrs.is_alibi = alibi;
    REQUIRE(dynattn::MultiHeadAttention(attrs, args).ok());
    return out;
  }

  TEST_CASE("§11.2 decode attention by hand, without and with ALiBi") {
    const std::vector<float> plain = DecodeByHand(1, false);
    CHECK(plain[0] == doctest::Approx(0.330238).epsilon(1e-5));
    CHECK(plain[1] == doctest::Approx(0.669762).epsilon(1e-5));
    const std::vector<float> alibi = DecodeByHand(8, true);
    CHECK(alibi[0] == doctest::Approx(0.230213).epsilon(1e-5));
    CHECK(alibi[1] == doctest::Approx(0.769787).epsilon(1e-5));
  }
}

}  // namespace

namespace {

using dynattn::DType;
using dynattn::TensorView;

/// Which slots of a layout-`layout`, 1-layer fp32 cache (Hkv = 1, D = 1) an MHCA step writes.
std::set<int64_t> WrittenSlots(int mode, int layout, int64_t max_t,
                               const std::vector<int64_t>& seqstarts,
                               const std::vector<int64_t>& kvstarts,
                               const std::vector<int64_t>& start_pos,
                               const std::vector<int64_t>& cachestarts,
                               const std::vector<int64_t>& cachestarts_shape, int page_size) {
  const int64_t batch = static_cast<int64_t>(start_pos.size()), tq = seqstarts.back();
  std::vector<float> query(tq, 1.0f), current(tq), out(tq);
  for (int64_t t = 0; t < tq; ++t) current[t] = -1.0f - t;
  std::vector<float> cache(2 * max_t, 7.0f);
  const std::vector<float> before = cache;
  const int64_t decoding = 1, max_seqlen = 512, max_kvlen = 1024;
  dynattn::MultiHeadCacheAttentionArgs a;
  a.query = TensorView::Dense(query.data(), DType::kF32, {tq, 1, 1});
  a.current_key = TensorView::Dense(current.data(), DType::kF32, {tq, 1, 1});
  a.current_value = a.current_key;
  a.seqstarts = TensorView::Dense(seqstarts.data(), DType::kI64, {batch + 1});
  a.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  a.start_pos = TensorView::Dense(start_pos.data(), DType::kI64, {batch});
  a.cachestarts =
      TensorView::Dense(cachestarts.data(), DType::kI64, static_cast<int>(cachestarts_shape.size()),
                        cachestarts_shape.data());
  a.decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
  a.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
  a.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
  const int64_t shapes[4][5] = {
      {max_t, 1, 2, 1, 1}, {1, max_t, 2, 1, 1}, {1, 2, max_t, 1, 1}, {1, 2, 1, max_t, 1}};
  a.cache = TensorView::Dense(cache.data(), DType::kF32, 5, shapes[layout]);
  a.attn_output = TensorView::Dense(out.data(), DType::kF32, {tq, 1, 1});
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = 1;
  attrs.attention.head_dim = 1;
  attrs.cache.cache_mode = mode;
  attrs.cache.cache_layout = layout;
  attrs.cache.page_size = page_size;
  const dynattn::Status s = dynattn::MultiHeadCacheAttention(attrs, a);
  REQUIRE_MESSAGE(s.ok(), s.message());
  // Key plane of layout `layout` at slot s: the PMX formula with L = 1, Hkv = 1, D = 1, kv = 0.
  std::set<int64_t> written;
  for (int64_t slot = 0; slot < max_t; ++slot) {
    const int64_t offset = layout <= 1 ? 2 * slot : slot;  // layouts 0, 1 interleave K and V
    if (cache[offset] != before[offset]) written.insert(slot);
  }
  return written;
}

}  // namespace

TEST_SUITE("spec_examples") {
  TEST_CASE("§11.1 mixed step: decode row 0 -> slot 4, prompt rows -> slots 64..66, every layout") {
    for (int layout = 0; layout < 4; ++layout) {
      CHECK(WrittenSlots(0, layout, 80, {0, 1, 4}, {0, 5, 8}, {4, 0}, {0, 64}, {2}, 128) ==
            std::set<int64_t>{4, 64, 65, 66});
    }
  }

  TEST_CASE("§11.4 paged step (P = 128, layout 3): p = 130 -> slot 258, prompt -> 128..132") {
    CHECK(WrittenSlots(1, 3, 384, {0, 1, 6}, {0, 131, 136}, {130, 0}, {0, 256, -1, 128, -1, -1},
                       {2, 3}, 128) == std::set<int64_t>{128, 129, 130, 131, 132, 258});
  }

  TEST_CASE("§11.3 GQA: KVC with num_repeat = 4 then MHA equals MHA with num_kv_heads = 2") {
    // Hq = 8, Hkv = 2, D = 4, one request of 3 new tokens over 2 cached ones, fp32.
    const int64_t dim = 4, tq = 3, kv = 5;
    std::vector<float> query(tq * 8 * dim), current_key(tq * 2 * dim), current_value(tq * 2 * dim);
    for (size_t i = 0; i < query.size(); ++i) query[i] = std::sin(0.37f * i);
    for (size_t i = 0; i < current_key.size(); ++i) {
      current_key[i] = std::cos(0.11f * i);
      current_value[i] = std::sin(0.23f * i + 1);
    }
    std::vector<float> cache(8 * 2 * 2 * dim, 0.25f);
    const int64_t seqstarts[] = {0, 3}, kvstarts[] = {0, 5}, start_pos[] = {2}, cachestarts[] = {0};
    const int64_t zero = 0, max_seqlen = 3, max_kvlen = 5;
    std::vector<float> key8(kv * 8 * dim), value8(kv * 8 * dim), key2(kv * 2 * dim),
        value2(kv * 2 * dim);
    dynattn::KeyValueCacheArgs k;
    k.current_key = TensorView::Dense(current_key.data(), DType::kF32, {tq, 2, dim});
    k.current_value = TensorView::Dense(current_value.data(), DType::kF32, {tq, 2, dim});
    k.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    k.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    k.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
    k.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    k.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    k.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
    k.cache = TensorView::Dense(cache.data(), DType::kF32, {8, 1, 2, 2, dim});
    k.key = TensorView::Dense(key8.data(), DType::kF32, {kv, 8, dim});
    k.value = TensorView::Dense(value8.data(), DType::kF32, {kv, 8, dim});
    dynattn::KeyValueCacheAttrs repeat;
    repeat.num_repeat = 4;
    REQUIRE(dynattn::KeyValueCache(repeat, k).ok());
    k.key = TensorView::Dense(key2.data(), DType::kF32, {kv, 2, dim});
    k.value = TensorView::Dense(value2.data(), DType::kF32, {kv, 2, dim});
    REQUIRE(dynattn::KeyValueCache({}, k).ok());
    for (int64_t row = 0; row < kv; ++row) {  // heads [k0, k0, k0, k0, k1, k1, k1, k1]
      for (int o = 0; o < 8; ++o) {
        CHECK(std::memcmp(&key8[(row * 8 + o) * dim], &key2[(row * 2 + o / 4) * dim], dim * 4) ==
              0);
      }
    }
    auto attend = [&](std::vector<float>& key, std::vector<float>& value, int kv_heads,
                      int attr_kv_heads) {
      std::vector<float> out(tq * 8 * dim);
      dynattn::MultiHeadAttentionArgs m;
      m.query = TensorView::Dense(query.data(), DType::kF32, {tq, 8, dim});
      m.key = TensorView::Dense(key.data(), DType::kF32, {kv, kv_heads, dim});
      m.value = TensorView::Dense(value.data(), DType::kF32, {kv, kv_heads, dim});
      m.seqstarts = k.seqstarts;
      m.kvstarts = k.kvstarts;
      m.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
      m.max_seqlen = k.max_seqlen;
      m.max_kvlen = k.max_kvlen;
      m.attn_output = TensorView::Dense(out.data(), DType::kF32, {tq, 8, dim});
      dynattn::AttentionAttrs attrs;
      attrs.num_heads = 8;
      attrs.head_dim = dim;
      attrs.num_kv_heads = attr_kv_heads;
      REQUIRE(dynattn::MultiHeadAttention(attrs, m).ok());
      return out;
    };
    const std::vector<float> expanded = attend(key8, value8, 8, 0);
    const std::vector<float> grouped = attend(key2, value2, 2, 2);
    CHECK(std::memcmp(expanded.data(), grouped.data(), expanded.size() * 4) == 0);
  }
}

// ================================================================================================
// Worked examples of the serving features: an fp8 e4m3fn and a bf16 cache written and read back,
// and one decode row with a window, a softmax scale, a soft-cap and a sink, all by hand.

namespace {

using dynattn::DType;
using dynattn::TensorView;

/// One token of D = 4 written by KeyValueCache into a one-slot cache of `cache_dtype` (fp32
/// activations), with k_scale = v_scale = `scale` when > 0. Returns the key bytes of the cache and
/// the key read back.
struct CacheRow {
  std::vector<uint8_t> bytes;
  std::vector<float> key;
};

CacheRow WriteOneToken(const std::vector<float>& x, DType cache_dtype, float scale) {
  const int64_t dim = 4, elem = cache_dtype == DType::kBF16 ? 2 : 1;
  const int64_t seqstarts[] = {0, 1}, kvstarts[] = {0, 1}, cachestarts[] = {0}, start_pos[] = {0};
  const int64_t one = 1;
  std::vector<float> current = x, key(dim), value(dim);
  std::vector<uint8_t> cache(2 * dim * elem, 0x55);
  dynattn::KeyValueCacheArgs args;
  args.current_key = TensorView::Dense(current.data(), DType::kF32, {1, 1, dim});
  args.current_value = args.current_key;
  args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
  args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
  args.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
  args.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
  args.max_seqlen = TensorView::Dense(&one, DType::kI64, {});
  args.max_kvlen = args.max_seqlen;
  args.cache = TensorView::Dense(cache.data(), cache_dtype, {1, 1, 2, 1, dim});
  if (scale > 0) {
    args.k_scale = TensorView::Dense(&scale, DType::kF32, {});
    args.v_scale = args.k_scale;
  }
  args.key = TensorView::Dense(key.data(), DType::kF32, {1, 1, dim});
  args.value = TensorView::Dense(value.data(), DType::kF32, {1, 1, dim});
  const dynattn::Status status = dynattn::KeyValueCache(dynattn::KeyValueCacheAttrs{}, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  CHECK(std::memcmp(key.data(), value.data(), key.size() * sizeof(float)) == 0);  // NaN too
  return {std::vector<uint8_t>(cache.begin(), cache.begin() + dim * elem), key};
}

}  // namespace

TEST_SUITE("spec_examples") {
  TEST_CASE("fp8 e4m3fn cache, k_scale = v_scale = 0.5: bytes and read-back by hand") {
    // x / 0.5 = 2 -> 0x40 (2^1); 0.6000000238 -> 0.625 (1.010b * 2^-1) = 0x32; 1000 saturates to
    // 448 = 0x7E; -0.002 is about one subnormal unit 2^-9 -> 0x81.
    const CacheRow r = WriteOneToken({1.0f, 0.3f, 500.0f, -0.001f}, DType::kF8E4M3, 0.5f);
    CHECK(r.bytes == std::vector<uint8_t>{0x40, 0x32, 0x7E, 0x81});
    CHECK(r.key == std::vector<float>{1.0f, 0.3125f, 224.0f, -0.0009765625f});
  }

  TEST_CASE("fp8 e5m2 cache, default scale 1: infinity kept, NaN stays NaN, saturation") {
    const float inf = HUGE_VALF;
    const CacheRow r = WriteOneToken({1.0f, 70000.0f, -inf, std::nanf("")}, DType::kF8E5M2, 0);
    CHECK(r.bytes[0] == 0x3C);  // 1.0
    CHECK(r.bytes[1] == 0x7B);  // 70000 rounds to 2^16, past the max: saturates to 57344
    CHECK(r.bytes[2] == 0xFC);  // -inf
    CHECK((r.bytes[3] & 0x7F) > 0x7C);
    CHECK(r.key[1] == 57344.0f);
    CHECK(std::isnan(r.key[3]));
  }

  TEST_CASE("bf16 cache: round to nearest even") {
    // 1 + 2^-8 and 1 + 3 * 2^-8 are ties: they go to the even neighbours 1 and 1 + 2^-6.
    const float tie_down = 1.0f + 0x1p-8f, tie_up = 1.0f + 3 * 0x1p-8f;
    const CacheRow r =
        WriteOneToken({tie_down, tie_up, 1.0f + 0x1p-8f + 0x1p-20f, -3.0e38f}, DType::kBF16, 0);
    const std::vector<uint16_t> want = {0x3F80, 0x3F82, 0x3F81, 0xFF62};
    CHECK(std::memcmp(r.bytes.data(), want.data(), 8) == 0);
    CHECK(r.key[1] == 1.015625f);
  }

  TEST_CASE("decode by hand: window 1, softmax scale 0.5, soft-cap 2, sink 0.25") {
    // One query row at position 3 sees keys 2 and 3 only (window_left 1). D = 1, q = 2,
    // k = (9, 9, 1, 3), v = (100, 100, 1, -1): s0 = 0.5 * q * k = (1, 3); s = 2 tanh(s0 / 2).
    const float query[] = {2.0f}, key[] = {9.0f, 9.0f, 1.0f, 3.0f};
    const float value[] = {100.0f, 100.0f, 1.0f, -1.0f}, sink = 0.25f;
    float out[1] = {NAN};
    const int64_t seqstarts[] = {0, 1}, kvstarts[] = {0, 4}, one = 1, four = 4, zero = 0;
    dynattn::MultiHeadAttentionArgs args;
    args.query = TensorView::Dense(query, DType::kF32, {1, 1, 1});
    args.key = TensorView::Dense(key, DType::kF32, {4, 1, 1});
    args.value = TensorView::Dense(value, DType::kF32, {4, 1, 1});
    args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    args.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&one, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&four, DType::kI64, {});
    args.sinks = TensorView::Dense(&sink, DType::kF32, {1});
    args.attn_output = TensorView::Dense(out, DType::kF32, {1, 1, 1});
    dynattn::AttentionAttrs attrs;
    attrs.num_heads = 1;
    attrs.head_dim = 1;
    attrs.window_left = 1;
    attrs.softmax_scale = 0.5f;
    attrs.logits_soft_cap = 2.0f;
    const dynattn::Status status = dynattn::MultiHeadAttention(attrs, args);
    REQUIRE_MESSAGE(status.ok(), status.message());
    const double s2 = 2 * std::tanh(0.5), s3 = 2 * std::tanh(1.5);
    const double want =
        (std::exp(s2) * 1 - std::exp(s3)) / (std::exp(0.25) + std::exp(s2) + std::exp(s3));
    CHECK(out[0] == doctest::Approx(want).epsilon(1e-6));
  }
}
