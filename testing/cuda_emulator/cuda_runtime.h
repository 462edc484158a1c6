// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CUDA emulator: the subset of CUDA that cuda/ uses, so that the unmodified cuda/*.cu files
// compile as C++ with g++ and run on the CPU. In an emulated build this header is found as
// <cuda_runtime.h>.
//
// Why it exists. No machine that builds or tests this project has a GPU, so without it the CUDA
// half of the library would compile but never execute. The tests would then prove nothing about
// it. The emulator runs every CUDA thread of a block as a fiber (a coroutine with its own stack)
// on one OS thread. Fibers switch only where CUDA threads synchronise: __syncthreads, __syncwarp,
// the shuffles, the ballots. This makes the emulator deterministic and lets it check the rules a
// GPU leaves undefined:
// * every thread of a block reaches the same __syncthreads;
// * the lanes named by a warp operation's mask exist, have not exited, and all execute the same
//   operation with the same mask;
// * a block does not deadlock;
// * device and shared memory are allocated exactly, behind guard pages, and filled with NaN
//   bytes (0xFF) before first use;
// * no pointer in a kernel argument (fields of argument structs included) points outside device
//   memory;
// * host code does not read device memory outside cudaMemcpy/cudaMemset.
// The order in which runnable threads, warps and blocks are resumed is selectable: forward,
// reverse, or seeded random. A missing barrier thus shows up as a result that depends on the
// schedule. Under ThreadSanitizer each CUDA thread is a TSan fiber (thread t of every block the
// same one): only the barriers (not the shuffles, which move registers, not memory) order memory
// between threads, so TSan names the racing lines. Under AddressSanitizer the slack behind each
// allocation is poisoned.
//
// What it cannot prove: speed, coalescing, bank conflicts, occupancy, register pressure, nvcc's
// code generation and FMA contraction, the device's expf/log bits, asynchrony (every launch and
// copy completes before it returns), and the GPU's weak memory ordering (fibers run sequentially
// consistent between their switch points).
//
// Selection (environment, read at each launch): CUDA_EMU_SCHEDULE = forward | reverse |
// random[:SEED]; CUDA_EMU_DEVICE = h100 (default) | a100.

#ifndef DYNATTN_TESTING_CUDA_EMULATOR_CUDA_RUNTIME_H_
#define DYNATTN_TESTING_CUDA_EMULATOR_CUDA_RUNTIME_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define DYNATTN_CUDA_EMULATOR 1

// Function and variable qualifiers: every function is host code here.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// Deliberately no __shared__: a static shared array would silently become per-thread. Dynamic
// shared memory is declared with CUDA_EMU_DYNAMIC_SHARED (cuda/launch.cuh).

// ---------------------------------------------------------------------------------------------
// Types of the runtime API.

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit as in CUDA
};

/// The error codes the emulator returns (same values as CUDA's).
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

/// The device properties the emulated target reports (a subset of CUDA's struct).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int regsPerMultiprocessor;
  int memoryBusWidth;
  int ECCEnabled;
};

using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
constexpr unsigned cudaStreamNonBlocking = 0x01;

// ---------------------------------------------------------------------------------------------
// The runtime API (testing/cuda_emulator/runtime.cc).

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* pointer, int value, size_t bytes);
// Streams: every launch and copy runs to completion when issued, in issue order, so each stream
// behaves as CUDA's in-order streams do and synchronizing one only reports the sticky error.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
// Events: work is done when issued, so an event records the host's clock when it is recorded, and
// the time between two events is the host time the emulated work between them took.
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
/// The versions an emulated process reports: those of CUDA 12.0 (12000).
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);

namespace cuda_emu {
namespace detail {
cudaError_t SetFunctionAttribute(const void* kernel, cudaFuncAttribute attr, int value);
}  // namespace detail
}  // namespace cuda_emu

template <class T>
cudaError_t cudaMalloc(T** pointer, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}

