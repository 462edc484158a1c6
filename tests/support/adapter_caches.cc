// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Random engine caches, steps and their tensors for the adapters suite (adapter_caches.h).

#include "tests/support/adapter_caches.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace dynattn_test {
namespace {

double RandReal(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
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

}  // namespace

int Rand(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

int64_t ElemBits(const CacheFormat& f, DType float_type) {
  if (f.quant_bit != 0) return f.quant_bit;
  return float_type == DType::kF32 ? 32 : 16;
}

DType StorageType(const CacheFormat& f, DType float_type) {
  return f.quant_bit != 0 ? DType::kI8 : float_type;
}

Pool RandomPool(std::mt19937_64& rng, int bits, KsanaBlockOrder order, bool slack, int layers,
                int64_t blocks, int tokens_per_block) {
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

dynattn_ref::Array RandomFloats(std::mt19937_64& rng, DType type, std::vector<int64_t> shape) {
  dynattn_ref::Array a = dynattn_ref::MakeArray(
      type == DType::kF32 ? dynattn_ref::Dt::kF32 : dynattn_ref::Dt::kF16, shape);
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, RandReal(rng, -1, 1));
  return a;
}

TensorView Scalar(const int64_t* v) { return TensorView::Dense(v, DType::kI64, {}); }

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

StepTensors RandomStepTensors(std::mt19937_64& rng, const Step& s, DType io, int64_t heads,
                              int64_t dim) {
  StepTensors t;
  t.num_heads = static_cast<int>(heads * Rand(rng, 1, 2));
  t.query = RandomFloats(rng, io, {s.Tokens(), t.num_heads, dim});
  t.key = RandomFloats(rng, io, {s.Tokens(), heads, dim});
  t.value = RandomFloats(rng, io, {s.Tokens(), heads, dim});
  return t;
}

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

}  // namespace dynattn_test
