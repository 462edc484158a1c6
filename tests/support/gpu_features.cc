// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's random formats, score features and float64 row checks (gpu_features.h).

#include "tests/support/gpu_features.h"

#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>

namespace dynattn_test {
namespace feature {

uint64_t FreshSeed() {
  static uint64_t next = 0;
  return dynattn_test::BaseSeed() + 0xD1B54A32D192ED03ull * ++next;
}

bool Quantized(CacheElem elem) { return elem == CacheElem::kInt8 || elem == CacheElem::kInt4; }

int Uniform(std::mt19937_64& rng, int lo, int hi) {  // [lo, hi]
  return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

float UniformF(std::mt19937_64& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

std::vector<uint8_t> Poison(size_t count) { return std::vector<uint8_t>(count, 0xFF); }

const di::BackendKernels& CudaRow(CacheElem elem) {
  const di::BackendKernels* row = di::CudaKernelsFor(elem);
  REQUIRE_MESSAGE(row != nullptr, "no CUDA row for cache element ", static_cast<int>(elem));
  return *row;
}

Features RandomFeatures(std::mt19937_64& rng, int64_t longest_context) {
  Features f;
  f.elem = kElems[rng() % std::size(kElems)];
  f.io = kIoTypes[rng() % std::size(kIoTypes)];
  f.kv_heads = Uniform(rng, 1, 2);
  f.group_size = Pick(rng, std::vector<int>{1, 2, 4});
  f.dim = Pick(rng, std::vector<int>{1, 7, 16, 32, 48, 64, 80});
  if (f.elem == CacheElem::kInt4) f.dim += f.dim % 2;
  f.quant_group = Quantized(f.elem) ? (f.dim % 8 == 0 ? 8 : 2 - f.dim % 2) : 8;
  f.scale_f16 = rng() % 2;
  switch (rng() % 4) {
    case 0:
      f.window = -1;
      break;
    case 1:
      f.window = 0;
      break;
    default:
      f.window = Uniform(rng, 1, static_cast<int>(std::max<int64_t>(2, longest_context)));
  }
  f.cap = rng() % 2 ? 0.0f : UniformF(rng, 0.5f, 20.0f);
  f.scale = rng() % 2 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(f.dim)))
                      : UniformF(rng, 0.02f, 1.5f);
  f.alibi = rng() % 4 == 0;
  if (rng() % 3 != 0) {
    for (int h = 0; h < f.heads(); ++h) f.sinks.push_back(UniformF(rng, -4.0f, 6.0f));
  }
  if (di::IsFp8(f.elem)) {
    f.k_scale = std::exp(UniformF(rng, -6.0f, 0.0f));
    f.v_scale = std::exp(UniformF(rng, -6.0f, 0.0f));
  }
  return f;
}

std::string Describe(const Features& f) {
  char text[400];
  std::snprintf(text, sizeof(text),
                "elem %d io %s heads %d/%d dim %d group %d window %lld cap %g scale %g alibi %d "
                "sinks %d k_scale %g v_scale %g",
                static_cast<int>(f.elem), dynattn::DTypeName(f.io), f.heads(), f.kv_heads, f.dim,
                f.quant_group, static_cast<long long>(f.window), f.cap, f.scale, f.alibi,
                static_cast<int>(!f.sinks.empty()), f.k_scale, f.v_scale);
  return text;
}

void CheckRow(const Features& f, const std::vector<uint8_t>& out, const std::vector<uint8_t>& lse,
              int64_t index, const Expected& e, double vmax, const std::string& where) {
  const double unit = f.io == DType::kBF16 ? 0x1p-8 : f.io == DType::kF16 ? 0x1p-11 : 0x1p-23;
  for (int d = 0; d < f.dim; ++d) {
    const double got = di::LoadActivationOf(out.data(), index * f.dim + d, f.io);
    const double bound = 1.01 * unit * std::fabs(e.out[d]) + 2e-4 * vmax + 1e-6;
    if (!(std::fabs(got - e.out[d]) <= bound)) {
      FAIL_CHECK(where, " d ", d, ": got ", got, ", expected ", e.out[d], " (bound ", bound, ")");
      return;
    }
  }
  if (lse.empty()) return;  // the op returns no log-sum-exp
  float got_lse;
  std::memcpy(&got_lse, lse.data() + index * 4, 4);
  if (e.lse == -INFINITY) {
    CHECK_MESSAGE(got_lse == -INFINITY, where, " lse ", got_lse, ", expected -inf");
  } else {
    CHECK_MESSAGE(std::fabs(got_lse - e.lse) <= 2e-5 * std::max(1.0, std::fabs(e.lse)), where,
                  " lse ", got_lse, ", expected ", e.lse);
  }
}

void FillCache(HostCache* cache, DType io, std::mt19937_64& rng) {
  const int heads = cache->desc.num_kv_heads, dim = cache->desc.head_dim;
  std::vector<float> row(dim);
  for (int64_t slot = 0; slot < cache->desc.num_slots; ++slot) {
    for (int h = 0; h < heads; ++h) {
      for (int plane = 0; plane < 2; ++plane) {
        // Values as activations of type io hold them (the cache is written from activations).
        for (float& x : row) {
          uint8_t bytes[4];
          di::StoreActivationOf(UniformF(rng, -1.0f, 1.0f), bytes, 0, io);
          x = di::LoadActivationOf(bytes, 0, io);
        }
        cache->Encode(
            plane, slot, h, [&](int d) { return row[d]; }, io);
      }
    }
  }
}

void FillFeatures(const Features& f, di::AttentionProblem* p, const std::vector<float>& slopes) {
  p->io_type = f.io;
  p->num_heads = f.heads();
  p->num_kv_heads = f.kv_heads;
  p->group_size = f.group_size;
  p->head_dim = f.dim;
  p->value_dim = f.dim;
  p->padded_dim = p->padded_value_dim = static_cast<int>(di::PadToLanes(f.dim));
  p->score_scale = f.scale;
  p->soft_cap = f.cap;
  p->window_left = f.window;
  p->alibi_slopes = f.alibi ? slopes.data() : nullptr;
  p->sinks = f.sinks.empty() ? nullptr : f.sinks.data();
}

void RunTrials(int trials, void (*check)(std::mt19937_64&)) {
  if (Reduced()) trials = std::max(1, trials / 4);
  const uint64_t seed = FreshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    check(rng);
  }
}

}  // namespace feature
}  // namespace dynattn_test
