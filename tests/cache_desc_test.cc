// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// A caller-built CacheDesc (here: separate key and value buffers of (MaxT, Hkv, D), as engines
// keep them) must behave exactly like the PMX cache tensor it mirrors: same output bits, same
// rows written.

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

/// A separate-planes copy of one layer of a PMX cache: K and V rows of (MaxT, Hkv, D).
struct SplitCache {
  std::vector<uint8_t> key, value, key_scale, value_scale;
  dynattn::CacheDesc desc;
};

int64_t RowBytes(const dynattn::CacheDesc& d) {
  switch (d.elem) {
    case dynattn::CacheElem::kF32:
      return 4 * d.head_dim;
    case dynattn::CacheElem::kF16:
    case dynattn::CacheElem::kBF16:
      return 2 * d.head_dim;
    case dynattn::CacheElem::kInt8:
    case dynattn::CacheElem::kF8E4M3:
    case dynattn::CacheElem::kF8E5M2:
      return d.head_dim;
    case dynattn::CacheElem::kInt4:
      return d.head_dim / 2;
  }
  return 0;
}

int ElementBits(const dynattn::CacheDesc& d) {
  return static_cast<int>(RowBytes(d) * 8 / d.head_dim);
}

const uint8_t* Row(const dynattn::CachePlane& p, const dynattn::CacheDesc& d, int64_t s, int h) {
  return static_cast<const uint8_t*>(p.data) +
         (s * p.slot_stride + h * p.head_stride) * ElementBits(d) / 8;
}

const uint8_t* ScaleRow(const dynattn::CachePlane& p, const dynattn::CacheDesc& d, int64_t s,
                        int h) {
  const int size = d.scale_type == dynattn::ScaleType::kF16 ? 2 : 4;
  return static_cast<const uint8_t*>(p.scale) +
         (s * p.scale_slot_stride + h * p.scale_head_stride) * size;
}

/// Copies every row of `pmx` into separate planes and describes them.
SplitCache Split(const dynattn::CacheDesc& pmx) {
  SplitCache out;
  out.desc = pmx;
  const int64_t row = RowBytes(pmx), heads = pmx.num_kv_heads;
  const bool quantized =
      pmx.elem == dynattn::CacheElem::kInt8 || pmx.elem == dynattn::CacheElem::kInt4;
  const int64_t scale_row = quantized ? (pmx.head_dim / pmx.quant_group) *
                                            (pmx.scale_type == dynattn::ScaleType::kF16 ? 2 : 4)
                                      : 0;
  for (std::vector<uint8_t>* v : {&out.key, &out.value}) v->resize(pmx.num_slots * heads * row);
  for (std::vector<uint8_t>* v : {&out.key_scale, &out.value_scale})
    v->resize(pmx.num_slots * heads * scale_row + 1);
  for (int64_t s = 0; s < pmx.num_slots; ++s) {
    for (int h = 0; h < heads; ++h) {
      const int64_t at = (s * heads + h);
      std::memcpy(&out.key[at * row], Row(pmx.key, pmx, s, h), row);
      std::memcpy(&out.value[at * row], Row(pmx.value, pmx, s, h), row);
      if (quantized) {
        std::memcpy(&out.key_scale[at * scale_row], ScaleRow(pmx.key, pmx, s, h), scale_row);
        std::memcpy(&out.value_scale[at * scale_row], ScaleRow(pmx.value, pmx, s, h), scale_row);
      }
    }
  }
  const int64_t elems_per_row = pmx.head_dim;  // strides count elements (nibbles for int4)
  const int64_t groups = pmx.head_dim / pmx.quant_group;
  out.desc.key = {out.key.data(), heads * elems_per_row,
                  elems_per_row,  quantized ? out.key_scale.data() : nullptr,
                  heads * groups, groups};
  out.desc.value = {out.value.data(), heads * elems_per_row,
                    elems_per_row,    quantized ? out.value_scale.data() : nullptr,
                    heads * groups,   groups};
  out.desc.key.tensor_scale = pmx.key.tensor_scale;  // fp8: the per-tensor scales
  out.desc.value.tensor_scale = pmx.value.tensor_scale;
  return out;
}

/// A dimension-major copy of an unquantized PMX cache layer: slots in tiles of `tile` slots,
/// each tile [Hkv, D, tile] per plane (element d of the tile's slot t at d * tile + t), as vLLM's
/// CPU backend keeps its keys per block; `key_only` leaves the values token-major (vLLM's own
/// mix).
struct DimMajorCache {
  std::vector<uint8_t> key, value;
  dynattn::CacheDesc desc;
  int64_t tile = 1;
  bool key_only = false;

