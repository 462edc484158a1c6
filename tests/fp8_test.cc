// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// fp8 and bf16 cache bytes, bit for bit, against the float64 reference's own encoders
// (reference): inputs built to land on every fp8 code point (through a tensor scale, so the
// fp32 division is part of it), on the midpoints between neighbouring codes and just beside them,
// past the largest finite value (saturation), on NaN, infinities, subnormals and negative zero;
// bf16 caches on round-to-nearest-even ties, NaN payloads and overflow. Every write path (the
// KeyValueCache op, MultiHeadCacheAttention's write, unified attention's write) on every compiled
// SIMD target, with the read-back outputs of KeyValueCache bit-exact too.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/harness.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;
using dynattn_ref::MakeArray;
using dynattn_ref::MakeI64;
using dynattn_ref::ScalarI64;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kHeadDim = 37;  // a vector body and a scalar tail on every target

float AsFloat(double x) { return static_cast<float>(x); }

/// Values whose fp32 quotient by `scale` hits every fp8 code of `format`, the midpoints between
/// neighbouring codes and the floats just beside each midpoint, values past the largest finite
/// one, and the specials (NaN, -NaN, +-inf, +-0).
std::vector<double> Fp8Probes(Dt format, double scale) {
  std::vector<double> probes;
  for (int b = 0; b < 256; ++b) {
    const double value = dynattn_ref::Fp8Value(static_cast<uint8_t>(b), format);
    if (std::isfinite(value)) probes.push_back(AsFloat(value * scale));
    if (b == 0x7F || b == 0xFF) continue;
    const double next = dynattn_ref::Fp8Value(static_cast<uint8_t>(b + 1), format);
    if (!std::isfinite(value) || !std::isfinite(next)) continue;
    const float mid = AsFloat((value + next) / 2 * scale);
    probes.push_back(mid);
    probes.push_back(std::nextafter(mid, 0.0f));
    probes.push_back(std::nextafter(mid, HUGE_VALF));
  }
  const double max = format == Dt::kF8E4M3 ? 448.0 : 57344.0;
  for (double factor : {1.01, 1.0 + 1.0 / 32, 1.0 + 1.0 / 16, 1.125, 2.0, 1e10}) {
    probes.push_back(AsFloat(max * factor * scale));
    probes.push_back(-AsFloat(max * factor * scale));
  }
  for (double special : {std::nan(""), -std::nan(""), kInf, -kInf, 0.0, -0.0, 3e38, -3e38}) {
    probes.push_back(special);
  }
  return probes;
}

/// bf16 probes: exact values, ties between neighbours (to even) and beside them, overflow, NaNs
/// with payloads only in the low half, subnormals, -0, and random float bit patterns.
std::vector<double> Bf16Probes(std::mt19937_64& rng) {
  std::vector<double> probes = {
      0.0, -0.0, kInf, -kInf, 3.4028234663852886e38, -3.4028234663852886e38};
  auto from_bits = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  for (uint32_t bits : {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F7F8000u,
                        0x7F7F7FFFu, 0x00008000u, 0x00018000u, 0x00000001u, 0x80000001u}) {
    probes.push_back(from_bits(bits));
  }
  for (int i = 0; i < 200; ++i) {
    const uint32_t high = static_cast<uint32_t>(rng()) & 0xFFFF0000u;
    probes.push_back(from_bits(high));           // exact
    probes.push_back(from_bits(high | 0x8000));  // tie
    probes.push_back(from_bits(high | 0x7FFF));
    probes.push_back(from_bits(high | 0x8001));
    probes.push_back(from_bits(static_cast<uint32_t>(rng())));
  }
  return probes;
}

