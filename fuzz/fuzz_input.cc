// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "fuzz/fuzz_input.h"

#include <algorithm>
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

uint8_t Flags::Encode() const {
  return static_cast<uint8_t>(f16 | int32_index << 1 | f32_scale << 2 | two_threads << 3 |
                              plan_run << 4);
}

Flags Flags::Decode(uint8_t byte) {
  Flags f;
  f.f16 = byte & 1;
  f.int32_index = byte & 2;
  f.f32_scale = byte & 4;
  f.two_threads = byte & 8;
  f.plan_run = byte & 16;
  return f;
}

int64_t* AttrAt(Attrs* a, int i) {
  int64_t* fields[kNumAttrs] = {&a->num_heads,   &a->num_kv_heads, &a->head_dim,     &a->is_causal,
                                &a->is_alibi,    &a->num_layer,    &a->layer_idx,    &a->quant_bit,
                                &a->quant_group, &a->cache_mode,   &a->cache_layout, &a->page_size,
                                &a->num_repeat,  &a->block_size};
  return fields[i];
}

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
    if (t.present) {
      t.rank = header & 7;
      t.mutation = static_cast<Mutation>((header >> 3) & 7);
      if (t.mutation == Mutation::kOtherDType) t.other_dtype = in.Byte();
      for (int d = 0; d < std::min(t.rank, 6); ++d) t.shape[d] = in.Int();
      if (spec.role == Role::kIndex) {
        const int64_t count = in.Int();
        for (int64_t i = 0; i < std::clamp<int64_t>(count, 0, kMaxIndexValues); ++i) {
          t.index_values.push_back(in.Int());
        }
      }
    }
    call.tensors.push_back(std::move(t));
  }
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
    out.push_back(static_cast<char>((t.rank & 7) | static_cast<int>(t.mutation) << 3));
    if (t.mutation == Mutation::kOtherDType) out.push_back(static_cast<char>(t.other_dtype));
    for (int d = 0; d < std::min(t.rank, 6); ++d) PutInt(t.shape[d], &out);
    if (specs[k].role == Role::kIndex) {
      const int64_t count = std::min<int64_t>(t.index_values.size(), kMaxIndexValues);
      PutInt(count, &out);
      for (int64_t i = 0; i < count; ++i) PutInt(t.index_values[i], &out);
    }
  }
  return out;
}

}  // namespace dynattn_fuzz
