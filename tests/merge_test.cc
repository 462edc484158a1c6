// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// MergeStates (spec unified-and-ksana.md §1.4, §3, §6.5): random key sets split into parts and
// merged back, against the float64 softmax over all keys; bitwise invariance under permutations
// of the parts and under adding empty parts; the spec's worked example; FlashInfer's base-2 LSE;
// and every validation rule, with every buffer unchanged after a rejected call. Outputs are
// poisoned with NaN before each call so an element the library forgets to write shows.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn::DType;
using dynattn::MergeStatesArgs;
using dynattn::Status;
using dynattn::TensorView;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();

/// A quiet NaN with a payload no arithmetic produces: what every output holds before a call.
float Poison() {
  const uint32_t bits = 0x7fc0beefu;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

/// K parts of T x H rows of D elements in both forms (each form is filled by the generators).
struct Parts {
  int64_t k = 0, t = 0, h = 0, d = 0;
  std::vector<float> out, lse;       // normalised form
  std::vector<float> acc, max, sum;  // unnormalised form

  int64_t Rows() const { return t * h; }
  void Resize() {
    out.assign(k * Rows() * d, 0.0f);
    acc.assign(k * Rows() * d, 0.0f);
    lse.assign(k * Rows(), -kInf);
    max.assign(k * Rows(), -kInf);
    sum.assign(k * Rows(), 0.0f);
  }
};

/// What one MergeStates call produced.
struct Merged {
  Status status;
  std::vector<float> out, lse;
};

enum class Form { kNormalised, kUnnormalised };
const char* FormName(Form form) {
  return form == Form::kNormalised ? "normalised (out, lse)" : "unnormalised (acc, max, sum)";
}

Merged Merge(Parts& p, Form form, bool with_lse = true) {
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

/// The keys of every row, in double: what the parts were made from.
struct Keys {
  std::vector<std::vector<double>> scores;  // [row][j]
  std::vector<std::vector<double>> values;  // [row][j * D + d]
  std::vector<std::vector<int>> part;       // [row][j]: the part key j went to
};

/// Direct softmax over all keys of `row` in double: out (D) and natural-log lse.
void DirectSoftmax(const Keys& keys, int64_t row, int64_t d, std::vector<double>* out,
                   double* lse) {
  const std::vector<double>& s = keys.scores[row];
  out->assign(d, 0.0);
  if (s.empty()) {
    *lse = -kInfD;
    return;
  }
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp(s[j] - m);
    z += p;
    for (int64_t e = 0; e < d; ++e) (*out)[e] += p * keys.values[row][j * d + e];
  }
  for (double& x : *out) x /= z;
  *lse = m + std::log(z);
}

/// Random rows whose keys are split among `p->k` parts at random (so some parts are empty), and
/// each part's state in both forms, computed in double and rounded to float. Scores are
/// N(offset, sigma) with |offset| <= 4, sigma <= 4, so every |lse| stays below about 25.
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

/// Checks a merge against the direct softmax, row by row.
///
/// Tolerance: every float input carries a relative rounding error <= u = 2^-24. A part's lse
/// (or max) off by |lse| u moves its weight exp(lse_k - m) by a relative 2 |lse| u <= 50 u, which
/// moves the output, a weighted mean of the part outputs, by at most about 2 * 50 u * max|v|;
/// the part vectors and the final rounding add a few u * max|v|. With |lse| < 25 that is
/// < 110 u ~ 6.6e-6 of max|v|, so 1e-5 * max|v| holds with margin and still catches a wrong
/// weight, a lost part or a missing division. The merged lse is off by at most ~3 |lse| u, so
/// 1e-5 * max(1, |lse|) holds too.
void ExpectMatchesReference(const Keys& keys, const Parts& p, const Merged& r,
                            const std::string& what) {
  REQUIRE_MESSAGE(r.status.ok(), what << ": " << r.status.message());
  std::vector<double> ref;
  for (int64_t row = 0; row < p.Rows(); ++row) {
    double ref_lse = 0;
    DirectSoftmax(keys, row, p.d, &ref, &ref_lse);
    if (keys.scores[row].empty()) {
      CHECK_MESSAGE(r.lse[row] == -kInf, what << " row " << row << ": lse " << r.lse[row]);
      for (int64_t e = 0; e < p.d; ++e) {
        CHECK_MESSAGE(r.out[row * p.d + e] == 0.0f,
                      what << " row " << row << ": out " << r.out[row * p.d + e]);
      }
      continue;
    }
    double scale = 0;
    for (double v : keys.values[row]) scale = std::max(scale, std::fabs(v));
    for (int64_t e = 0; e < p.d; ++e) {
      const double got = r.out[row * p.d + e];
      CHECK_MESSAGE(std::fabs(got - ref[e]) <= 1e-5 * scale,
                    what << " row " << row << " element " << e << ": got " << got << ", want "
                         << ref[e] << " (max |v| " << scale << ")");
    }
    CHECK_MESSAGE(std::fabs(r.lse[row] - ref_lse) <= 1e-5 * std::max(1.0, std::fabs(ref_lse)),
                  what << " row " << row << ": lse " << r.lse[row] << ", want " << ref_lse);
  }
}

/// Checks that a merge is the exact merge of its float inputs rounded once: the §1.4 algebra in
/// long double, written independently of the library (index order, no sorting, empty parts
/// skipped by the documented rule). A correct result is within half an ulp of it plus the
/// long-double and double summation noise (~1e-15 of the terms' magnitude); a weight or a sum
/// taken in float would be off by ~1e-7 of the magnitude, far more than allowed.
void ExpectRoundedOnce(const Parts& p, Form form, const Merged& r, const std::string& what) {
  REQUIRE_MESSAGE(r.status.ok(), what << ": " << r.status.message());
  const bool normalised = form == Form::kNormalised;
  for (int64_t row = 0; row < p.Rows(); ++row) {
    long double m = -INFINITY;
    for (int64_t k = 0; k < p.k; ++k) {
      const int64_t at = k * p.Rows() + row;
      const bool empty = normalised ? std::isinf(p.lse[at]) : p.sum[at] == 0;
      if (!empty) m = std::max<long double>(m, normalised ? p.lse[at] : p.max[at]);
    }
    if (m == -INFINITY) continue;  // all empty: checked elsewhere
    long double l = 0, magnitude = 0;
    std::vector<long double> a(p.d, 0.0L);
    for (int64_t k = 0; k < p.k; ++k) {
      const int64_t at = k * p.Rows() + row;
      const bool empty = normalised ? std::isinf(p.lse[at]) : p.sum[at] == 0;
      if (empty) continue;
      const long double w = std::exp((normalised ? p.lse[at] : p.max[at]) - m);
      l += w * (normalised ? 1.0L : p.sum[at]);
      for (int64_t e = 0; e < p.d; ++e) {
        const float v = normalised ? p.out[at * p.d + e] : p.acc[at * p.d + e];
        a[e] += w * v;
        magnitude = std::max(magnitude, std::fabs(w * v));
      }
    }
    for (int64_t e = 0; e < p.d; ++e) {
      const long double want = a[e] / l, got = r.out[row * p.d + e];
      CHECK_MESSAGE(
          std::fabs(got - want) <= std::ldexp(std::fabs(want), -24) + 1e-13L * magnitude * p.k / l,
          what << " row " << row << " element " << e << ": got " << got << ", want "
               << static_cast<double>(want));
    }
    const long double want_lse = m + std::log(l);
    CHECK_MESSAGE(std::fabs(r.lse[row] - want_lse) <=
                      std::ldexp(std::fabs(want_lse), -24) + 1e-13L * (1 + std::fabs(m)),
                  what << " row " << row << ": lse " << r.lse[row] << ", want "
                       << static_cast<double>(want_lse));
  }
}

/// `p` with its parts in the order `perm` (part i of the result is part perm[i] of `p`).
Parts Permuted(const Parts& p, const std::vector<int64_t>& perm) {
  Parts q = p;
  q.k = static_cast<int64_t>(perm.size());
  q.Resize();
  const int64_t rows = p.Rows(), d = p.d;
  for (int64_t i = 0; i < q.k; ++i) {
    const int64_t src = perm[i];
    std::copy_n(p.out.begin() + src * rows * d, rows * d, q.out.begin() + i * rows * d);
    std::copy_n(p.acc.begin() + src * rows * d, rows * d, q.acc.begin() + i * rows * d);
    std::copy_n(p.lse.begin() + src * rows, rows, q.lse.begin() + i * rows);
    std::copy_n(p.max.begin() + src * rows, rows, q.max.begin() + i * rows);
    std::copy_n(p.sum.begin() + src * rows, rows, q.sum.begin() + i * rows);
  }
  return q;
}

/// Makes part `dst` of every row a copy of part `src`, fully or in (m, l) only, to create ties.
void CopyPart(Parts* p, int64_t src, int64_t dst, bool whole) {
  const int64_t rows = p->Rows(), d = p->d;
  std::copy_n(p->lse.begin() + src * rows, rows, p->lse.begin() + dst * rows);
  std::copy_n(p->max.begin() + src * rows, rows, p->max.begin() + dst * rows);
  std::copy_n(p->sum.begin() + src * rows, rows, p->sum.begin() + dst * rows);
  if (whole) {
    std::copy_n(p->out.begin() + src * rows * d, rows * d, p->out.begin() + dst * rows * d);
    std::copy_n(p->acc.begin() + src * rows * d, rows * d, p->acc.begin() + dst * rows * d);
  }
}

/// Merges `p` and 4 random permutations of its parts in both forms, and checks that every
/// permutation gives the bits of the original order; `per_trial` sees each permuted copy.
void CheckPermutations(Parts& p, uint64_t seed, std::mt19937_64* rng,
                       const std::function<void(const Parts&)>& per_trial = {}) {
  std::vector<int64_t> perm(p.k);
  std::iota(perm.begin(), perm.end(), 0);
  for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
    const Merged base = Merge(p, form);
    REQUIRE(base.status.ok());
    for (int trial = 0; trial < 4; ++trial) {
      std::shuffle(perm.begin(), perm.end(), *rng);
      Parts q = Permuted(p, perm);
      const Merged r = Merge(q, form);
      REQUIRE(r.status.ok());
      std::string why;
      CHECK_MESSAGE(SameBits(base.out, r.out, &why), FormName(form)
                                                         << ", seed " << seed << ", out: " << why);
      CHECK_MESSAGE(SameBits(base.lse, r.lse, &why), FormName(form)
                                                         << ", seed " << seed << ", lse: " << why);
      if (per_trial) per_trial(q);
    }
  }
}