/// A one-request step that writes `probes` (padded with zeros) as K, and -probes as V, into an
/// empty cache of `cache_dt`, with T1 `t1`. `op` is key_value_cache, multi_head_cache_attention
/// or unified_attention.
Case WriteStep(const std::string& op, Dt t1, Dt cache_dt, const std::vector<double>& probes,
               double k_scale, double v_scale) {
  const int64_t tokens = (static_cast<int64_t>(probes.size()) + kHeadDim - 1) / kHeadDim;
  Case c;
  c.op = op;
  c.attrs.num_heads = 1;
  c.attrs.head_dim = kHeadDim;
  c.attrs.is_causal = 1;
  if (cache_dt == Dt::kF8E4M3) c.attrs.cache_dtype = "fp8_e4m3";
  if (cache_dt == Dt::kF8E5M2) c.attrs.cache_dtype = "fp8_e5m2";
  Array key = MakeArray(t1, {tokens, 1, kHeadDim});
  Array value = key;
  for (size_t i = 0; i < probes.size(); ++i) {
    dynattn_ref::StoreRounded(&key, static_cast<int64_t>(i), probes[i]);
    dynattn_ref::StoreRounded(&value, static_cast<int64_t>(i), -probes[i]);
  }
  c.inputs["current_key"] = key;
  c.inputs["current_value"] = value;
  c.inputs["cache"] = MakeArray(cache_dt, {tokens, 1, 2, 1, kHeadDim});
  if (k_scale > 0) {
    c.inputs["k_scale"] = MakeArray(Dt::kF32, {});
    dynattn_ref::StoreRounded(&c.inputs["k_scale"], 0, k_scale);
    c.inputs["v_scale"] = MakeArray(Dt::kF32, {});
    dynattn_ref::StoreRounded(&c.inputs["v_scale"], 0, v_scale);
  }
  if (op != "key_value_cache") c.inputs["query"] = MakeArray(t1, {tokens, 1, kHeadDim});
  if (op == "unified_attention") {
    c.attrs.block_size = static_cast<int>(tokens);
    c.inputs["query_start_loc"] = MakeI64({2}, {0, tokens});
    c.inputs["context_lens"] = MakeI64({1}, {0});
    c.inputs["block_table"] = MakeI64({1, 1}, {0});
    return c;
  }
  c.inputs["seqstarts"] = MakeI64({2}, {0, tokens});
  c.inputs["kvstarts"] = MakeI64({2}, {0, tokens});
  c.inputs["cachestarts"] = MakeI64({1}, {0});
  c.inputs["start_pos"] = MakeI64({1}, {0});
  c.inputs["max_seqlen"] = ScalarI64(tokens);
  c.inputs["max_kvlen"] = ScalarI64(tokens);
  if (op != "key_value_cache") c.inputs["decoding_batches"] = ScalarI64(0);
  return c;
}

/// The byte(s) the cache must hold for element `i` of plane `kv` (0 K, 1 V).
uint16_t ExpectedBits(const Case& c, Dt cache_dt, int kv, int64_t i, double scale) {
  const double x = dynattn_ref::LoadAsDouble(c.inputs.at(kv ? "current_value" : "current_key"), i);
  if (cache_dt == Dt::kBF16) return dynattn_ref::Bf16Bits(x);
  return dynattn_ref::Fp8Encode(x, scale, cache_dt);
}

uint16_t StoredBits(const Array& cache, int64_t offset) {
  if (cache.dt == Dt::kBF16) {
    uint16_t bits;
    std::memcpy(&bits, cache.bytes.data() + offset * 2, 2);
    return bits;
  }
  return cache.bytes[offset];
}

/// Every cache element of the step against the reference encoders; returns the mismatches.
int CheckCacheBits(const Case& c, const Array& cache, double k_scale, double v_scale) {
  const Array& key = c.inputs.at("current_key");
  const int64_t tokens = key.shape[0];
  int mismatches = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t d = 0; d < kHeadDim; ++d) {
        const int64_t i = t * kHeadDim + d, offset = ((t * 2) + kv) * kHeadDim + d;
        const uint16_t want = ExpectedBits(
            c, cache.dt, kv, i, kv ? (v_scale > 0 ? v_scale : 1.0) : (k_scale > 0 ? k_scale : 1.0));
        const uint16_t got = StoredBits(cache, offset);
        if (got == want) continue;
        if (++mismatches <= 5) {
          std::ostringstream text;
          text << c.op << (kv ? " V" : " K") << " element " << i << " input "
               << dynattn_ref::LoadAsDouble(c.inputs.at(kv ? "current_value" : "current_key"), i)
               << std::hex << ": got 0x" << got << " want 0x" << want;
          FAIL_CHECK(text.str());
        }
      }
    }
  }
  return mismatches;
}

/// KeyValueCache's gathered outputs: fp32(decoded * scale) stored as T1, bit for bit (NaN: any).
void CheckReadBack(const Array& got, const Array& cache, int kv, double scale) {
  REQUIRE(static_cast<int64_t>(got.bytes.size()) == got.numel() * dynattn_ref::DtSize(got.dt));
  const Dt tc = got.dt == Dt::kF16 ? Dt::kF16 : Dt::kF32;
  int mismatches = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t t = i / kHeadDim, d = i % kHeadDim;
    const int64_t offset = ((t * 2) + kv) * kHeadDim + d;
    const double read = cache.dt == Dt::kBF16
                            ? dynattn_ref::Bf16Value(StoredBits(cache, offset))
                            : dynattn_ref::Fp8Decode(cache.bytes[offset], scale, cache.dt);
    Array want = MakeArray(got.dt, {1});
    dynattn_ref::StoreRounded(&want, 0, dynattn_ref::detail::RoundTo(tc, read));
    const double got_value = dynattn_ref::LoadAsDouble(got, i);
    const bool same = std::isnan(read)
                          ? std::isnan(got_value)
                          : std::memcmp(want.bytes.data(), got.bytes.data() + i * want.bytes.size(),
                                        want.bytes.size()) == 0;
    if (!same && ++mismatches <= 5) {
      std::ostringstream text;
      text.precision(17);
      text << (kv ? "value" : "key") << " element " << i << ": got " << got_value << " want "
           << dynattn_ref::LoadAsDouble(want, 0);
      FAIL_CHECK(text.str());
    }
  }
  CHECK(mismatches == 0);
}

