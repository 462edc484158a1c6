// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/shards.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "reference/reference.h"

namespace dynattn_test {

using dynattn_ref::Dt;

std::vector<int64_t> I64s(const Array& a) {
  return std::vector<int64_t>(a.data<int64_t>(), a.data<int64_t>() + a.numel());
}

Array F32s(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  Array a = dynattn_ref::MakeArray(Dt::kF32, shape);
  std::memcpy(a.bytes.data(), values.data(), values.size() * sizeof(float));
  return a;
}

std::vector<float> StandardSlopes(int heads) {
  std::vector<float> slopes;
  for (double s : dynattn_ref::detail::AlibiSlopes(heads)) slopes.push_back(static_cast<float>(s));
  return slopes;
}

Array SliceHeads(const Array& a, int64_t begin, int64_t end) {
  const int64_t rows = a.shape[0], heads = a.shape[1], inner = a.shape[2];
  const int64_t size = dynattn_ref::DtSize(a.dt);
  Array out = dynattn_ref::MakeArray(a.dt, {rows, end - begin, inner});
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.bytes.data() + (r * (end - begin)) * inner * size,
                a.bytes.data() + (r * heads + begin) * inner * size,
                static_cast<size_t>((end - begin) * inner * size));
  }
  return out;
}

Case HeadShard(const Case& whole, int rank, int ranks, int64_t* first_head) {
  const int hq = whole.attrs.num_heads;
  const int hkv = whole.attrs.num_kv_heads > 0 ? whole.attrs.num_kv_heads : hq;
  const int group = hq / hkv;
  const int kv_begin = hkv * rank / ranks, kv_end = hkv * (rank + 1) / ranks;
  const int q_begin = kv_begin * group, q_end = kv_end * group;
  *first_head = q_begin;
  Case shard = whole;
  shard.attrs.num_heads = q_end - q_begin;
  shard.attrs.num_kv_heads = kv_end - kv_begin;
  shard.inputs["query"] = SliceHeads(whole.inputs.at("query"), q_begin, q_end);
  shard.inputs["key"] = SliceHeads(whole.inputs.at("key"), kv_begin, kv_end);
  shard.inputs["value"] = SliceHeads(whole.inputs.at("value"), kv_begin, kv_end);
  if (const auto mask = whole.inputs.find("attn_mask");
      mask != whole.inputs.end() && mask->second.shape.size() == 3) {
    const Array& m = mask->second;  // (Hq, Tq, cols): its planes are whole (Tq, cols) blocks
    const int64_t plane = m.shape[1] * m.shape[2] * dynattn_ref::DtSize(m.dt);
    Array sliced = dynattn_ref::MakeArray(m.dt, {q_end - q_begin, m.shape[1], m.shape[2]});
    if (!sliced.bytes.empty()) {  // no rows: nothing to copy (and no data pointers)
      std::memcpy(sliced.bytes.data(), m.bytes.data() + q_begin * plane, sliced.bytes.size());
    }
    shard.inputs["attn_mask"] = sliced;
  }
  if (const auto sinks = whole.inputs.find("sinks"); sinks != whole.inputs.end()) {
    const float* all = sinks->second.data<float>();
    shard.inputs["sinks"] = F32s({q_end - q_begin}, std::vector<float>(all + q_begin, all + q_end));
  }
  if (whole.attrs.is_alibi != 0) {  // a rank's heads are not the model's first heads
    const std::vector<float> slopes = StandardSlopes(hq);
    shard.attrs.is_alibi = 0;
    shard.inputs["alibi_slopes"] = F32s(
        {q_end - q_begin}, std::vector<float>(slopes.begin() + q_begin, slopes.begin() + q_end));
  }
  return shard;
}

namespace {

/// Cuts of contexts of `lengths` keys into `ranks` contiguous shares at multiples of `align`.
std::vector<std::vector<int64_t>> CutsOf(const std::vector<int64_t>& lengths, int ranks,
                                         int64_t align, std::mt19937_64* rng) {
  std::vector<std::vector<int64_t>> cuts;
  for (int64_t length : lengths) {
    std::vector<int64_t> c = {0, length};
    for (int r = 1; r < ranks; ++r) {
      const int64_t cut = static_cast<int64_t>((*rng)() % static_cast<uint64_t>(length + 1));
      c.push_back(cut / align * align);
    }
    std::sort(c.begin(), c.end());
    cuts.push_back(c);
  }
  return cuts;
}

}  // namespace

