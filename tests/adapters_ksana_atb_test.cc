// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The Ksana pool adapters (dynattn/adapters.h): a Ksana block cache and ATB's views of the same
// pool. An adapter is only pointer and stride arithmetic, so a wrong term silently reads another
// layer's or another request's rows: each case compares the adapters against an independent
// formula (the spec's §4.4 example, element-by-element address maps of every layer) and against
// the library itself over the same memory (KeyValueCache and UnifiedAttention through the Ksana
// and the ATB descriptors).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/adapters.h"
#include "dynattn/dynattn.h"
#include "reference/reference.h"
#include "tests/support/adapter_caches.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

/// Element index (nibbles for int4) of `ptr` from `base`.
int64_t ElemIndex(const void* ptr, const void* base, int64_t bits) {
  return (static_cast<const uint8_t*>(ptr) - static_cast<const uint8_t*>(base)) * 8 / bits;
}

/// Element index from `base` of element `e` of (slot, head) in a plane.
int64_t PlaneElem(const dynattn::CachePlane& p, const void* base, int64_t bits, int64_t slot,
                  int64_t head, int64_t e) {
  return ElemIndex(p.data, base, bits) + slot * p.slot_stride + head * p.head_stride + e;
}

/// Scale index from `base` of group `g` of (slot, head) in a plane.
int64_t PlaneScale(const dynattn::CachePlane& p, const void* base, int64_t size, int64_t slot,
                   int64_t head, int64_t g) {
  return ElemIndex(p.scale, base, size * 8) + slot * p.scale_slot_stride +
         head * p.scale_head_stride + g;
}

/// Element index from `base` of element `e` of (block, token, head) in a [blocks, T, H, row]
/// view (rows of bytes for int4).
int64_t ViewElem(const TensorView& v, const void* base, int64_t bits, int64_t block, int64_t token,
                 int64_t head, int64_t e) {
  const int64_t row = block * v.strides[0] + token * v.strides[1] + head * v.strides[2];
  return ElemIndex(v.data, base, bits) + (bits == 4 ? 2 * row : row) + e;
}

/// Reads / writes the element (nibble for int4) at element index `i`.
uint32_t GetElem(const std::vector<uint8_t>& mem, int64_t i, int64_t bits) {
  if (bits == 4) return (mem[i / 2] >> (4 * (i % 2))) & 0xF;
  uint32_t v = 0;
  std::memcpy(&v, &mem[i * bits / 8], bits / 8);
  return v;
}

void SetElem(std::vector<uint8_t>* mem, int64_t i, int64_t bits, uint32_t v) {
  if (bits == 4) {
    uint8_t& byte = (*mem)[i / 2];
    byte = static_cast<uint8_t>((byte & ~(0xF << (4 * (i % 2)))) | ((v & 0xF) << (4 * (i % 2))));
    return;
  }
  std::memcpy(&(*mem)[i * bits / 8], &v, bits / 8);
}

/// The spec's element index (§4.8) of (block, layer, kv, token, head, e), rows of `row`.
int64_t SpecIndex(const KsanaPoolAttrs& a, int64_t row, int64_t b, int l, int kv, int64_t t,
                  int64_t h, int64_t e) {
  const int64_t sub = int64_t{a.block_size} * a.num_kv_heads * row;
  const int64_t sub_block = a.LayerStride() * l + kv * a.KvStride();
  return (2 * a.num_layer * b + sub_block) * sub + (t * a.num_kv_heads + h) * row + e;
}

/// Ksana and ATB block caches of one layer of a pool.
struct LayerCaches {
  BlockCache ksana, atb;
  dynattn::AtbViews views;
};

LayerCaches CachesOf(const Pool& p, int layer) {
  LayerCaches c;
  REQUIRE(dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), p.attrs, layer, &c.ksana).ok());
  REQUIRE(dynattn::MakeAtbViews(p.View(), p.ScaleView(), p.attrs, &c.views).ok());
  const Status s =
      dynattn::MakePagedBlockCache(c.views.kcache, c.views.vcache, c.views.kscale, c.views.vscale,
                                   dynattn::PageLayout::kNHD, p.attrs.format, &c.atb);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return c;
}

