// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The shared-prefix step (see the header). The cache is tens of MB, so it is filled from a small
// pool of normal fp16 values picked by a fast generator rather than drawn value by value: the
// benchmark needs realistic magnitudes, not statistically independent elements.

#include "bench/shared_prefix.h"

#include <algorithm>
#include <random>

namespace dynattn::bench {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;

/// xorshift64*: fast enough to fill a cache of tens of millions of elements.
class FastRandom {
 public:
  explicit FastRandom(uint64_t seed) : state_(seed | 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 2685821657736338717ull;
  }

 private:
  uint64_t state_;
};

/// 4096 fp16 values drawn from N(0, 1).
std::vector<uint16_t> NormalPool(std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<uint16_t> pool(4096);
  for (uint16_t& bits : pool) bits = dynattn_ref::F16Bits(normal(rng));
  return pool;
}

Array RandomF16(const std::vector<int64_t>& shape, const std::vector<uint16_t>& pool,
                FastRandom& rng) {
  Array a = dynattn_ref::MakeArray(Dt::kF16, shape);
  uint16_t* data = a.data<uint16_t>();
  for (int64_t i = 0; i < a.numel(); ++i) data[i] = pool[rng.Next() % pool.size()];
  return a;
}

/// A layout-`cache_layout` cache of `max_t` slots (one layer) full of valid history, and its
/// scales when quantized.
void FillCache(const SharedPrefixShape& s, int64_t max_t, const std::vector<uint16_t>& pool,
               FastRandom& rng, dynattn_ref::Tensors* in) {
  const std::vector<int64_t> shape =
      dynattn_ref::detail::CacheShape(s.cache_layout, 1, max_t, s.num_kv_heads, s.head_dim);
  if (s.quant_bit == 0) {
    (*in)["cache"] = RandomF16(shape, pool, rng);
    return;
  }
  Array cache = dynattn_ref::MakeArray(Dt::kI8, shape);
  for (uint8_t& b : cache.bytes) b = static_cast<uint8_t>(static_cast<int>(rng.Next() % 255) - 127);
  (*in)["cache"] = std::move(cache);
  Array scale = dynattn_ref::MakeArray(
      Dt::kF16, dynattn_ref::detail::CacheShape(s.cache_layout, 1, max_t, s.num_kv_heads,
                                                s.head_dim / s.quant_group));
  uint16_t* data = scale.data<uint16_t>();  // steps in [0.004, 0.02): |x| up to about 2.5
  for (int64_t i = 0; i < scale.numel(); ++i) {
    data[i] = dynattn_ref::F16Bits(0.004 + 0.016 * static_cast<double>(rng.Next() % 1024) / 1024);
  }
  (*in)["scale"] = std::move(scale);
}

int64_t BlocksPerRequest(const SharedPrefixShape& s) {
  const int64_t tokens = s.prefix + s.own + 1;
  return (tokens + s.block_size - 1) / s.block_size;
}

/// (B, blocks per request) block ids: the prefix's, then each request's own, all shuffled.
std::vector<int64_t> BlockTable(const SharedPrefixShape& s, int64_t num_blocks,
                                std::mt19937_64& rng) {
  std::vector<int64_t> ids(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t width = BlocksPerRequest(s), prefix_blocks = s.prefix / s.block_size;
  std::vector<int64_t> table(s.requests * width);
  int64_t next = prefix_blocks;
  for (int64_t b = 0; b < s.requests; ++b) {
    for (int64_t j = 0; j < width; ++j)
      table[b * width + j] = j < prefix_blocks ? ids[j] : ids[next++];
  }
  return table;
}

/// The twin's MultiHeadCacheAttention inputs: one decode per request, pages = blocks.
void AddDecodeInputs(const SharedPrefixShape& s, const std::vector<int64_t>& table,
                     dynattn_ref::Tensors* in) {
  const int64_t batch = s.requests, context = s.prefix + s.own, width = BlocksPerRequest(s);
  std::vector<int64_t> seqstarts, kvstarts, pages;
  for (int64_t b = 0; b <= batch; ++b) {
    seqstarts.push_back(b);
    kvstarts.push_back(b * (context + 1));
  }
  for (int64_t id : table) pages.push_back(id * s.block_size);
  (*in)["seqstarts"] = dynattn_ref::MakeI64({batch + 1}, seqstarts);
  (*in)["kvstarts"] = dynattn_ref::MakeI64({batch + 1}, kvstarts);
  (*in)["cachestarts"] = dynattn_ref::MakeI64({batch, width}, pages);
  (*in)["start_pos"] = dynattn_ref::MakeI64({batch}, std::vector<int64_t>(batch, context));
  (*in)["decoding_batches"] = dynattn_ref::ScalarI64(batch);
  (*in)["max_seqlen"] = dynattn_ref::ScalarI64(1);
  (*in)["max_kvlen"] = dynattn_ref::ScalarI64(context + 1);
}

TensorView View(Array& a) {
  const DType dtype = a.dt == Dt::kF16 ? DType::kF16 : a.dt == Dt::kI8 ? DType::kI8 : DType::kI64;
  return TensorView::Dense(a.bytes.data(), dtype, static_cast<int>(a.shape.size()), a.shape.data());
}

TensorView Find(dynattn_ref::Tensors& in, const std::string& name) {
  auto it = in.find(name);
  return it != in.end() ? View(it->second) : TensorView{};
}

CacheAttrs MakeCacheAttrs(const SharedPrefixShape& s) {
  CacheAttrs a;
  a.quant_bit = s.quant_bit;
  a.quant_group = s.quant_group;
  a.cache_layout = s.cache_layout;
  a.cache_mode = 1;
  a.page_size = s.block_size;
  return a;
}

}  // namespace

UnifiedAttentionAttrs MakeUnifiedAttrs(const SharedPrefixShape& s) {
  UnifiedAttentionAttrs a;
  a.num_heads = s.num_heads;
  a.head_dim = s.head_dim;
  a.num_kv_heads = s.num_kv_heads;
  return a;
}

/// The unified call's arguments; `cache` must outlive them.
Status UnifiedArgs(SharedPrefixStep* step, Array* out, BlockCache* cache,
                   UnifiedAttentionArgs* args) {
  const SharedPrefixShape& s = step->shape;
  dynattn_ref::Tensors& in = step->inputs;
  DYNATTN_RETURN_IF_ERROR(MakePmxBlockCache(Find(in, "cache"), Find(in, "scale"), MakeCacheAttrs(s),
                                            s.num_kv_heads, s.head_dim, s.block_size, cache));
  if (out->bytes.empty()) *out = dynattn_ref::MakeArray(Dt::kF16, in.at("query").shape);
  args->query = Find(in, "query");
  args->current_key = Find(in, "current_key");
  args->current_value = Find(in, "current_value");
  args->query_start_loc = Find(in, "query_start_loc");
  args->context_lens = Find(in, "context_lens");
  args->block_table = Find(in, "block_table");
  args->cache = cache;
  args->attn_output = View(*out);
  return Status::Ok();
}

std::vector<SharedPrefixShape> SharedPrefixSteps() {
  SharedPrefixShape f16;
  SharedPrefixShape int8 = f16;
  int8.quant_bit = 8;
  return {f16, int8};
}

std::string SharedPrefixName(const SharedPrefixShape& s) {
  return "shared_prefix_" + std::to_string(s.requests) + "x" + std::to_string(s.prefix) + "+" +
         std::to_string(s.own) + (s.quant_bit == 0 ? "_f16" : "_int8");
}

SharedPrefixStep BuildSharedPrefixStep(const SharedPrefixShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  FastRandom fast(seed);
  const std::vector<uint16_t> pool = NormalPool(rng);
  SharedPrefixStep step;
  step.shape = shape;
  const SharedPrefixShape& s = shape;
  const int64_t batch = s.requests, width = BlocksPerRequest(s);
  const int64_t num_blocks = s.prefix / s.block_size + batch * (width - s.prefix / s.block_size);
  dynattn_ref::Tensors& in = step.inputs;
  in["query"] = RandomF16({batch, s.num_heads, s.head_dim}, pool, fast);
  in["current_key"] = RandomF16({batch, s.num_kv_heads, s.head_dim}, pool, fast);
  in["current_value"] = RandomF16({batch, s.num_kv_heads, s.head_dim}, pool, fast);
  std::vector<int64_t> qsl(batch + 1);
  for (int64_t b = 0; b <= batch; ++b) qsl[b] = b;
  in["query_start_loc"] = dynattn_ref::MakeI64({batch + 1}, qsl);
  in["context_lens"] = dynattn_ref::MakeI64({batch}, std::vector<int64_t>(batch, s.prefix + s.own));
  const std::vector<int64_t> table = BlockTable(s, num_blocks, rng);
  in["block_table"] = dynattn_ref::MakeI64({batch, width}, table);
  AddDecodeInputs(s, table, &in);
  FillCache(s, num_blocks * s.block_size, pool, fast, &in);
  return step;
}

Status RunUnified(SharedPrefixStep* step, Array* out, const RunOptions& options) {
  BlockCache cache;
  UnifiedAttentionArgs args;
  DYNATTN_RETURN_IF_ERROR(UnifiedArgs(step, out, &cache, &args));
  return UnifiedAttention(MakeUnifiedAttrs(step->shape), args, options);
}

Status DescribeUnified(SharedPrefixStep* step, UnifiedStepSummary* summary) {
  BlockCache cache;
  UnifiedAttentionArgs args;
  Array out;
  DYNATTN_RETURN_IF_ERROR(UnifiedArgs(step, &out, &cache, &args));
  return DescribeUnifiedStep(MakeUnifiedAttrs(step->shape), args, summary);
}

Status RunDecodes(SharedPrefixStep* step, Array* out, const RunOptions& options) {
  const SharedPrefixShape& s = step->shape;
  dynattn_ref::Tensors& in = step->inputs;
  if (out->bytes.empty()) *out = dynattn_ref::MakeArray(Dt::kF16, in.at("query").shape);
  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = s.num_heads;
  attrs.attention.head_dim = s.head_dim;
  attrs.attention.num_kv_heads = s.num_kv_heads;
  attrs.cache = MakeCacheAttrs(s);
  MultiHeadCacheAttentionArgs args =
      MultiHeadCacheAttentionArgsByName([&in](const std::string& name) { return Find(in, name); });
  args.attn_output = View(*out);
  return MultiHeadCacheAttention(attrs, args, options);
}

double DecodesCacheBytes(const SharedPrefixShape& s) {
  const double rows = static_cast<double>(s.requests) * static_cast<double>(s.prefix + s.own + 1);
  const double row =
      s.quant_bit == 0 ? 2.0 * s.head_dim : s.head_dim + 2.0 * s.head_dim / s.quant_group;
  return rows * s.num_kv_heads * 2 * row;  // K and V
}

double SharedPrefixFlops(const SharedPrefixShape& s) {
  const double pairs = static_cast<double>(s.requests) * static_cast<double>(s.prefix + s.own + 1);
  return 4.0 * pairs * s.head_dim * s.num_heads;
}

dynattn_ref::Attrs SharedPrefixReferenceAttrs(const SharedPrefixShape& s) {
  dynattn_ref::Attrs a;
  a.num_heads = s.num_heads;
  a.head_dim = s.head_dim;
  a.num_kv_heads = s.num_kv_heads;
  a.quant_bit = s.quant_bit;
  a.quant_group = s.quant_group;
  a.cache_layout = s.cache_layout;
  a.block_size = s.block_size;
  return a;
}

}  // namespace dynattn::bench
