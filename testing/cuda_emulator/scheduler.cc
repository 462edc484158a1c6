// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The emulator's scheduler: runs a launch's blocks one after another, each block's threads as
// fibers that switch only at synchronisation points, and checks the rules of those points.
//
// A thread is runnable, waiting at the block barrier, waiting at a warp operation, or exited.
// The scheduler resumes one runnable thread at a time, chosen by the schedule (NextRunnable);
// it runs until it waits or exits. A barrier opens when its last participant arrives; finding no
// runnable thread while some have not exited is a deadlock, and the diagnostic lists where each
// group of threads waits. Any violation stops the launch: the diagnostic names the kernel, the
// block, the thread and the file and line, and the device keeps a sticky error, as after a
// kernel fault on a GPU.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/cuda_emulator/fiber.h"
#include "testing/cuda_emulator/memory.h"
#include "testing/cuda_emulator/runtime_state.h"

#if defined(__SANITIZE_THREAD__) && !defined(CUDA_EMU_TSAN)
#define CUDA_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUDA_EMU_TSAN 1
#endif
#endif
#ifdef CUDA_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace cuda_emu::detail {

ThreadContext* g_current = nullptr;

namespace {

constexpr int kWarpSize = 32;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Happens-before edges for ThreadSanitizer: barriers order memory, shuffles do not.
void HappensBefore(void* sync) {
#ifdef CUDA_EMU_TSAN
  __tsan_release(sync);
#else
  (void)sync;
#endif
}
void HappensAfter(void* sync) {
#ifdef CUDA_EMU_TSAN
  __tsan_acquire(sync);
#else
  (void)sync;
#endif
}

const char* OpName(WarpOp op) {
  constexpr const char* kNames[] = {"__syncwarp",       "__shfl_sync",     "__shfl_up_sync",
                                    "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                                    "__any_sync",       "__all_sync"};
  static_assert(std::size(kNames) == static_cast<size_t>(WarpOp::kAll) + 1);
  return kNames[static_cast<size_t>(op)];
}

bool SameSite(const Site& a, const Site& b) {
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

std::string SiteText(const Site& site) {
  const char* slash = std::strrchr(site.file, '/');
  const char* gpu = std::strstr(site.file, "cuda/");
  return std::string(gpu != nullptr ? gpu : (slash != nullptr ? slash + 1 : site.file)) + ":" +
         std::to_string(site.line);
}

std::string Dim(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

std::string Hex(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", mask);
  return text;
}

enum class State { kRunnable, kAtBarrier, kAtWarpOp, kExited };

/// One CUDA thread of the running block.
struct EmuThread {
  ThreadContext context{};
  Fiber* fiber = nullptr;
  int linear = 0;
  State state = State::kRunnable;
  bool started = false;
  Site site{"", 0};
  // The warp operation it waits at.
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int operand = 0, width = kWarpSize;

  int lane() const { return linear % kWarpSize; }
  int warp() const { return linear / kWarpSize; }
};

/// The schedule of later launches: the environment's unless SetSchedule overrode it.
struct ScheduleChoice {
  Schedule schedule = Schedule::kForward;
  std::mt19937_64 random{0};
};

ScheduleChoice& Choice() {
  static ScheduleChoice* choice = [] {
    auto* c = new ScheduleChoice;
    const char* env = std::getenv("CUDA_EMU_SCHEDULE");
    if (env != nullptr && std::strcmp(env, "reverse") == 0) c->schedule = Schedule::kReverse;
    if (env != nullptr && std::strncmp(env, "random", 6) == 0) {
      c->schedule = Schedule::kRandom;
      const char* colon = std::strchr(env, ':');
      c->random.seed(colon != nullptr ? std::strtoull(colon + 1, nullptr, 0) : 1);
    }
    return c;
  }();
  return *choice;
}

Stats g_stats;                         // under g_launch_mutex
std::set<const void*> g_kernels_seen;  // under g_launch_mutex; what Stats::kernels counts

/// Thrown inside a thread of a failed launch: unwinds its stack to ThreadMain.
struct AbortThread {};

/// Runs the blocks of one launch.
class BlockRunner {
 public:
  explicit BlockRunner(const LaunchRequest& request)
      : request_(request),
        threads_per_block_(static_cast<int>(request.block.x * request.block.y * request.block.z)),
        shared_(request.shared_bytes, 16) {
    threads_.resize(threads_per_block_);
    while (static_cast<int>(Pool().size()) < threads_per_block_) {
      Pool().push_back(std::make_unique<Fiber>());
    }
    for (int i = 0; i < threads_per_block_; ++i) threads_[i].fiber = Pool()[i].get();
  }

  /// Runs every block in the schedule's order; false after a diagnosed error.
  bool Run() {
    if (!shared_.ok()) return Fail(nullptr, "cannot map the block's shared memory");
    const dim3 g = request_.grid;
    std::vector<int64_t> order(static_cast<size_t>(g.x) * g.y * g.z);
    std::iota(order.begin(), order.end(), 0);
    ArrangeBlocks(&order);
    for (const int64_t linear : order) {
      const uint3 block{static_cast<unsigned>(linear % g.x),
                        static_cast<unsigned>(linear / g.x % g.y),
                        static_cast<unsigned>(linear / g.x / g.y)};
      if (!RunBlock(block)) return false;
    }
    return true;
  }

  const GuardedBlock* shared() const { return &shared_; }

  // Called by the running thread (through the free functions below).
  void SyncThreads(Site site);
  uint64_t WarpRendezvous(WarpOp op, unsigned mask, uint64_t value, int operand, int width,
                          Site site);
  void ThreadMain();

 private:
  static std::vector<std::unique_ptr<Fiber>>& Pool() {
    thread_local std::vector<std::unique_ptr<Fiber>> pool;
    return pool;
  }

  /// Puts the blocks (in linear order) in the schedule's order.
  void ArrangeBlocks(std::vector<int64_t>* order) {
    ScheduleChoice& c = Choice();
    if (c.schedule == Schedule::kReverse) std::reverse(order->begin(), order->end());
    if (c.schedule == Schedule::kRandom) std::shuffle(order->begin(), order->end(), c.random);
  }

  bool RunBlock(uint3 block);
  int NextRunnable();
  EmuThread& Current() { return threads_[running_]; }
  /// Returns to the scheduler; throws AbortThread when the launch has failed meanwhile.
  void Suspend() {
    Current().fiber->Suspend();
    if (aborting_) {
      HappensAfter(&launch_sync_);  // the unwinding frees what the block's threads shared
      throw AbortThread{};
    }
  }
  /// Unwinds every thread still suspended in a failed block, so that nothing it holds leaks.
  void AbortSuspended();
  void Exit(EmuThread& t);
  void TryCompleteWarpOp(const EmuThread& arriving);
  uint64_t ResultFor(const EmuThread& t, unsigned ballot);
  std::string DescribeWaits() const;
  /// Records the diagnostic of a violation by thread `t` (null: the block as a whole).
  bool Fail(const EmuThread* t, const std::string& what);
  /// Fails from inside a thread, which unwinds.
  [[noreturn]] void FailHere(const std::string& what) {
    Fail(&Current(), what);
    throw AbortThread{};
  }

  const LaunchRequest& request_;
  const int threads_per_block_;
  GuardedBlock shared_;
  std::vector<EmuThread> threads_;
  std::vector<int> runnable_;
  uint3 block_{};
  int running_ = -1;
  int live_ = 0, at_barrier_ = 0;
  bool failed_ = false;
  bool aborting_ = false;
  // Addresses of these serve as TSan sync objects.
  char barrier_sync_ = 0;
  char warp_sync_[1024 / kWarpSize] = {};
  char launch_sync_ = 0;
};

BlockRunner* g_runner = nullptr;

void ThreadEntry(void* runner) { static_cast<BlockRunner*>(runner)->ThreadMain(); }

void BlockRunner::ThreadMain() {
  Current().started = true;
  HappensAfter(&launch_sync_);
  try {
    request_.body(request_.state);
    Exit(Current());
  } catch (const AbortThread&) {
    Current().state = State::kExited;
    HappensBefore(&launch_sync_);
  }
  Current().fiber->Finish();
}

void BlockRunner::AbortSuspended() {
  aborting_ = true;
  HappensBefore(&launch_sync_);
  for (int i = 0; i < threads_per_block_; ++i) {
    if (!threads_[i].started || threads_[i].state == State::kExited) continue;
    running_ = i;
    g_current = &threads_[i].context;
    threads_[i].fiber->Resume();
  }
  g_current = nullptr;
  running_ = -1;
  aborting_ = false;
  HappensAfter(&launch_sync_);
}

bool BlockRunner::RunBlock(uint3 block) {
  block_ = block;
  shared_.Poison();
  const dim3 b = request_.block;
  for (int i = 0; i < threads_per_block_; ++i) {
    EmuThread& t = threads_[i];
    t.context.thread_idx = {static_cast<unsigned>(i % b.x), static_cast<unsigned>(i / b.x % b.y),
                            static_cast<unsigned>(i / b.x / b.y)};
    t.context.block_idx = block;
    t.context.block_dim = request_.block;
    t.context.grid_dim = request_.grid;
    t.context.dynamic_shared = shared_.data();
    t.linear = i;
    t.state = State::kRunnable;
    t.started = false;
    t.fiber->Start(&ThreadEntry, this);
  }
  live_ = threads_per_block_;
  at_barrier_ = 0;
  HappensBefore(&launch_sync_);
  while (live_ > 0) {
    const int next = NextRunnable();
    if (next < 0) {
      Fail(nullptr, "deadlock: " + DescribeWaits());
      AbortSuspended();
      return false;
    }
    running_ = next;
    g_current = &threads_[next].context;
    ++g_stats.switches;
    threads_[next].fiber->Resume();
    g_current = nullptr;
    running_ = -1;
    if (failed_) {
      AbortSuspended();
      return false;
    }
  }
  HappensAfter(&launch_sync_);
  ++g_stats.blocks;
  g_stats.threads += threads_per_block_;
  int64_t offset = 0;
  if (shared_.DamagedSlack(&offset)) {
    return Fail(nullptr, "wrote " +
                             shared_.Describe(reinterpret_cast<uintptr_t>(shared_.data()) + offset,
                                              "the dynamic shared memory") +
                             " (its red zone)");
  }
  return true;
}

/// The thread to resume next: the first runnable one (forward), the last (reverse), or any
/// (random). Always preferring the same end lets a released warp run ahead of the others to its
/// next synchronisation point, which is what exposes a missing barrier.
int BlockRunner::NextRunnable() {
  ScheduleChoice& c = Choice();
  if (c.schedule == Schedule::kReverse) {
    for (int i = threads_per_block_ - 1; i >= 0; --i) {
      if (threads_[i].state == State::kRunnable) return i;
    }
    return -1;
  }
  if (c.schedule == Schedule::kForward) {
    for (int i = 0; i < threads_per_block_; ++i) {
      if (threads_[i].state == State::kRunnable) return i;
    }
    return -1;
  }
  runnable_.clear();
  for (int i = 0; i < threads_per_block_; ++i) {
    if (threads_[i].state == State::kRunnable) runnable_.push_back(i);
  }
  if (runnable_.empty()) return -1;
  return runnable_[std::uniform_int_distribution<size_t>(0, runnable_.size() - 1)(c.random)];
}

void BlockRunner::Exit(EmuThread& t) {
  t.state = State::kExited;
  --live_;
  HappensBefore(&launch_sync_);
  for (const EmuThread& other : threads_) {
    if (other.state == State::kAtBarrier) {
      FailHere("exited while " + std::to_string(at_barrier_) +
               " threads of its block wait at __syncthreads() at " + SiteText(other.site) +
               " (all threads must reach it)");
    }
  }
  for (const EmuThread& other : threads_) {
    if (other.state == State::kAtWarpOp && other.warp() == t.warp() &&
        (other.mask >> t.lane() & 1u)) {
      FailHere("exited while lane " + std::to_string(other.lane()) + " waits at " +
               OpName(other.op) + " (" + SiteText(other.site) + ") with mask " + Hex(other.mask) +
               ", which names it");
    }
  }
}

void BlockRunner::SyncThreads(Site site) {
  EmuThread& t = Current();
  for (const EmuThread& other : threads_) {
    if (other.state == State::kExited) {
      FailHere("reached __syncthreads() at " + SiteText(site) + " after thread " +
               Dim(other.context.thread_idx) + " exited (all threads must reach it)");
    }
  }
  t.state = State::kAtBarrier;
  t.site = site;
  HappensBefore(&barrier_sync_);
  if (++at_barrier_ == live_) {
    for (const EmuThread& other : threads_) {
      if (!SameSite(other.site, site)) {
        FailHere("threads wait at different __syncthreads(): " + SiteText(site) + " and " +
                 SiteText(other.site) + " (thread " + Dim(other.context.thread_idx) + ")");
      }
    }
    for (EmuThread& other : threads_) other.state = State::kRunnable;
    at_barrier_ = 0;
  }
  Suspend();
  HappensAfter(&barrier_sync_);
}

uint64_t BlockRunner::WarpRendezvous(WarpOp op, unsigned mask, uint64_t value, int operand,
                                     int width, Site site) {
  EmuThread& t = Current();
  const std::string call =
      std::string(OpName(op)) + " at " + SiteText(site) + " with mask " + Hex(mask);
  if (!(mask >> t.lane() & 1u)) FailHere(call + ": the mask does not name the calling lane");
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0) {
    FailHere(call + ": width " + std::to_string(width) + " is not a power of 2 up to 32");
  }
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    const int index = t.warp() * kWarpSize + lane;
    if (index >= threads_per_block_) {
      FailHere(call + ": the mask names lane " + std::to_string(lane) +
               ", which does not exist (the block has " + std::to_string(threads_per_block_) +
               " threads)");
    }
    if (threads_[index].state == State::kExited) {
      FailHere(call + ": the mask names lane " + std::to_string(lane) + ", which has exited");
    }
  }
  t.state = State::kAtWarpOp;
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.operand = operand;
  t.width = width;
  t.site = site;
  if (op == WarpOp::kSync) HappensBefore(&warp_sync_[t.warp()]);
  TryCompleteWarpOp(t);
  Suspend();
  if (op == WarpOp::kSync) HappensAfter(&warp_sync_[t.warp()]);
  return t.result;
}

void BlockRunner::TryCompleteWarpOp(const EmuThread& arriving) {
  const int first = arriving.warp() * kWarpSize;
  unsigned ballot = 0;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(arriving.mask >> lane & 1u)) continue;
    const EmuThread& other = threads_[first + lane];
    // A lane elsewhere may still come; a lane at another operation is left to deadlock detection
    // (it may belong to a smaller group that completes first).
    if (other.state != State::kAtWarpOp || other.op != arriving.op || other.mask != arriving.mask) {
      return;
    }
    if (other.op != WarpOp::kSync && !SameSite(other.site, arriving.site)) {
      FailHere(std::string("lanes of warp ") + std::to_string(arriving.warp()) + " execute " +
               OpName(arriving.op) + " at different places: " + SiteText(arriving.site) + " and " +
               SiteText(other.site) + " (lane " + std::to_string(lane) + ")");
    }
    if (other.value != 0) ballot |= 1u << lane;
  }
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (arriving.mask >> lane & 1u)
      threads_[first + lane].result = ResultFor(threads_[first + lane], ballot);
  }
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (arriving.mask >> lane & 1u) threads_[first + lane].state = State::kRunnable;
  }
}

