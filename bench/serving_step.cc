// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "bench/serving_step.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "dynattn/half.h"

namespace dynattn::bench {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;

/// Normal values as 16-bit patterns: fp16, or bf16 (held in an f16-typed array of the same size).
Array RandomF16(const std::vector<int64_t>& shape, std::mt19937_64& rng,
                DType dtype = DType::kF16) {
  Array a = dynattn_ref::MakeArray(Dt::kF16, shape);
  std::normal_distribution<float> normal;
  uint16_t* data = a.data<uint16_t>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = normal(rng);
    data[i] = dtype == DType::kBF16 ? FloatToBfloat16(x) : dynattn_ref::F16Bits(x);
  }
  return a;
}

/// Normal values as fp8 bytes (held in an int8-typed array).
Array RandomFp8(const std::vector<int64_t>& shape, std::mt19937_64& rng, DType dtype) {
  Array a = dynattn_ref::MakeArray(Dt::kI8, shape);
  std::normal_distribution<float> normal;
  const auto encode = dtype == DType::kF8E5M2 ? FloatToFp8E5M2 : FloatToFp8E4M3;
  for (uint8_t& byte : a.bytes) byte = encode(normal(rng));
  return a;
}

/// Page starts for every request, in a shuffled order over a cache of `pages` pages.
std::vector<int64_t> PageTable(const StepShape& s, int64_t table_width, int64_t pages,
                               std::mt19937_64& rng) {
  std::vector<int64_t> order(pages);
  for (int64_t i = 0; i < pages; ++i) order[i] = i * s.page_size;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> table(s.requests.size() * table_width, -1);
  int64_t next = 0;
  for (size_t b = 0; b < s.requests.size(); ++b) {
    const int64_t kvlen = s.requests[b].start_pos + s.requests[b].seqlen;
    for (int64_t k = 0; k < (kvlen + s.page_size - 1) / s.page_size; ++k) {
      table[b * table_width + k] = order[next++];
    }
  }
  return table;
}

/// A cache of `max_t` slots full of valid history, and its scales when quantized.
void FillCache(const StepShape& s, int64_t max_t, std::mt19937_64& rng, dynattn_ref::Tensors* in) {
  const int64_t row = s.quant_bit == 4 ? s.head_dim / 2 : s.head_dim;
  if (s.quant_bit == 0) {
    const std::vector<int64_t> shape = {1, 2, s.num_kv_heads, max_t, row};
    (*in)["cache"] = DTypeSize(s.plain_cache) == 1 ? RandomFp8(shape, rng, s.plain_cache)
                                                   : RandomF16(shape, rng, s.plain_cache);
    return;
  }
  Array cache = dynattn_ref::MakeArray(Dt::kI8, {1, 2, s.num_kv_heads, max_t, row});
  std::uniform_int_distribution<int> byte(-128, 127), code(-127, 127);
  for (uint8_t& b : cache.bytes) b = static_cast<uint8_t>(s.quant_bit == 4 ? byte(rng) : code(rng));
  (*in)["cache"] = std::move(cache);
  Array scale =
      dynattn_ref::MakeArray(Dt::kF16, {1, 2, s.num_kv_heads, max_t, s.head_dim / s.quant_group});
  std::uniform_real_distribution<float> step(s.quant_bit == 4 ? 0.05f : 0.004f,
                                             s.quant_bit == 4 ? 0.3f : 0.02f);
  uint16_t* data = scale.data<uint16_t>();
  for (int64_t i = 0; i < scale.numel(); ++i) data[i] = dynattn_ref::F16Bits(step(rng));
  (*in)["scale"] = std::move(scale);
}

/// Offset mode: request b owns slots [cachestarts[b], cachestarts[b] + kvlen_b), in order.
std::vector<int64_t> RegionStarts(const StepShape& s, int64_t* max_t) {
  std::vector<int64_t> starts;
  *max_t = 0;
  for (const StepRequest& r : s.requests) {
    starts.push_back(*max_t);
    *max_t += r.start_pos + r.seqlen;
  }
  return starts;
}