  /// Byte of element d of (slot, head) in a dimension-major plane.
  int64_t Byte(int64_t slot, int h, int d, int64_t heads, int64_t dim, int64_t size) const {
    return ((slot / tile * heads + h) * dim * tile + d * tile + slot % tile) * size;
  }
};

DimMajorCache ToDimMajor(const dynattn::CacheDesc& pmx, int64_t tile, bool key_only) {
  DimMajorCache out;
  out.desc = pmx;
  out.tile = tile;
  out.key_only = key_only;
  const int64_t heads = pmx.num_kv_heads, dim = pmx.head_dim, size = RowBytes(pmx) / dim;
  const int64_t tiles = (pmx.num_slots + tile - 1) / tile;
  const SplitCache split = Split(pmx);  // token-major rows (slot, head)
  out.key.assign(tiles * tile * heads * dim * size, 0xFF);
  out.value = key_only ? split.value : out.key;
  for (int64_t s = 0; s < pmx.num_slots; ++s) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        const int64_t from = ((s * heads + h) * dim + d) * size;
        const int64_t to = out.Byte(s, h, d, heads, dim, size);
        std::memcpy(&out.key[to], &split.key[from], size);
        if (!key_only) std::memcpy(&out.value[to], &split.value[from], size);
      }
    }
  }
  for (int kv = 0; kv < 2; ++kv) {
    dynattn::CachePlane& p = kv == 0 ? out.desc.key : out.desc.value;
    p.data = kv == 0 ? out.key.data() : out.value.data();
    p.scale = nullptr;
    if (kv == 1 && key_only) {  // token-major (slot, head) rows
      p.slot_stride = heads * dim;
      p.head_stride = dim;
      continue;
    }
    p.slot_stride = 1;
    p.head_stride = dim * tile;
    p.dim_stride = tile;
    p.slots_per_tile = tile;
    p.tile_stride = heads * dim * tile;
  }
  return out;
}

/// The token-major rows of a dimension-major copy, as Split would lay them out.
std::vector<uint8_t> TokenMajor(const DimMajorCache& c, int kv, const dynattn::CacheDesc& pmx) {
  const int64_t heads = pmx.num_kv_heads, dim = pmx.head_dim, size = RowBytes(pmx) / dim;
  if (kv == 1 && c.key_only) return c.value;
  const std::vector<uint8_t>& plane = kv == 0 ? c.key : c.value;
  std::vector<uint8_t> rows(pmx.num_slots * heads * dim * size);
  for (int64_t s = 0; s < pmx.num_slots; ++s) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        std::memcpy(&rows[((s * heads + h) * dim + d) * size],
                    &plane[c.Byte(s, h, d, heads, dim, size)], size);
      }
    }
  }
  return rows;
}

/// MHCA arguments over `inputs` (everything but the cache and the output).
dynattn::MultiHeadCacheAttentionArgs ArgsWithoutCache(dynattn_ref::Tensors* inputs) {
  return dynattn::MultiHeadCacheAttentionArgsByName([inputs](const std::string& name) {
    auto it = inputs->find(name);
    const bool bound = it != inputs->end() && name != "cache" && name != "scale";
    return bound ? ViewOf(it->second) : dynattn::TensorView{};
  });
}

/// The output of `c` (MHCA) run over `desc` instead of its PMX cache tensor.
Array RunOverDesc(const Case& c, const dynattn::CacheDesc* desc) {
  Case raw = c;
  raw.inputs.erase("cache");
  raw.inputs.erase("scale");
  Array out = dynattn_ref::MakeArray(c.inputs.at("query").dt, c.inputs.at("query").shape);
  dynattn::MultiHeadCacheAttentionArgs args = ArgsWithoutCache(&raw.inputs);
  args.cache_desc = desc;
  args.attn_output = ViewOf(out);
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = AttentionAttrsOf(c.attrs);
  attrs.cache = CacheAttrsOf(c.attrs);
  const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  return out;
}

