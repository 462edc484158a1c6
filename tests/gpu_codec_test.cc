// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CUDA module's codec (core/codec.h) against the CPU library, on the host: its functions are
// __host__ __device__ with one body, so these checks cover the arithmetic the kernels run (the
// device-specific intrinsics, __fdiv_rn, __fmul_rn and rintf, are correctly rounded like their
// host counterparts). Cache bytes and scales must be bit-identical to the CPU's KeyValueCache
// (spec pmx-ops §2), and decoded values bit-identical to the CPU's gather.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/codec.h"
#include "cpu/kernel_table.h"
#include "reference/reference.h"
#include "src/dispatch.h"
#include "tests/support/run_case.h"

namespace dynattn {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A fresh seed per test case, derived from the run's base seed (DYNATTN_TEST_SEED replays it).
uint64_t FreshSeed() {
  static uint64_t next = 0;
  return dynattn_test::BaseSeed() + 0x9E3779B97F4A7C15ull * ++next;
}

TEST_SUITE("gpu_codec") {
  TEST_CASE("fp16 conversions match the CPU on every half and a sweep of floats") {
    for (uint32_t h = 0; h < 65536; ++h) {
      const float a = internal::F16ToF32(static_cast<uint16_t>(h));
      const float b = internal::F16ToF32(static_cast<uint16_t>(h));
      REQUIRE(Bits(a) == Bits(b));
    }
    // Every exponent and high mantissa, with the low 13 bits at the rounding boundaries.
    const uint32_t lows[] = {0x0, 0x1, 0xFFF, 0x1000, 0x1001, 0x17FF, 0x1FFF, 0x0800};
    for (uint32_t high = 0; high < (1u << 19); ++high) {
      for (uint32_t low : lows) {
        const float f = FromBits((high << 13) | low);
        REQUIRE(internal::F32ToF16(f) == internal::F32ToF16(f));
        REQUIRE(Bits(internal::RoundToF16(f)) == Bits(internal::RoundToF16(f)));
      }
    }
    const uint64_t seed = FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 4000000; ++i) {
      const float f = FromBits(static_cast<uint32_t>(rng()));
      REQUIRE(internal::F32ToF16(f) == internal::F32ToF16(f));
    }
  }

  // An independent fp8 definition (OCP 8-bit floating point, as the fp8 cache rules of
  // docs/numerics.md name it), in double: the value of every byte from the format's fields, and
  // the encoder as "nearest finite value, ties to the even code, saturate past the largest finite
  // value".
  struct Fp8Spec {
    int mant_bits, bias;
    bool e4m3;
  };
  const Fp8Spec kE4M3Spec{3, 7, true}, kE5M2Spec{2, 15, false};

  double SpecValue(uint8_t byte, const Fp8Spec& f) {
    const int exp_field = (byte & 0x7F) >> f.mant_bits;
    const int mant = byte & ((1 << f.mant_bits) - 1);
    const int max_exp = (1 << (7 - f.mant_bits)) - 1;
    const double sign = (byte & 0x80) ? -1.0 : 1.0;
    if (f.e4m3 && exp_field == max_exp && mant == (1 << f.mant_bits) - 1) return std::nan("");
    if (!f.e4m3 && exp_field == max_exp) {
      return mant == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
    }
    const double fraction = static_cast<double>(mant) / (1 << f.mant_bits);
    if (exp_field == 0) return sign * std::ldexp(fraction, 1 - f.bias);
    return sign * std::ldexp(1.0 + fraction, exp_field - f.bias);
  }

