// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the adapters suite's files share (tests/adapters_*_test.cc): random engine caches in
// memory with an independent row formula per layout (Ksana pools, vLLM and FlashInfer caches), the
// random steps run over them (requests with context and new tokens on distinct blocks), their
// tensors, and UnifiedAttention through an adapter's block cache.

#ifndef DYNATTN_TESTS_SUPPORT_ADAPTER_CACHES_H_
#define DYNATTN_TESTS_SUPPORT_ADAPTER_CACHES_H_

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/adapters.h"
#include "dynattn/dynattn.h"
#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {

using dynattn::BlockCache;
using dynattn::CacheFormat;
using dynattn::DType;
using dynattn::KsanaBlockOrder;
using dynattn::KsanaPoolAttrs;
using dynattn::Status;
using dynattn::TensorView;

/// A uniform draw from [lo, hi].
int Rand(std::mt19937_64& rng, int lo, int hi);

/// Bits per stored cache element of a format and float dtype.
int64_t ElemBits(const CacheFormat& f, DType float_type);

/// Storage dtype of a cache tensor.
DType StorageType(const CacheFormat& f, DType float_type);

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
                int64_t blocks, int tokens_per_block = 0);

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
Step RandomStep(std::mt19937_64& rng, int64_t block_size, int64_t num_blocks);

/// A dense random float tensor of `type`.
dynattn_ref::Array RandomFloats(std::mt19937_64& rng, DType type, std::vector<int64_t> shape);

/// The int64 scalar tensor holding `v` (kept alive by the caller).
TensorView Scalar(const int64_t* v);

// -------------------------------------------------------------------------------------------
// Engine caches (vLLM, FlashInfer) with an independent row formula per layout.

enum class Kind { kVllmNhd, kVllmCpu, kFiNhd, kFiHnd, kFiNhdCombined, kFiHndCombined };

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

/// A random engine cache of `kind` over `pages` pages of `page_size` tokens, random content.
EngineCache RandomEngineCache(std::mt19937_64& rng, Kind kind, int64_t pages, int64_t page_size,
                              int quant_bit, DType float_type);

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

/// The step's query and fresh K/V.
struct StepTensors {
  dynattn_ref::Array query, key, value;
  int num_heads = 0;
};

/// The step's query (Hq = Hkv or 2 Hkv) and fresh K/V, random values of type `io`.
StepTensors RandomStepTensors(std::mt19937_64& rng, const Step& s, DType io, int64_t heads,
                              int64_t dim);

/// UnifiedAttention of `t` over `bc` with `meta`; the output in `out`.
Status RunUnified(StepTensors& t, const dynattn::UnifiedMetadata& meta, const BlockCache& bc,
                  dynattn_ref::Array* out);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_ADAPTER_CACHES_H_
