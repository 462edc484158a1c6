// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "fuzz/fuzz_input.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dynattn_fuzz {
namespace {

// Compact integers: a byte below 0xE0 is its own value; 0xE0-0xEF name the extremes that break
// arithmetic; 0xF0 / 0xF1 / 0xF2 are followed by 2 / 4 / 8 little-endian bytes (uint16, int32,
// int64); 0xF3-0xFF read as -(b - 0xF2) (small negatives).
constexpr int64_t kExtremes[16] = {
    -1,
    std::numeric_limits<int32_t>::min(),
    std::numeric_limits<int32_t>::max(),
    int64_t{1} << 31,
    int64_t{1} << 32,
    int64_t{1} << 40,
    int64_t{1} << 46,
    (int64_t{1} << 46) + 1,
    int64_t{1} << 62,
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int64_t>::max() / 2 + 1,
    65535,
    65536,
    1 << 20,
    (1 << 20) + 1,
};

// Compact reals: 0 is 0; 0x01-0xFE pick one of kReals (valid and hostile values alike); 0xFF is
// followed by the 4 little-endian bytes of any float.
constexpr float kReals[16] = {
    1.0f,  0.5f, 2.0f,     30.0f,     50.0f,  0.125f, 1e-3f,  1e4f,
    -1.0f, NAN,  INFINITY, -INFINITY, 1e-30f, 1e-45f, 448.0f, 3.4e38f,
};
constexpr uint8_t kRawReal = 0xFF;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t Bytes(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(Byte()) << (8 * i);
    return v;
  }
  int64_t Int() {
    const uint8_t b = Byte();
    if (b < 0xE0) return b;
    if (b < 0xF0) return kExtremes[b - 0xE0];
    if (b == 0xF0) return static_cast<int64_t>(Bytes(2));
    if (b == 0xF1) return static_cast<int32_t>(static_cast<uint32_t>(Bytes(4)));
    if (b == 0xF2) return static_cast<int64_t>(Bytes(8));
    return -static_cast<int64_t>(b - 0xF2);
  }
  float Real() {
    const uint8_t b = Byte();
    if (b == 0) return 0.0f;
    if (b != kRawReal) return kReals[(b - 1) % 16];
    const uint32_t bits = static_cast<uint32_t>(Bytes(4));
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

void PutBytes(uint64_t v, int n, std::string* out) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void PutInt(int64_t v, std::string* out) {
  if (v >= 0 && v < 0xE0) {
    out->push_back(static_cast<char>(v));
  } else if (v >= 0 && v <= 0xFFFF) {
    out->push_back(static_cast<char>(0xF0));
    PutBytes(static_cast<uint64_t>(v), 2, out);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    out->push_back(static_cast<char>(0xF1));
    PutBytes(static_cast<uint32_t>(static_cast<int32_t>(v)), 4, out);
  } else {
    out->push_back(static_cast<char>(0xF2));
    PutBytes(static_cast<uint64_t>(v), 8, out);
  }
}

// A real as the shortest code that reads back as the same bits.
void PutReal(float v, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if (bits == 0) {
    out->push_back(0);
    return;
  }
  for (int i = 0; i < 16; ++i) {
    uint32_t table_bits;
    std::memcpy(&table_bits, &kReals[i], sizeof table_bits);
    if (table_bits == bits) {
      out->push_back(static_cast<char>(i + 1));
      return;
    }
  }
  out->push_back(static_cast<char>(kRawReal));
  PutBytes(bits, 4, out);
}

// a + b modulo 2^64 (the window is stored off by one, and any int64 must survive the trip).
int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// Bits of the ext byte. A distributed rank's inputs share the last bit: key_offsets with
// key_counts (unified attention) and with the lse output (MHA has the lse alone there).
constexpr uint8_t kExtBf16 = 1, kExtSinks = 8, kExtKScale = 16, kExtVScale = 32;
constexpr uint8_t kExtAlibiSlopes = 64, kExtShard = 128;
constexpr int kExtCacheShift = 1;

uint8_t ExtBit(const char* name) {
  const std::string n = name;
  if (n == "sinks") return kExtSinks;
  if (n == "k_scale") return kExtKScale;
  if (n == "v_scale") return kExtVScale;
  if (n == "alibi_slopes") return kExtAlibiSlopes;
  return kExtShard;  // key_offsets, key_counts, lse
}

uint64_t Fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace

const std::vector<TensorSpec>& OpTensors(Op op) {
  static const std::vector<TensorSpec> kTensors[kNumOps] = {
      {{"current_key", Role::kActivation},
       {"current_value", Role::kActivation},
       {"seqstarts", Role::kIndex},
       {"kvstarts", Role::kIndex},
       {"cachestarts", Role::kIndex},
       {"start_pos", Role::kIndex},
       {"max_seqlen", Role::kIndex},
       {"max_kvlen", Role::kIndex},
       {"cache", Role::kCache},
       {"scale", Role::kScale},
       {"key", Role::kOutput},
       {"value", Role::kOutput}},
      {{"query", Role::kActivation},
       {"key", Role::kActivation},
       {"value", Role::kActivation},
       {"seqstarts", Role::kIndex},
       {"kvstarts", Role::kIndex},
       {"decoding_batches", Role::kIndex},
       {"max_seqlen", Role::kIndex},
       {"max_kvlen", Role::kIndex},
       {"attn_mask", Role::kActivation},
       {"attn_output", Role::kOutput}},
      {{"query", Role::kActivation},
       {"current_key", Role::kActivation},
       {"current_value", Role::kActivation},
       {"seqstarts", Role::kIndex},
       {"kvstarts", Role::kIndex},
       {"cachestarts", Role::kIndex},
       {"start_pos", Role::kIndex},
       {"decoding_batches", Role::kIndex},
       {"max_seqlen", Role::kIndex},
       {"max_kvlen", Role::kIndex},
       {"cache", Role::kCache},
       {"scale", Role::kScale},
       {"attn_mask", Role::kActivation},
       {"attn_output", Role::kOutput}},
      {{"query", Role::kActivation},
       {"current_key", Role::kActivation},
       {"current_value", Role::kActivation},
       {"query_start_loc", Role::kIndex},
       {"context_lens", Role::kIndex},
       {"block_table", Role::kIndex},
       {"cache", Role::kCache},
       {"scale", Role::kScale},
       {"attn_output", Role::kOutput},
       {"lse", Role::kLse}},
  };
  return kTensors[static_cast<int>(op)];
}

const std::vector<TensorSpec>& ExtraTensors(Op op) {
  static const std::vector<TensorSpec> kExtras[kNumOps] = {
      {{"k_scale", Role::kTensorScale}, {"v_scale", Role::kTensorScale}},
      {{"sinks", Role::kSinks}, {"alibi_slopes", Role::kSinks}, {"lse", Role::kLse}},
      {{"sinks", Role::kSinks},
       {"k_scale", Role::kTensorScale},
       {"v_scale", Role::kTensorScale},
       {"alibi_slopes", Role::kSinks},
       {"key_offsets", Role::kIndex},
       {"lse", Role::kLse}},
      {{"sinks", Role::kSinks},
       {"k_scale", Role::kTensorScale},
       {"v_scale", Role::kTensorScale},
       {"alibi_slopes", Role::kSinks},
       {"key_offsets", Role::kIndex},
       {"key_counts", Role::kIndex}},
  };
  return kExtras[static_cast<int>(op)];
}

std::vector<TensorSpec> AllTensors(Op op) {
  std::vector<TensorSpec> all = OpTensors(op);
  for (const TensorSpec& extra : ExtraTensors(op)) all.push_back(extra);
  return all;
}

uint8_t Flags::Encode() const {
  return static_cast<uint8_t>(f16 | int32_index << 1 | f32_scale << 2 | two_threads << 3 |
                              plan_run << 4 | fast << 7);
}

Flags Flags::Decode(uint8_t byte) {
  Flags f;
  f.f16 = byte & 1;
  f.int32_index = byte & 2;
  f.f32_scale = byte & 4;
  f.two_threads = byte & 8;
  f.plan_run = byte & 16;
  f.fast = byte & 128;
  return f;
}

int64_t* AttrAt(Attrs* a, int i) {
  int64_t* fields[kNumAttrs] = {&a->num_heads,   &a->num_kv_heads, &a->head_dim,     &a->is_causal,
                                &a->is_alibi,    &a->num_layer,    &a->layer_idx,    &a->quant_bit,
                                &a->quant_group, &a->cache_mode,   &a->cache_layout, &a->page_size,
                                &a->num_repeat,  &a->block_size};
  return fields[i];
}

namespace {

// Reads what follows a present tensor's header byte.
void ReadTensor(const TensorSpec& spec, uint8_t header, Reader* in, TensorInput* t) {
  t->rank = header & 7;
  t->mutation = static_cast<Mutation>((header >> 3) & 7);
  if (t->mutation == Mutation::kOtherDType) t->other_dtype = in->Byte();
  for (int d = 0; d < std::min(t->rank, 6); ++d) t->shape[d] = in->Int();
  if (spec.role == Role::kIndex) {
    const int64_t count = in->Int();
    for (int64_t i = 0; i < std::clamp<int64_t>(count, 0, kMaxIndexValues); ++i) {
      t->index_values.push_back(in->Int());
    }
  }
  if (spec.role == Role::kSinks || spec.role == Role::kTensorScale) {
    const int64_t count = in->Int();
    for (int64_t i = 0; i < std::clamp<int64_t>(count, 0, kMaxRealValues); ++i) {
      t->real_values.push_back(in->Real());
    }
  }
}

// Writes a present tensor: header byte, extents, values.
void WriteTensor(const TensorSpec& spec, const TensorInput& t, std::string* out) {
  out->push_back(static_cast<char>((t.rank & 7) | static_cast<int>(t.mutation) << 3));
  if (t.mutation == Mutation::kOtherDType) out->push_back(static_cast<char>(t.other_dtype));
  for (int d = 0; d < std::min(t.rank, 6); ++d) PutInt(t.shape[d], out);
  if (spec.role == Role::kIndex) {
    const int64_t count = std::min<int64_t>(t.index_values.size(), kMaxIndexValues);
    PutInt(count, out);
    for (int64_t i = 0; i < count; ++i) PutInt(t.index_values[i], out);
  }
  if (spec.role == Role::kSinks || spec.role == Role::kTensorScale) {
    const int64_t count = std::min<int64_t>(t.real_values.size(), kMaxRealValues);
    PutInt(count, out);
    for (int64_t i = 0; i < count; ++i) PutReal(t.real_values[i], out);
  }
}

}  // namespace

Call Decode(const uint8_t* data, size_t size) {
  Reader in(data, size);
  Call call;
  call.op = static_cast<Op>(in.Byte() % kNumOps);
  call.flags = Flags::Decode(in.Byte());
  for (int i = 0; i < kNumAttrs; ++i) *AttrAt(&call.attrs, i) = in.Int();
  for (const TensorSpec& spec : OpTensors(call.op)) {
    TensorInput t;
    const uint8_t header = in.Byte();
    t.present = header != 0xFF;
    if (t.present) ReadTensor(spec, header, &in, &t);
    call.tensors.push_back(std::move(t));
  }
  const uint8_t ext = in.Byte();
  call.ext.bf16 = ext & kExtBf16;
  call.ext.cache = static_cast<CacheChoice>((ext >> kExtCacheShift) & 3);
  call.ext.window_left = WrappingAdd(in.Int(), -1);
  call.ext.logits_soft_cap = in.Real();
  call.ext.softmax_scale = in.Real();
  for (const TensorSpec& spec : ExtraTensors(call.op)) {
    TensorInput t;
    t.present = (ext & ExtBit(spec.name)) != 0;
    if (t.present) ReadTensor(spec, in.Byte(), &in, &t);
    call.tensors.push_back(std::move(t));
  }
  call.ext.head_dim_v = in.Int();
  call.ext.value_from_key = in.Int() != 0;
  call.data_seed = Fnv1a(data, size);
  return call;
}

std::string Encode(const Call& call) {
  std::string out;
  out.push_back(static_cast<char>(call.op));
  out.push_back(static_cast<char>(call.flags.Encode()));
  Attrs attrs = call.attrs;
  for (int i = 0; i < kNumAttrs; ++i) PutInt(*AttrAt(&attrs, i), &out);
  const std::vector<TensorSpec>& specs = OpTensors(call.op);
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorInput& t = call.tensors[k];
    if (!t.present) {
      out.push_back(static_cast<char>(0xFF));
      continue;
    }
    WriteTensor(specs[k], t, &out);
  }
  // The extension; its trailing zero bytes are left out (missing bytes read as 0), so a call
  // that uses none of it encodes exactly as before the extension existed.
  const std::vector<TensorSpec>& extras = ExtraTensors(call.op);
  uint8_t ext = static_cast<uint8_t>((call.ext.bf16 ? kExtBf16 : 0) |
                                     static_cast<int>(call.ext.cache) << kExtCacheShift);
  std::string tail;
  for (size_t k = 0; k < extras.size(); ++k) {
    const TensorInput& t = call.tensors[specs.size() + k];
    if (!t.present) continue;
    ext |= ExtBit(extras[k].name);
    WriteTensor(extras[k], t, &tail);
  }
  std::string ext_bytes(1, static_cast<char>(ext));
  PutInt(WrappingAdd(call.ext.window_left, 1), &ext_bytes);
  PutReal(call.ext.logits_soft_cap, &ext_bytes);
  PutReal(call.ext.softmax_scale, &ext_bytes);
  ext_bytes += tail;
  PutInt(call.ext.head_dim_v, &ext_bytes);
  PutInt(call.ext.value_from_key ? 1 : 0, &ext_bytes);
  while (!ext_bytes.empty() && ext_bytes.back() == 0) ext_bytes.pop_back();
  return out + ext_bytes;
}

}  // namespace dynattn_fuzz
