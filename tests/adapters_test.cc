// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The zero-copy adapters (dynattn/adapters.h). Why these tests: an adapter is only pointer and
// stride arithmetic, so a wrong term silently reads another layer's or another request's rows.
// Each test therefore compares the adapter against an independent formula (the spec's §4.4
// example, element-by-element address maps), against the library itself over the same memory
// (KeyValueCache and UnifiedAttention through the Ksana and the ATB descriptors), and against
// the float64 reference (vLLM and FlashInfer steps), and checks that each validation rule names
// its input.

#include "dynattn/adapters.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn::BlockCache;
using dynattn::CacheFormat;
using dynattn::DType;
using dynattn::KsanaBlockOrder;
using dynattn::KsanaPoolAttrs;
using dynattn::Status;
using dynattn::TensorView;

int Rand(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

double RandReal(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

/// Bits per stored cache element of a format and float dtype.
int64_t ElemBits(const CacheFormat& f, DType float_type) {
  if (f.quant_bit != 0) return f.quant_bit;
  return float_type == DType::kF32 ? 32 : 16;
}

/// Storage dtype of a cache tensor.
DType StorageType(const CacheFormat& f, DType float_type) {
  return f.quant_bit != 0 ? DType::kI8 : float_type;
}

/// Fills `bytes` with valid random elements (finite floats, int8 in [-127, 127], int4 in [-7, 7]).
void FillElements(std::vector<uint8_t>* bytes, int64_t bits, std::mt19937_64& rng) {
  if (bits == 32) {
    for (size_t i = 0; i + 4 <= bytes->size(); i += 4) {
      const float v = static_cast<float>(RandReal(rng, -1, 1));
      std::memcpy(&(*bytes)[i], &v, 4);
    }
  } else if (bits == 16) {
    for (size_t i = 0; i + 2 <= bytes->size(); i += 2) {
      const uint16_t v = dynattn_ref::F16Bits(RandReal(rng, -1, 1));
      std::memcpy(&(*bytes)[i], &v, 2);
    }
  } else if (bits == 8) {
    for (uint8_t& b : *bytes) b = static_cast<uint8_t>(Rand(rng, -127, 127));
  } else {
    for (uint8_t& b : *bytes)
      b = dynattn_ref::detail::PackNibbles(Rand(rng, -7, 7), Rand(rng, -7, 7));
  }
}

/// Fills a scale buffer with positive scales of `type`.
void FillScales(std::vector<uint8_t>* bytes, DType type, std::mt19937_64& rng) {
  const int size = type == DType::kF32 ? 4 : 2;
  for (size_t i = 0; i + size <= bytes->size(); i += size) {
    const double s = RandReal(rng, 0.002, 0.02);
    if (size == 4) {
      const float v = static_cast<float>(s);
      std::memcpy(&(*bytes)[i], &v, 4);
    } else {
      const uint16_t v = dynattn_ref::F16Bits(s);
      std::memcpy(&(*bytes)[i], &v, 2);
    }
  }
}

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

// -------------------------------------------------------------------------------------------
// Ksana pools.

/// A Ksana pool in memory with its descriptor.
struct Pool {
  KsanaPoolAttrs attrs;
  DType float_type = DType::kF16;
  DType scale_type = DType::kF16;
  std::vector<uint8_t> data, scales;

  int64_t Blocks() const { return attrs.num_blocks + (attrs.slack_block ? 1 : 0); }
  int64_t Bits() const { return ElemBits(attrs.format, float_type); }
  int64_t SubBlock() const {
    return int64_t{attrs.block_size} * attrs.num_kv_heads * attrs.head_dim;
  }
  int64_t Groups() const { return attrs.head_dim / attrs.format.quant_group; }
  int64_t SubBlockScales() const {
    return int64_t{attrs.block_size} * attrs.num_kv_heads * Groups();
  }
  bool Quantized() const { return attrs.format.quant_bit != 0; }
  TensorView View() const {
    const int64_t row =
        2 * attrs.num_layer * SubBlock() * Bits() / 8 /
        static_cast<int64_t>(dynattn::DTypeSize(StorageType(attrs.format, float_type)));
    return TensorView::Dense(data.data(), StorageType(attrs.format, float_type), {Blocks(), row});
  }
  TensorView ScaleView() const {
    if (!Quantized()) return {};
    return TensorView::Dense(scales.data(), scale_type,
                             {Blocks(), 2 * attrs.num_layer * SubBlockScales()});
  }
  std::string Describe() const {
    return std::string(attrs.order == KsanaBlockOrder::kKvLayer ? "[2][L]" : "[L][2]") +
           " L=" + std::to_string(attrs.num_layer) + " N=" + std::to_string(attrs.num_blocks) +
           (attrs.slack_block ? "+1" : "") + " T=" + std::to_string(attrs.block_size) +
           " Hkv=" + std::to_string(attrs.num_kv_heads) + " D=" + std::to_string(attrs.head_dim) +
           " bits=" + std::to_string(Bits()) + " G=" + std::to_string(attrs.format.quant_group);
  }
};

/// A random pool of the given element kind (bits 32, 16, 8 or 4), random content.
Pool RandomPool(std::mt19937_64& rng, int bits, KsanaBlockOrder order, bool slack, int layers,
                int64_t blocks, int tokens_per_block = 0) {
  Pool p;
  p.attrs.order = order;
  p.attrs.num_layer = layers;
  p.attrs.num_blocks = blocks;
  p.attrs.slack_block = slack;
  p.attrs.block_size = tokens_per_block > 0 ? tokens_per_block : Rand(rng, 1, 5);
  p.attrs.num_kv_heads = Rand(rng, 1, 3);
  p.attrs.head_dim = 2 * Rand(rng, 1, 4);
  p.attrs.format.quant_bit = bits <= 8 ? bits : 0;
  p.attrs.format.quant_group = p.attrs.head_dim / (Rand(rng, 0, 1) ? 2 : 1);
  if (bits == 4 && p.attrs.format.quant_group % 2) p.attrs.format.quant_group = p.attrs.head_dim;
  p.float_type = bits == 32 ? DType::kF32 : DType::kF16;
  p.scale_type = Rand(rng, 0, 1) ? DType::kF32 : DType::kF16;
  p.data.resize(p.Blocks() * 2 * layers * p.SubBlock() * p.Bits() / 8);
  FillElements(&p.data, p.Bits(), rng);
  if (p.Quantized()) {
    p.scales.resize(p.Blocks() * 2 * layers * p.SubBlockScales() *
                    dynattn::DTypeSize(p.scale_type));
    FillScales(&p.scales, p.scale_type, rng);
  }
  return p;
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

// -------------------------------------------------------------------------------------------
// Steps over a block cache: requests with context and new tokens, distinct blocks.

struct Step {
  std::vector<int64_t> qsl, context, table;  ///< table: (B, max_blocks), padded with 0.
  int64_t max_blocks = 0, block_size = 0, num_blocks = 0;
  int64_t Batch() const { return static_cast<int64_t>(context.size()); }
  int64_t Tokens() const { return qsl.back(); }
  int64_t Query(int64_t b) const { return qsl[b + 1] - qsl[b]; }
  int64_t KvLen(int64_t b) const { return context[b] + Query(b); }
  int64_t Pages(int64_t b) const { return (KvLen(b) + block_size - 1) / block_size; }
  std::string Describe() const {
    std::string s = "bs=" + std::to_string(block_size) + " blocks=" + std::to_string(num_blocks);
    for (int64_t b = 0; b < Batch(); ++b) {
      s += " [ctx " + std::to_string(context[b]) + " q " + std::to_string(Query(b)) + "]";
    }
    return s;
  }
};

/// A random step over `num_blocks` blocks (at least the pages it needs; ids distinct, shuffled).
/// When `num_blocks` is 0 it is chosen here.
Step RandomStep(std::mt19937_64& rng, int64_t block_size, int64_t num_blocks) {
  Step s;
  s.block_size = block_size;
  const int batch = Rand(rng, 1, 4);
  s.qsl = {0};
  int64_t pages = 0;
  for (int b = 0; b < batch; ++b) {
    const int kind = Rand(rng, 0, 3);  // decode, prompt, chunk, empty
    const int64_t q = kind == 0 ? 1 : kind == 3 && b > 0 ? 0 : Rand(rng, 1, 6);
    const int64_t ctx = kind == 1 ? 0 : Rand(rng, 0, static_cast<int>(3 * block_size));
    s.qsl.push_back(s.qsl.back() + q);
    s.context.push_back(ctx);
    pages += (ctx + q + block_size - 1) / block_size;
  }
  if (num_blocks > 0 && num_blocks < pages) return RandomStep(rng, block_size, num_blocks);
  s.num_blocks = num_blocks > 0 ? num_blocks : pages + Rand(rng, 0, 3);
  std::vector<int64_t> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int64_t b = 0; b < s.Batch(); ++b) s.max_blocks = std::max(s.max_blocks, s.Pages(b));
  s.table.assign(s.Batch() * s.max_blocks, 0);
  size_t next = 0;
  for (int64_t b = 0; b < s.Batch(); ++b) {
    for (int64_t j = 0; j < s.Pages(b); ++j) s.table[b * s.max_blocks + j] = ids[next++];
  }
  return s;
}

/// A dense random float tensor of `type`.
dynattn_ref::Array RandomFloats(std::mt19937_64& rng, DType type, std::vector<int64_t> shape) {
  dynattn_ref::Array a = dynattn_ref::MakeArray(
      type == DType::kF32 ? dynattn_ref::Dt::kF32 : dynattn_ref::Dt::kF16, shape);
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, RandReal(rng, -1, 1));
  return a;
}

/// The int64 scalar tensor holding `v` (kept alive by the caller).
TensorView Scalar(const int64_t* v) { return TensorView::Dense(v, DType::kI64, {}); }

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

// -------------------------------------------------------------------------------------------
// Engine caches (vLLM, FlashInfer) with an independent row formula per layout.

enum class Kind { kVllmNhd, kVllmCpu, kFiNhd, kFiHnd, kFiNhdCombined, kFiHndCombined };

const char* KindName(Kind k) {
  const char* names[] = {"vLLM NHD",       "vLLM CPU",          "FlashInfer NHD",
                         "FlashInfer HND", "FlashInfer NHD kv", "FlashInfer HND kv"};
  return names[static_cast<int>(k)];
}

/// An engine's cache in memory: K and V buffers (one buffer when combined) and their scales.
struct EngineCache {
  Kind kind = Kind::kVllmNhd;
  int64_t pages = 0, page_size = 0, heads = 0, dim = 0;
  CacheFormat format;
  DType float_type = DType::kF16, scale_type = DType::kF16;
  std::vector<uint8_t> data[2], scales[2];

  bool Separate() const {
    return kind == Kind::kVllmNhd || kind == Kind::kFiNhd || kind == Kind::kFiHnd;
  }
  int Buffer(int kv) const { return Separate() ? kv : 0; }
  int64_t Bits() const { return ElemBits(format, float_type); }
  int64_t Groups() const { return dim / format.quant_group; }
  int64_t RowBytes() const { return dim * Bits() / 8; }
  int64_t ScaleRowBytes() const { return Groups() * dynattn::DTypeSize(scale_type); }
  int64_t RowsPerBuffer() const { return (Separate() ? 1 : 2) * pages * page_size * heads; }

  /// Row of (kv, page, token, head) in its buffer, by the engine's documented layout.
  int64_t Row(int kv, int64_t page, int64_t t, int64_t h) const {
    const int64_t ps = page_size, hh = heads;
    switch (kind) {
      case Kind::kVllmNhd:
      case Kind::kFiNhd:
        return (page * ps + t) * hh + h;
      case Kind::kFiHnd:
        return (page * hh + h) * ps + t;
      case Kind::kFiNhdCombined:
        return ((page * 2 + kv) * ps + t) * hh + h;
      case Kind::kFiHndCombined:
        return ((page * 2 + kv) * hh + h) * ps + t;
      case Kind::kVllmCpu:
        return ((kv * pages + page) * hh + h) * ps + t;
    }
    return 0;
  }

  /// Whether plane `kv` stores its rows dimension-major: vLLM's CPU keys, [D, block_size] per
  /// (block, head) (vLLM's cpu_attn backend, csrc/cpu/cpu_attn_vec*.hpp), so element d of token
  /// t of a block sits d * block_size + t elements into the (block, head) region.
  bool DimMajor(int kv) const { return kind == Kind::kVllmCpu && kv == 0; }

  /// Byte of element d of (kv, page, token, head) in its buffer, by the engine's layout.
  int64_t ElementByte(int kv, int64_t page, int64_t t, int64_t h, int64_t d) const {
    const int64_t element_bytes = Bits() / 8;  // unquantized: whole bytes
    if (!DimMajor(kv)) return Row(kv, page, t, h) * RowBytes() + d * element_bytes;
    const int64_t region = Row(kv, page, 0, h);  // the (block, head)'s first row
    return (region * dim + d * page_size + t) * element_bytes;
  }

  /// Tensor shape of a buffer whose rows have `last` entries.
  std::vector<int64_t> Shape(int64_t last) const {
    const int64_t p = pages, ps = page_size, h = heads;
    switch (kind) {
      case Kind::kVllmNhd:
      case Kind::kFiNhd:
        return {p, ps, h, last};
      case Kind::kFiHnd:
        return {p, h, ps, last};
      case Kind::kFiNhdCombined:
        return {p, 2, ps, h, last};
      case Kind::kFiHndCombined:
        return {p, 2, h, ps, last};
      case Kind::kVllmCpu:
        return {2, p, h, ps, last};
    }
    return {};
  }

  TensorView DataView(int buffer) const {
    const std::vector<int64_t> shape = Shape(format.quant_bit == 4 ? dim / 2 : dim);
    return TensorView::Dense(data[buffer].data(), StorageType(format, float_type),
                             static_cast<int>(shape.size()), shape.data());
  }
  TensorView ScaleView(int buffer) const {
    if (format.quant_bit == 0) return {};
    const std::vector<int64_t> shape = Shape(Groups());
    return TensorView::Dense(scales[buffer].data(), scale_type, static_cast<int>(shape.size()),
                             shape.data());
  }

  /// The adapter's block cache over this memory.
  Status Make(BlockCache* out) const {
    using dynattn::PageLayout;
    switch (kind) {
      case Kind::kVllmNhd:
      case Kind::kFiNhd:
      case Kind::kFiHnd:
        return dynattn::MakePagedBlockCache(
            DataView(0), DataView(1), ScaleView(0), ScaleView(1),
            kind == Kind::kFiHnd ? PageLayout::kHND : PageLayout::kNHD, format, out);
      case Kind::kFiNhdCombined:
      case Kind::kFiHndCombined:
        return dynattn::MakeCombinedBlockCache(
            DataView(0), ScaleView(0),
            kind == Kind::kFiHndCombined ? PageLayout::kHND : PageLayout::kNHD, format, out);
      case Kind::kVllmCpu:
        return dynattn::MakeVllmCpuBlockCache(DataView(0), ScaleView(0), format, out);
    }
    return Status::Ok();
  }
};

EngineCache RandomEngineCache(std::mt19937_64& rng, Kind kind, int64_t pages, int64_t page_size,
                              int quant_bit, DType float_type) {
  EngineCache c;
  c.kind = kind;
  c.pages = pages;
  c.page_size = page_size;
  c.heads = Rand(rng, 1, 3);
  c.dim = 2 * Rand(rng, 1, 4);
  c.format.quant_bit = quant_bit;
  c.format.quant_group = c.dim / (Rand(rng, 0, 1) ? 2 : 1);
  if (quant_bit == 4 && c.format.quant_group % 2) c.format.quant_group = c.dim;
  c.float_type = float_type;
  const int buffers = c.Separate() ? 2 : 1;
  for (int i = 0; i < buffers; ++i) {
    c.data[i].resize(c.RowsPerBuffer() * c.RowBytes());
    FillElements(&c.data[i], c.Bits(), rng);
    if (quant_bit != 0) {
      c.scales[i].resize(c.RowsPerBuffer() * c.ScaleRowBytes());
      FillScales(&c.scales[i], c.scale_type, rng);
    }
  }
  return c;
}

/// Copies (`to_ref`) the engine's rows into a reference cache (MaxT, 1, 2, Hkv, row) with slot =
/// page * page_size + token, or compares them with it (returns false on the first difference).
bool MirrorRows(const EngineCache& c, dynattn_ref::Array* cache, dynattn_ref::Array* scale,
                bool to_ref) {
  for (int64_t page = 0; page < c.pages; ++page) {
    for (int64_t t = 0; t < c.page_size; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int64_t h = 0; h < c.heads; ++h) {
          const int64_t ref_row = ((page * c.page_size + t) * 2 + kv) * c.heads + h;
          const int64_t row = c.Row(kv, page, t, h);
          uint8_t* r = cache->bytes.data() + ref_row * c.RowBytes();
          if (c.DimMajor(kv)) {  // element by element
            const int64_t size = c.Bits() / 8;
            for (int64_t d = 0; d < c.dim; ++d) {
              const uint8_t* e = c.data[c.Buffer(kv)].data() + c.ElementByte(kv, page, t, h, d);
              if (to_ref) std::memcpy(r + d * size, e, size);
              if (!to_ref && std::memcmp(r + d * size, e, size) != 0) return false;
            }
            continue;
          }
          const uint8_t* e = c.data[c.Buffer(kv)].data() + row * c.RowBytes();
          if (to_ref) std::memcpy(r, e, c.RowBytes());
          if (!to_ref && std::memcmp(r, e, c.RowBytes()) != 0) return false;
          if (c.format.quant_bit == 0) continue;
          uint8_t* rs = scale->bytes.data() + ref_row * c.ScaleRowBytes();
          const uint8_t* es = c.scales[c.Buffer(kv)].data() + row * c.ScaleRowBytes();
          if (to_ref) std::memcpy(rs, es, c.ScaleRowBytes());
          if (!to_ref && std::memcmp(rs, es, c.ScaleRowBytes()) != 0) return false;
        }
      }
    }
  }
  return true;
}