/// Checks every element of layer `l` through the Ksana cache, the ATB views and the spec formula;
/// marks each element of the pool it addresses in `hits`.
void CheckLayerAddresses(const Pool& p, int l, std::vector<int>* hits,
                         std::vector<int>* scale_hits) {
  const LayerCaches c = CachesOf(p, l);
  const KsanaPoolAttrs& a = p.attrs;
  const int64_t bits = p.Bits(), size = dynattn::DTypeSize(p.scale_type);
  const void* base = p.data.data();
  const void* sbase = p.scales.data();
  for (int64_t b = 0; b < a.num_blocks; ++b) {
    const int64_t id = a.AtbBlockId(b, l);
    for (int64_t t = 0; t < a.block_size; ++t) {
      const int64_t slot = b * c.ksana.Stride() + t;
      REQUIRE(slot < c.ksana.cache.num_slots);
      REQUIRE(id * c.atb.Stride() + t < c.atb.cache.num_slots);
      for (int kv = 0; kv < 2; ++kv) {
        const dynattn::CachePlane& kp = kv ? c.ksana.cache.value : c.ksana.cache.key;
        const dynattn::CachePlane& ap = kv ? c.atb.cache.value : c.atb.cache.key;
        const TensorView& view = kv ? c.views.vcache : c.views.kcache;
        for (int64_t h = 0; h < a.num_kv_heads; ++h) {
          for (int64_t e = 0; e < a.head_dim; ++e) {
            const int64_t want = SpecIndex(a, a.head_dim, b, l, kv, t, h, e);
            REQUIRE(PlaneElem(kp, base, bits, slot, h, e) == want);
            REQUIRE(PlaneElem(ap, base, bits, id * c.atb.Stride() + t, h, e) == want);
            REQUIRE(ViewElem(view, base, bits, id, t, h, e) == want);
            REQUIRE(want < static_cast<int64_t>(hits->size()));
            ++(*hits)[want];
          }
          for (int64_t g = 0; p.Quantized() && g < p.Groups(); ++g) {
            const int64_t want = SpecIndex(a, p.Groups(), b, l, kv, t, h, g);
            const TensorView& sview = kv ? c.views.vscale : c.views.kscale;
            REQUIRE(PlaneScale(kp, sbase, size, slot, h, g) == want);
            REQUIRE(PlaneScale(ap, sbase, size, id * c.atb.Stride() + t, h, g) == want);
            REQUIRE(ViewElem(sview, sbase, size * 8, id, t, h, g) == want);
            ++(*scale_hits)[want];
          }
        }
      }
    }
  }
}

/// The largest element any valid (slot, head) of `bc` reaches, plus one, from `base`.
int64_t PlaneEnd(const BlockCache& bc, const void* base, int64_t bits) {
  const int64_t slot = bc.cache.num_slots - 1, h = bc.cache.num_kv_heads - 1;
  return std::max(PlaneElem(bc.cache.key, base, bits, slot, h, bc.cache.head_dim - 1),
                  PlaneElem(bc.cache.value, base, bits, slot, h, bc.cache.head_dim - 1)) +
         1;
}

/// Elements a view declares, from `base`.
int64_t ViewEnd(const TensorView& v, const void* base, int64_t bits) {
  return ElemIndex(v.data, base, bits) + v.NumElements() * (bits == 4 ? 2 : 1);
}