void FillAttrs(Step* step) {
  const StepShape& s = step->shape;
  MultiHeadCacheAttentionAttrs& a = step->attrs;
  a.attention.num_heads = s.num_heads;
  a.attention.head_dim = s.head_dim;
  a.attention.num_kv_heads = s.num_kv_heads;
  a.cache.quant_bit = s.quant_bit;
  a.cache.quant_group = s.quant_group;
  a.cache.cache_mode = s.cache_mode;
  a.cache.cache_layout = s.cache_layout;
  a.cache.page_size = s.page_size;
  a.attention.window_left = s.window_left;
  a.attention.head_dim_v = s.head_dim_v;
  a.attention.value_from_key = s.latent;
  a.attention.precision = s.precision;
  dynattn_ref::Attrs& r = step->reference_attrs;
  r.precision = s.precision == Precision::kFast ? "fast" : "";
  r.num_heads = s.num_heads;
  r.head_dim = s.head_dim;
  r.num_kv_heads = s.num_kv_heads;
  r.quant_bit = s.quant_bit;
  r.quant_group = s.quant_group;
  r.cache_mode = s.cache_mode;
  r.cache_layout = s.cache_layout;
  r.page_size = s.page_size;
}

TensorView View(Array& a) {
  const DType dtype = a.dt == Dt::kF16 ? DType::kF16 : a.dt == Dt::kI8 ? DType::kI8 : DType::kI64;
  return TensorView::Dense(a.bytes.data(), dtype, static_cast<int>(a.shape.size()), a.shape.data());
}

/// Rows [begin, end) of a packed tensor (dim 0).
Array Rows(const Array& a, int64_t begin, int64_t end) {
  Array out = a;
  const int64_t row = a.shape[0] > 0 ? static_cast<int64_t>(a.bytes.size()) / a.shape[0] : 0;
  out.shape[0] = end - begin;
  out.bytes.assign(a.bytes.begin() + begin * row, a.bytes.begin() + end * row);
  return out;
}

void AppendRows(const Array& from, Array* to) {
  to->shape[0] += from.shape[0];
  to->bytes.insert(to->bytes.end(), from.bytes.begin(), from.bytes.end());
}

const int64_t* Starts(const Step& step, const char* name) {
  return step.inputs.at(name).data<int64_t>();
}

/// Describes the step's PMX cache tensor in `cache_desc`; false (for the call to report) when the
/// tensor is malformed.
bool DescribePmxCache(Step* step, const MultiHeadCacheAttentionArgs& args) {
  const StepShape& s = step->shape;
  return MakePmxCacheDesc(args.cache, args.scale, step->attrs.cache, s.num_kv_heads, s.head_dim,
                          &step->cache_desc)
      .ok();
}

/// Points `args` at the key half of the step's PMX cache tensor as a latent cache (values read
/// from the keys); a malformed tensor leaves `args` as it was, for the call to report.
void UseKeyHalfAsLatent(Step* step, MultiHeadCacheAttentionArgs* args) {
  if (!DescribePmxCache(step, *args)) return;
  step->cache_desc.head_dim_v = step->shape.value_dim();
  args->cache_desc = &step->cache_desc;
}

/// Byte offset of element d of (slot, head) in a key plane stored [D, page_size] per page and
/// head, pages of all heads in slot order.
int64_t DimMajorOffset(const StepShape& s, int64_t slot, int head, int d, int64_t elem_bytes) {
  const int64_t page = slot / s.page_size, in_page = slot % s.page_size;
  const int64_t block = (page * s.num_kv_heads + head) * s.head_dim * s.page_size;
  return (block + d * s.page_size + in_page) * elem_bytes;
}

/// Copies the key half of the PMX cache tensor (layout 3: [1, 2, Hkv, MaxT, D]) into
/// `dim_major_keys`, page by page dimension-major.
void TransposeKeys(Step* step) {
  const StepShape& s = step->shape;
  const Array& cache = step->inputs.at("cache");
  const int64_t slots = cache.shape[3], bytes = DTypeSize(s.plain_cache);
  step->dim_major_keys.assign(cache.bytes.size() / 2, 0);
  for (int h = 0; h < s.num_kv_heads; ++h) {
    for (int64_t slot = 0; slot < slots; ++slot) {
      for (int d = 0; d < s.head_dim; ++d) {
        const int64_t from = ((h * slots + slot) * s.head_dim + d) * bytes;
        std::memcpy(&step->dim_major_keys[DimMajorOffset(s, slot, h, d, bytes)], &cache.bytes[from],
                    bytes);
      }
    }
  }
}

/// Points `args` at a descriptor whose key plane is `dim_major_keys` and whose value plane is the
/// value half of the PMX cache tensor; a malformed tensor leaves `args` as it was.
void UseDimMajorKeys(Step* step, MultiHeadCacheAttentionArgs* args) {
  if (!DescribePmxCache(step, *args)) return;
  const StepShape& s = step->shape;
  CachePlane& key = step->cache_desc.key;
  key.data = step->dim_major_keys.data();
  key.slot_stride = 1;
  key.dim_stride = s.page_size;
  key.head_stride = int64_t{s.head_dim} * s.page_size;
  key.slots_per_tile = s.page_size;
  key.tile_stride = key.head_stride * s.num_kv_heads;
  args->cache_desc = &step->cache_desc;
}

}  // namespace