/// An index tensor stored as int32 or int64.
struct Index {
  std::vector<int64_t> v64;
  std::vector<int32_t> v32;
  std::vector<int64_t> shape;
  bool narrow = false;

  Index(const std::vector<int64_t>& values, std::vector<int64_t> dims, bool int32)
      : v64(values), v32(values.begin(), values.end()), shape(std::move(dims)), narrow(int32) {}
  TensorView View() const {
    return TensorView::Dense(narrow ? static_cast<const void*>(v32.data()) : v64.data(),
                             narrow ? DType::kI32 : DType::kI64, static_cast<int>(shape.size()),
                             shape.data());
  }
};

/// vLLM metadata of a step, the table padded with `extra` columns.
struct VllmInputs {
  Index qsl, seq_lens, table, slots;
  dynattn::VllmMetadata View() const {
    return {qsl.View(), seq_lens.View(), table.View(), slots.View()};
  }
};

VllmInputs VllmOf(const Step& s, int extra, bool int32) {
  std::vector<int64_t> seq, table, slots;
  const int64_t cols = s.max_blocks + extra;
  for (int64_t b = 0; b < s.Batch(); ++b) {
    seq.push_back(s.KvLen(b));
    for (int64_t j = 0; j < cols; ++j) {
      table.push_back(j < s.max_blocks ? s.table[b * s.max_blocks + j] : 0);
    }
    for (int64_t p = s.context[b]; p < s.KvLen(b); ++p) {
      slots.push_back(s.table[b * s.max_blocks + p / s.block_size] * s.block_size +
                      p % s.block_size);
    }
  }
  return {Index(s.qsl, {s.Batch() + 1}, int32), Index(seq, {s.Batch()}, int32),
          Index(table, {s.Batch(), cols}, int32),
          Index(slots, {static_cast<int64_t>(slots.size())}, int32)};
}