template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  return cuda_emu::detail::SetFunctionAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---------------------------------------------------------------------------------------------
// Device built-ins: the running fiber's indices, barriers, warp operations, intrinsics.

namespace cuda_emu {
namespace detail {

/// What a running CUDA thread sees of itself; the scheduler points `g_current` at it.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* dynamic_shared;
};

extern ThreadContext* g_current;

/// A source location, filled in at the call site.
struct Site {
  const char* file;
  int line;
};

enum class WarpOp : uint8_t { kSync, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

void SyncThreads(Site site);
/// Rendezvous of the lanes of `mask` at a warp operation: returns the 8 value bytes the operation
/// gives this lane (the source lane's value for shuffles, the vote for ballots).
uint64_t WarpRendezvous(WarpOp op, unsigned mask, uint64_t value, int operand, int width,
                        Site site);

template <class T>
T FromBits(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

template <class T>
uint64_t ToBits(T value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a 1-8 byte type");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

template <class T>
T Shuffle(WarpOp op, unsigned mask, T var, int operand, int width, Site site) {
  return FromBits<T>(WarpRendezvous(op, mask, ToBits(var), operand, width, site));
}

}  // namespace detail
}  // namespace cuda_emu

#define threadIdx (::cuda_emu::detail::g_current->thread_idx)
#define blockIdx (::cuda_emu::detail::g_current->block_idx)
#define blockDim (::cuda_emu::detail::g_current->block_dim)
#define gridDim (::cuda_emu::detail::g_current->grid_dim)
inline constexpr int warpSize = 32;

// The source location of each synchronising call is its caller's: __builtin_FILE and
// __builtin_LINE as default arguments are evaluated at the call site, so every diagnostic names
// the kernel's file and line.
#define CUDA_EMU_CALLER const char *file = __builtin_FILE(), int line = __builtin_LINE()
#define CUDA_EMU_SITE \
  ::cuda_emu::detail::Site { file, line }

inline void __syncthreads(CUDA_EMU_CALLER) { cuda_emu::detail::SyncThreads(CUDA_EMU_SITE); }

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, CUDA_EMU_CALLER) {
  cuda_emu::detail::WarpRendezvous(cuda_emu::detail::WarpOp::kSync, mask, 0, 0, 32, CUDA_EMU_SITE);
}

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, CUDA_EMU_CALLER) {
  return cuda_emu::detail::Shuffle(cuda_emu::detail::WarpOp::kShflIdx, mask, var, src_lane, width,
                                   CUDA_EMU_SITE);
}

template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, CUDA_EMU_CALLER) {
  return cuda_emu::detail::Shuffle(cuda_emu::detail::WarpOp::kShflUp, mask, var,
                                   static_cast<int>(delta), width, CUDA_EMU_SITE);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, CUDA_EMU_CALLER) {
  return cuda_emu::detail::Shuffle(cuda_emu::detail::WarpOp::kShflDown, mask, var,
                                   static_cast<int>(delta), width, CUDA_EMU_SITE);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, CUDA_EMU_CALLER) {
  return cuda_emu::detail::Shuffle(cuda_emu::detail::WarpOp::kShflXor, mask, var, lane_mask, width,
                                   CUDA_EMU_SITE);
}

inline unsigned __ballot_sync(unsigned mask, int predicate, CUDA_EMU_CALLER) {
  return static_cast<unsigned>(cuda_emu::detail::WarpRendezvous(
      cuda_emu::detail::WarpOp::kBallot, mask, predicate != 0, 0, 32, CUDA_EMU_SITE));
}

inline int __any_sync(unsigned mask, int predicate, CUDA_EMU_CALLER) {
  return static_cast<int>(cuda_emu::detail::WarpRendezvous(cuda_emu::detail::WarpOp::kAny, mask,
                                                           predicate != 0, 0, 32, CUDA_EMU_SITE));
}