uint64_t BlockRunner::ResultFor(const EmuThread& t, unsigned ballot) {
  const int lane = t.lane();
  const int base = lane & ~(t.width - 1);
  int source = lane;
  switch (t.op) {
    case WarpOp::kSync:
      return 0;
    case WarpOp::kBallot:
      return ballot;
    case WarpOp::kAny:
      return ballot != 0;
    case WarpOp::kAll:
      return ballot == t.mask;
    case WarpOp::kShflIdx:
      source = base + (t.operand & (t.width - 1));
      break;
    case WarpOp::kShflUp:
      source = lane - t.operand >= base ? lane - t.operand : lane;
      break;
    case WarpOp::kShflDown:
      source = lane + t.operand < base + t.width ? lane + t.operand : lane;
      break;
    case WarpOp::kShflXor:
      source = lane ^ t.operand;
      if (source >= base + t.width || source < 0 || source >= kWarpSize) source = lane;
      break;
  }
  if (!(t.mask >> source & 1u)) {
    // Undefined on a device: report it rather than invent a value.
    Fail(&t, std::string(OpName(t.op)) + " at " + SiteText(t.site) + ": lane " +
                 std::to_string(lane) + " reads lane " + std::to_string(source) +
                 ", which the mask " + Hex(t.mask) + " does not name");
    return 0;
  }
  return threads_[t.warp() * kWarpSize + source].value;
}

