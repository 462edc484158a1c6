// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's serving formats and score features through the public ops on the device:
// MultiHeadCacheAttention over a raw cache descriptor (bf16, fp8 and the other caches, the call's
// fp8 scales) and MultiHeadAttention over packed bf16/fp16/fp32 keys and values, with windows,
// soft-cap, softmax scale, sinks, ALiBi and masks taken from the call. Cache bytes must be the host
// codec's, outputs within tolerance of the float64 attention; the CPU backend, when it has the
// format, must write the same bytes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/alibi.h"
#include "tests/support/gpu_features.h"

namespace dynattn_test {
namespace feature {
namespace {

/// MultiHeadCacheAttention through the public API on the device (a raw cache descriptor over
/// device planes, every data tensor in device memory, index tensors, sinks and fp8 scales on the
/// host): new tokens written with the call's k_scale/v_scale (the descriptor's own tensor scales
/// are wrong on purpose), the window, soft-cap, softmax scale and sinks taken from the attributes.
/// The cache must hold the host codec's bytes, the output the float64 attention over it; and the
/// CPU backend, once it has the bf16 and fp8 formats, the same bytes and an output within
/// tolerance.
void CheckPublicCacheAttention(std::mt19937_64& rng) {
  const int64_t batch = Uniform(rng, 1, 3);
  const int64_t decodes = Uniform(rng, 0, static_cast<int>(batch));
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  int64_t slots = 0, longest = 1, max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = b < decodes ? 1 : Uniform(rng, 1, 40);
    const int64_t start = rng() % 4 == 0 ? Uniform(rng, 1025, 1300) : Uniform(rng, 0, 70);
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + start + seqlen);
    start_pos.push_back(start);
    cachestarts.push_back(slots + Uniform(rng, 0, 3));
    slots = cachestarts.back() + start + seqlen;
    longest = std::max(longest, start + seqlen);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, start + seqlen);
  }
  const Features f = RandomFeatures(rng, longest);
  const bool causal = rng() % 4 != 0, masked = rng() % 3 == 0;
  const bool default_scale = f.scale == static_cast<float>(1.0 / std::sqrt(double{1.0} * f.dim));
  INFO(Describe(f) << " causal " << causal << " masked " << masked << " decodes " << decodes
                   << " batch " << batch);
  const int64_t tokens = seqstarts.back(), mask_cols = kvstarts.back() + Uniform(rng, 0, 4);
  const auto draw = [&] { return UniformF(rng, -1.0f, 1.0f); };
  const size_t new_count = static_cast<size_t>(tokens) * f.kv_heads * f.dim;
  const Activations new_key = MakeActivations(f.io, new_count, draw);
  const Activations new_value = MakeActivations(f.io, new_count, draw);
  const Activations query =
      MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim, draw);
  const Activations mask =
      MakeActivations(f.io, masked ? static_cast<size_t>(tokens * mask_cols) : 0,
                      [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -2.0f, 1.0f); });
  HostCache initial(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, slots, f.k_scale,
                    f.v_scale, rng);
  FillCache(&initial, f.io, rng);
  HostCache expected = initial;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = seqstarts[b]; t < seqstarts[b + 1]; ++t) {
      const int64_t slot = cachestarts[b] + start_pos[b] + (t - seqstarts[b]);
      for (int h = 0; h < f.kv_heads; ++h) {
        const size_t first = (static_cast<size_t>(t) * f.kv_heads + h) * f.dim;
        expected.Encode(
            0, slot, h, [&](int d) { return new_key.values[first + d]; }, f.io);
        expected.Encode(
            1, slot, h, [&](int d) { return new_value.values[first + d]; }, f.io);
      }
    }
  }

  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = f.heads();
  attrs.attention.num_kv_heads = f.kv_heads;
  attrs.attention.head_dim = f.dim;
  attrs.attention.is_causal = causal;
  attrs.attention.is_alibi = f.alibi;
  attrs.attention.window_left = static_cast<int>(f.window);
  attrs.attention.logits_soft_cap = f.cap;
  attrs.attention.softmax_scale = default_scale && rng() % 2 ? 0.0f : f.scale;
  attrs.cache.quant_bit = f.elem == CacheElem::kInt8 ? 8 : f.elem == CacheElem::kInt4 ? 4 : 0;
  attrs.cache.quant_group = f.quant_group;
  const int64_t scalars[3] = {decodes, max_seqlen, max_kvlen};
  const float fp8_scales[2] = {f.k_scale, f.v_scale};
  using dynattn::TensorView;
  const auto host_i64 = [](const std::vector<int64_t>& v) {
    return TensorView::Dense(v.data(), DType::kI64, {static_cast<int64_t>(v.size())});
  };
  const auto run = [&](dynattn::Device device, std::vector<uint8_t> planes_out[2],
                       std::vector<uint8_t>* out_bytes) {
    const bool on_device = device == dynattn::Device::kCuda;
    HostCache host_copy = initial;
    // The descriptor's tensor scales are not the cache's: k_scale/v_scale must replace them.
    host_copy.desc.key.tensor_scale = 3.0f;
    host_copy.desc.value.tensor_scale = 5.0f;
    std::unique_ptr<DeviceCache> device_cache;
    if (on_device) device_cache = std::make_unique<DeviceCache>(host_copy);
    const dynattn::CacheDesc desc = on_device ? device_cache->desc : host_copy.desc;
    std::vector<std::unique_ptr<DeviceBytes>> buffers;
    const auto place = [&](const std::vector<uint8_t>& bytes) -> void* {
      if (!on_device) return const_cast<uint8_t*>(bytes.data());
      buffers.push_back(std::make_unique<DeviceBytes>(bytes));
      return buffers.back()->get();
    };
    std::vector<uint8_t> out_host = Poison(query.bytes.size());
    dynattn::MultiHeadCacheAttentionArgs args;
    const int64_t hq = f.heads(), hkv = f.kv_heads, dim = f.dim;
    args.query = TensorView::Dense(place(query.bytes), f.io, {tokens, hq, dim}, device);
    args.current_key = TensorView::Dense(place(new_key.bytes), f.io, {tokens, hkv, dim}, device);
    args.current_value =
        TensorView::Dense(place(new_value.bytes), f.io, {tokens, hkv, dim}, device);
    args.seqstarts = host_i64(seqstarts);
    args.kvstarts = host_i64(kvstarts);
    args.cachestarts = host_i64(cachestarts);
    args.start_pos = host_i64(start_pos);
    args.decoding_batches = TensorView::Dense(&scalars[0], DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&scalars[1], DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&scalars[2], DType::kI64, {});
    if (masked) {
      args.attn_mask = TensorView::Dense(place(mask.bytes), f.io, {tokens, mask_cols}, device);
    }
    if (!f.sinks.empty()) args.sinks = TensorView::Dense(f.sinks.data(), DType::kF32, {hq});
    if (di::IsFp8(f.elem)) {
      args.k_scale = TensorView::Dense(&fp8_scales[0], DType::kF32, {});
      args.v_scale = TensorView::Dense(&fp8_scales[1], DType::kF32, {});
    }
    args.cache_desc = &desc;
    void* out = place(out_host);
    args.attn_output = TensorView::Dense(out, f.io, {tokens, hq, dim}, device);
    // One CPU thread: under ThreadSanitizer (gpu-tsan) the only threads are then the emulated
    // kernels' (oneTBB's synchronisation is invisible to it).
    const dynattn::Status status =
        dynattn::MultiHeadCacheAttention(attrs, args, dynattn::RunOptions{.num_threads = 1});
    REQUIRE_MESSAGE(status.ok(), status.message());
    for (int plane = 0; plane < 2; ++plane) {
      planes_out[plane] = on_device ? device_cache->planes[plane].Fetch() : host_copy.planes[plane];
    }
    *out_bytes = on_device ? buffers.back()->Fetch() : out_host;
  };
  std::vector<uint8_t> planes[2], out;
  run(dynattn::Device::kCuda, planes, &out);
  CHECK(planes[0] == expected.planes[0]);
  CHECK(planes[1] == expected.planes[1]);

  // The float64 attention over the cache as written (its scales: the call's k_scale/v_scale).
  const DecodedCache rounded(expected, f.io), cpu_read(expected, f.io, true);
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());
  const std::vector<uint8_t> no_lse;
  const auto check_output = [&](const std::vector<uint8_t>& got, const DecodedCache& decoded,
                                const char* backend) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t seqlen = seqstarts[b + 1] - seqstarts[b];
      const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
      const bool limited = f.alibi || f.window >= 0 || (causal && seqlen > 1 && b >= decodes);
      for (int64_t r = 0; r < seqlen; ++r) {
        const int64_t token = seqstarts[b] + r, position = kvlen - seqlen + r;
        const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
        const int64_t last = limited ? position : kvlen - 1;
        for (int h = 0; h < f.heads(); ++h) {
          const int kvh = h / f.group_size;
          const auto key = [&](int64_t j) {
            return decoded.Row(0, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
          };
          const auto value = [&](int64_t j) {
            return decoded.Row(1, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
          };
          const auto bias = [&](int64_t j) {
            double x = f.alibi ? double{slopes[h]} * static_cast<double>(j - position) : 0.0;
            if (masked) x += mask.values[token * mask_cols + kvstarts[b] + j];
            return x;
          };
          const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
          CheckAttendedRow(f, q, first, last, key, value, bias,
                           f.sinks.empty() ? nullptr : &f.sinks[h], got, no_lse,
                           token * f.heads() + h,
                           std::string(backend) + " request " + std::to_string(b) + " row " +
                               std::to_string(r) + " head " + std::to_string(h));
        }
      }
    }
  };
  check_output(out, rounded, "CUDA");
  if (di::KernelsFor(dynattn::Device::kCpu, CacheElem::kBF16) == nullptr) {
    static bool said = false;
    if (!said) MESSAGE("the CPU backend has no bf16/fp8 rows: no CPU comparison");
    said = true;
    return;
  }
  std::vector<uint8_t> cpu_planes[2], cpu_out;
  run(dynattn::Device::kCpu, cpu_planes, &cpu_out);
  CHECK(cpu_planes[0] == planes[0]);
  CHECK(cpu_planes[1] == planes[1]);
  check_output(cpu_out, cpu_read, "CPU");
}

