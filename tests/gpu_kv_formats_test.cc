// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's cache formats on the CUDA rows' write and gather kernels, driven directly (a
// problem and its plan, as src/ builds them): every cache element type with fp32, fp16 and bf16
// activations, and every fp8 byte. Cache bytes and gathered activations must equal core/codec.h's
// host encoding bit for bit, and the CPU row's when this library has one for the format.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/plan.h"
#include "src/context.h"
#include "tests/support/gpu_features.h"

namespace dynattn_test {
namespace feature {
namespace {

/// A value for a new cache row: ordinary values at a random range, with ties, zeros, huge, tiny
/// and non-finite values mixed in (e4m3 saturates past 448, e5m2 past 57344 or keeps infinity).
float CacheValue(std::mt19937_64& rng, float range) {
  switch (rng() % 12) {
    case 0:
      return rng() % 2 ? 0.0f : -0.0f;
    case 1:
      return std::numeric_limits<float>::quiet_NaN();
    case 2:
      return (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity();
    case 3:
      return static_cast<float>(Uniform(rng, -600, 600)) * 0.0625f;  // fp8 ties and saturation
    case 4:
      return UniformF(rng, -1e-5f, 1e-5f);
    case 5:
      return UniformF(rng, -7e4f, 7e4f);
    default:
      return UniformF(rng, -range, range);
  }
}

/// True when two arrays of activations of type `io` hold the same bits, except that any NaN
/// equals any NaN.
bool SameUpToNanPayload(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType io) {
  if (a.size() != b.size()) return false;
  const size_t bytes = io == DType::kF32 ? 4 : 2;
  for (size_t i = 0; i < a.size() / bytes; ++i) {
    if (std::memcmp(a.data() + i * bytes, b.data() + i * bytes, bytes) == 0) continue;
    const float x = di::LoadActivationOf(a.data(), static_cast<int64_t>(i), io);
    const float y = di::LoadActivationOf(b.data(), static_cast<int64_t>(i), io);
    if (!(std::isnan(x) && std::isnan(y))) {
      MESSAGE("element ", i, ": ", x, " vs ", y);
      return false;
    }
  }
  return true;
}

/// KeyValueCache on a CUDA row: new tokens written at start_pos, then every request's context
/// gathered num_repeat times. Cache and scales must be the host codec's (and the CPU row's)
/// bytes; the gathered rows the host decode of the whole cache (old random bytes included, so
/// any fp8 byte is read) stored in the activation type.
void CheckCacheIo(CacheElem elem, DType io, std::mt19937_64& rng) {
  const int heads = Uniform(rng, 1, 3), repeat = Uniform(rng, 1, 3);
  int dim = Uniform(rng, 1, 80);
  if (elem == CacheElem::kInt4) dim += dim % 2;
  std::vector<int> groups;
  for (int g = 1; g <= dim; ++g) {
    if (dim % g == 0 && (elem != CacheElem::kInt4 || g % 2 == 0)) groups.push_back(g);
  }
  const int group = Quantized(elem) ? Pick(rng, groups) : 8;
  const bool scale_f16 = rng() % 2;
  const float k_scale = std::exp(UniformF(rng, -7.0f, 2.0f));
  const float v_scale = rng() % 4 == 0 ? 1.0f : std::exp(UniformF(rng, -7.0f, 2.0f));
  const int64_t batch = Uniform(rng, 1, 3);
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  int64_t slots = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = Uniform(rng, 0, 5), start = Uniform(rng, 0, 6);
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + start + seqlen);
    start_pos.push_back(start);
    cachestarts.push_back(slots + Uniform(rng, 0, 2));
    slots = cachestarts.back() + start + seqlen;
  }
  const int64_t tokens = seqstarts.back(), rows = kvstarts.back();
  INFO("elem " << static_cast<int>(elem) << " io " << std::string(dynattn::DTypeName(io))
               << " heads " << heads << " dim " << dim << " group " << group << " repeat " << repeat
               << " scales " << k_scale << " " << v_scale << " tokens " << tokens << " rows "
               << rows);
  const float range = std::exp(UniformF(rng, -6.0f, 6.0f));
  const auto draw = [&] { return CacheValue(rng, range); };
  const size_t new_count = static_cast<size_t>(tokens) * heads * dim;
  const Activations new_key = MakeActivations(io, new_count, draw);
  const Activations new_value = MakeActivations(io, new_count, draw);
  const HostCache initial(elem, heads, dim, group, scale_f16, slots, k_scale, v_scale, rng);