inline int __all_sync(unsigned mask, int predicate, CUDA_EMU_CALLER) {
  return static_cast<int>(cuda_emu::detail::WarpRendezvous(cuda_emu::detail::WarpOp::kAll, mask,
                                                           predicate != 0, 0, 32, CUDA_EMU_SITE));
}

// Correctly rounded arithmetic (the emulated build compiles with -ffp-contract=off, and each is a
// separate operation, so none is fused). Like NVIDIA hardware, a NaN result is the canonical NaN
// 0x7FFFFFFF whatever the operands' NaN signs and payloads (x86 keeps an operand's, or gives
// 0xFFC00000): code that must give the CPU's bits for a NaN input cannot let it pass through
// arithmetic.
namespace cuda_emu::detail {
inline float CanonicalNan(float x) { return std::isnan(x) ? FromBits<float>(0x7FFFFFFFu) : x; }
}  // namespace cuda_emu::detail
inline float __fadd_rn(float a, float b) { return cuda_emu::detail::CanonicalNan(a + b); }
inline float __fsub_rn(float a, float b) { return cuda_emu::detail::CanonicalNan(a - b); }
inline float __fmul_rn(float a, float b) { return cuda_emu::detail::CanonicalNan(a * b); }
inline float __fdiv_rn(float a, float b) { return cuda_emu::detail::CanonicalNan(a / b); }
inline float __fmaf_rn(float a, float b, float c) {
  return cuda_emu::detail::CanonicalNan(std::fma(a, b, c));
}
inline float __expf(float x) { return std::exp(x); }  // the device's is approximate
inline unsigned __float_as_uint(float x) {
  return cuda_emu::detail::FromBits<unsigned>(cuda_emu::detail::ToBits(x));
}
inline float __uint_as_float(unsigned x) {
  return cuda_emu::detail::FromBits<float>(cuda_emu::detail::ToBits(x));
}
inline int __float_as_int(float x) {
  return cuda_emu::detail::FromBits<int>(cuda_emu::detail::ToBits(x));
}
inline float __int_as_float(int x) {
  return cuda_emu::detail::FromBits<float>(cuda_emu::detail::ToBits(x));
}

// CUDA's min/max overloads for same-typed operands (the float ones are fminf/fmaxf).
#define CUDA_EMU_MIN_MAX(T)                        \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDA_EMU_MIN_MAX(int)
CUDA_EMU_MIN_MAX(unsigned)
CUDA_EMU_MIN_MAX(long)
CUDA_EMU_MIN_MAX(unsigned long)
CUDA_EMU_MIN_MAX(long long)
CUDA_EMU_MIN_MAX(unsigned long long)
#undef CUDA_EMU_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// Kernel launches: CUDA_EMU_LAUNCH(kernel, grid, block, shared_bytes)(arguments...) is the
// emulator's kernel<<<grid, block, shared_bytes>>>(arguments...).

