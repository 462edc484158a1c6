// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Opt-in pinning of a Context's threads (ContextOptions::pin_threads).
//
// Why: on small VMs the kernel often wakes a worker on the vCPU of the thread that woke it, so an
// unpinned two-thread call may run both halves on one core and take twice as long (calls came out
// bimodal in the benchmark). Pinning arena slot i to the i-th CPU the process may use keeps the
// caller and each worker on a core of their own. A thread is pinned while it works in the arena
// and gets its previous affinity back when it leaves, so neither the caller nor oneTBB's shared
// workers carry the pinning into other work.

#ifndef DYNATTN_SRC_THREAD_PINNING_H_
#define DYNATTN_SRC_THREAD_PINNING_H_

#include <tbb/task_arena.h>
#include <tbb/task_scheduler_observer.h>

#include <vector>

namespace dynattn::internal {

class ThreadPinning : public tbb::task_scheduler_observer {
 public:
  /// Starts observing `arena` (already initialized); pins nothing when the process may use a
  /// single CPU or the platform has no thread affinity.
  explicit ThreadPinning(tbb::task_arena& arena);
  ~ThreadPinning() override;
  ThreadPinning(const ThreadPinning&) = delete;
  ThreadPinning& operator=(const ThreadPinning&) = delete;

  void on_scheduler_entry(bool is_worker) override;
  void on_scheduler_exit(bool is_worker) override;

  /// The CPUs slots are pinned to, in slot order (slot i -> cpus()[i % size]).
  const std::vector<int>& cpus() const { return cpus_; }

 private:
  std::vector<int> cpus_;
};

/// The CPU the calling thread runs on now (-1 when unknown).
int CurrentCpu();

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_THREAD_PINNING_H_
