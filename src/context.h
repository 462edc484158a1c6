// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What a public Context holds, and how the CPU backend runs parallel work in it.
//
// Why it looks like this: an engine runs the same step shape in every layer of every step, so
// everything a call needs besides its plan (the oneTBB arena, each worker's scratch, the partial
// states, the CUDA stream and device workspace) lives here, is created once and grows to the
// largest plan run. A call then allocates nothing, and a tiny step costs its kernels' work plus
// the arena's hand-off, not an arena's creation.

#ifndef DYNATTN_SRC_CONTEXT_H_
#define DYNATTN_SRC_CONTEXT_H_

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cpu/kernel_table.h"
#include "dynattn/plan.h"
#include "src/device_slot.h"
#include "src/thread_pinning.h"

namespace dynattn::internal {

/// Work (multiply-adds of a step's scores) below which a parallel loop runs on the caller's
/// thread: handing pieces to a sleeping worker costs tens of microseconds (more on a VM, where
/// the woken thread often lands on the waker's vCPU), more than such a step's kernels take on one
/// core. Which thread runs a piece never changes its bits, so this only moves time.
inline constexpr int64_t kInlineWork = int64_t{1} << 18;

/// The library's way to the state behind a public Context or Plan (the classes expose none).
struct StateAccess {
  static ContextState* Of(const Context& context) { return context.state_.get(); }
  static PlanState* Of(const Plan& plan) { return plan.state_.get(); }
  static void Reset(Plan* plan, std::unique_ptr<PlanState> state);  // src/plan_state.cc
};

/// The state of `context`.
inline ContextState* StateOf(const Context& context) { return StateAccess::Of(context); }

struct ContextState {
  explicit ContextState(const ContextOptions& options);
  ~ContextState();

  /// Calls body(i, scratch) for i in [0, n) on the context's threads. A single piece, a
  /// one-thread context, or `work` (an estimate, in score multiply-adds) under kInlineWork runs
  /// on the caller's thread without entering the arena.
  template <typename Body>
  void ParallelFor(int64_t n, const Body& body, int64_t work = kInlineWork);

  /// `floats` floats of partial-state workspace (contents undefined), grown when needed.
  float* States(size_t floats);

  /// Grows every slot's scratch to the largest any slot needed: which worker runs which piece
  /// changes from run to run, so after one run of a plan every slot can run any of its pieces.
  void BalanceScratch();

  Status status;           ///< ValidateContextOptions of the requested options.
  ContextOptions options;  ///< num_threads resolved (>= 1; 1 when `status` is an error).
  /// More threads than oneTBB lends by default (cores - 1 workers): each parallel call then
  /// raises oneTBB's process-wide worker limit for its own duration (tests do, to prove
  /// determinism under oversubscription).
  bool oversubscribed = false;
  tbb::task_arena arena;
  /// Scratch of arena slot i (slot 0 also for work run on the caller's thread): whichever oneTBB
  /// worker takes a slot uses its scratch, so a Context that has run a plan owns all it needs.
  std::vector<Scratch> scratch;
  std::vector<float> states;
  DeviceWorkspace* device = nullptr;       ///< Created by the CUDA backend on first use.
  std::unique_ptr<ThreadPinning> pinning;  ///< With ContextOptions::pin_threads.
  std::atomic<bool> busy{false};           ///< A Run holds it (ContextLease).
};

/// Holds a Context for one Run. A Context's buffers serve one call at a time: a second caller
/// (another thread, at the same time) gets FailedPrecondition instead of corrupting them.
class ContextLease {
 public:
  explicit ContextLease(ContextState* context)
      : context_(context), held_(!context->busy.exchange(true, std::memory_order_acquire)) {}
  ~ContextLease() {
    if (held_) context_->busy.store(false, std::memory_order_release);
  }
  ContextLease(const ContextLease&) = delete;
  ContextLease& operator=(const ContextLease&) = delete;

  Status status() const {
    if (held_) return Status::Ok();
    return Status::FailedPrecondition(
        "context",
        "is running another call: a Context runs one call at a time (give each "
        "thread its own)");
  }

 private:
  ContextState* context_;
  bool held_;
};

template <typename Body>
void ContextState::ParallelFor(int64_t n, const Body& body, int64_t work) {
  if (n <= 0) return;
  if (n == 1 || options.num_threads == 1 || work < kInlineWork) {
    for (int64_t i = 0; i < n; ++i) body(i, &scratch[0]);
    return;
  }
  std::optional<tbb::global_control> allow;
  if (oversubscribed) {
    allow.emplace(tbb::global_control::max_allowed_parallelism, options.num_threads);
  }
  arena.execute([&] {
    // One task per piece: the pieces are coarse (work items, token chunks), and a few of them
    // (a long split, a shared segment for 64 readers) can outweigh many others, so an idle
    // worker must be able to take any single one.
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, n, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          Scratch& local = scratch[tbb::this_task_arena::current_thread_index()];
          for (int64_t i = r.begin(); i < r.end(); ++i) body(i, &local);
        },
        tbb::simple_partitioner());
  });
  BalanceScratch();
}

/// A Context from a process-wide pool for the one-shot calls, returned to the pool when the
/// lease ends. Concurrent one-shot calls get different contexts.
class PooledContext {
 public:
  PooledContext(int num_threads, bool pin_threads);
  ~PooledContext();
  PooledContext(const PooledContext&) = delete;
  PooledContext& operator=(const PooledContext&) = delete;
  Context* get() const { return context_.get(); }

 private:
  std::unique_ptr<Context> context_;
};

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_CONTEXT_H_
