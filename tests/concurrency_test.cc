// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Concurrent use: different ops called at once from several threads, each with its own
// RunOptions, give the same bits as the same calls run one after another; and a call's results
// do not change while another thread's calls keep changing the thread count (which resizes
// oneTBB's process-wide worker limit for oversubscribed calls).

#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "src/thread_pinning.h"
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

/// The only CPU of the calling thread's affinity mask, or -1 when it may run on several.
int PinnedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) {
    return -1;
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return -1;
}

TEST_SUITE("concurrency") {
  TEST_CASE("a pinning arena runs slot i on the i-th CPU and gives the caller its mask back") {
    cpu_set_t before;
    CPU_ZERO(&before);
    REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(before), &before) == 0);
    if (CPU_COUNT(&before) < 2) {
      MESSAGE("a single CPU: there is nothing to pin");
      return;
    }
    tbb::task_arena arena(2);
    arena.initialize();
    dynattn::internal::ThreadPinning pinning(arena);
    REQUIRE(pinning.cpus().size() >= 2);
    std::array<std::atomic<int>, 2> cpu_of_slot = {-2, -2};
    std::atomic<int> unpinned{0};
    arena.execute([&] {
      tbb::parallel_for(0, 64, [&](int) {
        const int slot = tbb::this_task_arena::current_thread_index();
        const int cpu = PinnedCpu();
        if (cpu < 0 || slot < 0 || slot > 1) {
          ++unpinned;
        } else {
          cpu_of_slot[static_cast<size_t>(slot)] = cpu;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      });
    });
    CHECK(unpinned == 0);
    CHECK(cpu_of_slot[0] == pinning.cpus()[0]);
    if (cpu_of_slot[1] != -2) CHECK(cpu_of_slot[1] == pinning.cpus()[1]);  // the worker came
    cpu_set_t after;
    CPU_ZERO(&after);
    REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(after), &after) == 0);
    CHECK(CPU_EQUAL(&before, &after));
  }

  TEST_CASE("a Context with pinned threads gives the bits of an unpinned one") {
    for (uint64_t k = 0; k < 4; ++k) {
      const Case c = ConcurrencyCase(kOps[k], BaseSeed() + 40 + k);
      const LibResult unpinned = RunLibrary(c, Threads(2));
      REQUIRE_MESSAGE(unpinned.status.ok(), unpinned.status.message());
      dynattn::RunOptions pinned = Threads(2);
      pinned.pin_threads = true;
      CheckSame(unpinned, RunLibrary(c, pinned), c.op + " pinned");
    }
  }

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

  TEST_CASE("a Context used by two threads at once refuses the second caller") {
    // One MHA step long enough to overlap (a 64-token prompt over 1024 keys), run in a loop by
    // two threads on one Context, each into its own output: every Run either gives the serial
    // bits or FailedPrecondition naming the rule, never corrupted buffers.
    constexpr int kTokens = 64, kKeys = 1024, kHeads = 4, kDim = 64;
    std::mt19937 rng(static_cast<uint32_t>(BaseSeed()));
    std::normal_distribution<float> normal;
    std::vector<float> q(kTokens * kHeads * kDim), k(kKeys * kHeads * kDim), v(k.size());
    for (std::vector<float>* t : {&q, &k, &v}) {
      for (float& x : *t) x = normal(rng);
    }
    int64_t seqstarts[] = {0, kTokens}, kvstarts[] = {0, kKeys}, zero = 0;
    int64_t max_seqlen = kTokens, max_kvlen = kKeys;
    std::vector<float> outputs[2] = {std::vector<float>(q.size()), std::vector<float>(q.size())};
    dynattn::MultiHeadAttentionArgs args[2];
    for (int i = 0; i < 2; ++i) {
      dynattn::MultiHeadAttentionArgs& a = args[i];
      a.query = dynattn::TensorView::Dense(q.data(), dynattn::DType::kF32, {kTokens, kHeads, kDim});
      a.key = dynattn::TensorView::Dense(k.data(), dynattn::DType::kF32, {kKeys, kHeads, kDim});
      a.value = dynattn::TensorView::Dense(v.data(), dynattn::DType::kF32, {kKeys, kHeads, kDim});
      a.seqstarts = dynattn::TensorView::Dense(seqstarts, dynattn::DType::kI64, {2});
      a.kvstarts = dynattn::TensorView::Dense(kvstarts, dynattn::DType::kI64, {2});
      a.decoding_batches = dynattn::TensorView::Dense(&zero, dynattn::DType::kI64, {});
      a.max_seqlen = dynattn::TensorView::Dense(&max_seqlen, dynattn::DType::kI64, {});
      a.max_kvlen = dynattn::TensorView::Dense(&max_kvlen, dynattn::DType::kI64, {});
      a.attn_output = dynattn::TensorView::Dense(outputs[i].data(), dynattn::DType::kF32,
                                                 {kTokens, kHeads, kDim});
    }
    const dynattn::AttentionAttrs attrs{
        .num_heads = kHeads, .num_kv_heads = kHeads, .head_dim = kDim, .is_causal = true};
    dynattn::Plan plan;
    REQUIRE(dynattn::PlanMultiHeadAttention(attrs, args[0], &plan).ok());
    dynattn::Context context(dynattn::ContextOptions{.num_threads = 1});
    REQUIRE(dynattn::RunMultiHeadAttention(plan, args[0], &context).ok());
    const std::vector<float> serial = outputs[0];
    std::atomic<int> refused{0}, wrong{0}, other{0};
    std::atomic<bool> stop{false};
    auto loop = [&](int i) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stop && std::chrono::steady_clock::now() < deadline) {
        std::fill(outputs[i].begin(), outputs[i].end(), std::nanf(""));
        const dynattn::Status s = dynattn::RunMultiHeadAttention(plan, args[i], &context);
        if (s.ok()) {
          if (outputs[i] != serial) ++wrong;
        } else if (s.code() == dynattn::StatusCode::kFailedPrecondition &&
                   s.message() ==
                       "context: is running another call: a Context runs one call at "
                       "a time (give each thread its own)") {
          if (++refused >= 20) stop = true;
        } else {
          ++other;
        }
      }
    };
    std::thread first(loop, 0), second(loop, 1);
    first.join();
    second.join();
    CHECK(refused >= 20);
    CHECK(wrong == 0);
    CHECK(other == 0);
    // Once free, the Context serves calls again.
    CHECK(dynattn::RunMultiHeadAttention(plan, args[1], &context).ok());
    CHECK(outputs[1] == serial);
  }
}

}  // namespace
}  // namespace dynattn_test
