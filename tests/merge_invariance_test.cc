// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// MergeStates (spec unified-and-ksana.md §1.4, §3, §6.5) is bitwise invariant: under any
// permutation of the parts (ties included, and where the order of the sums would show), under
// adding empty parts in any of their encodings, and for a large batch of rows merged in parallel
// against each row merged alone.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/support/merge_parts.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

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
}

}  // namespace
}  // namespace dynattn_test