std::string BlockRunner::DescribeWaits() const {
  // Group the waiting threads by where they wait.
  std::map<std::string, std::pair<int, int>> groups;  // place -> (count, first thread)
  for (const EmuThread& t : threads_) {
    std::string place;
    if (t.state == State::kAtBarrier) place = "__syncthreads() at " + SiteText(t.site);
    if (t.state == State::kAtWarpOp) {
      place = std::string(OpName(t.op)) + " at " + SiteText(t.site) + " (warp " +
              std::to_string(t.warp()) + ", mask " + Hex(t.mask) + ")";
    }
    if (place.empty()) continue;
    auto& group = groups.emplace(place, std::make_pair(0, t.linear)).first->second;
    ++group.first;
  }
  std::string text;
  for (const auto& [place, group] : groups) {
    if (!text.empty()) text += "; ";
    text += std::to_string(group.first) + " thread(s) wait at " + place + " (first: thread " +
            Dim(threads_[group.second].context.thread_idx) + ")";
  }
  return text;
}

bool BlockRunner::Fail(const EmuThread* t, const std::string& what) {
  if (failed_) return false;
  failed_ = true;
  std::string text = "kernel " + std::string(request_.kernel_name) + " (launched at " +
                     SiteText(request_.site) + "), block " + Dim(block_);
  if (t != nullptr) text += ", thread " + Dim(t->context.thread_idx);
  RecordStickyError(cudaErrorLaunchFailure, text + ": " + what);
  return false;
}

