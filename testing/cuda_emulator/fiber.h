// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Fibers for the emulator's CUDA threads: Boost.Context's fcontext switches (a few nanoseconds,
// about 50x faster than glibc's ucontext), stacks with a guard page, and the switch annotations
// that AddressSanitizer and ThreadSanitizer need to follow a program across stacks.

#ifndef DYNATTN_TESTING_CUDA_EMULATOR_FIBER_H_
#define DYNATTN_TESTING_CUDA_EMULATOR_FIBER_H_

#include <cstddef>

namespace cuda_emu::detail {

/// A stack and a suspended context. Start() prepares a run of `entry(argument)`; the scheduler
/// then alternates Resume() (from the scheduler) and Suspend() (from inside the fiber). A fiber
/// that finishes calls Finish() instead of returning.
class Fiber {
 public:
  using Entry = void (*)(void* argument);

  Fiber();
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  /// Prepares a fresh run (any earlier run is abandoned) and, under TSan, a fresh TSan fiber.
  void Start(Entry entry, void* argument);
  /// From the scheduler: runs the fiber until it suspends or finishes.
  void Resume();
  /// From inside the fiber: returns to the scheduler.
  void Suspend();
  /// From inside the fiber, as its last act.
  [[noreturn]] void Finish();

  /// The fiber whose code is running, or null in the scheduler.
  static Fiber* Current();

 private:
  friend struct FiberAccess;
  void SwitchToScheduler(bool finishing);

  void* stack_ = nullptr;  ///< mmap'd: guard page at the low end.
  size_t stack_bytes_ = 0;
  void* context_ = nullptr;  ///< fcontext_t of the suspended fiber.
  Entry entry_ = nullptr;
  void* argument_ = nullptr;
  void* asan_fake_stack_ = nullptr;
  void* tsan_fiber_ = nullptr;
};

}  // namespace cuda_emu::detail

#endif  // DYNATTN_TESTING_CUDA_EMULATOR_FIBER_H_