/// FlashInfer metadata of a step (kv_indices with `extra` trailing unused entries).
struct FlashInferInputs {
  Index qo, kv, indices, last;
  dynattn::FlashInferMetadata View() const {
    return {qo.View(), kv.View(), indices.View(), last.View()};
  }
};

FlashInferInputs FlashInferOf(const Step& s, int extra, bool int32) {
  std::vector<int64_t> kv = {0}, indices, last;
  for (int64_t b = 0; b < s.Batch(); ++b) {
    for (int64_t j = 0; j < s.Pages(b); ++j) indices.push_back(s.table[b * s.max_blocks + j]);
    kv.push_back(static_cast<int64_t>(indices.size()));
    last.push_back(s.Pages(b) ? s.KvLen(b) - (s.Pages(b) - 1) * s.block_size : 0);
  }
  for (int i = 0; i < extra; ++i) indices.push_back(0);
  return {Index(s.qsl, {s.Batch() + 1}, int32), Index(kv, {s.Batch() + 1}, int32),
          Index(indices, {static_cast<int64_t>(indices.size())}, int32),
          Index(last, {s.Batch()}, int32)};
}

/// The step's query and fresh K/V.
struct StepTensors {
  dynattn_ref::Array query, key, value;
  int num_heads = 0;
};

