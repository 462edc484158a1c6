// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What every doctest binary shares beyond running cases: the replayable base seed, skips that
// show in meson's counts, and forcing a Highway target for a scope.

#ifndef DYNATTN_TESTS_SUPPORT_HARNESS_H_
#define DYNATTN_TESTS_SUPPORT_HARNESS_H_

#include <cstdint>
#include <string>

namespace dynattn_test {

/// meson's exit status for a skipped test.
inline constexpr int kExitSkipped = 77;

/// A fresh base seed per run, or DYNATTN_TEST_SEED when set (so a failure replays). Every random
/// test derives its seeds from it; a failed check prints it.
uint64_t BaseSeed();

/// Prints the base seed and how to replay it; each binary calls it once at start.
void PrintBaseSeed();

/// The Highway target named by DYNATTN_TEST_TARGET ("AVX2", "AVX3", ...), 0 when unset. main
/// forces it for the whole run, so that a failure of the sanitizer build (AVX2 kernels only)
/// replays on a release build; tests that loop over every target still do. Names as
/// dynattn::ForceCpuTarget takes them; an unknown or unsupported one ends the run (exit 2) with
/// its error, which names the targets there are.
int64_t TargetFromEnvironment();

/// Marks the running test case as skipped, saying why; the caller returns right after. A binary
/// whose test cases were all skipped exits kExitSkipped (see ExitStatus), so a check that cannot
/// run here is counted as skipped rather than passed. Keep such cases in a doctest suite (and a
/// meson test) of their own: a skip among passing cases is only a message.
void SkipTest(const std::string& why);

/// The exit status for doctest's result `run_status`: kExitSkipped when it passed but every test
/// case that ran was skipped.
int ExitStatus(int run_status);

/// Forces one Highway target for its lifetime and restores, even when unwinding, the one forced
/// before it (0: none, every supported target eligible). All forcing in the tests goes through it,
/// since Highway cannot report which target a test forced.
class ForcedTarget {
 public:
  /// Forces `target` (a single HWY_* bit, or 0 for none).
  explicit ForcedTarget(int64_t target);
  ~ForcedTarget();
  ForcedTarget(const ForcedTarget&) = delete;
  ForcedTarget& operator=(const ForcedTarget&) = delete;

  /// Forces `target` instead, keeping what the destructor restores.
  void Set(int64_t target);

  /// The target forced now (0 when none).
  static int64_t Current();

 private:
  int64_t previous_;
};

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_HARNESS_H_
