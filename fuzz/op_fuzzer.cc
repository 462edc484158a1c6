// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The libFuzzer entry point (built with -Dfuzz=enabled under clang; see "Fuzzing" in
// docs/testing.md).

#include <cstddef>
#include <cstdint>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dynattn_fuzz::RunOneInput(data, size);
}