StepTensors RandomStepTensors(std::mt19937_64& rng, const Step& s, DType io, int64_t heads,
                              int64_t dim) {
  StepTensors t;
  t.num_heads = static_cast<int>(heads * Rand(rng, 1, 2));
  t.query = RandomFloats(rng, io, {s.Tokens(), t.num_heads, dim});
  t.key = RandomFloats(rng, io, {s.Tokens(), heads, dim});
  t.value = RandomFloats(rng, io, {s.Tokens(), heads, dim});
  return t;
}

/// UnifiedAttention of `t` over `bc` with `meta`; the output in `out`.
Status RunUnified(StepTensors& t, const dynattn::UnifiedMetadata& meta, const BlockCache& bc,
                  dynattn_ref::Array* out) {
  *out = dynattn_ref::MakeArray(t.query.dt, t.query.shape);
  dynattn::UnifiedAttentionArgs args;
  args.query = ViewOf(t.query);
  args.current_key = ViewOf(t.key);
  args.current_value = ViewOf(t.value);
  meta.BindTo(&args);
  args.cache = &bc;
  args.attn_output = ViewOf(*out);
  dynattn::UnifiedAttentionAttrs attrs;
  attrs.num_heads = t.num_heads;
  attrs.head_dim = bc.cache.head_dim;
  attrs.num_kv_heads = bc.cache.num_kv_heads;
  return dynattn::UnifiedAttention(attrs, args);
}

/// The float64 reference of the step over a PMX layout-0 copy of the engine cache.
dynattn_ref::AttnResult ReferenceOf(const StepTensors& t, const Step& s, const EngineCache& c) {
  dynattn_ref::Attrs attrs;
  attrs.num_heads = t.num_heads;
  attrs.head_dim = static_cast<int>(c.dim);
  attrs.num_kv_heads = static_cast<int>(c.heads);
  attrs.quant_bit = c.format.quant_bit;
  attrs.quant_group = c.format.quant_group;
  attrs.block_size = static_cast<int>(c.page_size);
  const int64_t max_t = c.pages * c.page_size;
  const int64_t row = c.format.quant_bit == 4 ? c.dim / 2 : c.dim;
  const dynattn_ref::Dt cache_dt =
      c.format.quant_bit
          ? dynattn_ref::Dt::kI8
          : (c.float_type == DType::kF32 ? dynattn_ref::Dt::kF32 : dynattn_ref::Dt::kF16);
  dynattn_ref::Tensors in;
  in["query"] = t.query;
  in["current_key"] = t.key;
  in["current_value"] = t.value;
  in["query_start_loc"] = dynattn_ref::MakeI64({s.Batch() + 1}, s.qsl);
  in["context_lens"] = dynattn_ref::MakeI64({s.Batch()}, s.context);
  in["block_table"] = dynattn_ref::MakeI64({s.Batch(), s.max_blocks}, s.table);
  in["cache"] = dynattn_ref::MakeArray(cache_dt, {max_t, 1, 2, c.heads, row});
  dynattn_ref::Array scale =
      dynattn_ref::MakeArray(dynattn_ref::Dt::kF16, {max_t, 1, 2, c.heads, c.Groups()});
  MirrorRows(c, &in["cache"], &scale, true);
  if (c.format.quant_bit) in["scale"] = scale;
  return dynattn_ref::UnifiedAttention(attrs, in);
}

