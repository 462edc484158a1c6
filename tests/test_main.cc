// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// doctest entry point of the test binaries: prints the base seed (DYNATTN_TEST_SEED replays it),
// forces the target DYNATTN_TEST_TARGET names, and exits 77, meson's "skipped", when every test
// case that ran was skipped.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "dynattn/dynattn.h"
#include "tests/support/harness.h"

int main(int argc, char** argv) {
  dynattn_test::PrintBaseSeed();
  const dynattn_test::ForcedTarget forced(dynattn_test::TargetFromEnvironment());
  if (dynattn_test::ForcedTarget::Current() != 0) {
    std::printf("kernels forced to %s\n", dynattn::CpuTargetName());
    std::fflush(stdout);
  }
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases and the like
  return dynattn_test::ExitStatus(status);
}
