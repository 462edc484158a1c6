// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// doctest entry point of the test binaries; prints the seed so any failure can be replayed with
// DYNATTN_TEST_SEED.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/support/run_case.h"

int main(int argc, char** argv) {
  std::printf("base seed %llu (set DYNATTN_TEST_SEED to replay)\n",
              static_cast<unsigned long long>(dynattn_test::BaseSeed()));
  doctest::Context context(argc, argv);
  return context.run();
}