/// Writes random elements at random coordinates through one side and reads them through the
/// other, in the pool's memory.
void CheckWriteRead(Pool* p, std::mt19937_64& rng) {
  const KsanaPoolAttrs& a = p->attrs;
  const int64_t bits = p->Bits();
  for (int i = 0; i < 50; ++i) {
    const int l = Rand(rng, 0, a.num_layer - 1), kv = Rand(rng, 0, 1);
    const int64_t b = Rand(rng, 0, static_cast<int>(a.num_blocks) - 1);
    const int64_t t = Rand(rng, 0, a.block_size - 1), h = Rand(rng, 0, a.num_kv_heads - 1);
    const int64_t e = Rand(rng, 0, a.head_dim - 1);
    const LayerCaches c = CachesOf(*p, l);
    const dynattn::CachePlane& kp = kv ? c.ksana.cache.value : c.ksana.cache.key;
    const int64_t ks = PlaneElem(kp, p->data.data(), bits, b * c.ksana.Stride() + t, h, e);
    const int64_t at = ViewElem(kv ? c.views.vcache : c.views.kcache, p->data.data(), bits,
                                a.AtbBlockId(b, l), t, h, e);
    const uint32_t v = static_cast<uint32_t>(rng()) & (bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1);
    const bool ksana_first = i % 2 == 0;
    SetElem(&p->data, ksana_first ? ks : at, bits, v);
    INFO("write " << (ksana_first ? "ksana" : "atb") << " b=" << b << " l=" << l << " kv=" << kv
                  << " t=" << t << " h=" << h << " e=" << e);
    REQUIRE(GetElem(p->data, ksana_first ? at : ks, bits) == v);
  }
}

/// KeyValueCache over `bc` for `step` (paged mode, page = block, cachestarts = id * stride).
/// With `write` false the step's new tokens are left out (a pure gather of the whole kv length).
struct KvcRun {
  Status status;
  dynattn_ref::Array key, value;
};

KvcRun RunKvc(const BlockCache& bc, const std::vector<int64_t>& ids, const Step& s,
              const dynattn_ref::Array& k, const dynattn_ref::Array& v, int quant_bit,
              int quant_group, bool write) {
  const int64_t batch = s.Batch();
  std::vector<int64_t> seqstarts(batch + 1, 0), kvstarts(batch + 1, 0), start(batch);
  std::vector<int64_t> cachestarts(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) cachestarts[i] = ids[i] * bc.Stride();
  for (int64_t b = 0; b < batch; ++b) {
    seqstarts[b + 1] = write ? s.qsl[b + 1] : 0;
    kvstarts[b + 1] = kvstarts[b] + s.KvLen(b);
    start[b] = write ? s.context[b] : s.KvLen(b);
  }
  const int64_t max_seq = std::max<int64_t>(s.Tokens(), 1), max_kv = kvstarts[batch] + 1;
  const int64_t heads = bc.cache.num_kv_heads, dim = bc.cache.head_dim;
  const int64_t tokens = write ? s.Tokens() : 0;
  dynattn::KeyValueCacheArgs args;
  const DType io = k.dt == dynattn_ref::Dt::kF32 ? DType::kF32 : DType::kF16;
  args.current_key = TensorView::Dense(k.bytes.data(), io, {tokens, heads, dim});
  args.current_value = TensorView::Dense(v.bytes.data(), io, {tokens, heads, dim});
  args.seqstarts = TensorView::Dense(seqstarts.data(), DType::kI64, {batch + 1});
  args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  args.cachestarts = TensorView::Dense(cachestarts.data(), DType::kI64, {batch, s.max_blocks});
  args.start_pos = TensorView::Dense(start.data(), DType::kI64, {batch});
  args.max_seqlen = Scalar(&max_seq);
  args.max_kvlen = Scalar(&max_kv);
  args.cache_desc = &bc.cache;
  KvcRun run;
  run.key = dynattn_ref::MakeArray(k.dt, {kvstarts[batch], heads, dim});
  run.value = dynattn_ref::MakeArray(k.dt, {kvstarts[batch], heads, dim});
  args.key = ViewOf(run.key);
  args.value = ViewOf(run.value);
  dynattn::KeyValueCacheAttrs attrs;
  attrs.cache.quant_bit = quant_bit;
  attrs.cache.quant_group = quant_group;
  attrs.cache.cache_mode = 1;
  attrs.cache.page_size = static_cast<int>(bc.block_size);
  run.status = dynattn::KeyValueCache(attrs, args);
  return run;
}