Step BuildStep(const StepShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Step step;
  step.shape = shape;
  const int64_t batch = static_cast<int64_t>(shape.requests.size());
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos;
  int64_t table_width = 1, pages = 0, max_seqlen = 0, max_kvlen = 0;
  for (const StepRequest& r : shape.requests) {
    const int64_t kvlen = r.start_pos + r.seqlen;
    seqstarts.push_back(seqstarts.back() + r.seqlen);
    kvstarts.push_back(kvstarts.back() + kvlen);
    start_pos.push_back(r.start_pos);
    table_width = std::max(table_width, (kvlen + shape.page_size - 1) / shape.page_size);
    pages += (kvlen + shape.page_size - 1) / shape.page_size;
    max_seqlen = std::max(max_seqlen, r.seqlen);
    max_kvlen = std::max(max_kvlen, kvlen);
  }
  const int64_t tq = seqstarts.back();
  dynattn_ref::Tensors& in = step.inputs;
  in["query"] = RandomF16({tq, shape.num_heads, shape.head_dim}, rng, shape.activation);
  in["current_key"] = RandomF16({tq, shape.num_kv_heads, shape.head_dim}, rng, shape.activation);
  if (!shape.latent) {
    in["current_value"] =
        RandomF16({tq, shape.num_kv_heads, shape.value_dim()}, rng, shape.activation);
  }
  in["seqstarts"] = dynattn_ref::MakeI64({batch + 1}, seqstarts);
  in["kvstarts"] = dynattn_ref::MakeI64({batch + 1}, kvstarts);
  int64_t max_t = pages * shape.page_size;
  if (shape.cache_mode == 0) {
    in["cachestarts"] = dynattn_ref::MakeI64({batch}, RegionStarts(shape, &max_t));
  } else {
    in["cachestarts"] =
        dynattn_ref::MakeI64({batch, table_width}, PageTable(shape, table_width, pages, rng));
  }
  in["start_pos"] = dynattn_ref::MakeI64({batch}, start_pos);
  in["decoding_batches"] = dynattn_ref::ScalarI64(shape.decoding_batches);
  in["max_seqlen"] = dynattn_ref::ScalarI64(max_seqlen);
  in["max_kvlen"] = dynattn_ref::ScalarI64(max_kvlen);
  FillCache(shape, max_t, rng, &in);
  FillAttrs(&step);
  if (shape.dim_major_keys) TransposeKeys(&step);
  return step;
}

Status RunStep(Step* step, Array* out, const RunOptions& options) {
  return MultiHeadCacheAttention(step->attrs, StepArgs(step, out), options);
}

MultiHeadCacheAttentionArgs StepArgs(Step* step, Array* out) {
  dynattn_ref::Tensors& in = step->inputs;
  if (out->bytes.empty()) {
    std::vector<int64_t> shape = in.at("query").shape;
    shape.back() = step->shape.value_dim();
    *out = dynattn_ref::MakeArray(Dt::kF16, shape);
  }
  MultiHeadCacheAttentionArgs args =
      MultiHeadCacheAttentionArgsByName([&](const std::string& name) {
        auto it = in.find(name);
        return it != in.end() ? View(it->second) : TensorView{};
      });
  args.attn_output = View(*out);
  // The arrays hold raw bits; the shape says what they are.
  for (TensorView* v : {&args.query, &args.current_key, &args.current_value, &args.attn_output}) {
    v->dtype = step->shape.activation;
  }
  if (step->shape.quant_bit == 0) args.cache.dtype = step->shape.plain_cache;
  if (step->shape.latent) UseKeyHalfAsLatent(step, &args);
  if (step->shape.dim_major_keys) UseDimMajorKeys(step, &args);
  return args;
}

