// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// doctest entry point of the test binaries: prints the base seed (DYNATTN_TEST_SEED replays it)
// and exits 77, meson's "skipped", when every test case that ran was skipped.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/support/harness.h"

int main(int argc, char** argv) {
  dynattn_test::PrintBaseSeed();
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases and the like
  return dynattn_test::ExitStatus(status);
}
