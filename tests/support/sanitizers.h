// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// DYNATTN_TEST_ASAN is defined when the code under test (the library, the tool, the emulated
// kernels) runs under AddressSanitizer: a few tests must then skip what ASan itself reports first
// or what its shadow memory makes impossible. A sanitizer build compiles the tests' own code
// without instrumentation, so tests/meson.build defines it there; a test compiled with ASan itself,
// under g++ (__SANITIZE_ADDRESS__) or clang (__has_feature), gets it here.

#ifndef DYNATTN_TESTS_SUPPORT_SANITIZERS_H_
#define DYNATTN_TESTS_SUPPORT_SANITIZERS_H_

#ifndef DYNATTN_TEST_ASAN
#if defined(__SANITIZE_ADDRESS__)
#define DYNATTN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DYNATTN_TEST_ASAN 1
#endif
#endif
#endif  // DYNATTN_TEST_ASAN

#endif  // DYNATTN_TESTS_SUPPORT_SANITIZERS_H_