  // What the write must leave: the host codec's rows at every new token's slot.
  HostCache expected = initial;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = seqstarts[b]; t < seqstarts[b + 1]; ++t) {
      const int64_t slot = cachestarts[b] + start_pos[b] + (t - seqstarts[b]);
      for (int h = 0; h < heads; ++h) {
        for (int plane = 0; plane < 2; ++plane) {
          const std::vector<float>& src = plane == 0 ? new_key.values : new_value.values;
          const size_t first = (static_cast<size_t>(t) * heads + h) * dim;
          expected.Encode(
              plane, slot, h, [&](int d) { return src[first + d]; }, io);
        }
      }
    }
  }
  const size_t out_bytes =
      static_cast<size_t>(rows) * heads * repeat * dim * (io == DType::kF32 ? 4 : 2);
  std::vector<uint8_t> expected_out[2];
  for (int plane = 0; plane < 2; ++plane) {
    expected_out[plane] = Poison(out_bytes);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < kvstarts[b + 1] - kvstarts[b]; ++j) {
        const int64_t row = kvstarts[b] + j;
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < dim; ++d) {
            const float x = expected.Decode(plane, cachestarts[b] + j, h, d, io);
            for (int r = 0; r < repeat; ++r) {
              di::StoreActivationOf(x, expected_out[plane].data(),
                                    ((row * heads + h) * repeat + r) * dim + d, io);
            }
          }
        }
      }
    }
  }

  // The CUDA row writes and gathers.
  DeviceCache cache(initial);
  const DeviceBytes key_in(new_key.bytes), value_in(new_value.bytes);
  const DeviceBytes key_out(Poison(out_bytes)), value_out(Poison(out_bytes));
  di::Batch b;
  b.size = batch;
  b.seqstarts = seqstarts.data();
  b.kvstarts = kvstarts.data();
  b.start_pos = start_pos.data();
  di::KvSource source;
  source.cache = cache.desc;
  source.slots.mode = di::SlotMap::Mode::kOffset;
  source.slots.starts = cachestarts.data();
  const di::WriteProblem write{b, io, key_in.get(), value_in.get(), source};
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(elem);
  const dynattn::Status written =
      row.write_new_tokens(row, write, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(written.ok(), written.message());
  di::GatherProblem gather{b, io, repeat, key_out.get(), value_out.get(), source};
  const dynattn::Status gathered =
      row.gather_context(row, gather, di::PlanGather(b), dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(gathered.ok(), gathered.message());
  for (int plane = 0; plane < 2; ++plane) {
    CAPTURE(plane);
    CHECK(cache.planes[plane].Fetch() == expected.planes[plane]);
    CHECK(cache.scales[plane].Fetch() == expected.scales[plane]);
  }
  // Gathered rows: the host decode's bytes, but a NaN's sign and payload are not part of the
  // contract (NVIDIA hardware gives the canonical NaN for any NaN a product yields, x86 the
  // operand's); the cache bytes above are exact, NaN included.
  CHECK(SameUpToNanPayload(key_out.Fetch(), expected_out[0], io));
  CHECK(SameUpToNanPayload(value_out.Fetch(), expected_out[1], io));

  // The CPU row writes and gathers the same bytes (once the CPU backend has the bf16 and fp8
  // formats: its bf16 row stands for them all).
  const di::BackendKernels* cpu = di::KernelsFor(dynattn::Device::kCpu, elem);
  if (di::KernelsFor(dynattn::Device::kCpu, CacheElem::kBF16) == nullptr || cpu == nullptr) {
    static bool said = false;
    if (!said) MESSAGE("the CPU backend has no bf16/fp8 rows: compared with the host codec only");
    said = true;
    return;
  }
  HostCache cpu_cache = initial;
  di::KvSource cpu_source = source;
  cpu_source.cache = cpu_cache.desc;
  const di::WriteProblem cpu_write{b, io, new_key.bytes.data(), new_value.bytes.data(), cpu_source};
  di::Scratch scratch;
  cpu->cpu.write_tokens(cpu_write, 0, tokens, &scratch);
  std::vector<uint8_t> cpu_out[2] = {Poison(out_bytes), Poison(out_bytes)};
  const di::GatherProblem cpu_gather{b,         io, repeat, cpu_out[0].data(), cpu_out[1].data(),
                                     cpu_source};
  for (const di::GatherPiece& piece : di::PlanGather(b)) {
    cpu->cpu.gather_rows(cpu_gather, piece.request, piece.begin, piece.end, &scratch);
  }
  for (int plane = 0; plane < 2; ++plane) {
    CHECK(cpu_cache.planes[plane] == expected.planes[plane]);
    CHECK(cpu_cache.scales[plane] == expected.scales[plane]);
    // Old rows hold random bytes, int8/int4 group scales included: a NaN scale's payload is not
    // part of the contract, so the CPU's gather is compared with NaN equal to NaN.
    CHECK(SameUpToNanPayload(cpu_out[plane], expected_out[plane], io));
  }
}

/// Every fp8 byte through a CUDA row: a cache holding bytes 0..255 gathers to the host decode of
/// each (fp32, fp16 and bf16 activations), and new tokens holding every finite value of the format
/// times the tensor scale, the midpoints between neighbours, values past the largest finite one,
/// infinities, NaN and -0 write the host codec's bytes.
void CheckEveryFp8Byte(CacheElem elem, float tensor_scale, std::mt19937_64& rng) {
  INFO("elem " << static_cast<int>(elem) << " tensor_scale " << tensor_scale);
  const di::Fp8Format format = di::Fp8FormatOf(elem);
  std::vector<float> values;
  for (int byte = 0; byte < 256; ++byte) {
    const float x = di::Fp8ToF32(static_cast<uint8_t>(byte), format);
    values.push_back(x * tensor_scale);
    const float next =
        di::Fp8ToF32(static_cast<uint8_t>((byte & 0x80) | ((byte + 1) & 0x7F)), format);
    if (std::isfinite(x) && std::isfinite(next)) values.push_back((x + next) / 2 * tensor_scale);
  }
  for (float special :
       {2.0f * di::Fp8Max(format) * tensor_scale, 1e30f, -1e30f, INFINITY, -INFINITY, -0.0f, NAN}) {
    values.push_back(special);
  }
  const int dim = 32, heads = 1;
  while (values.size() % dim != 0) values.push_back(UniformF(rng, -1.0f, 1.0f));
  const int64_t tokens = static_cast<int64_t>(values.size()) / dim;
  const int64_t slots = std::max<int64_t>(tokens, 256 / dim);
  for (DType io : kIoTypes) {
    INFO("io " << std::string(dynattn::DTypeName(io)));
    // New tokens in fp32 carry the values exactly; bf16/fp16 activations round them first.
    const Activations keys =
        MakeActivations(io, values.size(), [&, i = size_t{0}]() mutable { return values[i++]; });
    HostCache initial(elem, heads, dim, 8, false, slots, tensor_scale, tensor_scale, rng);
    for (int plane = 0; plane < 2; ++plane) {
      for (size_t i = 0; i < initial.planes[plane].size(); ++i) {
        initial.planes[plane][i] = static_cast<uint8_t>(i + 97 * plane);
      }
    }
    HostCache expected = initial;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int plane = 0; plane < 2; ++plane) {
        expected.Encode(
            plane, t, 0, [&](int d) { return keys.values[t * dim + d]; }, io);
      }
    }
    // Gather the initial cache (every byte) without writing: a request of `slots` context rows.
    const size_t out_bytes = static_cast<size_t>(slots) * dim * (io == DType::kF32 ? 4 : 2);
    DeviceCache cache(initial);
    const DeviceBytes key_out(Poison(out_bytes)), value_out(Poison(out_bytes));
    const int64_t no_tokens[2] = {0, 0}, context[2] = {0, slots}, zero[1] = {0};
    di::Batch gather_batch{1, no_tokens, context, zero, 0};
    di::KvSource source;
    source.cache = cache.desc;
    source.slots.starts = zero;
    dynattn::Context ctx;
    const di::BackendKernels& row = CudaRow(elem);
    const di::GatherProblem gather{gather_batch, io, 1, key_out.get(), value_out.get(), source};
    REQUIRE(row.gather_context(row, gather, di::PlanGather(gather_batch),
                               dynattn::internal::StateOf(ctx))
                .ok());
    std::vector<uint8_t> expected_out[2] = {Poison(out_bytes), Poison(out_bytes)};
    for (int plane = 0; plane < 2; ++plane) {
      for (int64_t s = 0; s < slots; ++s) {
        for (int d = 0; d < dim; ++d) {
          di::StoreActivationOf(initial.Decode(plane, s, 0, d, io), expected_out[plane].data(),
                                s * dim + d, io);
        }
      }
    }
    CHECK(SameUpToNanPayload(key_out.Fetch(), expected_out[0], io));
    CHECK(SameUpToNanPayload(value_out.Fetch(), expected_out[1], io));
    // Then write every value as new tokens at positions 0.. and compare the bytes.
    const DeviceBytes key_in(keys.bytes);
    const int64_t seqstarts[2] = {0, tokens}, kvstarts[2] = {0, tokens};
    const di::Batch write_batch{1, seqstarts, kvstarts, zero, 0};
    const di::WriteProblem write{write_batch, io, key_in.get(), key_in.get(), source};
    REQUIRE(row.write_new_tokens(row, write, dynattn::internal::StateOf(ctx)).ok());
    CHECK(cache.planes[0].Fetch() == expected.planes[0]);
    CHECK(cache.planes[1].Fetch() == expected.planes[1]);
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("bf16 and fp8 caches: the CUDA write and gather give the host codec's bytes") {
    const uint64_t seed = feature::FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (dynattn::CacheElem elem : feature::kElems) {
      for (dynattn::DType io : feature::kIoTypes) {
        for (int trial = 0; trial < 3; ++trial) feature::CheckCacheIo(elem, io, rng);
      }
    }
  }
  TEST_CASE("fp8 caches on the device: every byte reads and writes as the host codec says") {
    const uint64_t seed = feature::FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (dynattn::CacheElem elem : {dynattn::CacheElem::kF8E4M3, dynattn::CacheElem::kF8E5M2}) {
      feature::CheckEveryFp8Byte(elem, 1.0f, rng);
      feature::CheckEveryFp8Byte(elem, 0.25f, rng);
      feature::CheckEveryFp8Byte(elem, std::exp(feature::UniformF(rng, -5.0f, 5.0f)), rng);
    }
  }
}

}  // namespace
}  // namespace feature
}  // namespace dynattn_test