std::vector<std::vector<int64_t>> DrawCuts(const Case& whole, int ranks, std::mt19937_64* rng) {
  std::vector<int64_t> lengths;
  int64_t align = 1;
  if (whole.op == "unified_attention") {
    const std::vector<int64_t> qsl = I64s(whole.inputs.at("query_start_loc"));
    const std::vector<int64_t> context = I64s(whole.inputs.at("context_lens"));
    for (size_t b = 0; b < context.size(); ++b) lengths.push_back(context[b] + qsl[b + 1] - qsl[b]);
    align = whole.attrs.block_size;  // a shard's blocks are whole blocks of the request's
  } else {
    const std::vector<int64_t> kvstarts = I64s(whole.inputs.at("kvstarts"));
    for (size_t b = 0; b + 1 < kvstarts.size(); ++b)
      lengths.push_back(kvstarts[b + 1] - kvstarts[b]);
  }
  if (whole.attrs.window_left >= 0) align = std::lcm<int64_t>(align, 64);
  return CutsOf(lengths, ranks, align, rng);
}

/// Rank `rank`'s unified-attention step: its blocks are the request's from its first position's
/// block on (the cuts are whole blocks), with key_offsets and key_counts.
Case UnifiedShard(const Case& whole, const std::vector<std::vector<int64_t>>& cuts, int rank,
                  bool with_sinks) {
  Case shard = whole;
  const Array& table = whole.inputs.at("block_table");
  const int64_t count = static_cast<int64_t>(cuts.size()), stride = table.shape[1];
  const int64_t block_size = whole.attrs.block_size;
  std::vector<int64_t> offsets, held, ids;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t begin = cuts[b][rank], end = cuts[b][rank + 1];
    offsets.push_back(begin);
    held.push_back(end - begin);
    for (int64_t j = 0; j < stride; ++j) {
      const int64_t from = std::min(stride - 1, j + begin / block_size);  // past the end: unread
      ids.push_back(table.data<int64_t>()[b * stride + from]);
    }
  }
  shard.inputs["key_offsets"] = dynattn_ref::MakeI64({count}, offsets);
  shard.inputs["key_counts"] = dynattn_ref::MakeI64({count}, held);
  shard.inputs["block_table"] = dynattn_ref::MakeI64({count, stride}, ids);
  if (!with_sinks) shard.inputs.erase("sinks");
  return shard;
}

Case ContextShard(const Case& whole, const std::vector<std::vector<int64_t>>& cuts, int rank,
                  bool with_sinks) {
  if (whole.op == "unified_attention") return UnifiedShard(whole, cuts, rank, with_sinks);
  Case shard = whole;
  const std::vector<int64_t> cachestarts = I64s(whole.inputs.at("cachestarts"));
  const int64_t count = static_cast<int64_t>(cuts.size());
  std::vector<int64_t> kvstarts = {0}, offsets, starts;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t begin = cuts[b][rank], end = cuts[b][rank + 1];
    kvstarts.push_back(kvstarts.back() + end - begin);
    offsets.push_back(begin);
    starts.push_back(cachestarts[b] + begin);
  }
  shard.inputs["kvstarts"] = dynattn_ref::MakeI64({count + 1}, kvstarts);
  shard.inputs["key_offsets"] = dynattn_ref::MakeI64({count}, offsets);
  shard.inputs["cachestarts"] = dynattn_ref::MakeI64({count}, starts);
  if (!with_sinks) shard.inputs.erase("sinks");
  return shard;
}

dynattn::Status MergeParts(const std::vector<LibResult>& parts, Array* merged, Array* merged_lse) {
  const std::vector<int64_t>& shape = parts[0].attn_output.shape;
  const int64_t k = static_cast<int64_t>(parts.size()), t = shape[0], h = shape[1], d = shape[2];
  Array out = dynattn_ref::MakeArray(Dt::kF32, {k, t, h, d});
  Array lse = dynattn_ref::MakeArray(Dt::kF32, {k, t, h});
  for (int64_t i = 0; i < k; ++i) {
    std::memcpy(out.bytes.data() + i * t * h * d * 4, parts[i].attn_output.bytes.data(),
                static_cast<size_t>(t * h * d * 4));
    std::memcpy(lse.bytes.data() + i * t * h * 4, parts[i].lse.bytes.data(),
                static_cast<size_t>(t * h * 4));
  }
  *merged = dynattn_ref::MakeArray(Dt::kF32, {t, h, d});
  *merged_lse = dynattn_ref::MakeArray(Dt::kF32, {t, h});
  dynattn::MergeStatesArgs args;
  args.out = ViewOf(out);
  args.lse = ViewOf(lse);
  args.merged_out = ViewOf(*merged);
  args.merged_lse = ViewOf(*merged_lse);
  return dynattn::MergeStates(args);
}

}  // namespace dynattn_test
