// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The emulator's CUDA runtime API: one device with the limits of a named target, errors as
// cudaError_t (launch faults are sticky, as on a device), and copies that check both ends.

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "testing/cuda_emulator/memory.h"
#include "testing/cuda_emulator/runtime_state.h"

namespace cuda_emu::detail {
namespace {

struct ErrorState {
  std::mutex mutex;
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::string diagnostic;
  std::map<const void*, int> opt_ins;
};

ErrorState& Errors() {
  static ErrorState* state = new ErrorState;
  return *state;
}

cudaDeviceProp MakeProperties(const char* name, int major, int minor, int sms, size_t optin,
                              size_t memory) {
  cudaDeviceProp p{};
  std::snprintf(p.name, sizeof(p.name), "%s", name);
  p.totalGlobalMem = memory;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerBlockOptin = optin;
  p.sharedMemPerMultiprocessor = optin + 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 0x7FFFFFFF;
  p.maxGridSize[1] = p.maxGridSize[2] = 65535;
  p.major = major;
  p.minor = minor;
  p.multiProcessorCount = sms;
  p.l2CacheSize = major >= 9 ? 50 << 20 : 40 << 20;
  p.regsPerMultiprocessor = 65536;
  p.memoryBusWidth = 5120;
  p.ECCEnabled = 1;
  return p;
}

/// Which of host and device memory [pointer, pointer + bytes) is, or why it is neither.
enum class Side { kHost, kDevice, kBadDevice };

Side SideOf(const void* pointer, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (DeviceHeap::Get().Near(address) == nullptr) return Side::kHost;
  return DeviceHeap::Get().Find(pointer, bytes) != nullptr ? Side::kDevice : Side::kBadDevice;
}

bool IsDevice(const void* pointer) {
  return DeviceHeap::Get().Near(reinterpret_cast<uintptr_t>(pointer)) != nullptr;
}

cudaError_t CheckCopyEnd(const char* call, const char* end, const void* pointer, size_t bytes,
                         bool want_device) {
  const Side side = SideOf(pointer, bytes);
  if (side == Side::kBadDevice) {
    return RecordError(cudaErrorInvalidValue, std::string(call) + ": " + end + " range of " +
                                                  std::to_string(bytes) +
                                                  " bytes runs outside its device allocation");
  }
  if ((side == Side::kDevice) != want_device) {
    return RecordError(cudaErrorInvalidValue,
                       std::string(call) + ": " + end + " is " + (want_device ? "host" : "device") +
                           " memory, but the copy kind says " + (want_device ? "device" : "host"));
  }
  return cudaSuccess;
}

}  // namespace

const cudaDeviceProp& DeviceProperties() {
  static const cudaDeviceProp properties = [] {
    const char* env = std::getenv("CUDA_EMU_DEVICE");
    if (env != nullptr && std::strcmp(env, "a100") == 0) {
      return MakeProperties("NVIDIA A100 (CUDA emulator)", 8, 0, 108, 166912, size_t{80} << 30);
    }
    return MakeProperties("NVIDIA H100 (CUDA emulator)", 9, 0, 132, 232448, size_t{80} << 30);
  }();
  return properties;
}

cudaError_t RecordError(cudaError_t error, const std::string& diagnostic) {
  ErrorState& s = Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.last = error;
  s.diagnostic = diagnostic;
  std::fprintf(stderr, "cuda-emulator: %s\n", diagnostic.c_str());
  return error;
}

cudaError_t RecordStickyError(cudaError_t error, const std::string& diagnostic) {
  RecordError(error, diagnostic);
  ErrorState& s = Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sticky == cudaSuccess) s.sticky = error;
  return error;
}

cudaError_t StickyError() {
  ErrorState& s = Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.sticky;
}

int OptedInSharedBytes(const void* kernel) {
  ErrorState& s = Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.opt_ins.find(kernel);
  return it == s.opt_ins.end() ? 0 : it->second;
}

cudaError_t SetFunctionAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (const cudaError_t sticky = StickyError()) return sticky;
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return RecordError(cudaErrorInvalidValue, "cudaFuncSetAttribute: unsupported attribute");
  }
  if (value < 0 || static_cast<size_t>(value) > DeviceProperties().sharedMemPerBlockOptin) {
    return RecordError(cudaErrorInvalidValue,
                       "cudaFuncSetAttribute: MaxDynamicSharedMemorySize " + std::to_string(value) +
                           " exceeds the device's opt-in limit of " +
                           std::to_string(DeviceProperties().sharedMemPerBlockOptin) + " bytes");
  }
  ErrorState& s = Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.opt_ins[kernel] = value;
  return cudaSuccess;
}

}  // namespace cuda_emu::detail

namespace cuda_emu {

std::string LastDiagnostic() {
  detail::ErrorState& s = detail::Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.diagnostic;
}

void ResetDevice() {
  detail::ErrorState& s = detail::Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.last = s.sticky = cudaSuccess;
  s.diagnostic.clear();
}

}  // namespace cuda_emu

using cuda_emu::detail::DeviceAccess;
using cuda_emu::detail::DeviceHeap;
using cuda_emu::detail::RecordError;
using cuda_emu::detail::StickyError;