/// MultiHeadCacheAttention of `t` over `bc` in paged mode (page = block, cachestarts = id *
/// stride) with the converted metadata `m`: the same step as UnifiedAttention, by the reference's
/// definition, on the base library.
Status RunPagedMhca(StepTensors& t, const dynattn::UnifiedMetadata& m, const BlockCache& bc,
                    dynattn_ref::Array* out) {
  *out = dynattn_ref::MakeArray(t.query.dt, t.query.shape);
  const int64_t batch = m.num_requests();
  std::vector<int64_t> kvstarts(batch + 1, 0), cachestarts(m.block_table.size());
  for (int64_t b = 0; b < batch; ++b) {
    kvstarts[b + 1] =
        kvstarts[b] + m.context_lens[b] + m.query_start_loc[b + 1] - m.query_start_loc[b];
  }
  for (size_t i = 0; i < cachestarts.size(); ++i) cachestarts[i] = m.block_table[i] * bc.Stride();
  const int64_t zero = 0, max_seq = std::max<int64_t>(m.query_start_loc.back(), 1);
  const int64_t max_kv = std::max<int64_t>(kvstarts[batch], 1);
  dynattn::MultiHeadCacheAttentionArgs args;
  args.query = ViewOf(t.query);
  args.current_key = ViewOf(t.key);
  args.current_value = ViewOf(t.value);
  args.seqstarts = TensorView::Dense(m.query_start_loc.data(), DType::kI64, {batch + 1});
  args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  args.cachestarts = TensorView::Dense(cachestarts.data(), DType::kI64, {batch, m.max_blocks});
  args.start_pos = TensorView::Dense(m.context_lens.data(), DType::kI64, {batch});
  args.decoding_batches = Scalar(&zero);
  args.max_seqlen = Scalar(&max_seq);
  args.max_kvlen = Scalar(&max_kv);
  args.cache_desc = &bc.cache;
  args.attn_output = ViewOf(*out);
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = t.num_heads;
  attrs.attention.head_dim = bc.cache.head_dim;
  attrs.attention.num_kv_heads = bc.cache.num_kv_heads;
  const bool quantized =
      bc.cache.elem == dynattn::CacheElem::kInt8 || bc.cache.elem == dynattn::CacheElem::kInt4;
  attrs.cache.quant_bit = bc.cache.elem == dynattn::CacheElem::kInt8   ? 8
                          : bc.cache.elem == dynattn::CacheElem::kInt4 ? 4
                                                                       : 0;
  attrs.cache.quant_group = quantized ? bc.cache.quant_group : 8;
  attrs.cache.cache_mode = 1;
  attrs.cache.page_size = bc.block_size;
  return dynattn::MultiHeadCacheAttention(attrs, args);
}