namespace cuda_emu {
namespace detail {

/// One launch as the scheduler sees it; `body` runs the kernel as the current fiber.
struct LaunchRequest {
  const char* kernel_name;
  const void* kernel;
  Site site;
  dim3 grid, block;
  size_t shared_bytes;
  void (*body)(const void* state);
  const void* state;
  /// Every pointer the arguments hold, found field by field (ArgumentPointer), with where.
  const struct ArgumentPointer* pointers;
  int num_pointers;
};

/// A pointer inside a kernel argument: argument `argument`, field path `path` ("3.0": field 0 of
/// field 3; "" for the argument itself).
struct ArgumentPointer {
  const void* value;
  int argument;
  char path[24];
};

// Finding the pointers of an argument: a pointer is one; an aggregate (every struct of
// cpu/kernel_table.h) is taken apart field by field with structured bindings, after counting its
// fields by aggregate initialisation (as Boost.PFR does); other types hold none we can see.
struct AnyField {
  template <class U>
  operator U() const noexcept;  // only in unevaluated operands
};

template <class T, class Indices, class = void>
struct InitializableFrom : std::false_type {};
template <class T, size_t... I>
struct InitializableFrom<T, std::index_sequence<I...>,
                         std::void_t<decltype(T{(void(I), AnyField{})...})>> : std::true_type {};

template <class T, size_t N = 0>
constexpr size_t FieldCount() {
  if constexpr (N < 28 && InitializableFrom<T, std::make_index_sequence<N + 1>>::value) {
    return FieldCount<T, N + 1>();
  } else {
    return N;
  }
}

#define CUDA_EMU_FIELDS(n, ...)        \
  if constexpr (count == n) {          \
    const auto& [__VA_ARGS__] = value; \
    visit(__VA_ARGS__);                \
  }
template <class T, class Visit>
void VisitFields(const T& value, const Visit& visit) {
  constexpr size_t count = FieldCount<T>();
  static_assert(count <= 24, "kernel argument struct with more than 24 fields");
  CUDA_EMU_FIELDS(1, a)
  CUDA_EMU_FIELDS(2, a, b)
  CUDA_EMU_FIELDS(3, a, b, c)
  CUDA_EMU_FIELDS(4, a, b, c, d)
  CUDA_EMU_FIELDS(5, a, b, c, d, e)
  CUDA_EMU_FIELDS(6, a, b, c, d, e, f)
  CUDA_EMU_FIELDS(7, a, b, c, d, e, f, g)
  CUDA_EMU_FIELDS(8, a, b, c, d, e, f, g, h)
  CUDA_EMU_FIELDS(9, a, b, c, d, e, f, g, h, i)
  CUDA_EMU_FIELDS(10, a, b, c, d, e, f, g, h, i, j)
  CUDA_EMU_FIELDS(11, a, b, c, d, e, f, g, h, i, j, k)
  CUDA_EMU_FIELDS(12, a, b, c, d, e, f, g, h, i, j, k, l)
  CUDA_EMU_FIELDS(13, a, b, c, d, e, f, g, h, i, j, k, l, m)
  CUDA_EMU_FIELDS(14, a, b, c, d, e, f, g, h, i, j, k, l, m, n)
  CUDA_EMU_FIELDS(15, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o)
  CUDA_EMU_FIELDS(16, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p)
  CUDA_EMU_FIELDS(17, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q)
  CUDA_EMU_FIELDS(18, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r)
  CUDA_EMU_FIELDS(19, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s)
  CUDA_EMU_FIELDS(20, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t)
  CUDA_EMU_FIELDS(21, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u)
  CUDA_EMU_FIELDS(22, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v)
  CUDA_EMU_FIELDS(23, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w)
  CUDA_EMU_FIELDS(24, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x)
}
#undef CUDA_EMU_FIELDS

/// Collects the pointers of an argument (at most `capacity`).
class PointerCollector {
 public:
  PointerCollector(ArgumentPointer* out, int capacity) : out_(out), capacity_(capacity) {}

  template <class T>
  void Collect(const T& value, int argument, const std::string& path) {
    if constexpr (std::is_pointer_v<T>) {
      if (count_ < capacity_) {
        ArgumentPointer& p = out_[count_++];
        p.value = reinterpret_cast<const void*>(value);
        p.argument = argument;
        std::snprintf(p.path, sizeof(p.path), "%s", path.c_str());
      }
    } else if constexpr (std::is_class_v<T> && std::is_aggregate_v<T>) {
      int field = 0;
      VisitFields(value, [&](const auto&... fields) {
        ((Collect(fields, argument, path + (path.empty() ? "" : ".") + std::to_string(field++))),
         ...);
      });
    }
  }
  int count() const { return count_; }

