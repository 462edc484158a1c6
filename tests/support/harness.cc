// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/harness.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "dynattn/dynattn.h"
#include "hwy/targets.h"
#include "src/dispatch.h"

namespace dynattn_test {
namespace {

int64_t g_forced_target = 0;
int g_cases_run = 0;
int g_cases_skipped = 0;
bool g_current_skipped = false;

/// Counts test cases and skips for ExitStatus, and names the seed under every failed check so
/// that each failure message carries what replays it.
class HarnessListener : public doctest::IReporter {
 public:
  explicit HarnessListener(const doctest::ContextOptions&) {}

  void test_case_start(const doctest::TestCaseData&) override {
    ++g_cases_run;
    g_current_skipped = false;
  }
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void log_assert(const doctest::AssertData& data) override {
    if (!data.m_failed) return;
    std::printf("  (replay with DYNATTN_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(BaseSeed()));
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {
    std::printf("  (replay with DYNATTN_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(BaseSeed()));
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("dynattn_harness", 1, HarnessListener);

}  // namespace

uint64_t BaseSeed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("DYNATTN_TEST_SEED")) {
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    }
    return static_cast<uint64_t>(std::random_device{}()) << 20;
  }();
  return seed;
}

void PrintBaseSeed() {
  std::printf("base seed %llu (DYNATTN_TEST_SEED=%llu replays this run)\n",
              static_cast<unsigned long long>(BaseSeed()),
              static_cast<unsigned long long>(BaseSeed()));
  std::fflush(stdout);
}

int64_t TargetFromEnvironment() {
  const char* name = std::getenv("DYNATTN_TEST_TARGET");
  if (name == nullptr || *name == '\0') return 0;
  const dynattn::Status status = dynattn::ForceCpuTarget(name);  // the library's name rules
  if (!status.ok()) {
    std::fprintf(stderr, "DYNATTN_TEST_TARGET: %s\n", status.message().c_str());
    std::exit(2);
  }
  return hwy::SupportedTargets();  // the one target just forced
}

void SkipTest(const std::string& why) {
  if (!g_current_skipped) ++g_cases_skipped;
  g_current_skipped = true;
  std::printf("SKIPPED: %s\n", why.c_str());
}

int ExitStatus(int run_status) {
  if (run_status == 0 && g_cases_run > 0 && g_cases_skipped == g_cases_run) {
    std::printf("all %d test case(s) skipped: exit status %d\n", g_cases_run, kExitSkipped);
    return kExitSkipped;
  }
  if (g_cases_skipped > 0) {
    std::printf("%d of %d test case(s) skipped\n", g_cases_skipped, g_cases_run);
  }
  return run_status;
}

ForcedTarget::ForcedTarget(int64_t target) : previous_(g_forced_target) { Set(target); }

ForcedTarget::~ForcedTarget() { Set(previous_); }

void ForcedTarget::Set(int64_t target) {
  g_forced_target = target;
  hwy::SetSupportedTargetsForTest(target);
  // The dispatch table resolves its CPU rows once; forcing a target fills them again.
  dynattn::internal::RefillCpuRows();
}

int64_t ForcedTarget::Current() { return g_forced_target; }

}  // namespace dynattn_test