Step SubStep(const Step& step, const std::vector<int64_t>& picked, const Array& out, Array* rows) {
  const int64_t* qs = Starts(step, "seqstarts");
  const int64_t* ks = Starts(step, "kvstarts");
  const Array& table = step.inputs.at("cachestarts");
  const bool paged = table.shape.size() == 2;  // else offset mode: one start per request
  const int64_t width = paged ? table.shape[1] : 1;
  Step sub = step;
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  *rows = Rows(out, 0, 0);
  sub.shape.requests.clear();
  std::vector<const char*> packed = {"query", "current_key"};
  if (step.inputs.count("current_value") != 0) packed.push_back("current_value");
  for (const char* name : packed) sub.inputs[name] = Rows(step.inputs.at(name), 0, 0);
  int64_t decodes = 0;
  for (int64_t b : picked) {
    seqstarts.push_back(seqstarts.back() + qs[b + 1] - qs[b]);
    kvstarts.push_back(kvstarts.back() + ks[b + 1] - ks[b]);
    start_pos.push_back(Starts(step, "start_pos")[b]);
    cachestarts.insert(cachestarts.end(), table.data<int64_t>() + b * width,
                       table.data<int64_t>() + (b + 1) * width);
    for (const char* name : packed)
      AppendRows(Rows(step.inputs.at(name), qs[b], qs[b + 1]), &sub.inputs[name]);
    AppendRows(Rows(out, qs[b], qs[b + 1]), rows);
    sub.shape.requests.push_back(step.shape.requests[b]);
    decodes += b < step.shape.decoding_batches ? 1 : 0;
  }
  sub.shape.decoding_batches = decodes;
  const int64_t batch = static_cast<int64_t>(picked.size());
  sub.inputs["seqstarts"] = dynattn_ref::MakeI64({batch + 1}, seqstarts);
  sub.inputs["kvstarts"] = dynattn_ref::MakeI64({batch + 1}, kvstarts);
  sub.inputs["start_pos"] = dynattn_ref::MakeI64({batch}, start_pos);
  sub.inputs["cachestarts"] = paged ? dynattn_ref::MakeI64({batch, width}, cachestarts)
                                    : dynattn_ref::MakeI64({batch}, cachestarts);
  sub.inputs["decoding_batches"] = dynattn_ref::ScalarI64(decodes);
  return sub;
}

int64_t KeysRead(const StepShape& s, const StepRequest& r) {
  const int64_t kvlen = r.start_pos + r.seqlen;
  if (s.window_left < 0) return kvlen;
  return kvlen - std::max<int64_t>(0, r.start_pos - s.window_left);  // from the first row's window
}

namespace {

/// Keys the step's requests read (one per request and key, all heads together).
double KeysOfStep(const StepShape& s) {
  double tokens = 0;
  for (const StepRequest& r : s.requests) tokens += static_cast<double>(KeysRead(s, r));
  return tokens;
}

/// Elements of a key row plus its value row as the cache holds them (a latent row: one).
double RowElements(const StepShape& s) {
  return s.latent ? s.head_dim : s.head_dim + s.value_dim();
}

}  // namespace

double KvElementsRead(const Step& step) {
  const StepShape& s = step.shape;
  return KeysOfStep(s) * s.num_kv_heads * RowElements(s);
}

StepShape HotShape(const StepShape& s) {
  StepShape hot = s;
  hot.num_heads = s.num_heads / s.num_kv_heads;
  hot.num_kv_heads = 1;
  StepRequest r = s.requests.front();
  r.seqlen = std::min(r.seqlen, kHotKeys);
  r.start_pos = std::min(r.start_pos, kHotKeys - r.seqlen);
  hot.requests = {r};
  hot.decoding_batches = s.decoding_batches > 0 ? 1 : 0;
  return hot;
}

double KvBytesRead(const Step& step) {
  const StepShape& s = step.shape;
  const double tokens = KeysOfStep(s);
  const double plain = static_cast<double>(DTypeSize(s.plain_cache));
  const double elements = RowElements(s);
  const double row = s.quant_bit == 0   ? plain * elements
                     : s.quant_bit == 8 ? elements + 2.0 * elements / s.quant_group
                                        : elements / 2.0 + 2.0 * elements / s.quant_group;
  return tokens * s.num_kv_heads * row;
}

double AttentionFlops(const Step& step) {
  const StepShape& s = step.shape;
  double pairs = 0;  // (query, key) pairs under the bottom-right causal rule and the window
  for (const StepRequest& r : s.requests) {
    if (s.window_left < 0) {
      const double past = static_cast<double>(r.start_pos), n = static_cast<double>(r.seqlen);
      pairs += n * past + n * (n + 1) / 2;
      continue;
    }
    for (int64_t row = 0; row < r.seqlen; ++row) {
      pairs += static_cast<double>(std::min<int64_t>(r.start_pos + row, s.window_left) + 1);
    }
  }
  return 2.0 * pairs * (s.head_dim + s.value_dim()) * s.num_heads;
}

}  // namespace dynattn::bench