/// Launch-time checks of the configuration; the error CUDA would give, with a diagnostic.
cudaError_t CheckConfiguration(const LaunchRequest& r) {
  const cudaDeviceProp& p = DeviceProperties();
  const std::string kernel =
      std::string("launch of ") + r.kernel_name + " at " + SiteText(r.site) + ": ";
  const uint64_t threads = uint64_t{r.block.x} * r.block.y * r.block.z;
  if (threads == 0 || threads > static_cast<uint64_t>(p.maxThreadsPerBlock) || r.block.x > 1024 ||
      r.block.y > 1024 || r.block.z > 64) {
    return RecordError(
        cudaErrorInvalidConfiguration,
        kernel + "block " + Dim({r.block.x, r.block.y, r.block.z}) + " is outside 1-1024 threads");
  }
  if (r.grid.x == 0 || r.grid.y == 0 || r.grid.z == 0 || r.grid.y > 65535 || r.grid.z > 65535 ||
      r.grid.x > 0x7FFFFFFFu) {
    return RecordError(cudaErrorInvalidConfiguration,
                       kernel + "grid " + Dim({r.grid.x, r.grid.y, r.grid.z}) + " is invalid");
  }
  const int opted_in = OptedInSharedBytes(r.kernel);
  if (r.shared_bytes > kDefaultSharedBytes && r.shared_bytes > static_cast<size_t>(opted_in)) {
    return RecordError(cudaErrorInvalidValue,
                       kernel + std::to_string(r.shared_bytes) +
                           " bytes of dynamic shared memory need an opt-in above 48 KiB "
                           "(cudaFuncSetAttribute MaxDynamicSharedMemorySize is " +
                           std::to_string(opted_in) + ")");
  }
  return cudaSuccess;
}

