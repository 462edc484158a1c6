// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Device memory for the CUDA rows: the index arrays and plans a call copies to the device, and
// the partial softmax states it allocates. A CUDA error here is a bug or a broken device (the
// public API has validated every input before dispatch), so it aborts with its location.

#ifndef DYNATTN_GPU_DEVICE_BUFFER_H_
#define DYNATTN_GPU_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace dynattn::gpu {

/// Aborts with the failing call's location and CUDA's message unless `error` is cudaSuccess.
inline void CheckCuda(cudaError_t error, const char* what, const char* file, int line) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "libdynattn CUDA error at %s:%d: %s: %s\n", file, line, what,
               cudaGetErrorString(error));
  std::abort();
}

#define DYNATTN_CUDA_CHECK(call) ::dynattn::gpu::CheckCuda((call), #call, __FILE__, __LINE__)

/// An owned array of `T` in device memory (cudaMalloc / cudaFree); move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { Allocate(count); }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = other.data_;
      count_ = other.count_;
      other.data_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }

  /// Replaces the contents with `count` uninitialised elements (none: no allocation).
  void Allocate(size_t count) {
    Release();
    if (count == 0) return;
    DYNATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    count_ = count;
  }

  /// Replaces the contents with a copy of host[0, count); null host or count 0 gives an empty
  /// buffer (data() is null).
  void Upload(const T* host, size_t count) {
    Allocate(host == nullptr ? 0 : count);
    if (count_ == 0) return;
    DYNATTN_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void Upload(const std::vector<T>& host) { Upload(host.data(), host.size()); }

  /// Sets every byte to zero.
  void Zero() {
    if (count_ != 0) DYNATTN_CUDA_CHECK(cudaMemset(data_, 0, count_ * sizeof(T)));
  }

  T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  void Release() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }

  T* data_ = nullptr;
  size_t count_ = 0;
};

/// A device copy of host[0, count).
template <typename T>
DeviceBuffer<T> ToDevice(const T* host, size_t count) {
  DeviceBuffer<T> buffer;
  buffer.Upload(host, count);
  return buffer;
}

}  // namespace dynattn::gpu

#endif  // DYNATTN_GPU_DEVICE_BUFFER_H_