void RunWriteStep(const Case& c, double k_scale, double v_scale) {
  const LibResult lib = RunLibrary(c);
  REQUIRE_MESSAGE(lib.status.ok(), lib.status.message());
  CHECK(CheckCacheBits(c, lib.cache, k_scale, v_scale) == 0);
  if (c.op != "key_value_cache") return;
  CheckReadBack(lib.key, lib.cache, 0, k_scale > 0 ? k_scale : 1.0);
  CheckReadBack(lib.value, lib.cache, 1, v_scale > 0 ? v_scale : 1.0);
}

const char* const kWriteOps[] = {"key_value_cache", "multi_head_cache_attention",
                                 "unified_attention"};

TEST_SUITE("fp8") {
  TEST_CASE("fp8 cache bytes: every code, ties, saturation, NaN, subnormals, -0, on every target") {
    // (k_scale, v_scale); 0 = inputs absent (the default 1). 0.1 makes the division round.
    const std::vector<std::pair<double, double>> scales = {
        {0, 0}, {1.0, 1.0}, {0.75, 3.0}, {0.1, 0.0078125}, {1024.0, 0.3}};
    ForEachTarget([&](const std::string& target) {
      for (Dt format : {Dt::kF8E4M3, Dt::kF8E5M2}) {
        for (const auto& [k_wide, v_wide] : scales) {
          // The scales as the library reads them: float32.
          const double k_scale = AsFloat(k_wide), v_scale = AsFloat(v_wide);
          const std::vector<double> probes = Fp8Probes(format, k_scale > 0 ? k_scale : 1.0);
          for (const char* op : kWriteOps) {
            for (Dt t1 : {Dt::kF32, Dt::kF16, Dt::kBF16}) {
              if (t1 != Dt::kF32 && std::string(op) != "key_value_cache") continue;
              const std::string op_name = op, format_name = dynattn_ref::DtName(format);
              const std::string t1_name = dynattn_ref::DtName(t1);
              CAPTURE(target);
              CAPTURE(op_name);
              CAPTURE(format_name);
              CAPTURE(t1_name);
              CAPTURE(k_scale);
              CAPTURE(v_scale);
              RunWriteStep(WriteStep(op, t1, format, probes, k_scale, v_scale), k_scale, v_scale);
            }
          }
        }
      }
    });
  }

  TEST_CASE("bf16 cache bytes: ties to even, NaN payloads, overflow, on every target") {
    std::mt19937_64 rng(BaseSeed());
    const std::vector<double> probes = Bf16Probes(rng);
    ForEachTarget([&](const std::string& target) {
      for (const char* op : kWriteOps) {
        const std::string op_name = op;
        CAPTURE(target);
        CAPTURE(op_name);
        RunWriteStep(WriteStep(op, Dt::kF32, Dt::kBF16, probes, 0, 0), 0, 0);
      }
    });
  }

  TEST_CASE("the reference's fp8 encoder is the definition: exhaustive over floats near codes") {
    // Independent of the library: for random floats, the chosen code is a nearest one, ties go
    // to the even code, and finite values past the max saturate.
    std::mt19937_64 rng(BaseSeed() + 1);
    for (Dt format : {Dt::kF8E4M3, Dt::kF8E5M2}) {
      const double max = format == Dt::kF8E4M3 ? 448.0 : 57344.0;
      for (int i = 0; i < 20000; ++i) {
        const double x = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng),
                                    static_cast<int>(rng() % 40) - 22);
        const uint8_t code = dynattn_ref::Fp8Bits(static_cast<float>(x), format);
        const double chosen = dynattn_ref::Fp8Value(code, format);
        const double clamped = std::fmin(std::fabs(static_cast<float>(x)), max);
        double best = kInf;
        for (int b = 0; b < 128; ++b) {
          const double v = dynattn_ref::Fp8Value(static_cast<uint8_t>(b), format);
          if (std::isfinite(v)) best = std::fmin(best, std::fabs(v - clamped));
        }
        INFO("x " << x << " code " << int{code});
        CHECK(std::fabs(std::fabs(chosen) - clamped) == best);
        CHECK((std::signbit(chosen) == std::signbit(x)));
      }
    }
  }
}

}  // namespace
}  // namespace dynattn_test
