// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Fibers over Boost.Context's fcontext (see fiber.h).

#include "testing/cuda_emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(CUDA_EMU_TSAN)
#define CUDA_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(CUDA_EMU_ASAN)
#define CUDA_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(CUDA_EMU_TSAN)
#define CUDA_EMU_TSAN 1
#endif
#endif
#ifdef CUDA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef CUDA_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace cuda_emu::detail {

namespace bctx = boost::context::detail;

namespace {

constexpr size_t kStackBytes = size_t{256} << 10;  // kernels need little; sanitizers inflate

/// The scheduler's side of the switches (one scheduler per OS thread).
struct SchedulerSide {
  bctx::fcontext_t context = nullptr;
  Fiber* running = nullptr;
  const void* stack_bottom = nullptr;  // ASan: learned from the first switch into a fiber
  size_t stack_size = 0;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};
thread_local SchedulerSide g_side;

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

struct FiberAccess {
  /// The first code a fiber runs: remembers the scheduler and calls the entry.
  static void Trampoline(bctx::transfer_t transfer) {
    g_side.context = transfer.fctx;
    Fiber* self = static_cast<Fiber*>(transfer.data);
#ifdef CUDA_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_side.stack_bottom, &g_side.stack_size);
#endif
    self->entry_(self->argument_);
    self->Finish();
  }
};

Fiber::Fiber() {
  stack_bytes_ = kStackBytes + PageSize();
  stack_ = mmap(nullptr, stack_bytes_, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (stack_ == MAP_FAILED) {
    std::fprintf(stderr, "cuda-emulator: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(stack_, PageSize(), PROT_NONE);  // overflow faults instead of corrupting
}

Fiber::~Fiber() {
#ifdef CUDA_EMU_TSAN
  if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  munmap(stack_, stack_bytes_);
}

void Fiber::Start(Entry entry, void* argument) {
  entry_ = entry;
  argument_ = argument;
  char* usable = static_cast<char*>(stack_) + PageSize();
#ifdef CUDA_EMU_ASAN
  // An abandoned run (a kernel stopped by an error) leaves its frames' redzones poisoned.
  ASAN_UNPOISON_MEMORY_REGION(usable, kStackBytes);
#endif
#ifdef CUDA_EMU_TSAN
  // One TSan fiber per Fiber, for its lifetime: creating one per block costs milliseconds each
  // and, by the hundred thousand, makes TSan reset its history (and miss races).
  if (tsan_fiber_ == nullptr) tsan_fiber_ = __tsan_create_fiber(0);
#endif
  context_ = bctx::make_fcontext(usable + kStackBytes, kStackBytes, &FiberAccess::Trampoline);
}

void Fiber::Resume() {
  Fiber* previous = g_side.running;
  g_side.running = this;
#ifdef CUDA_EMU_TSAN
  if (g_side.tsan_fiber == nullptr) g_side.tsan_fiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef CUDA_EMU_ASAN
  __sanitizer_start_switch_fiber(&g_side.asan_fake_stack, static_cast<char*>(stack_) + PageSize(),
                                 kStackBytes);
#endif
  const bctx::transfer_t back = bctx::jump_fcontext(context_, this);
#ifdef CUDA_EMU_ASAN
  __sanitizer_finish_switch_fiber(g_side.asan_fake_stack, nullptr, nullptr);
#endif
  context_ = back.fctx;
  g_side.running = previous;
}

void Fiber::SwitchToScheduler(bool finishing) {
#ifdef CUDA_EMU_TSAN
  __tsan_switch_to_fiber(g_side.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef CUDA_EMU_ASAN
  __sanitizer_start_switch_fiber(finishing ? nullptr : &asan_fake_stack_, g_side.stack_bottom,
                                 g_side.stack_size);
#else
  (void)finishing;
#endif
  const bctx::transfer_t back = bctx::jump_fcontext(g_side.context, nullptr);
  g_side.context = back.fctx;
#ifdef CUDA_EMU_ASAN
  __sanitizer_finish_switch_fiber(asan_fake_stack_, &g_side.stack_bottom, &g_side.stack_size);
#endif
}

void Fiber::Suspend() { SwitchToScheduler(false); }

void Fiber::Finish() {
  SwitchToScheduler(true);
  std::fprintf(stderr, "cuda-emulator: a finished fiber was resumed\n");
  std::abort();
}

Fiber* Fiber::Current() { return g_side.running; }

}  // namespace cuda_emu::detail