/// On every target: MHCA over a copy of `c`'s cache whose planes (keys only with `key_only`) are
/// dimension-major in tiles of `tile` slots gives the token-major bits, and writes its new tokens
/// where the layout says, as the same bytes.
void CheckDimMajorBits(const Case& c, int64_t tile, bool key_only) {
  Array cache = c.inputs.at("cache");
  dynattn::CacheDesc pmx;
  const int kv_heads = c.attrs.num_kv_heads ? c.attrs.num_kv_heads : c.attrs.num_heads;
  REQUIRE(dynattn::MakePmxCacheDesc(ViewOf(cache), {}, CacheAttrsOf(c.attrs), kv_heads,
                                    c.attrs.head_dim, &pmx)
              .ok());
  const std::string planes = key_only ? "keys only" : "keys and values";
  ForEachTarget([&](const std::string& target) {
    INFO("tile " << tile << ", " << planes << ", on " << target);
    const LibResult token_major = RunLibrary(c);
    REQUIRE(token_major.status.ok());
    DimMajorCache dim_major = ToDimMajor(pmx, tile, key_only);
    std::string why;
    CHECK_MESSAGE(SameBytes(RunOverDesc(c, &dim_major.desc), token_major.attn_output, &why), why);
    Array after = token_major.cache;
    dynattn::CacheDesc pmx_after;
    REQUIRE(dynattn::MakePmxCacheDesc(ViewOf(after), {}, CacheAttrsOf(c.attrs), kv_heads,
                                      c.attrs.head_dim, &pmx_after)
                .ok());
    const SplitCache expected = Split(pmx_after);
    CHECK(TokenMajor(dim_major, 0, pmx) == expected.key);
    CHECK(TokenMajor(dim_major, 1, pmx) == expected.value);
  });
}