/// A pointer in a kernel argument that is neither null nor into device memory: the kernel could
/// only fault on it (or read the wrong memory, where host and device addresses overlap).
bool FindHostPointer(const LaunchRequest& r, std::string* where) {
  for (int i = 0; i < r.num_pointers; ++i) {
    const ArgumentPointer& p = r.pointers[i];
    const auto address = reinterpret_cast<uintptr_t>(p.value);
    if (address == 0 || DeviceHeap::Get().Near(address) != nullptr) continue;
    char text[200];
    std::snprintf(text, sizeof(text),
                  "argument %d%s%s holds %p, which is in no live device allocation (a host "
                  "pointer, or freed device memory)",
                  p.argument, p.path[0] != '\0' ? ", field " : "", p.path, p.value);
    *where = text;
    return true;
  }
  return false;
}

std::mutex g_launch_mutex;

}  // namespace

void SyncThreads(Site site) { g_runner->SyncThreads(site); }

uint64_t WarpRendezvous(WarpOp op, unsigned mask, uint64_t value, int operand, int width,
                        Site site) {
  return g_runner->WarpRendezvous(op, mask, value, operand, width, site);
}

/// Launches FailNextLaunches still has to refuse.
int g_launches_to_fail = 0;

void Launch(const LaunchRequest& request) {
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  if (StickyError() != cudaSuccess) return;
  if (g_launches_to_fail > 0) {
    --g_launches_to_fail;
    RecordError(cudaErrorLaunchOutOfResources,
                std::string("launch of ") + request.kernel_name + " refused (FailNextLaunches)");
    return;
  }
  if (CheckConfiguration(request) != cudaSuccess) return;
  const std::string kernel =
      std::string(request.kernel_name) + " (launched at " + SiteText(request.site) + ")";
  std::string host_pointer;
  if (FindHostPointer(request, &host_pointer)) {
    RecordStickyError(cudaErrorIllegalAddress, "kernel " + kernel + ": " + host_pointer);
    return;
  }
  InstallFaultReporter();
  ++g_stats.launches;
  if (g_kernels_seen.insert(request.kernel).second) ++g_stats.kernels;
  DeviceAccess open;
  BlockRunner runner(request);
  g_runner = &runner;
  SetFaultContext("kernel " + kernel, runner.shared());
  const bool ok = runner.Run();
  SetFaultContext("", nullptr);
  g_runner = nullptr;
  if (!ok) return;
  const std::string damage = DeviceHeap::Get().CheckSlack();
  if (!damage.empty())
    RecordStickyError(cudaErrorIllegalAddress, "kernel " + kernel + " " + damage);
}

}  // namespace cuda_emu::detail

namespace cuda_emu {

void SetSchedule(Schedule schedule, uint64_t seed) {
  detail::ScheduleChoice& c = detail::Choice();
  c.schedule = schedule;
  c.random.seed(seed);
}

Stats GetStats() { return detail::g_stats; }

void ResetStats() {
  detail::g_stats = Stats{};
  detail::g_kernels_seen.clear();
}

void FailNextLaunches(int count) {
  std::lock_guard<std::mutex> lock(detail::g_launch_mutex);
  detail::g_launches_to_fail = count;
}

}  // namespace cuda_emu
