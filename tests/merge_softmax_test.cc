// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// MergeStates (spec unified-and-ksana.md §1.4, §3, §6.5) against the softmax: random key sets
// split into parts and merged back, against the float64 softmax over all keys and the exact merge
// of the float inputs rounded once, in both forms; rows whose parts are all empty; the spec's
// worked example; FlashInfer's base-2 LSE. Outputs are poisoned with NaN before each call so an
// element the library forgets to write shows.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/support/merge_parts.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

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
}

}  // namespace
}  // namespace dynattn_test
