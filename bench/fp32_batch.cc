// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Random fp32 batches for the composed baselines. A cheap generator keeps the largest shapes
// (1 GB of K and V) quick to fill; the values only need to be finite and varied.

#include "bench/fp32_batch.h"

#include <cmath>

namespace dynattn::bench {
namespace {

/// splitmix64: a fast, well-mixed stream of 64-bit values.
uint64_t NextBits(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<float> RandomFloats(size_t n, uint64_t* state) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(NextBits(state) >> 40) * 0x1p-23f - 1.0f;
  return v;
}

}  // namespace

float Fp32Batch::scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

Fp32Batch RandomFp32Batch(int num_heads, int num_kv_heads, int head_dim,
                          const std::vector<Fp32Request>& requests, uint64_t seed, int head_dim_v,
                          bool latent) {
  Fp32Batch batch;
  batch.num_heads = num_heads;
  batch.num_kv_heads = num_kv_heads;
  batch.head_dim = head_dim;
  batch.head_dim_v = head_dim_v;
  batch.latent = latent;
  batch.requests = requests;
  uint64_t state = seed;
  for (const Fp32Request& r : requests) {
    const size_t rows = static_cast<size_t>(num_heads) * r.seqlen;
    const size_t keys = static_cast<size_t>(num_kv_heads) * r.context;
    batch.query.push_back(RandomFloats(rows * head_dim, &state));
    batch.key.push_back(RandomFloats(keys * head_dim, &state));
    if (!latent) batch.value.push_back(RandomFloats(keys * batch.value_dim(), &state));
    batch.out.emplace_back(rows * batch.value_dim(), 0.0f);
  }
  return batch;
}

double Fp32KvBytes(const Fp32Batch& batch) {
  double tokens = 0;
  for (const Fp32Request& r : batch.requests) tokens += static_cast<double>(r.context);
  const int row = batch.head_dim + (batch.latent ? 0 : batch.value_dim());
  return tokens * batch.num_kv_heads * row * sizeof(float);
}

}  // namespace dynattn::bench