TEST_SUITE("merge") {
  TEST_CASE("random splits of a key set merge to the float64 softmax over all keys, rounded once") {
    for (int iter = 0; iter < 200; ++iter) {
      const uint64_t seed = BaseSeed() + 100 + iter;
      std::mt19937_64 rng(seed);
      Parts p;
      RandomShape(rng, &p);
      const Keys keys = RandomParts(rng, &p);
      for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
        const std::string what = std::string(FormName(form)) + ", seed " + std::to_string(seed);
        const Merged r = Merge(p, form);
        ExpectMatchesReference(keys, p, r, what);
        ExpectRoundedOnce(p, form, r, what);
        // Without merged_lse the output is the same, bit for bit.
        const Merged with = Merge(p, form), without = Merge(p, form, /*with_lse=*/false);
        std::string why;
        CHECK_MESSAGE(SameBits(with.out, without.out, &why), what << ": " << why);
      }
    }
  }

  TEST_CASE("both forms give the same result within tolerance") {
    for (int iter = 0; iter < 200; ++iter) {
      const uint64_t seed = BaseSeed() + 1000 + iter;
      std::mt19937_64 rng(seed);
      Parts p;
      RandomShape(rng, &p);
      const Keys keys = RandomParts(rng, &p);
      const Merged a = Merge(p, Form::kNormalised), b = Merge(p, Form::kUnnormalised);
      REQUIRE(a.status.ok());
      REQUIRE(b.status.ok());
      for (int64_t row = 0; row < p.Rows(); ++row) {
        double scale = 0;
        for (double v : keys.values[row]) scale = std::max(scale, std::fabs(v));
        for (int64_t e = 0; e < p.d; ++e) {
          const float x = a.out[row * p.d + e], y = b.out[row * p.d + e];
          CHECK_MESSAGE(std::fabs(x - y) <= 2e-5 * scale,
                        "seed " << seed << " row " << row << ": " << x << " vs " << y);
        }
        const float x = a.lse[row], y = b.lse[row];
        CHECK_MESSAGE((x == y || std::fabs(x - y) <= 2e-5 * std::max(1.0f, std::fabs(x))),
                      "seed " << seed << " row " << row << ": lse " << x << " vs " << y);
      }
    }
  }

  TEST_CASE("any permutation of the parts gives the same bits") {
    for (int iter = 0; iter < 200; ++iter) {
      const uint64_t seed = BaseSeed() + 2000 + iter;
      std::mt19937_64 rng(seed);
      Parts p;
      RandomShape(rng, &p);
      p.k = 2 + rng() % 7;
      RandomParts(rng, &p);
      // Ties: identical parts, and parts that share (m, l) but differ in their vectors.
      if (rng() % 2) CopyPart(&p, 0, 1, /*whole=*/rng() % 2);
      CheckPermutations(p, seed, &rng);
    }
  }

  TEST_CASE("any permutation gives the same bits where the order of the sums matters") {
    // Parts that tie on (lse, max, sum) with vectors of mixed magnitudes (up to 2^60) cancel in
    // double, so a sum taken in index order, or an order that ignores the vectors, changes the
    // rounded result. The test counts how often index order would have differed, to prove it
    // can fail.
    int64_t order_sensitive = 0;
    for (int iter = 0; iter < 100; ++iter) {
      const uint64_t seed = BaseSeed() + 2500 + iter;
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<double> uniform(1, 2);
      Parts p;
      RandomShape(rng, &p);
      p.k = 3 + rng() % 6;
      p.Resize();
      for (int64_t row = 0; row < p.Rows(); ++row) {
        const float m = static_cast<float>(uniform(rng)), l = static_cast<float>(uniform(rng));
        for (int64_t k = 0; k < p.k; ++k) {
          p.lse[k * p.Rows() + row] = p.max[k * p.Rows() + row] = m;
          p.sum[k * p.Rows() + row] = l;
        }
      }
      // Each element: pairs +B, -B with B ~ 2^60 that cancel exactly, and small values that a
      // partial sum holding B absorbs.
      std::vector<float> column(p.k);
      for (int64_t i = 0; i < p.Rows() * p.d; ++i) {
        const int64_t row = i / p.d, e = i % p.d;
        const float big = static_cast<float>(std::ldexp(uniform(rng), 60));
        const int64_t pairs = 1 + rng() % (p.k / 2);
        for (int64_t k = 0; k < p.k; ++k) {
          column[k] = k < 2 * pairs ? (k % 2 ? -big : big)
                                    : static_cast<float>(std::ldexp(uniform(rng), rng() % 8));
        }
        std::shuffle(column.begin(), column.end(), rng);
        for (int64_t k = 0; k < p.k; ++k) {
          p.out[(k * p.Rows() + row) * p.d + e] = p.acc[(k * p.Rows() + row) * p.d + e] = column[k];
        }
      }
      CheckPermutations(p, seed, &rng, [&](const Parts& q) {
        // Equal weights: an index-order merge is the plain sum in index order.
        for (int64_t i = 0; i < p.Rows() * p.d; ++i) {
          const int64_t row = i / p.d, e = i % p.d;
          double sum_p = 0, sum_q = 0;
          for (int64_t k = 0; k < p.k; ++k) {
            sum_p += p.out[(k * p.Rows() + row) * p.d + e];
            sum_q += q.out[(k * p.Rows() + row) * p.d + e];
          }
          if (static_cast<float>(sum_p) != static_cast<float>(sum_q)) ++order_sensitive;
        }
      });
    }
    CHECK_MESSAGE(order_sensitive > 100,
                  "only " << order_sensitive << " order-sensitive elements: a weak test");
  }

  TEST_CASE("adding an empty part changes no bit") {
    for (int iter = 0; iter < 200; ++iter) {
      const uint64_t seed = BaseSeed() + 3000 + iter;
      std::mt19937_64 rng(seed);
      Parts p;
      RandomShape(rng, &p);
      RandomParts(rng, &p);
      // Part k of `with` is empty in every row, in each of the empty encodings.
      std::vector<int64_t> perm(p.k);
      std::iota(perm.begin(), perm.end(), 0);
      const int64_t at = static_cast<int64_t>(rng() % (p.k + 1));
      perm.insert(perm.begin() + at, 0);
      Parts with = Permuted(p, perm);
      std::normal_distribution<double> normal;
      const int64_t rows = p.Rows();
      for (int64_t row = 0; row < rows; ++row) {
        with.lse[at * rows + row] = rng() % 2 ? kInf : -kInf;
        const float clamps[] = {-kInf, -std::numeric_limits<float>::max(), 7.5f};
        with.max[at * rows + row] = clamps[rng() % 3];
        with.sum[at * rows + row] = 0.0f;
        for (int64_t e = 0; e < p.d; ++e) {
          with.out[(at * rows + row) * p.d + e] = static_cast<float>(100 * normal(rng));
          with.acc[(at * rows + row) * p.d + e] = static_cast<float>(100 * normal(rng));
        }
      }
      for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
        const Merged a = Merge(p, form), b = Merge(with, form);
        REQUIRE(a.status.ok());
        REQUIRE_MESSAGE(b.status.ok(), b.status.message());
        std::string why;
        CHECK_MESSAGE(SameBits(a.out, b.out, &why), FormName(form)
                                                        << ", seed " << seed << ", out: " << why);
        CHECK_MESSAGE(SameBits(a.lse, b.lse, &why), FormName(form)
                                                        << ", seed " << seed << ", lse: " << why);
      }
    }
  }

  TEST_CASE("rows whose parts are all empty give out 0 and lse -inf, never NaN") {
    Parts p;
    p.k = 3;
    p.t = 2;
    p.h = 2;
    p.d = 5;
    p.Resize();
    // Empty in every encoding: lse -inf / +inf; max -inf / -FLT_MAX / finite with sum 0.
    const float lses[] = {-kInf, kInf, -kInf};
    const float maxes[] = {-kInf, -std::numeric_limits<float>::max(), 3.0f};
    for (int64_t k = 0; k < p.k; ++k) {
      for (int64_t row = 0; row < p.Rows(); ++row) {
        p.lse[k * p.Rows() + row] = lses[(k + row) % 3];
        p.max[k * p.Rows() + row] = maxes[(k + row) % 3];
      }
    }
    for (size_t i = 0; i < p.out.size(); ++i) p.out[i] = p.acc[i] = static_cast<float>(i % 7);
    for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
      const Merged r = Merge(p, form);
      REQUIRE_MESSAGE(r.status.ok(), r.status.message());
      for (float x : r.out) CHECK_MESSAGE(x == 0.0f, FormName(form) << ": out " << x);
      for (float x : r.lse) CHECK_MESSAGE(x == -kInf, FormName(form) << ": lse " << x);
    }
    // One part (the middle one) becomes non-empty in row 1 only: that row is exactly that part.
    p.lse[1 * p.Rows() + 1] = 0.25f;
    p.max[1 * p.Rows() + 1] = 0.25f;
    p.sum[1 * p.Rows() + 1] = 1.0f;
    const Merged r = Merge(p, Form::kNormalised), u = Merge(p, Form::kUnnormalised);
    REQUIRE(r.status.ok());
    REQUIRE(u.status.ok());
    CHECK(r.lse[1] == 0.25f);
    CHECK(u.lse[1] == 0.25f);
    for (int64_t e = 0; e < p.d; ++e) {
      CHECK(r.out[p.d + e] == p.out[(p.Rows() + 1) * p.d + e]);
      CHECK(u.out[p.d + e] == p.acc[(p.Rows() + 1) * p.d + e]);
    }
    CHECK(r.lse[0] == -kInf);
    CHECK(r.out[0] == 0.0f);
  }

  TEST_CASE("§1.4 worked example: scores {1,2} | {3}, values {10,20} | {30}") {
    const double e1 = std::exp(-1.0);
    const double a1 = 10 * e1 + 20, l1 = e1 + 1;
    Parts p;
    p.k = 2;
    p.t = p.h = p.d = 1;
    p.Resize();
    p.acc = {static_cast<float>(a1), 30.0f};
    p.max = {2.0f, 3.0f};
    p.sum = {static_cast<float>(l1), 1.0f};
    p.out = {static_cast<float>(a1 / l1), 30.0f};
    p.lse = {static_cast<float>(2 + std::log(l1)), 3.0f};
    CHECK(p.lse[0] == doctest::Approx(2.3133).epsilon(1e-4));
    // Direct softmax over {1, 2, 3} in double.
    const double z = std::exp(-2.0) + std::exp(-1.0) + 1;
    const double direct = (10 * std::exp(-2.0) + 20 * std::exp(-1.0) + 30) / z;
    const double direct_lse = 3 + std::log(z);
    for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
      const Merged r = Merge(p, form);
      REQUIRE(r.status.ok());
      INFO(FormName(form));
      CHECK(std::fabs(r.out[0] - 25.752) < 5e-4);  // the spec's 3 decimals
      CHECK(std::fabs(r.lse[0] - 3.4076) < 5e-5);  // the spec's 4 decimals
      CHECK(std::fabs(r.out[0] - direct) <= 1e-5 * 30);
      CHECK(std::fabs(r.lse[0] - direct_lse) <= 1e-5 * 3.5);
    }
  }

  TEST_CASE("FlashInfer base-2 lse: conversion round trip and merging converted inputs") {
    const uint64_t seed = BaseSeed() + 4000;
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    for (float x : {0.0f, -0.0f, -kInf, kInf}) {
      CHECK(dynattn::LseToBase2(dynattn::LseFromBase2(x)) == x);
    }
    CHECK(dynattn::LseFromBase2(1.0f) == static_cast<float>(std::log(2.0)));
    CHECK(dynattn::LseToBase2(static_cast<float>(std::log(8.0))) == doctest::Approx(3.0));
    for (int i = 0; i < 10000; ++i) {
      const float x = static_cast<float>(30 * normal(rng));
      const float y = dynattn::LseToBase2(dynattn::LseFromBase2(x));
      // Two roundings of a relative u = 2^-24 each.
      CHECK_MESSAGE(std::fabs(y - x) <= std::ldexp(std::fabs(x), -23),
                    "seed " << seed << ": " << x << " -> " << y);
    }
    for (int iter = 0; iter < 100; ++iter) {
      const uint64_t s = seed + 1 + iter;
      std::mt19937_64 part_rng(s);
      Parts p;
      RandomShape(part_rng, &p);
      const Keys keys = RandomParts(part_rng, &p);
      // What FlashInfer would report: base-2 lse of each part, in float; converted back here.
      Parts converted = p;
      for (size_t i = 0; i < p.lse.size(); ++i) {
        const float lse2 =
            std::isinf(p.lse[i]) ? p.lse[i] : static_cast<float>(p.lse[i] / dynattn::kLn2);
        converted.lse[i] = dynattn::LseFromBase2(lse2);
      }
      const Merged r = Merge(converted, Form::kNormalised);
      ExpectMatchesReference(keys, converted, r, "base 2, seed " + std::to_string(s));
      std::vector<double> ref;
      for (int64_t row = 0; row < p.Rows(); ++row) {
        double ref_lse = 0;
        DirectSoftmax(keys, row, p.d, &ref, &ref_lse);
        const double ref2 = ref_lse / dynattn::kLn2, got2 = dynattn::LseToBase2(r.lse[row]);
        CHECK_MESSAGE(
            (got2 == ref2 || std::fabs(got2 - ref2) <= 1e-5 * std::max(1.0, std::fabs(ref2))),
            "seed " << s << " row " << row << ": base-2 lse " << got2 << " vs " << ref2);
      }
    }
  }

  TEST_CASE("a large batch (parallel rows) gives the bits of each row merged alone") {
    const uint64_t seed = BaseSeed() + 5000;
    std::mt19937_64 rng(seed);
    Parts p;
    p.k = 5;
    p.t = 96;
    p.h = 8;
    p.d = 64;
    RandomParts(rng, &p);
    for (Form form : {Form::kNormalised, Form::kUnnormalised}) {
      const Merged all = Merge(p, form);
      REQUIRE(all.status.ok());
      int mismatches = 0;
      for (int64_t row = 0; row < p.Rows(); ++row) {
        Parts one;
        one.k = p.k;
        one.t = one.h = 1;
        one.d = p.d;
        one.Resize();
        for (int64_t k = 0; k < p.k; ++k) {
          const int64_t at = k * p.Rows() + row;
          one.lse[k] = p.lse[at];
          one.max[k] = p.max[at];
          one.sum[k] = p.sum[at];
          std::copy_n(p.out.begin() + at * p.d, p.d, one.out.begin() + k * p.d);
          std::copy_n(p.acc.begin() + at * p.d, p.d, one.acc.begin() + k * p.d);
        }
        const Merged r = Merge(one, form);
        REQUIRE(r.status.ok());
        const bool same = std::memcmp(r.out.data(), all.out.data() + row * p.d, 4 * p.d) == 0 &&
                          std::memcmp(&r.lse[0], &all.lse[row], 4) == 0;
        if (!same) ++mismatches;
      }
      CHECK_MESSAGE(mismatches == 0,
                    FormName(form) << ", seed " << seed << ": " << mismatches << " rows differ");
    }
  }

  /// A small valid call of either form, and every buffer it touches.
  struct Call {
    Parts p;
    std::vector<float> merged_out, merged_lse;
    MergeStatesArgs args;

    explicit Call(Form form) {
      p.k = 3;
      p.t = 2;
      p.h = 2;
      p.d = 4;
      std::mt19937_64 rng(BaseSeed() + 7);  // a failure names the seed (harness.h)
      RandomParts(rng, &p);
      merged_out.assign(p.Rows() * p.d, Poison());
      merged_lse.assign(p.Rows(), Poison());
      if (form == Form::kNormalised) {
        args.out = TensorView::Dense(p.out.data(), DType::kF32, {p.k, p.t, p.h, p.d});
        args.lse = TensorView::Dense(p.lse.data(), DType::kF32, {p.k, p.t, p.h});
      } else {
        args.acc = TensorView::Dense(p.acc.data(), DType::kF32, {p.k, p.t, p.h, p.d});
        args.max = TensorView::Dense(p.max.data(), DType::kF32, {p.k, p.t, p.h});
        args.sum = TensorView::Dense(p.sum.data(), DType::kF32, {p.k, p.t, p.h});
      }
      args.merged_out = TensorView::Dense(merged_out.data(), DType::kF32, {p.t, p.h, p.d});
      args.merged_lse = TensorView::Dense(merged_lse.data(), DType::kF32, {p.t, p.h});
    }
    /// Every buffer, as bytes.
    std::vector<uint8_t> Snapshot() const {
      std::vector<uint8_t> bytes;
      for (const std::vector<float>* v :
           {&p.out, &p.lse, &p.acc, &p.max, &p.sum, &merged_out, &merged_lse}) {
        const auto* b = reinterpret_cast<const uint8_t*>(v->data());
        bytes.insert(bytes.end(), b, b + v->size() * sizeof(float));
      }
      return bytes;
    }
  };

  struct Mutation {
    const char* what;
    Form form;
    const char* input;    // the name the error must start with
    const char* mention;  // a substring the message must contain ("" for none)
    std::function<void(Call*)> apply;
    dynattn::StatusCode code = dynattn::StatusCode::kInvalidArgument;
  };

  TEST_CASE("validation: each rule names its input and nothing is written") {
    const Form kN = Form::kNormalised, kU = Form::kUnnormalised;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Element (k=1, t=0, h=1) of a (3, 2, 2) tensor is flat index 1*4 + 0*2 + 1 = 5.
    const std::vector<Mutation> mutations = {
        {"no form", kN, "out", "either", [](Call* c) { c->args.out = c->args.lse = TensorView(); }},
        {"both forms", kN, "acc", "not both",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 2, 2, 4});
           c->args.max = TensorView::Dense(c->p.max.data(), DType::kF32, {3, 2, 2});
           c->args.sum = TensorView::Dense(c->p.sum.data(), DType::kF32, {3, 2, 2});
         }},
        {"out without lse", kN, "lse", "required", [](Call* c) { c->args.lse = TensorView(); }},
        {"lse without out", kN, "out", "required", [](Call* c) { c->args.out = TensorView(); }},
        {"acc without sum", kU, "sum", "required", [](Call* c) { c->args.sum = TensorView(); }},
        {"max alone", kU, "acc", "required",
         [](Call* c) { c->args.acc = c->args.sum = TensorView(); }},
        {"out float16", kN, "out", "float32", [](Call* c) { c->args.out.dtype = DType::kF16; }},
        {"lse int64", kN, "lse", "float32", [](Call* c) { c->args.lse.dtype = DType::kI64; }},
        {"sum float16", kU, "sum", "float32", [](Call* c) { c->args.sum.dtype = DType::kF16; }},
        {"merged_out float16", kN, "merged_out", "float32",
         [](Call* c) { c->args.merged_out.dtype = DType::kF16; }},
        {"merged_lse float16", kU, "merged_lse", "float32",
         [](Call* c) { c->args.merged_lse.dtype = DType::kF16; }},
        {"out rank 3", kN, "out", "(K, T, H, D)",
         [](Call* c) {
           c->args.out = TensorView::Dense(c->p.out.data(), DType::kF32, {3, 4, 4});
         }},
        {"no parts", kN, "out", "K (parts) >= 1",
         [](Call* c) {
           c->args.out = TensorView::Dense(c->p.out.data(), DType::kF32, {0, 2, 2, 4});
           c->args.lse = TensorView::Dense(c->p.lse.data(), DType::kF32, {0, 2, 2});
         }},
        {"no tokens", kU, "acc", "T (tokens) >= 1",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 0, 2, 4});
         }},
        {"no head dim", kU, "acc", "D (head dim) >= 1",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 2, 2, 0});
         }},
        {"lse of other heads", kN, "lse", "(3, 2, 2)",
         [](Call* c) {
           c->args.lse = TensorView::Dense(c->p.lse.data(), DType::kF32, {3, 2, 1});
         }},
        {"max of fewer parts", kU, "max", "(3, 2, 2)",
         [](Call* c) {
           c->args.max = TensorView::Dense(c->p.max.data(), DType::kF32, {2, 2, 2});
         }},
        {"merged_out absent", kN, "merged_out", "required",
         [](Call* c) { c->args.merged_out = TensorView(); }},
        {"merged_out of another D", kN, "merged_out", "(2, 2, 4)",
         [](Call* c) {
           c->args.merged_out = TensorView::Dense(c->merged_out.data(), DType::kF32, {2, 2, 3});
         }},
        {"merged_lse rank 3", kU, "merged_lse", "(T, H)",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->merged_lse.data(), DType::kF32, {2, 2, 1});
         }},
        {"out not dense", kN, "out", "dense", [](Call* c) { c->args.out.strides[3] = 2; }},
        {"sum not dense", kU, "sum", "dense", [](Call* c) { c->args.sum.strides[0] = 8; }},
        {"out null", kN, "out", "null", [](Call* c) { c->args.out.data = nullptr; }},
        {"out on CUDA", kN, "out", "CPU",
         [](Call* c) { c->args.out.device = dynattn::Device::kCuda; },
         dynattn::StatusCode::kUnsupported},
        {"merged_lse on CUDA", kN, "merged_lse", "CPU",
         [](Call* c) { c->args.merged_lse.device = dynattn::Device::kCuda; },
         dynattn::StatusCode::kUnsupported},
        {"merged_out over out", kN, "merged_out", "overlap",
         [](Call* c) {
           c->args.merged_out = TensorView::Dense(c->p.out.data(), DType::kF32, {2, 2, 4});
         }},
        {"merged_lse inside sum", kU, "merged_lse", "overlap",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->p.sum.data() + 3, DType::kF32, {2, 2});
         }},
        {"merged_lse inside merged_out", kN, "merged_lse", "overlap",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->merged_out.data() + 1, DType::kF32, {2, 2});
         }},
        {"NaN in out", kN, "out", "out[1, 0, 1, 2]", [nan](Call* c) { c->p.out[5 * 4 + 2] = nan; }},
        {"inf in out", kN, "out", "finite", [](Call* c) { c->p.out[7] = -kInf; }},
        {"NaN in acc", kU, "acc", "acc[2, 1, 1, 3]", [nan](Call* c) { c->p.acc.back() = nan; }},
        {"inf in acc", kU, "acc", "finite", [](Call* c) { c->p.acc[0] = kInf; }},
        {"NaN in lse", kN, "lse", "lse[1, 0, 1]", [nan](Call* c) { c->p.lse[5] = nan; }},
        {"NaN in max", kU, "max", "max[1, 0, 1]", [nan](Call* c) { c->p.max[5] = nan; }},
        {"+inf max", kU, "max", "-inf", [](Call* c) { c->p.max[5] = kInf; }},
        {"NaN in sum", kU, "sum", "sum[1, 0, 1]", [nan](Call* c) { c->p.sum[5] = nan; }},
        {"negative sum", kU, "sum", ">= 0", [](Call* c) { c->p.sum[5] = -1.0f; }},
        {"-0 is fine but -tiny is not", kU, "sum", ">= 0",
         [](Call* c) {
           c->p.sum[4] = -0.0f;
           c->p.sum[5] = -1e-30f;
         }},
        {"infinite sum", kU, "sum", "finite", [](Call* c) { c->p.sum[5] = kInf; }},
        {"sum > 0 with max -inf", kU, "sum", "where max is -inf",
         [](Call* c) {
           c->p.max[5] = -kInf;
           c->p.sum[5] = 1.0f;
         }},
    };
    for (const Mutation& m : mutations) {
      {
        // The unmutated call is valid (so the error below is the mutation's).
        Call fresh(m.form);
        const Status ok = dynattn::MergeStates(fresh.args);
        REQUIRE_MESSAGE(ok.ok(), m.what << ": base call fails: " << ok.message());
      }
      Call c(m.form);
      m.apply(&c);
      const std::vector<uint8_t> before = c.Snapshot();
      const Status status = dynattn::MergeStates(c.args);
      INFO(m.what << ": " << status.message());
      CHECK(!status.ok());
      CHECK(status.code() == m.code);
      CHECK(status.message().rfind(std::string(m.input) + ": ", 0) == 0);
      CHECK(status.message().find(m.mention) != std::string::npos);
      CHECK(c.Snapshot() == before);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