/// MultiHeadAttention through the public API on the device: packed bf16/fp16/fp32 keys and values
/// (an unquantized cache of the activation type), with the window, soft-cap, softmax scale, sinks,
/// ALiBi and a per-head mask, against the float64 attention.
void CheckPublicAttention(std::mt19937_64& rng) {
  const int64_t batch = Uniform(rng, 1, 3);
  std::vector<int64_t> seqstarts{0}, kvstarts{0};
  int64_t longest = 1, max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = Uniform(rng, 1, 40);
    const int64_t kvlen =
        seqlen + (rng() % 4 == 0 ? Uniform(rng, 1025, 1200) : Uniform(rng, 0, 50));
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + kvlen);
    longest = std::max(longest, kvlen);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, kvlen);
  }
  Features f = RandomFeatures(rng, longest);
  f.elem = f.io == DType::kF32   ? CacheElem::kF32
           : f.io == DType::kF16 ? CacheElem::kF16
                                 : CacheElem::kBF16;
  const bool causal = rng() % 3 != 0, masked = rng() % 2 == 0;
  INFO(Describe(f) << " causal " << causal << " masked " << masked << " batch " << batch);
  const int64_t tokens = seqstarts.back(), rows = kvstarts.back();
  const int64_t hq = f.heads(), hkv = f.kv_heads, dim = f.dim;
  const auto draw = [&] { return UniformF(rng, -1.0f, 1.0f); };
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens * hq * dim), draw);
  const Activations key = MakeActivations(f.io, static_cast<size_t>(rows * hkv * dim), draw);
  const Activations value = MakeActivations(f.io, static_cast<size_t>(rows * hkv * dim), draw);
  const Activations mask =
      MakeActivations(f.io, masked ? static_cast<size_t>(hq * tokens * rows) : 0,
                      [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -2.0f, 1.0f); });
  dynattn::AttentionAttrs attrs;
  attrs.num_heads = f.heads();
  attrs.num_kv_heads = f.kv_heads;
  attrs.head_dim = f.dim;
  attrs.is_causal = causal;
  attrs.is_alibi = f.alibi;
  attrs.window_left = static_cast<int>(f.window);
  attrs.logits_soft_cap = f.cap;
  attrs.softmax_scale = f.scale;
  using dynattn::TensorView;
  const dynattn::Device cuda = dynattn::Device::kCuda;
  const DeviceBytes q_in(query.bytes), k_in(key.bytes), v_in(value.bytes), m_in(mask.bytes);
  const DeviceBytes out(Poison(query.bytes.size()));
  const int64_t scalars[3] = {0, max_seqlen, max_kvlen};
  dynattn::MultiHeadAttentionArgs args;
  args.query = TensorView::Dense(q_in.get(), f.io, {tokens, hq, dim}, cuda);
  args.key = TensorView::Dense(k_in.get(), f.io, {rows, hkv, dim}, cuda);
  args.value = TensorView::Dense(v_in.get(), f.io, {rows, hkv, dim}, cuda);
  args.seqstarts = TensorView::Dense(seqstarts.data(), DType::kI64, {batch + 1});
  args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  args.decoding_batches = TensorView::Dense(&scalars[0], DType::kI64, {});
  args.max_seqlen = TensorView::Dense(&scalars[1], DType::kI64, {});
  args.max_kvlen = TensorView::Dense(&scalars[2], DType::kI64, {});
  if (masked) args.attn_mask = TensorView::Dense(m_in.get(), f.io, {hq, tokens, rows}, cuda);
  if (!f.sinks.empty()) args.sinks = TensorView::Dense(f.sinks.data(), DType::kF32, {hq});
  args.attn_output = TensorView::Dense(out.get(), f.io, {tokens, hq, dim}, cuda);
  const dynattn::Status status = dynattn::MultiHeadAttention(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), no_lse;
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = seqstarts[b + 1] - seqstarts[b];
    const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
    const bool limited = f.alibi || f.window >= 0 || (causal && seqlen > 1);
    for (int64_t r = 0; r < seqlen; ++r) {
      const int64_t token = seqstarts[b] + r, position = kvlen - seqlen + r;
      const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
      const int64_t last = limited ? position : kvlen - 1;
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto row = [&](const Activations& a, int64_t j) {
          return a.values.data() + ((kvstarts[b] + j) * hkv + kvh) * dim;
        };
        const auto key_of = [&](int64_t j) { return row(key, j); };
        const auto value_of = [&](int64_t j) { return row(value, j); };
        const auto bias = [&](int64_t j) {
          double x = f.alibi ? double{slopes[h]} * static_cast<double>(j - position) : 0.0;
          if (masked) x += mask.values[(h * tokens + token) * rows + kvstarts[b] + j];
          return x;
        };
        const float* q = query.values.data() + (token * hq + h) * dim;
        CheckAttendedRow(f, q, first, last, key_of, value_of, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, no_lse, token * hq + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("multi_head_cache_attention on the device with the new formats and attributes") {
    feature::RunTrials(12, &feature::CheckPublicCacheAttention);
  }
  TEST_CASE("multi_head_attention on the device with bf16 and the new attributes") {
    feature::RunTrials(10, &feature::CheckPublicAttention);
  }
}

}  // namespace
}  // namespace feature
}  // namespace dynattn_test