/// `step.table` with every used entry mapped to the ATB id of layer `l` (padding stays 0).
std::vector<int64_t> AtbTable(const Step& s, const KsanaPoolAttrs& a, int l) {
  std::vector<int64_t> out(s.table.size(), 0);
  for (int64_t b = 0; b < s.Batch(); ++b) {
    for (int64_t j = 0; j < s.Pages(b); ++j) {
      out[b * s.max_blocks + j] = a.AtbBlockId(s.table[b * s.max_blocks + j], l);
    }
  }
  return out;
}

TEST_SUITE("adapters") {
  TEST_CASE("§4.4 worked example: ATB ids, K/V element addresses, slot, extents") {
    for (bool slack : {true, false}) {
      Pool p;
      p.attrs.num_layer = 2;
      p.attrs.num_blocks = 3;
      p.attrs.slack_block = slack;
      p.attrs.block_size = 4;
      p.attrs.num_kv_heads = 2;
      p.attrs.head_dim = 8;
      p.data.assign(p.Blocks() * 256 * 2, 0);
      CHECK(p.SubBlock() == 64);
      const std::pair<int64_t, int> rows[3] = {{0, 0}, {0, 1}, {2, 1}};
      const int64_t want_ids[3] = {0, 1, 9};
      for (int i = 0; i < 3; ++i) {
        const auto [b, l] = rows[i];
        const LayerCaches c = CachesOf(p, l);
        const int64_t id = p.attrs.AtbBlockId(b, l);
        CHECK(id == want_ids[i]);
        CHECK(ViewElem(c.views.kcache, p.data.data(), 16, id, 0, 0, 0) == 64 * id);
        CHECK(ViewElem(c.views.vcache, p.data.data(), 16, id, 0, 0, 0) == 128 + 64 * id);
        CHECK(PlaneElem(c.ksana.cache.key, p.data.data(), 16, b * c.ksana.Stride(), 0, 0) ==
              64 * id);
        CHECK(PlaneElem(c.ksana.cache.value, p.data.data(), 16, b * c.ksana.Stride(), 0, 0) ==
              128 + 64 * id);
        CHECK(64 * id >= 256 * b);
        CHECK(128 + 64 * id + 64 <= 256 * (b + 1));
      }
      // Position 5 of a request whose table is [2, 0], layer 1.
      const int64_t table[2] = {2, 0}, request = 0, position = 5;
      const TensorView tv = TensorView::Dense(table, DType::kI64, {1, 2});
      std::vector<int64_t> slots, atb;
      REQUIRE(dynattn::AtbSlotMapping(tv, TensorView::Dense(&request, DType::kI64, {1}),
                                      TensorView::Dense(&position, DType::kI64, {1}), p.attrs, 1,
                                      &slots)
                  .ok());
      CHECK(slots == std::vector<int64_t>{5});
      REQUIRE(dynattn::KsanaToAtbBlockTable(tv, p.attrs, 1, &atb).ok());
      CHECK(atb == std::vector<int64_t>{9, 1});
      const LayerCaches c = CachesOf(p, 1);
      CHECK(PlaneElem(c.atb.cache.key, p.data.data(), 16, slots[0], 0, 0) == 80);
      CHECK(PlaneElem(c.atb.cache.value, p.data.data(), 16, slots[0], 0, 0) == 208);
      CHECK(PlaneElem(c.ksana.cache.value, p.data.data(), 16, 0 * c.ksana.Stride() + 1, 0, 0) ==
            208);
      // Largest address: 768 = N blocks; the declared views end inside the allocation.
      CHECK(PlaneElem(c.atb.cache.value, p.data.data(), 16, 9 * 4 + 3, 1, 7) + 1 == 768);
      CHECK(PlaneEnd(c.ksana, p.data.data(), 16) == 768);
      CHECK(PlaneEnd(c.atb, p.data.data(), 16) == (slack ? 896 : 768));
      CHECK(c.views.vcache.shape[0] == (slack ? 12 : 10));
      CHECK(ViewEnd(c.views.vcache, p.data.data(), 16) == (slack ? 896 : 768));
      CHECK(ViewEnd(c.views.vcache, p.data.data(), 16) <= 256 * p.Blocks());
    }
  }

  TEST_CASE("Ksana and ATB address the same elements, tile the pool, stay inside it") {
    const uint64_t seed = BaseSeed() + 7100;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 160; ++i) {
      const int bits = std::vector<int>{16, 8, 32, 4}[i % 4];
      const auto order = (i / 4) % 2 ? KsanaBlockOrder::kLayerKv : KsanaBlockOrder::kKvLayer;
      const bool slack = (i / 8) % 2 == 0;
      const int layers = i % 5 == 0 ? 1 : Rand(rng, 1, 4);
      const int64_t blocks = i % 7 == 0 ? 1 : Rand(rng, 1, 4);
      Pool p = RandomPool(rng, bits, order, slack, layers, blocks);
      INFO("seed " << seed << " case " << i << ": " << p.Describe());
      const int64_t used = p.attrs.num_blocks * 2 * layers * p.SubBlock();
      std::vector<int> hits(used, 0), scale_hits(used, 0);
      for (int l = 0; l < layers; ++l) CheckLayerAddresses(p, l, &hits, &scale_hits);
      CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
      if (p.Quantized()) {
        const int64_t scales = p.attrs.num_blocks * 2 * layers * p.SubBlockScales();
        CHECK(std::all_of(scale_hits.begin(), scale_hits.begin() + scales,
                          [](int h) { return h == 1; }));
      }
      const int64_t end = p.Blocks() * 2 * layers * p.SubBlock();
      for (int l = 0; l < layers; ++l) {
        const LayerCaches c = CachesOf(p, l);
        CHECK(PlaneEnd(c.ksana, p.data.data(), p.Bits()) <= used);
        CHECK(PlaneEnd(c.atb, p.data.data(), p.Bits()) <= end);  // the declared view
        CHECK(ViewEnd(c.views.kcache, p.data.data(), p.Bits()) <= end);
        CHECK(ViewEnd(c.views.vcache, p.data.data(), p.Bits()) <= end);
        if (p.Quantized()) {
          const int64_t sbits = dynattn::DTypeSize(p.scale_type) * 8;
          CHECK(ViewEnd(c.views.vscale, p.scales.data(), sbits) <=
                p.Blocks() * 2 * layers * p.SubBlockScales());
        }
      }
      CheckWriteRead(&p, rng);
    }
  }

  TEST_CASE("KeyValueCache writes through one descriptor and gathers through the other") {
    const uint64_t seed = BaseSeed() + 7200;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 80; ++i) {
      const int bits = std::vector<int>{16, 8, 32, 4}[i % 4];
      const auto order = (i / 4) % 2 ? KsanaBlockOrder::kLayerKv : KsanaBlockOrder::kKvLayer;
      const int layers = Rand(rng, 1, 3);
      const Step s = RandomStep(rng, Rand(rng, 1, 5), 0);
      const Pool p = RandomPool(rng, bits, order, i % 3 != 0, layers, s.num_blocks,
                                static_cast<int>(s.block_size));
      const int l = Rand(rng, 0, layers - 1);
      INFO("seed " << seed << " case " << i << ": " << p.Describe() << " layer " << l << " "
                   << s.Describe());
      const DType io = bits == 32 ? DType::kF32 : DType::kF16;
      const auto k = RandomFloats(rng, io, {s.Tokens(), p.attrs.num_kv_heads, p.attrs.head_dim});
      const auto v = RandomFloats(rng, io, {s.Tokens(), p.attrs.num_kv_heads, p.attrs.head_dim});
      const int qb = p.attrs.format.quant_bit, qg = p.attrs.format.quant_group;
      Pool via_ksana = p, via_atb = p;
      const LayerCaches ck = CachesOf(via_ksana, l), ca = CachesOf(via_atb, l);
      const std::vector<int64_t> atb_ids = AtbTable(s, p.attrs, l);
      const KvcRun a = RunKvc(ck.ksana, s.table, s, k, v, qb, qg, true);
      const KvcRun b = RunKvc(ca.atb, atb_ids, s, k, v, qb, qg, true);
      REQUIRE_MESSAGE(a.status.ok(), a.status.message());
      REQUIRE_MESSAGE(b.status.ok(), b.status.message());
      std::string why;
      CHECK(via_ksana.data == via_atb.data);
      CHECK(via_ksana.scales == via_atb.scales);
      CHECK_MESSAGE(SameBytes(a.key, b.key, &why), why);
      CHECK_MESSAGE(SameBytes(a.value, b.value, &why), why);
      if (s.Tokens() > 0) CHECK(via_ksana.data != p.data);
      // Written through Ksana, gathered through ATB, and the reverse.
      const KvcRun c = RunKvc(ck.atb, atb_ids, s, k, v, qb, qg, false);
      REQUIRE_MESSAGE(c.status.ok(), c.status.message());
      CHECK_MESSAGE(SameBytes(c.key, a.key, &why), why);
      CHECK_MESSAGE(SameBytes(c.value, a.value, &why), why);
      const KvcRun d = RunKvc(ca.ksana, s.table, s, k, v, qb, qg, false);
      REQUIRE_MESSAGE(d.status.ok(), d.status.message());
      CHECK_MESSAGE(SameBytes(d.key, b.key, &why), why);
      CHECK_MESSAGE(SameBytes(d.value, b.value, &why), why);
    }
  }

  TEST_CASE("UnifiedAttention through the Ksana and the ATB block cache: identical bits") {
    const uint64_t seed = BaseSeed() + 7300;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 40; ++i) {
      const int bits = std::vector<int>{16, 8, 32, 4}[i % 4];
      const auto order = (i / 4) % 2 ? KsanaBlockOrder::kLayerKv : KsanaBlockOrder::kKvLayer;
      const int layers = Rand(rng, 1, 3);
      const Step s = RandomStep(rng, Rand(rng, 1, 5), 0);
      const Pool p = RandomPool(rng, bits, order, i % 3 != 0, layers, s.num_blocks,
                                static_cast<int>(s.block_size));
      const int l = Rand(rng, 0, layers - 1);
      INFO("seed " << seed << " case " << i << ": " << p.Describe() << " layer " << l << " "
                   << s.Describe());
      StepTensors t = RandomStepTensors(rng, s, bits == 32 ? DType::kF32 : DType::kF16,
                                        p.attrs.num_kv_heads, p.attrs.head_dim);
      dynattn::UnifiedMetadata ksana_meta, atb_meta;
      ksana_meta.query_start_loc = atb_meta.query_start_loc = s.qsl;
      ksana_meta.context_lens = atb_meta.context_lens = s.context;
      ksana_meta.block_table = s.table;
      ksana_meta.max_blocks = atb_meta.max_blocks = s.max_blocks;
      const Index table(s.table, {s.Batch(), s.max_blocks}, i % 2 == 0);
      REQUIRE(dynattn::KsanaToAtbBlockTable(table.View(), p.attrs, l, &atb_meta.block_table).ok());
      Pool via_ksana = p, via_atb = p;
      const LayerCaches ck = CachesOf(via_ksana, l), ca = CachesOf(via_atb, l);
      dynattn_ref::Array out_ksana, out_atb;
      const Status a = RunUnified(t, ksana_meta, ck.ksana, &out_ksana);
      const Status b = RunUnified(t, atb_meta, ca.atb, &out_atb);
      REQUIRE_MESSAGE(a.ok(), a.message());
      REQUIRE_MESSAGE(b.ok(), b.message());
      std::string why;
      CHECK_MESSAGE(SameBytes(out_ksana, out_atb, &why), why);
      CHECK(via_ksana.data == via_atb.data);
      CHECK(via_ksana.scales == via_atb.scales);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
