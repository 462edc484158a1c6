// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Random softmax parts and one MergeStates call for the merge suite (merge_parts.h).

#include "tests/support/merge_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dynattn_test {

float Poison() {
  const uint32_t bits = 0x7fc0beefu;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

const char* FormName(Form form) {
  return form == Form::kNormalised ? "normalised (out, lse)" : "unnormalised (acc, max, sum)";
}

Merged Merge(Parts& p, Form form, bool with_lse) {
  Merged r;
  r.out.assign(p.Rows() * p.d, Poison());
  r.lse.assign(p.Rows(), Poison());
  MergeStatesArgs args;
  if (form == Form::kNormalised) {
    args.out = TensorView::Dense(p.out.data(), DType::kF32, {p.k, p.t, p.h, p.d});
    args.lse = TensorView::Dense(p.lse.data(), DType::kF32, {p.k, p.t, p.h});
  } else {
    args.acc = TensorView::Dense(p.acc.data(), DType::kF32, {p.k, p.t, p.h, p.d});
    args.max = TensorView::Dense(p.max.data(), DType::kF32, {p.k, p.t, p.h});
    args.sum = TensorView::Dense(p.sum.data(), DType::kF32, {p.k, p.t, p.h});
  }
  args.merged_out = TensorView::Dense(r.out.data(), DType::kF32, {p.t, p.h, p.d});
  if (with_lse) args.merged_lse = TensorView::Dense(r.lse.data(), DType::kF32, {p.t, p.h});
  r.status = dynattn::MergeStates(args);
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = "sizes differ";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *why = "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
      return false;
    }
  }
  return true;
}

Keys RandomParts(std::mt19937_64& rng, Parts* p) {
  std::uniform_int_distribution<int> keys_per_row(0, 24);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::normal_distribution<double> normal;
  const double sigmas[] = {0.3, 1.0, 4.0};
  p->Resize();
  Keys keys;
  keys.scores.resize(p->Rows());
  keys.values.resize(p->Rows());
  keys.part.resize(p->Rows());
  for (int64_t row = 0; row < p->Rows(); ++row) {
    // One row in eight has no keys at all: every part of it is empty.
    const int n = rng() % 8 == 0 ? 0 : keys_per_row(rng);
    const double offset = 4 * uniform(rng), sigma = sigmas[rng() % 3];
    for (int j = 0; j < n; ++j) {
      keys.scores[row].push_back(offset + sigma * normal(rng));
      keys.part[row].push_back(static_cast<int>(rng() % p->k));
      for (int64_t e = 0; e < p->d; ++e) keys.values[row].push_back(normal(rng));
    }
    for (int64_t k = 0; k < p->k; ++k) {
      double m = -kInfD;
      for (int j = 0; j < n; ++j) {
        if (keys.part[row][j] == k) m = std::max(m, keys.scores[row][j]);
      }
      const int64_t at = k * p->Rows() + row;
      if (m == -kInfD) {
        // Empty part: lse -inf (sometimes +inf, as FlashAttention-2 reports it), max -inf
        // (sometimes a -FLT_MAX clamp) with sum 0; garbage vectors that must be ignored.
        p->lse[at] = rng() % 4 == 0 ? kInf : -kInf;
        p->max[at] = rng() % 4 == 0 ? -std::numeric_limits<float>::max() : -kInf;
        for (int64_t e = 0; e < p->d; ++e) {
          p->out[at * p->d + e] = rng() % 2 ? 0.0f : static_cast<float>(1e3 * normal(rng));
          p->acc[at * p->d + e] = rng() % 2 ? 0.0f : static_cast<float>(1e3 * normal(rng));
        }
        continue;
      }
      // Any reference at or above the part's maximum is exact; sometimes use one above it.
      if (rng() % 4 == 0) m += 2 * (uniform(rng) + 1);
      double l = 0;
      std::vector<double> a(p->d, 0.0);
      for (int j = 0; j < n; ++j) {
        if (keys.part[row][j] != k) continue;
        const double w = std::exp(keys.scores[row][j] - m);
        l += w;
        for (int64_t e = 0; e < p->d; ++e) a[e] += w * keys.values[row][j * p->d + e];
      }
      p->max[at] = static_cast<float>(m);
      p->sum[at] = static_cast<float>(l);
      p->lse[at] = static_cast<float>(m + std::log(l));
      for (int64_t e = 0; e < p->d; ++e) {
        p->acc[at * p->d + e] = static_cast<float>(a[e]);
        p->out[at * p->d + e] = static_cast<float>(a[e] / l);
      }
    }
  }
  return keys;
}

void RandomShape(std::mt19937_64& rng, Parts* p) {
  p->k = 1 + rng() % 6;
  p->t = 1 + rng() % 4;
  p->h = 1 + rng() % 3;
  p->d = 1 + rng() % 9;
}

}  // namespace dynattn_test