 private:
  ArgumentPointer* out_;
  int capacity_;
  int count_ = 0;
};

void Launch(const LaunchRequest& request);

template <class... Params>
struct KernelCall {
  void (*kernel)(Params...);
  std::tuple<Params...> arguments;
  static void Run(const void* state) {
    const auto* self = static_cast<const KernelCall*>(state);
    std::apply(self->kernel, self->arguments);  // each thread gets its own copies
  }
};

}  // namespace detail

/// Launches `kernel` over `grid` x `block` threads when called with the kernel's arguments.
template <class... Params>
class Launcher {
 public:
  Launcher(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block, size_t shared_bytes,
           detail::Site site)
      : kernel_(kernel),
        name_(name),
        grid_(grid),
        block_(block),
        shared_(shared_bytes),
        site_(site) {}

  template <class... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel argument count");
    static_assert((std::is_trivially_copyable_v<Params> && ...),
                  "kernel parameters must be trivially copyable values");
    detail::KernelCall<Params...> call{kernel_, std::tuple<Params...>(std::forward<Args>(args)...)};
    detail::ArgumentPointer pointers[64];
    detail::PointerCollector collector(pointers, 64);
    std::apply(
        [&](const auto&... a) {
          int i = 0;
          (collector.Collect(a, i++, ""), ...);
        },
        call.arguments);
    detail::LaunchRequest request{
        name_,   reinterpret_cast<const void*>(kernel_), site_, grid_,    block_,
        shared_, &detail::KernelCall<Params...>::Run,    &call, pointers, collector.count()};
    detail::Launch(request);
  }

 private:
  void (*kernel_)(Params...);
  const char* name_;
  dim3 grid_, block_;
  size_t shared_;
  detail::Site site_;
};

/// The running block's dynamic shared memory.
template <class T>
T* DynamicShared() {
  return reinterpret_cast<T*>(detail::g_current->dynamic_shared);
}

// ---------------------------------------------------------------------------------------------
// Emulator controls and observations (tests).

/// The order in which runnable threads, warps and blocks are resumed.
enum class Schedule { kForward, kReverse, kRandom };

/// Overrides CUDA_EMU_SCHEDULE for later launches.
void SetSchedule(Schedule schedule, uint64_t seed = 0);

/// What the emulator has run since the process started (or since ResetStats).
struct Stats {
  int64_t launches = 0;
  int64_t blocks = 0;
  int64_t threads = 0;
  int64_t switches = 0;  ///< Fiber switches.
  int64_t kernels = 0;   ///< Distinct kernel functions launched (each template instantiation).
};
Stats GetStats();
void ResetStats();

/// The last error the emulator diagnosed (launch failure, bad copy), "" if none.
std::string LastDiagnostic();

/// Clears the sticky error of a failed launch (a real device would need a new process).
void ResetDevice();

/// Makes the next `count` launches fail as a device refuses one (cudaErrorLaunchOutOfResources,
/// not sticky; the kernel does not run): for tests of how callers report CUDA errors.
void FailNextLaunches(int count);

/// Lets the next `count` cudaMalloc calls succeed and makes every later one fail with
/// cudaErrorMemoryAllocation (not sticky), as a full device does; a negative count (the default)
/// turns it off. For tests that prove a call allocates everything before it writes.
void FailMallocsAfter(int count);
/// Tests: the devices cudaGetDeviceCount reports (1 by default; 0 emulates a machine without
/// one, which answers cudaErrorNoDevice).
void SetDeviceCount(int count);

}  // namespace cuda_emu

#define CUDA_EMU_LAUNCH(kernel, grid, block, shared_bytes)         \
  ::cuda_emu::Launcher(kernel, #kernel, grid, block, shared_bytes, \
                       ::cuda_emu::detail::Site{__FILE__, __LINE__})
#define CUDA_EMU_DYNAMIC_SHARED(type, name) type* name = ::cuda_emu::DynamicShared<type>()

#endif  // DYNATTN_TESTING_CUDA_EMULATOR_CUDA_RUNTIME_H_
