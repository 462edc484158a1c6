// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Concurrent use: different ops called at once from several threads, each with its own
// RunOptions, give the same bits as the same calls run one after another; and a call's results
// do not change while another thread's calls keep changing the thread count (which resizes
// oneTBB's process-wide worker limit for oversubscribed calls).

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/reference/case_gen.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

const char* const kOps[] = {"key_value_cache", "multi_head_attention", "multi_head_cache_attention",
                            "unified_attention"};

/// A random case of `op` big enough that calls overlap in time (several key splits).
Case ConcurrencyCase(const std::string& op, uint64_t seed) {
  dynattn_ref::GenOptions options;
  options.max_batch = 4;
  options.max_context = 1500;
  if (op == "unified_attention") return dynattn_ref::RandomUnifiedCase(seed, options);
  return dynattn_ref::RandomCase(op, seed, options);
}

/// Every output and in/out buffer of `got` equals `want`, bit for bit.
void CheckSame(const LibResult& want, const LibResult& got, const std::string& what) {
  INFO(what);
  REQUIRE_MESSAGE(got.status.ok(), got.status.message());
  std::string why;
  for (auto member : {&LibResult::cache, &LibResult::scale, &LibResult::key, &LibResult::value,
                      &LibResult::attn_output, &LibResult::lse}) {
    CHECK_MESSAGE(SameBytes(want.*member, got.*member, &why), why);
  }
}

dynattn::RunOptions Threads(int n) {
  dynattn::RunOptions options;
  options.num_threads = n;
  return options;
}

TEST_SUITE("concurrency") {
  TEST_CASE("different ops on several threads at once give the serial bits") {
    std::vector<Case> cases;
    std::vector<LibResult> serial;
    for (int k = 0; k < 8; ++k) {
      cases.push_back(ConcurrencyCase(kOps[k % 4], BaseSeed() + k));
      serial.push_back(RunLibrary(cases.back(), Threads(1)));
      REQUIRE_MESSAGE(serial.back().status.ok(), serial.back().status.message());
    }
    // Eight threads, each with its own op and thread count (0 = all cores, up to 3: more than
    // this machine's cores), three rounds each.
    std::vector<LibResult> concurrent(cases.size() * 3);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < cases.size(); ++k) {
      threads.emplace_back([&, k] {
        for (int round = 0; round < 3; ++round) {
          concurrent[k * 3 + round] = RunLibrary(cases[k], Threads((k + round) % 4));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < concurrent.size(); ++i) {
      CheckSame(serial[i / 3], concurrent[i],
                "case " + std::to_string(i / 3) + " (" + cases[i / 3].op + "), round " +
                    std::to_string(i % 3));
    }
  }

  TEST_CASE("a call's bits do not change while another thread changes the thread count") {
    const Case steady = ConcurrencyCase("multi_head_cache_attention", BaseSeed() + 100);
    const Case churn = ConcurrencyCase("unified_attention", BaseSeed() + 101);
    const LibResult want = RunLibrary(steady, Threads(2));
    REQUIRE_MESSAGE(want.status.ok(), want.status.message());
    std::atomic<bool> done{false};
    std::atomic<int> churn_failures{0};
    std::thread changer([&] {
      // 1, 4 (oversubscribed: raises the process-wide worker limit for its loops), 2, 0, ...
      for (int i = 1; !done.load(); ++i) {
        if (!RunLibrary(churn, Threads(i % 5)).status.ok()) ++churn_failures;
      }
    });
    for (int round = 0; round < 6; ++round) {
      CheckSame(want, RunLibrary(steady, Threads(2)), "round " + std::to_string(round));
    }
    done = true;
    changer.join();
    CHECK(churn_failures.load() == 0);
  }
}

}  // namespace
}  // namespace dynattn_test
