// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/context.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "src/validate.h"

namespace dynattn {
namespace internal {
namespace {

int ResolveThreads(int requested) {
  return requested > 0 ? requested : tbb::this_task_arena::max_concurrency();
}

/// The options a Context runs with: `requested` when valid; one thread when not (it runs nothing,
/// and a refused thread count must not reach oneTBB, which crashes or hangs on some).
ContextOptions Usable(const ContextOptions& requested, const Status& status) {
  ContextOptions options = requested;
  options.num_threads = status.ok() ? ResolveThreads(requested.num_threads) : 1;
  return options;
}

/// Idle contexts of the one-shot calls, any thread count.
struct ContextPool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Context>> idle;
};

ContextPool& Pool() {
  static ContextPool* pool = new ContextPool;  // never destroyed: leases may end at exit
  return *pool;
}

}  // namespace

ContextState::ContextState(const ContextOptions& requested)
    : status(ValidateContextOptions(requested)),
      options(Usable(requested, status)),
      arena(options.num_threads) {
  oversubscribed = options.num_threads > tbb::this_task_arena::max_concurrency();
  scratch.resize(static_cast<size_t>(options.num_threads));
  if (options.num_threads > 1) {
    arena.initialize();
    if (options.pin_threads) pinning = std::make_unique<ThreadPinning>(arena);
  }
}

ContextState::~ContextState() {
  pinning.reset();  // stop observing before the arena goes
  if (device != nullptr) ReleaseDeviceWorkspace(device);
}

DeviceSlot DeviceSlotOf(ContextState* context) {
  return DeviceSlot{context->options.cuda_stream, &context->device};
}

float* ContextState::States(size_t floats) {
  if (states.size() < floats) states.resize(floats);
  return states.data();
}

void ContextState::BalanceScratch() {
  size_t floats = 0, parts = 0;
  for (const Scratch& s : scratch) {
    floats = std::max(floats, s.floats.size());
    parts = std::max(parts, s.parts.size());
  }
  for (Scratch& s : scratch) {
    s.Reserve(floats);
    s.ReserveParts(parts);
  }
}

PooledContext::PooledContext(int num_threads, bool pin_threads) {
  const int threads = ResolveThreads(num_threads);
  {
    ContextPool& pool = Pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    for (size_t i = 0; i < pool.idle.size(); ++i) {
      const ContextOptions& idle = pool.idle[i]->options();
      if (idle.num_threads != threads || idle.pin_threads != pin_threads) continue;
      context_ = std::move(pool.idle[i]);
      pool.idle.erase(pool.idle.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
  ContextOptions options;
  options.num_threads = threads;
  options.pin_threads = pin_threads;
  context_ = std::make_unique<Context>(options);
}

PooledContext::~PooledContext() {
  ContextPool& pool = Pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.idle.push_back(std::move(context_));
}

}  // namespace internal

Context::Context(const ContextOptions& options)
    : state_(std::make_unique<internal::ContextState>(options)) {}

Context::~Context() = default;

const ContextOptions& Context::options() const { return state_->options; }

const Status& Context::status() const { return state_->status; }

Status ValidateContextOptions(const ContextOptions& options) {
  if (options.num_threads < 0 || options.num_threads > internal::kMaxThreads) {
    return Status::Invalid("num_threads", "must be 0 (all cores) or in [1, " +
                                              std::to_string(internal::kMaxThreads) + "], got " +
                                              std::to_string(options.num_threads));
  }
  return Status::Ok();
}

size_t Context::workspace_bytes() const {
  size_t bytes = state_->states.capacity() * sizeof(float);
  for (const internal::Scratch& s : state_->scratch) bytes += s.floats.capacity() * sizeof(float);
  return bytes;
}

}  // namespace dynattn