  uint8_t SpecEncode(float x, const Fp8Spec& f) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    if (std::isnan(x)) return sign | (f.e4m3 ? 0x7F : 0x7E);
    if (std::isinf(x) && !f.e4m3) return sign | 0x7C;
    // Non-negative finite codes in increasing value: 0x00 .. largest finite.
    const uint8_t max_code = f.e4m3 ? 0x7E : 0x7B;
    static const auto table = [](const Fp8Spec& spec) {
      std::vector<double> values;
      for (int code = 0; code <= (spec.e4m3 ? 0x7E : 0x7B); ++code) {
        values.push_back(SpecValue(static_cast<uint8_t>(code), spec));
      }
      return values;
    };
    static const std::vector<double> e4m3 = table(kE4M3Spec), e5m2 = table(kE5M2Spec);
    const std::vector<double>& values = f.e4m3 ? e4m3 : e5m2;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values[max_code]) return sign | max_code;
    // The last code whose value is <= a, and the one above it.
    const uint8_t low = static_cast<uint8_t>(std::upper_bound(values.begin(), values.end(), a) -
                                             values.begin() - 1);
    const double below = a - values[low], above = values[low + 1] - a;
    uint8_t code = low;
    if (above < below || (above == below && (low & 1))) code = static_cast<uint8_t>(low + 1);
    return sign | code;
  }

  TEST_CASE(
      "fp8 codec: every byte decodes to its format's value, encodes back, and the encoder "
      "rounds to nearest even and saturates") {
    for (const Fp8Spec& spec : {kE4M3Spec, kE5M2Spec}) {
      const internal::Fp8Format format =
          spec.e4m3 ? internal::Fp8Format::kE4M3 : internal::Fp8Format::kE5M2;
      CAPTURE(spec.e4m3);
      CHECK(internal::Fp8Max(format) == SpecValue(spec.e4m3 ? 0x7E : 0x7B, spec));
      for (int byte = 0; byte < 256; ++byte) {
        CAPTURE(byte);
        const float value = internal::Fp8ToF32(static_cast<uint8_t>(byte), format);
        const double expected = SpecValue(static_cast<uint8_t>(byte), spec);
        if (std::isnan(expected)) {
          REQUIRE(std::isnan(value));
          REQUIRE(internal::F32ToFp8(value, format) == SpecEncode(value, spec));
          continue;
        }
        REQUIRE(static_cast<double>(value) == expected);
        REQUIRE(std::signbit(value) == ((byte & 0x80) != 0));  // -0 included
        REQUIRE(internal::F32ToFp8(value, format) == byte);
        // The midpoint to the next code up (exact in float) goes to the even one of the two.
        const int magnitude = byte & 0x7F;
        if (magnitude < (spec.e4m3 ? 0x7E : 0x7B)) {
          const double next = SpecValue(static_cast<uint8_t>(byte + 1), spec);
          const float mid = static_cast<float>((expected + next) / 2);
          REQUIRE(static_cast<double>(mid) == (expected + next) / 2);
          REQUIRE(internal::F32ToFp8(mid, format) == SpecEncode(mid, spec));
          REQUIRE((internal::F32ToFp8(mid, format) & 1) == 0);
        }
      }
      // Every float whose low 13 bits sit at a rounding boundary, and random floats.
      const uint32_t lows[] = {0x0, 0x1, 0xFFF, 0x1000, 0x1001, 0x1FFF};
      for (uint32_t high = 0; high < (1u << 19); high += 3) {
        for (uint32_t low : lows) {
          const float f = FromBits((high << 13) | low);
          REQUIRE(internal::F32ToFp8(f, format) == SpecEncode(f, spec));
        }
      }
      const uint64_t seed = FreshSeed();
      INFO("seed " << seed);
      std::mt19937_64 rng(seed);
      for (int i = 0; i < 200000; ++i) {
        const float f = FromBits(static_cast<uint32_t>(rng()));
        REQUIRE(internal::F32ToFp8(f, format) == SpecEncode(f, spec));
        // With a tensor scale: the correctly rounded fp32 quotient, then the byte; read back
        // as the byte's value times the scale, rounded once.
        const float scale = std::exp(std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng));
        const uint8_t byte = internal::EncodeFp8(f, scale, format);
        REQUIRE(byte == SpecEncode(f / scale, spec));
        const float back = internal::DecodeFp8(byte, scale, format);
        const double exact = SpecValue(byte, spec) * scale;
        if (std::isnan(exact)) {
          REQUIRE(std::isnan(back));
        } else {
          REQUIRE(Bits(back) == Bits(static_cast<float>(exact)));
        }
      }
    }
  }

  TEST_CASE("bf16 codec: every bf16 decodes exactly, and the encoder rounds to nearest even") {
    for (uint32_t b = 0; b < 65536; ++b) {
      const float f = internal::Bf16ToF32(static_cast<uint16_t>(b));
      REQUIRE(Bits(f) == b << 16);
    }
    // Independent RNE: the nearest of the two bf16 neighbours of f (by their doubles), the even
    // one on a tie; infinities past the largest finite bf16 + half an ulp; NaN stays NaN.
    const auto expected = [](float f) -> uint32_t {
      const uint32_t bits = Bits(f);
      if (std::isnan(f)) return 0xFFFFFFFFu;  // any NaN
      if (std::isinf(f)) return bits >> 16;
      const uint32_t down = bits & 0xFFFF0000u, up = down + 0x10000u;
      const double x = f, lo = FromBits(down);
      const double hi = (up & 0x7F800000u) == 0x7F800000u && (up & 0x7FFFFFu) == 0
                            ? std::copysign(std::ldexp(1.0, 128), x)  // the rounding target
                            : static_cast<double>(FromBits(up));
      const double below = std::fabs(x - lo), above = std::fabs(hi - x);
      const bool round_up = above < below || (above == below && ((down >> 16) & 1));
      return (round_up ? up : down) >> 16;
    };
    const uint64_t seed = FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const uint32_t lows[] = {0x0, 0x1, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t high = 0; high < 65536; ++high) {
      for (uint32_t low : lows) {
        const float f = FromBits((high << 16) | low);
        const uint16_t got = internal::F32ToBf16(f);
        if (std::isnan(f)) {
          REQUIRE(std::isnan(internal::Bf16ToF32(got)));
          REQUIRE((got & 0x8000) == ((high & 0x8000)));
        } else {
          REQUIRE(got == expected(f));
        }
      }
    }
    for (int i = 0; i < 1000000; ++i) {
      const float f = FromBits(static_cast<uint32_t>(rng()));
      if (!std::isnan(f)) REQUIRE(internal::F32ToBf16(f) == expected(f));
    }
  }

  TEST_CASE("nibbles and codes follow the spec's bit rules") {
    for (int low = -8; low < 8; ++low) {
      for (int high = -8; high < 8; ++high) {
        const uint8_t byte =
            internal::PackNibbles(static_cast<int8_t>(low), static_cast<int8_t>(high));
        CHECK(byte == dynattn_ref::detail::PackNibbles(low, high));
        CHECK(internal::Int4At(&byte, 0) == low);
        CHECK(internal::Int4At(&byte, 1) == high);
      }
    }
    // Ties go to even, NaN to 0, out of range to +-qmax.
    CHECK(internal::QuantizeCode(2.5f, 1.0f, 127, false) == 2);
    CHECK(internal::QuantizeCode(3.5f, 1.0f, 127, false) == 4);
    CHECK(internal::QuantizeCode(-2.5f, 1.0f, 127, false) == -2);
    CHECK(internal::QuantizeCode(std::numeric_limits<float>::quiet_NaN(), 1.0f, 7, false) == 0);
    CHECK(internal::QuantizeCode(1e30f, 1.0f, 7, false) == 7);
    CHECK(internal::QuantizeCode(-std::numeric_limits<float>::infinity(), 1.0f, 127, true) == -127);
  }

  TEST_CASE("groups quantize and dequantize as the reference defines") {
    const uint64_t seed = FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> magnitude(-6.0f, 3.0f);
    for (int trial = 0; trial < 20000; ++trial) {
      const bool io_f16 = rng() % 2, scale_f16 = rng() % 2, int4 = rng() % 2;
      const int group = 2 * (1 + static_cast<int>(rng() % 16));
      const float range = std::pow(10.0f, magnitude(rng));
      std::vector<float> x(group);
      std::vector<double> xd(group);
      for (int i = 0; i < group; ++i) {
        float v = std::uniform_real_distribution<float>(-range, range)(rng);
        if (io_f16) v = internal::RoundToF16(v);
        x[i] = v;
        xd[i] = v;
      }
      const auto t1 = io_f16 ? dynattn_ref::Dt::kF16 : dynattn_ref::Dt::kF32;
      const auto t3 = scale_f16 ? dynattn_ref::Dt::kF16 : dynattn_ref::Dt::kF32;
      const auto ref = dynattn_ref::detail::QuantizeGroup(xd, t1, t3, int4 ? 4 : 8);
      const int qmax = internal::QMax(int4);
      const auto load = [&](int i) { return x[i]; };
      const float s = internal::GroupScaleOf(load, 0, group, qmax, io_f16);
      INFO("trial " << trial << " group " << group << " io_f16 " << io_f16 << " int4 " << int4);
      REQUIRE(static_cast<double>(s) == ref.scale);
      const float stored = scale_f16 ? internal::F16ToF32(internal::F32ToF16(s)) : s;
      REQUIRE(static_cast<double>(stored) == ref.stored);
      for (int i = 0; i < group; ++i) {
        const int q = internal::QuantizeCode(x[i], s, qmax, io_f16);
        REQUIRE(q == ref.q[i]);
        const float value = internal::Dequantize(
            q, stored, internal::ProductsRoundToF16(scale_f16, io_f16 ? DType::kF16 : DType::kF32));
        REQUIRE(static_cast<double>(value) ==
                dynattn_ref::detail::Dequantize(q, ref.stored, t1, t3));
      }
    }
  }

  // A random value for a cache row: ordinary values at a random scale, with ties, zeros, huge,
  // tiny (subnormal in fp16) and non-finite values mixed in.
  float SpecialValue(std::mt19937_64 & rng, float range) {
    switch (rng() % 16) {
      case 0:
        return 0.0f;
      case 1:
        return std::numeric_limits<float>::quiet_NaN();
      case 2:
        return (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity();
      case 3:
        return static_cast<float>(static_cast<int>(rng() % 255) - 127) * 0.5f;  // ties
      case 4:
        return std::uniform_real_distribution<float>(-1e-6f, 1e-6f)(rng);
      case 5:
        return std::uniform_real_distribution<float>(-6e4f, 6e4f)(rng);
      default:
        return std::uniform_real_distribution<float>(-range, range)(rng);
    }
  }

  TEST_CASE("rows encode to the CPU's cache bytes and scales, and decode to its gather") {
    const uint64_t seed = FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<CacheElem> elems = {CacheElem::kF32, CacheElem::kF16, CacheElem::kInt8,
                                    CacheElem::kInt4};
    std::vector<DType> io_types = {DType::kF32, DType::kF16};
    // bf16 and fp8 caches and bf16 activations, once the CPU library has them (its bf16 row).
    if (internal::KernelsFor(Device::kCpu, CacheElem::kBF16) != nullptr) {
      elems.insert(elems.end(), {CacheElem::kBF16, CacheElem::kF8E4M3, CacheElem::kF8E5M2});
      io_types.push_back(DType::kBF16);
    } else {
      MESSAGE("the CPU library has no bf16/fp8 rows: fp32/fp16/int8/int4 only");
    }
    for (int trial = 0; trial < 400; ++trial) {
      const CacheElem elem = elems[rng() % elems.size()];
      const DType io = io_types[rng() % io_types.size()];
      const bool quantized = elem == CacheElem::kInt8 || elem == CacheElem::kInt4;
      const bool io_f16 = io == DType::kF16, scale_f16 = rng() % 2, specials = rng() % 2;
      const bool fp8 = internal::IsFp8(elem);
      const float tensor_scales[2] = {
          fp8 ? std::exp(std::uniform_real_distribution<float>(-6.0f, 3.0f)(rng)) : 1.0f,
          fp8 ? std::exp(std::uniform_real_distribution<float>(-6.0f, 3.0f)(rng)) : 1.0f};
      const int heads = 1 + static_cast<int>(rng() % 3);
      int dim = 1 + static_cast<int>(rng() % 160);
      if (elem == CacheElem::kInt4) dim += dim % 2;
      std::vector<int> groups;
      for (int g = 1; g <= dim; ++g) {
        if (dim % g == 0 && (elem != CacheElem::kInt4 || g % 2 == 0)) groups.push_back(g);
      }
      const int group = quantized ? groups[rng() % groups.size()] : 8;
      const int64_t tokens = 1 + static_cast<int64_t>(rng() % 6);
      const float range = std::pow(10.0f, std::uniform_real_distribution<float>(-4.0f, 3.0f)(rng));
      INFO("trial " << trial << " elem " << static_cast<int>(elem) << " dim " << dim << " group "
                    << group << " io " << std::string(DTypeName(io)) << " scale_f16 " << scale_f16
                    << " tensor scales " << tensor_scales[0] << " " << tensor_scales[1]);

      // New tokens (Tq, Hkv, D) in the activation type.
      const size_t count = static_cast<size_t>(tokens) * heads * dim;
      std::vector<float> key32(count), value32(count);
      std::vector<uint16_t> key16(count), value16(count);
      for (size_t i = 0; i < count; ++i) {
        const float k = specials ? SpecialValue(rng, range)
                                 : std::uniform_real_distribution<float>(-range, range)(rng);
        const float v = specials ? SpecialValue(rng, range)
                                 : std::uniform_real_distribution<float>(-range, range)(rng);
        internal::StoreActivationOf(k, key16.data(), static_cast<int64_t>(i),
                                    io == DType::kBF16 ? DType::kBF16 : DType::kF16);
        internal::StoreActivationOf(v, value16.data(), static_cast<int64_t>(i),
                                    io == DType::kBF16 ? DType::kBF16 : DType::kF16);
        key32[i] = io == DType::kF32 ? k : internal::LoadActivationOf(key16.data(), i, io);
        value32[i] = io == DType::kF32 ? v : internal::LoadActivationOf(value16.data(), i, io);
      }

      // Cache of `tokens` slots, layout (slot, head, d); int4 offsets count nibbles.
      const int64_t row_elems = dim, slot_elems = static_cast<int64_t>(heads) * dim;
      const int64_t groups_per_row = dim / group;
      const size_t elem_bytes = elem == CacheElem::kF32                                 ? 4
                                : (elem == CacheElem::kF16 || elem == CacheElem::kBF16) ? 2
                                                                                        : 1;
      const size_t plane_bytes = elem == CacheElem::kInt4
                                     ? static_cast<size_t>(tokens * slot_elems / 2)
                                     : static_cast<size_t>(tokens * slot_elems) * elem_bytes;
      const size_t scale_bytes =
          static_cast<size_t>(tokens * heads * groups_per_row) * (scale_f16 ? 2 : 4);
      std::vector<uint8_t> cpu_planes[2], gpu_planes[2], cpu_scales[2], gpu_scales[2];
      for (int plane = 0; plane < 2; ++plane) {
        cpu_planes[plane].assign(plane_bytes, 0xAB);
        gpu_planes[plane].assign(plane_bytes, 0xAB);
        cpu_scales[plane].assign(scale_bytes, 0xCD);
        gpu_scales[plane].assign(scale_bytes, 0xCD);
      }
      const auto describe = [&](std::vector<uint8_t>* planes, std::vector<uint8_t>* scales) {
        CacheDesc c;
        c.elem = elem;
        c.scale_type = scale_f16 ? ScaleType::kF16 : ScaleType::kF32;
        c.quant_group = group;
        c.num_kv_heads = heads;
        c.head_dim = dim;
        c.num_slots = tokens;
        CachePlane* out[2] = {&c.key, &c.value};
        for (int plane = 0; plane < 2; ++plane) {
          out[plane]->data = planes[plane].data();
          out[plane]->slot_stride = slot_elems;
          out[plane]->head_stride = row_elems;
          out[plane]->scale = quantized ? scales[plane].data() : nullptr;
          out[plane]->scale_slot_stride = heads * groups_per_row;
          out[plane]->scale_head_stride = groups_per_row;
          out[plane]->tensor_scale = tensor_scales[plane];
        }
        return c;
      };

      // The CPU library writes its cache.
      const int64_t seqstarts[2] = {0, tokens}, start_pos[1] = {0}, offsets[1] = {0};
      internal::WriteProblem write;
      write.batch.size = 1;
      write.batch.seqstarts = seqstarts;
      write.batch.kvstarts = seqstarts;
      write.batch.start_pos = start_pos;
      const bool half_io = io != DType::kF32;
      write.io_type = io;
      write.current_key = half_io ? static_cast<const void*>(key16.data()) : key32.data();
      write.current_value = half_io ? static_cast<const void*>(value16.data()) : value32.data();
      write.kv.cache = describe(cpu_planes, cpu_scales);
      write.kv.slots.mode = internal::SlotMap::Mode::kOffset;
      write.kv.slots.starts = offsets;
      internal::Scratch write_scratch;
      internal::KernelsFor(Device::kCpu, elem)->cpu.write_tokens(write, 0, tokens, &write_scratch);

      // The CUDA module's row encoder writes its own, from the activations as the kernel reads
      // them.
      for (int64_t t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          for (int plane = 0; plane < 2; ++plane) {
            const void* src = plane == 0 ? write.current_key : write.current_value;
            const int64_t first = (t * heads + h) * dim;
            const auto load = [&](int d) { return internal::LoadActivationOf(src, first + d, io); };
            const int64_t offset = t * slot_elems + h * row_elems;
            const size_t byte = elem == CacheElem::kInt4 ? static_cast<size_t>(offset / 2)
                                                         : static_cast<size_t>(offset) * elem_bytes;
            const size_t scale_byte =
                static_cast<size_t>((t * heads + h) * groups_per_row) * (scale_f16 ? 2 : 4);
            internal::EncodeRow(
                load, elem, dim, group, scale_f16, io_f16, gpu_planes[plane].data() + byte,
                quantized ? gpu_scales[plane].data() + scale_byte : nullptr, tensor_scales[plane]);
          }
        }
      }
      for (int plane = 0; plane < 2; ++plane) {
        REQUIRE(cpu_planes[plane] == gpu_planes[plane]);
        REQUIRE(cpu_scales[plane] == gpu_scales[plane]);
      }

      // The CPU gathers the cache back; DecodeElement must give the same bits.
      std::vector<float> out32[2];
      std::vector<uint16_t> out16[2];
      for (int plane = 0; plane < 2; ++plane) {
        out32[plane].assign(count, 0.0f);
        out16[plane].assign(count, 0);
      }
      internal::GatherProblem gather;
      gather.batch = write.batch;
      gather.io_type = write.io_type;
      gather.num_repeat = 1;
      gather.key = half_io ? static_cast<void*>(out16[0].data()) : out32[0].data();
      gather.value = half_io ? static_cast<void*>(out16[1].data()) : out32[1].data();
      gather.kv = write.kv;
      internal::Scratch scratch;
      internal::KernelsFor(Device::kCpu, elem)->cpu.gather_rows(gather, 0, 0, tokens, &scratch);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          for (int plane = 0; plane < 2; ++plane) {
            const int64_t offset = t * slot_elems + h * row_elems;
            const size_t byte = elem == CacheElem::kInt4 ? static_cast<size_t>(offset / 2)
                                                         : static_cast<size_t>(offset) * elem_bytes;
            const size_t scale_byte =
                static_cast<size_t>((t * heads + h) * groups_per_row) * (scale_f16 ? 2 : 4);
            const void* out =
                half_io ? static_cast<const void*>(out16[plane].data()) : out32[plane].data();
            for (int d = 0; d < dim; ++d) {
              const float value = internal::DecodeElement(
                  gpu_planes[plane].data() + byte,
                  quantized ? gpu_scales[plane].data() + scale_byte : nullptr, d, elem, group,
                  scale_f16, io, tensor_scales[plane]);
              // The gather stores in the activation type; so does the CUDA gather kernel.
              std::vector<uint8_t> stored(4);
              internal::StoreActivationOf(value, stored.data(), 0, io);
              const int64_t index = (t * heads + h) * dim + d;
              if (half_io) {
                uint16_t bits;
                std::memcpy(&bits, stored.data(), 2);
                REQUIRE(bits == static_cast<const uint16_t*>(out)[index]);
              } else {
                float f;
                std::memcpy(&f, stored.data(), 4);
                REQUIRE(Bits(f) == Bits(static_cast<const float*>(out)[index]));
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dynattn
