// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/thread_pinning.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#define DYNATTN_HAS_AFFINITY 1
#else
#define DYNATTN_HAS_AFFINITY 0
#endif

namespace dynattn::internal {
namespace {

#if DYNATTN_HAS_AFFINITY
/// The affinity a thread had before it entered a pinning arena (one level: arenas of contexts
/// do not nest inside each other's parallel loops).
thread_local cpu_set_t saved_affinity;
thread_local bool has_saved_affinity = false;

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}
#endif

}  // namespace

ThreadPinning::ThreadPinning(tbb::task_arena& arena) : tbb::task_scheduler_observer(arena) {
#if DYNATTN_HAS_AFFINITY
  cpus_ = AllowedCpus();
  if (cpus_.size() < 2) cpus_.clear();
#endif
  if (!cpus_.empty()) observe(true);
}

ThreadPinning::~ThreadPinning() {
  if (!cpus_.empty()) observe(false);
}

void ThreadPinning::on_scheduler_entry(bool /*is_worker*/) {
#if DYNATTN_HAS_AFFINITY
  const int slot = tbb::this_task_arena::current_thread_index();
  if (slot < 0 || has_saved_affinity) return;
  if (pthread_getaffinity_np(pthread_self(), sizeof(saved_affinity), &saved_affinity) != 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus_[static_cast<size_t>(slot) % cpus_.size()], &one);
  has_saved_affinity = pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
#endif
}

void ThreadPinning::on_scheduler_exit(bool /*is_worker*/) {
#if DYNATTN_HAS_AFFINITY
  if (!has_saved_affinity) return;
  pthread_setaffinity_np(pthread_self(), sizeof(saved_affinity), &saved_affinity);
  has_saved_affinity = false;
#endif
}

int CurrentCpu() {
#if DYNATTN_HAS_AFFINITY
  return sched_getcpu();
#else
  return -1;
#endif
}

}  // namespace dynattn::internal