TEST_SUITE("cache_desc") {
  TEST_CASE("a raw descriptor over separate K/V planes gives the PMX tensor's bits") {
    for (int i = 0; i < 60; ++i) {
      const uint64_t seed = BaseSeed() + 900000 + i;
      const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
      INFO("seed " << seed << ": " << c.description);
      const LibResult pmx_result = RunLibrary(c);
      REQUIRE(pmx_result.status.ok());

      // Describe the untouched input cache, split it, and run the same step on the split copy.
      Array cache = c.inputs.at("cache");
      Array scale = c.inputs.count("scale") ? c.inputs.at("scale") : Array{};
      dynattn::CacheDesc pmx;
      const int kv_heads = c.attrs.num_kv_heads ? c.attrs.num_kv_heads : c.attrs.num_heads;
      REQUIRE(dynattn::MakePmxCacheDesc(
                  ViewOf(cache), c.inputs.count("scale") ? ViewOf(scale) : dynattn::TensorView{},
                  CacheAttrsOf(c.attrs), kv_heads, c.attrs.head_dim, &pmx)
                  .ok());
      SplitCache split = Split(pmx);
      std::string why;
      CHECK_MESSAGE(SameBytes(RunOverDesc(c, &split.desc), pmx_result.attn_output, &why), why);

      // The rows written into the split copy equal those written into the PMX tensor.
      Array after = pmx_result.cache;
      Array after_scale = pmx_result.scale;
      dynattn::CacheDesc pmx_after;
      REQUIRE(dynattn::MakePmxCacheDesc(
                  ViewOf(after),
                  c.inputs.count("scale") ? ViewOf(after_scale) : dynattn::TensorView{},
                  CacheAttrsOf(c.attrs), kv_heads, c.attrs.head_dim, &pmx_after)
                  .ok());
      const SplitCache expected = Split(pmx_after);
      CHECK(split.key == expected.key);
      CHECK(split.value == expected.value);
      CHECK(split.key_scale == expected.key_scale);
      CHECK(split.value_scale == expected.value_scale);
    }
  }

  TEST_CASE("dimension-major planes in tiles give the token-major bits on every target") {
    int ran = 0;
    for (int i = 0; ran < 24 && i < 200; ++i) {
      const uint64_t seed = BaseSeed() + 970000 + i;
      const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
      if (c.attrs.quant_bit != 0) continue;  // dimension-major planes are unquantized
      ++ran;
      INFO("seed " << seed << ": " << c.description);
      CheckDimMajorBits(c, 1 + static_cast<int64_t>(seed % 7), i % 2 == 0);
    }
    CHECK(ran == 24);
  }

  TEST_CASE("dimension-major keys in blocks of 8 to 128 slots: the decode kernel's vertical runs") {
    // Blocks of at least a vector of keys put runs of adjacent keys under the decode kernel's
    // dimension-major path (keys across lanes); blocks that are no multiple of the vector width
    // mix them with gathered keys. Decodes of every GQA block size, multiples of 16 dimensions.
    // On 8 lanes a block of 40, 56 or 64 slots makes stretches of 5, 7 and 8 runs, which the
    // kernel takes in threes, pairs and singles.
    const int64_t tiles[] = {8, 16, 24, 32, 40, 56, 64, 128};
    const int elems[] = {0, 1, 4, 5, 6};  // fp32, fp16, bf16, fp8 e4m3, fp8 e5m2
    const int ratios[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 24; ++i) {
      const uint64_t seed = BaseSeed() + 975000 + i;
      dynattn_ref::GenOptions options;
      options.lane_head_dims = true;
      options.max_batch = 3;
      options.max_context = 300;
      options.pins.cache_elem = elems[i % 5];
      options.pins.gqa_ratio = ratios[(i / 8 + i) % 5];
      options.pins.step = i % 4 == 3 ? 0 : 1;  // mostly decodes, sometimes a drawn step
      options.pins.cache_mode = i % 2;         // offsets: consecutive slots; pages: drawn sizes
      const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", seed, options);
      INFO("seed " << seed << ": " << c.description);
      CheckDimMajorBits(c, tiles[i % 8], i % 3 == 0);
    }
  }

  TEST_CASE("dimension-major or tiled planes of a quantized cache are refused, by name") {
    for (int i = 0; i < 40; ++i) {
      Case c = dynattn_ref::RandomCase("multi_head_cache_attention", BaseSeed() + 980000 + i);
      if (c.attrs.quant_bit == 0) continue;
      INFO(c.description);
      Array cache = c.inputs.at("cache");
      Array scale = c.inputs.at("scale");
      dynattn::CacheDesc desc;
      const int kv_heads = c.attrs.num_kv_heads ? c.attrs.num_kv_heads : c.attrs.num_heads;
      REQUIRE(dynattn::MakePmxCacheDesc(ViewOf(cache), ViewOf(scale), CacheAttrsOf(c.attrs),
                                        kv_heads, c.attrs.head_dim, &desc)
                  .ok());
      (i % 2 ? desc.key : desc.value).dim_stride = 2;
      if (i % 3 == 0) (i % 2 ? desc.key : desc.value).dim_stride = -1;
      Array out = dynattn_ref::MakeArray(c.inputs.at("query").dt, c.inputs.at("query").shape);
      const Array before = c.inputs.at("cache");
      dynattn::MultiHeadCacheAttentionArgs args = ArgsWithoutCache(&c.inputs);
      args.cache_desc = &desc;
      args.attn_output = ViewOf(out);
      dynattn::MultiHeadCacheAttentionAttrs attrs;
      attrs.attention = AttentionAttrsOf(c.attrs);
      attrs.cache = CacheAttrsOf(c.attrs);
      const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
      CHECK_MESSAGE(status.message().find("cache_desc: ") == 0, status.message());
      CHECK(status.message().find(i % 3 == 0 ? ">= 0" : "unquantized") != std::string::npos);
      CHECK(cache.bytes == before.bytes);
    }
  }

  TEST_CASE("a raw descriptor that contradicts the call is rejected, naming cache_desc") {
    for (int i = 0; i < 10; ++i) {
      Case c = dynattn_ref::RandomCase("multi_head_cache_attention", BaseSeed() + 950000 + i);
      INFO(c.description);
      Array out = dynattn_ref::MakeArray(c.inputs.at("query").dt, c.inputs.at("query").shape);
      dynattn::MultiHeadCacheAttentionArgs args = ArgsWithoutCache(&c.inputs);
      args.attn_output = ViewOf(out);
      std::vector<uint8_t> plane(64);
      dynattn::CacheDesc bad;
      bad.elem = c.attrs.quant_bit == 8 ? dynattn::CacheElem::kInt8 : dynattn::CacheElem::kF16;
      bad.num_kv_heads = 999;  // contradicts the call
      bad.head_dim = c.attrs.head_dim;
      bad.key.data = bad.value.data = plane.data();
      args.cache_desc = &bad;
      dynattn::MultiHeadCacheAttentionAttrs attrs;
      attrs.attention = {.num_heads = c.attrs.num_heads,
                         .num_kv_heads = c.attrs.num_kv_heads,
                         .head_dim = c.attrs.head_dim};
      attrs.cache = CacheAttrsOf(c.attrs);
      const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
      CHECK_FALSE(status.ok());
      CHECK_MESSAGE(status.message().find("cache_desc") == 0, status.message());
    }
  }
}

}  // namespace
}  // namespace dynattn_test