/// Random vLLM and FlashInfer steps (every layout) through the adapters, run by UnifiedAttention
/// (`unified`) or by paged MultiHeadCacheAttention, against the float64 reference.
void CheckEngineSteps(uint64_t seed, bool unified) {
  std::mt19937_64 rng(seed);
  const Kind kinds[] = {Kind::kVllmNhd, Kind::kVllmCpu,       Kind::kFiNhd,
                        Kind::kFiHnd,   Kind::kFiNhdCombined, Kind::kFiHndCombined};
  for (int i = 0; i < 120; ++i) {
    const Kind kind = kinds[i % 6];
    // vLLM's CPU cache is unquantized (its keys are dimension-major).
    const int quant_bit = kind == Kind::kVllmCpu ? 0 : std::vector<int>{0, 8, 0, 4}[(i / 6) % 4];
    const DType io = Rand(rng, 0, 1) ? DType::kF32 : DType::kF16;
    const Step s = RandomStep(rng, Rand(rng, 1, 5), 0);
    EngineCache c = RandomEngineCache(rng, kind, s.num_blocks, s.block_size, quant_bit, io);
    StepTensors t = RandomStepTensors(rng, s, io, c.heads, c.dim);
    INFO("seed " << seed << " case " << i << ": " << std::string(KindName(kind)) << " quant "
                 << quant_bit << " Hkv " << c.heads << " D " << c.dim << " " << s.Describe());
    dynattn::UnifiedMetadata meta;
    Status status;
    const bool int32 = Rand(rng, 0, 1);
    if (kind == Kind::kVllmNhd || kind == Kind::kVllmCpu) {
      const VllmInputs in = VllmOf(s, Rand(rng, 0, 2), int32);
      status = dynattn::FromVllm(in.View(), static_cast<int>(s.block_size), s.num_blocks, &meta);
    } else {
      const FlashInferInputs in = FlashInferOf(s, Rand(rng, 0, 2), int32);
      status =
          dynattn::FromFlashInfer(in.View(), static_cast<int>(s.block_size), s.num_blocks, &meta);
    }
    REQUIRE_MESSAGE(status.ok(), status.message());
    CHECK(meta.query_start_loc == s.qsl);
    CHECK(meta.context_lens == s.context);
    for (int64_t b = 0; b < s.Batch(); ++b) {
      for (int64_t j = 0; j < s.Pages(b); ++j) {
        CHECK(meta.block_table[b * meta.max_blocks + j] == s.table[b * s.max_blocks + j]);
      }
    }
    const dynattn_ref::AttnResult ref = ReferenceOf(t, s, c);
    BlockCache bc;
    status = c.Make(&bc);
    REQUIRE_MESSAGE(status.ok(), status.message());
    dynattn_ref::Array out;
    status = unified ? RunUnified(t, meta, bc, &out) : RunPagedMhca(t, meta, bc, &out);
    REQUIRE_MESSAGE(status.ok(), status.message());
    const std::string err = dynattn_ref::CheckAttention(ref, out);
    CHECK_MESSAGE(err.empty(), err);
    dynattn_ref::Array ref_cache = ref.cache, ref_scale = ref.scale;
    CHECK_MESSAGE(MirrorRows(c, &ref_cache, &ref_scale, false),
                  "the engine cache differs from the reference's after the writes");
  }
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

  TEST_CASE("vLLM and FlashInfer caches and metadata: paged MultiHeadCacheAttention = reference") {
    CheckEngineSteps(BaseSeed() + 7400, false);
  }

  TEST_CASE("vLLM and FlashInfer steps: UnifiedAttention = the float64 reference") {
    CheckEngineSteps(BaseSeed() + 7450, true);
  }

  TEST_CASE("vLLM's fp8 CPU cache: UnifiedAttention gives the bits of the same bytes as PMX") {
    // 3 requests (a decode, a 2-token decode, a 5-token chunk) over 6 blocks of 4 slots,
    // Hq 4, Hkv 2, D 16, fp8 e4m3 with per-tensor scales 0.5 (K) and 0.25 (V), sinks, a window.
    const int nb = 6, bs = 4, hkv = 2, hq = 4, d = 16;
    std::mt19937_64 rng(BaseSeed() + 7300);
    std::vector<uint8_t> vllm(size_t{2} * nb * hkv * bs * d);
    for (uint8_t& byte : vllm) {
      do byte = static_cast<uint8_t>(rng());
      while ((byte & 0x7F) == 0x7F);  // no NaN codes
    }
    // Calls element(vllm_byte, pmx_byte) for every (K/V, block, head, slot, dimension): vLLM's
    // CPU layout [2, nb, Hkv, bs, D], keys [D, bs] and values [bs, D] per (block, head) (vLLM's
    // cpu_attn backend, as its reshape_and_cache writes them), against PMX layout 3,
    // [1, 2, Hkv, MaxT = nb * bs, D].
    const auto for_each_element = [&](const std::function<void(size_t, size_t)>& element) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int b = 0; b < nb; ++b) {
          for (int h = 0; h < hkv; ++h) {
            const size_t region = ((size_t(kv) * nb + b) * hkv + h) * bs * d;
            for (int t = 0; t < bs; ++t) {
              for (int e = 0; e < d; ++e) {
                element(region + (kv == 0 ? size_t(e) * bs + t : size_t(t) * d + e),
                        ((size_t(kv) * hkv + h) * (nb * bs) + b * bs + t) * d + e);
              }
            }
          }
        }
      }
    };
    std::vector<uint8_t> pmx(vllm.size());
    for_each_element([&](size_t from, size_t to) { pmx[to] = vllm[from]; });
    TensorView vllm_view = TensorView::Dense(vllm.data(), DType::kF8E4M3, {2, nb, hkv, bs, d});
    BlockCache from_vllm, from_pmx;
    REQUIRE(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, CacheFormat{}, &from_vllm).ok());
    CHECK(from_vllm.cache.elem == dynattn::CacheElem::kF8E4M3);
    dynattn::CacheAttrs attrs;
    attrs.cache_layout = 3;
    REQUIRE(dynattn::MakePmxBlockCache(
                TensorView::Dense(pmx.data(), DType::kF8E4M3, {1, 2, hkv, nb * bs, d}), {}, attrs,
                hkv, d, bs, &from_pmx)
                .ok());
    // A scale tensor is refused for a plain (fp8) format, naming it.
    const Status with_scale = dynattn::MakeVllmCpuBlockCache(vllm_view, vllm_view, {}, &from_vllm);
    CHECK(with_scale.message().rfind("kv_scale:", 0) == 0);
    REQUIRE(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, CacheFormat{}, &from_vllm).ok());

    const int64_t qsl[4] = {0, 1, 3, 8}, ctx[3] = {6, 3, 2};
    const int64_t table[3 * 2] = {4, 1, 0, 3, 5, 2};
    const int tokens = 8;
    std::vector<float> query(size_t{tokens} * hq * d), key(size_t{tokens} * hkv * d),
        value(key.size());
    std::normal_distribution<float> normal;
    for (std::vector<float>* v : {&query, &key, &value}) {
      for (float& x : *v) x = normal(rng);
    }
    const float sinks[hq] = {0.5f, -1.0f, 1.5f, 0.0f};
    float k_scale = 0.5f, v_scale = 0.25f;
    const auto run = [&](const BlockCache* cache, std::vector<float>* out) {
      dynattn::UnifiedAttentionAttrs a;
      a.num_heads = hq;
      a.num_kv_heads = hkv;
      a.head_dim = d;
      a.window_left = 4;
      a.logits_soft_cap = 20.0f;
      dynattn::UnifiedAttentionArgs args;
      args.query = TensorView::Dense(query.data(), DType::kF32, {tokens, hq, d});
      args.current_key = TensorView::Dense(key.data(), DType::kF32, {tokens, hkv, d});
      args.current_value = TensorView::Dense(value.data(), DType::kF32, {tokens, hkv, d});
      args.query_start_loc = TensorView::Dense(qsl, DType::kI64, {4});
      args.context_lens = TensorView::Dense(ctx, DType::kI64, {3});
      args.block_table = TensorView::Dense(table, DType::kI64, {3, 2});
      args.cache = cache;
      args.k_scale = TensorView::Dense(&k_scale, DType::kF32, {});
      args.v_scale = TensorView::Dense(&v_scale, DType::kF32, {});
      args.sinks = TensorView::Dense(sinks, DType::kF32, {hq});
      out->assign(query.size(), std::numeric_limits<float>::quiet_NaN());
      args.attn_output = TensorView::Dense(out->data(), DType::kF32, {tokens, hq, d});
      return dynattn::UnifiedAttention(a, args);
    };
    std::vector<float> out_vllm, out_pmx;
    const Status s1 = run(&from_vllm, &out_vllm), s2 = run(&from_pmx, &out_pmx);
    REQUIRE_MESSAGE(s1.ok(), s1.message());
    REQUIRE_MESSAGE(s2.ok(), s2.message());
    CHECK(std::memcmp(out_vllm.data(), out_pmx.data(), out_vllm.size() * sizeof(float)) == 0);
    for (float x : out_vllm) REQUIRE(std::isfinite(x));
    // The fresh tokens were written as the same fp8 bytes in both layouts.
    int differing = 0;
    for_each_element([&](size_t from, size_t to) { differing += pmx[to] != vllm[from]; });
    CHECK(differing == 0);
    // A quantized format is refused: vLLM's CPU cache has none.
    CacheFormat int8;
    int8.quant_bit = 8;
    CHECK(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, int8, &from_vllm)
              .message()
              .rfind("quant_bit:", 0) == 0);
  }

  TEST_CASE("every validation rule names its input") {
    std::mt19937_64 rng(BaseSeed() + 7500);
    Pool p = RandomPool(rng, 8, KsanaBlockOrder::kKvLayer, true, 2, 3, 4);
    const int64_t table[4] = {0, 2, 1, -1};
    const TensorView tv = TensorView::Dense(table, DType::kI64, {2, 2});
    const int64_t req[2] = {0, 1}, pos[2] = {0, 5}, bad_req[2] = {0, 2}, bad_pos[2] = {0, 8};
    const auto vec = [](const int64_t* v) { return TensorView::Dense(v, DType::kI64, {2}); };
    BlockCache bc;
    dynattn::AtbViews views;
    std::vector<int64_t> ids;
    using Check = std::pair<const char*, std::function<Status()>>;
    std::vector<Check> checks = {
        {"num_layer",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_layer = 0;
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"num_layer",  // 2 * L * T * Hkv * D overflows int64: refused, never wrapped
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_layer = a.block_size = a.num_kv_heads = std::numeric_limits<int>::max();
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"num_layer",  // N + 1 slack block overflows
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_blocks = std::numeric_limits<int64_t>::max();
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"block_size",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.block_size = 0;
           return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
         }},
        {"quant_group",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.format.quant_group = a.head_dim + 1;  // never divides head_dim
           return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
         }},
        {"pool",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.slack_block = false;
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"pool",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.format.quant_bit = 0;
           return dynattn::MakeKsanaBlockCache(p.View(), {}, a, 0, &bc);
         }},
        {"scale_pool", [&] { return dynattn::MakeKsanaBlockCache(p.View(), {}, p.attrs, 0, &bc); }},
        {"layer",
         [&] { return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), p.attrs, 2, &bc); }},
        {"ksana_table",
         [&] {
           const int64_t t[2] = {0, 3};
           return dynattn::KsanaToAtbBlockTable(TensorView::Dense(t, DType::kI64, {1, 2}), p.attrs,
                                                0, &ids);
         }},
        {"ksana_table", [&] { return dynattn::KsanaToAtbBlockTable(vec(req), p.attrs, 0, &ids); }},
        {"requests",
         [&] { return dynattn::AtbSlotMapping(tv, vec(bad_req), vec(pos), p.attrs, 0, &ids); }},
        {"positions",
         [&] { return dynattn::AtbSlotMapping(tv, vec(req), vec(bad_pos), p.attrs, 0, &ids); }},
        {"ksana_table",
         [&] {
           const int64_t r[2] = {1, 1}, q[2] = {0, 4};
           return dynattn::AtbSlotMapping(tv, vec(r), vec(q), p.attrs, 0, &ids);
         }},
    };
    // Paged caches.
    EngineCache c = RandomEngineCache(rng, Kind::kFiNhd, 3, 4, 8, DType::kF16);
    const CacheFormat f = c.format;
    checks.push_back({"key", [&] {
                        TensorView k = c.DataView(0);
                        k.rank = 3;
                        return dynattn::MakePagedBlockCache(k, c.DataView(1), c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value", [&] {
                        TensorView v = c.DataView(1);
                        v.shape[0] = 2;
                        return dynattn::MakePagedBlockCache(c.DataView(0), v, c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"key_scale", [&] {
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), {},
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value_scale", [&] {
                        TensorView s = c.ScaleView(1);
                        s.dtype = DType::kI8;
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1),
                                                            c.ScaleView(0), s,
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"kv", [&] {
                        return dynattn::MakeCombinedBlockCache(c.DataView(0), c.ScaleView(0),
                                                               dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back(
        {"kv_cache",
         [&] { return dynattn::MakeVllmCpuBlockCache(c.DataView(0), {}, CacheFormat{}, &bc); }});
    // vLLM metadata: 2 requests, block size 4, 4 blocks; request 1 decodes position 5.
    const int64_t qsl[3] = {0, 2, 3}, seq[2] = {2, 6}, vt[4] = {3, 0, 1, 2}, slots[3] = {12, 13, 9};
    const auto vllm = [&](std::vector<int64_t> q, std::vector<int64_t> sl, std::vector<int64_t> t,
                          std::vector<int64_t> sm, int64_t cols) {
      dynattn::UnifiedMetadata m;
      dynattn::VllmMetadata in{
          TensorView::Dense(q.data(), DType::kI64, {static_cast<int64_t>(q.size())}),
          TensorView::Dense(sl.data(), DType::kI64, {static_cast<int64_t>(sl.size())}),
          TensorView::Dense(t.data(), DType::kI64, {2, cols}),
          TensorView::Dense(sm.data(), DType::kI64, {static_cast<int64_t>(sm.size())})};
      return dynattn::FromVllm(in, 4, 4, &m);
    };
    const std::vector<int64_t> q0(qsl, qsl + 3), s0(seq, seq + 2), t0(vt, vt + 4),
        m0(slots, slots + 3);
    REQUIRE(vllm(q0, s0, t0, m0, 2).ok());
    checks.push_back({"query_start_loc", [&] { return vllm({1, 2, 3}, s0, t0, m0, 2); }});
    checks.push_back({"query_start_loc", [&] { return vllm({0, 2, 1}, s0, t0, m0, 2); }});
    checks.push_back({"seq_lens", [&] { return vllm(q0, {1, 6}, t0, m0, 2); }});
    checks.push_back({"seq_lens", [&] { return vllm(q0, {2}, t0, m0, 2); }});
    checks.push_back({"block_table", [&] { return vllm(q0, s0, {3, 0, 1, 4}, m0, 2); }});
    checks.push_back({"block_table", [&] { return vllm(q0, s0, {3, 1}, m0, 1); }});
    checks.push_back({"slot_mapping: slot_mapping[2] = 10", [&] {
                        return vllm(q0, s0, t0, {12, 13, 10}, 2);
                      }});
    checks.push_back({"slot_mapping", [&] { return vllm(q0, s0, t0, {12, 13}, 2); }});
    // FlashInfer metadata: same step, page size 4.
    const auto fi = [&](std::vector<int64_t> qo, std::vector<int64_t> kv, std::vector<int64_t> idx,
                        std::vector<int64_t> last, DType type) {
      dynattn::UnifiedMetadata m;
      std::vector<int32_t> narrow(qo.begin(), qo.end());
      const void* qo_data =
          type == DType::kI32 ? static_cast<const void*>(narrow.data()) : qo.data();
      dynattn::FlashInferMetadata in{
          TensorView::Dense(qo_data, type, {static_cast<int64_t>(qo.size())}),
          TensorView::Dense(kv.data(), DType::kI64, {static_cast<int64_t>(kv.size())}),
          TensorView::Dense(idx.data(), DType::kI64, {static_cast<int64_t>(idx.size())}),
          TensorView::Dense(last.data(), DType::kI64, {static_cast<int64_t>(last.size())})};
      return dynattn::FromFlashInfer(in, 4, 4, &m);
    };
    REQUIRE(fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI32).ok());
    checks.push_back({"qo_indptr", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kF32);
                      }});
    checks.push_back({"kv_indptr", [&] {
                        return fi(q0, {0, 3, 1}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indptr", [&] { return fi(q0, {0, 1}, {3, 1, 2}, {2, 2}, DType::kI64); }});
    checks.push_back({"kv_indices", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indices", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 4}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_last_page_len", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 0}, DType::kI64);
                      }});
    checks.push_back({"kv_last_page_len", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {5, 2}, DType::kI64);
                      }});
    checks.push_back({"qo_indptr", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {1, 2}, DType::kI64);
                      }});
    // The rules shared with the PMX validators (src/validate.h), each on every adapter path that
    // uses it, with the rule's own words: dropping a rule, or weakening it, fails here.
    const auto ksana_format = [&](int bits, int group, int64_t head_dim) {
      KsanaPoolAttrs a = p.attrs;
      a.format.quant_bit = bits;
      a.format.quant_group = group;
      a.head_dim = head_dim;
      return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
    };
    checks.push_back(
        {"quant_bit: must be 0, 4 or 8, got 3", [&] { return ksana_format(3, 4, 8); }});
    checks.push_back({"head_dim: must be >= 1, got 0", [&] { return ksana_format(8, 4, 0); }});
    checks.push_back(
        {"quant_group: must divide head_dim 8, got 3", [&] { return ksana_format(8, 3, 8); }});
    checks.push_back({"quant_group: must be even for int4", [&] { return ksana_format(4, 1, 8); }});
    const auto paged_format = [&](int bits, int group) {
      CacheFormat g = f;
      g.quant_bit = bits;
      g.quant_group = group;
      return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), c.ScaleView(0),
                                          c.ScaleView(1), dynattn::PageLayout::kNHD, g, &bc);
    };
    checks.push_back({"quant_bit: must be 0, 4 or 8, got 5", [&] { return paged_format(5, 4); }});
    checks.push_back({"quant_group: must divide head_dim", [&] {
                        // Larger than head_dim (at most twice the last dim): never divides it.
                        const TensorView k = c.DataView(0);
                        return paged_format(8, static_cast<int>(2 * k.shape[k.rank - 1] + 1));
                      }});
    // Storage: a negative extent, a null pointer, strides that are not row-major.
    checks.push_back({"key: has a negative extent", [&] {
                        TensorView k = c.DataView(0);
                        k.shape[0] = -1;
                        return dynattn::MakePagedBlockCache(k, c.DataView(1), c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value: data is null", [&] {
                        TensorView v = c.DataView(1);
                        v.data = nullptr;
                        return dynattn::MakePagedBlockCache(c.DataView(0), v, c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"key_scale: must be dense row-major", [&] {
                        TensorView s = c.ScaleView(0);
                        s.strides[0] += 1;
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), s,
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    // Shapes in messages: rank 1 reads "(2,)" everywhere.
    checks.push_back({"ksana_table: must have rank 2, got shape (2,)",
                      [&] { return dynattn::KsanaToAtbBlockTable(vec(req), p.attrs, 0, &ids); }});
    // Offsets: from 0, non-decreasing, in range; int32 and int64 alike.
    checks.push_back({"query_start_loc: must start at 0, got 1", [&] {
                        return vllm({1, 2, 3}, s0, t0, m0, 2);
                      }});
    checks.push_back(
        {"qo_indptr: must be non-decreasing (qo_indptr[2] = 1 < qo_indptr[1] = 2)", [&] {
           return fi({0, 2, 1}, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI32);
         }});
    checks.push_back({"qo_indptr: must have B+1 >= 1 entries, got 0", [&] {
                        return fi({}, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indptr: entry 2 = 140737488355328 is too large", [&] {
                        return fi(q0, {0, 1, int64_t{1} << 47}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    for (size_t i = 0; i < checks.size(); ++i) {
      const Status st = checks[i].second();
      INFO("check " << i << " expects " << std::string(checks[i].first)
                    << ", got: " << st.message());
      CHECK(st.code() == dynattn::StatusCode::kInvalidArgument);
      CHECK(st.message().find(checks[i].first) == 0);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