namespace {
std::atomic<int> g_device_count{1};  // SetDeviceCount
}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = g_device_count.load();
  return *count > 0 ? cudaSuccess
                    : RecordError(cudaErrorNoDevice, "cudaGetDeviceCount: none (SetDeviceCount)");
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return StickyError();
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return RecordError(cudaErrorInvalidDevice, "cudaSetDevice: one device, 0");
  return StickyError();
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return RecordError(cudaErrorInvalidDevice, "cudaGetDeviceProperties: device");
  *prop = cuda_emu::detail::DeviceProperties();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return RecordError(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: device");
  const cudaDeviceProp& p = cuda_emu::detail::DeviceProperties();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    default:
      return RecordError(cudaErrorInvalidValue, "cudaDeviceGetAttribute: unsupported attribute");
  }
  return StickyError();
}

cudaError_t cudaDeviceSynchronize() { return StickyError(); }

cudaError_t cudaGetLastError() {
  cuda_emu::detail::ErrorState& s = cuda_emu::detail::Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  const cudaError_t error = s.sticky != cudaSuccess ? s.sticky : s.last;
  s.last = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  cuda_emu::detail::ErrorState& s = cuda_emu::detail::Errors();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.sticky != cudaSuccess ? s.sticky : s.last;
}

namespace {

struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;  ///< CUDA's own wording.
};

constexpr ErrorText kErrorTexts[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
};

const ErrorText* FindErrorText(cudaError_t error) {
  for (const ErrorText& e : kErrorTexts) {
    if (e.error == error) return &e;
  }
  return nullptr;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* e = FindErrorText(error);
  return e != nullptr ? e->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* e = FindErrorText(error);
  return e != nullptr ? e->text : "unknown error";
}

namespace {
std::atomic<int> g_mallocs_before_failure{-1};  // FailMallocsAfter; negative: off
}  // namespace

namespace cuda_emu {
void FailMallocsAfter(int count) { g_mallocs_before_failure = count; }

void SetDeviceCount(int count) { g_device_count = count; }
}  // namespace cuda_emu

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  if (const cudaError_t sticky = StickyError()) return sticky;
  if (pointer == nullptr) return RecordError(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (g_mallocs_before_failure == 0) {
    return RecordError(cudaErrorMemoryAllocation, "cudaMalloc: " + std::to_string(bytes) +
                                                      " bytes refused (FailMallocsAfter)");
  }
  if (g_mallocs_before_failure > 0) --g_mallocs_before_failure;
  cuda_emu::detail::InstallFaultReporter();  // host code touching it must be reported
  *pointer = DeviceHeap::Get().Allocate(bytes);
  if (*pointer == nullptr) {
    return RecordError(cudaErrorMemoryAllocation,
                       "cudaMalloc: cannot map " + std::to_string(bytes) + " bytes");
  }
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return StickyError();
  if (!DeviceHeap::Get().Free(pointer)) {
    return RecordError(cudaErrorInvalidDevicePointer,
                       "cudaFree: not the start of a live device allocation");
  }
  return StickyError();
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t sticky = StickyError()) return sticky;
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {
    kind = static_cast<cudaMemcpyKind>((cuda_emu::detail::IsDevice(src) ? 2 : 0) +
                                       (cuda_emu::detail::IsDevice(dst) ? 1 : 0));
  }
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice) {
    return RecordError(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: copy kind");
  }
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (const cudaError_t e =
          cuda_emu::detail::CheckCopyEnd("cudaMemcpy", "source", src, bytes, src_device)) {
    return e;
  }
  if (const cudaError_t e =
          cuda_emu::detail::CheckCopyEnd("cudaMemcpy", "destination", dst, bytes, dst_device)) {
    return e;
  }
  DeviceAccess open;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return StickyError(); }

struct CUstream_st {};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (stream == nullptr) return RecordError(cudaErrorInvalidValue, "cudaStreamCreate: null");
  *stream = new CUstream_st;
  return StickyError();
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return StickyError();
}

struct CUevent_st {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return RecordError(cudaErrorInvalidValue, "cudaEventCreate: null");
  *event = new CUevent_st;
  return StickyError();
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return StickyError();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return RecordError(cudaErrorInvalidResourceHandle, "cudaEventRecord");
  event->time = std::chrono::steady_clock::now();
  event->recorded = true;
  return StickyError();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return RecordError(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  return StickyError();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) {
    return RecordError(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: null");
  }
  if (!start->recorded || !end->recorded) {
    return RecordError(cudaErrorNotReady, "cudaEventElapsedTime: an event was never recorded");
  }
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return StickyError();
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 12000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 12000;
  return cudaSuccess;
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (const cudaError_t sticky = StickyError()) return sticky;
  if (bytes == 0) return cudaSuccess;
  if (DeviceHeap::Get().Find(pointer, bytes) == nullptr) {
    return RecordError(cudaErrorInvalidValue,
                       "cudaMemset: the range is not inside one device allocation");
  }
  DeviceAccess open;
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}
