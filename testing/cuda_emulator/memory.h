// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Emulated device and shared memory: every allocation is its own mapping with a guard page on
// each side, so an access past either end faults at once in any build. The data ends where the
// rear guard page begins (rounded up to the allocation's alignment); the few bytes of slack hold
// a canary that is checked after every kernel, and AddressSanitizer builds also poison them.
// Device allocations are inaccessible to host code outside kernels and copies, as on a GPU.

#ifndef DYNATTN_TESTING_CUDA_EMULATOR_MEMORY_H_
#define DYNATTN_TESTING_CUDA_EMULATOR_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace cuda_emu::detail {

/// One guarded mapping: [guard][front slack | data (bytes) | rear slack][guard].
class GuardedBlock {
 public:
  GuardedBlock() = default;
  GuardedBlock(size_t bytes, size_t alignment);
  GuardedBlock(const GuardedBlock&) = delete;
  GuardedBlock& operator=(const GuardedBlock&) = delete;
  GuardedBlock(GuardedBlock&& other) noexcept { *this = static_cast<GuardedBlock&&>(other); }
  GuardedBlock& operator=(GuardedBlock&& other) noexcept;
  ~GuardedBlock();

  bool ok() const { return data_ != nullptr; }
  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  /// True when `address` lies anywhere in the mapping, guard pages included.
  bool Contains(uintptr_t address) const;
  /// Fills the data with the NaN pattern (0xFF bytes) and re-arms the slack canaries.
  void Poison();
  /// The first slack byte that lost its canary, as an offset from data() (negative: before it);
  /// false when the slack is intact.
  bool DamagedSlack(int64_t* offset) const;
  /// Makes the data readable and writable (true) or inaccessible (false).
  void SetAccessible(bool accessible) const;
  /// Where `address` lies relative to the data, in words (for diagnostics).
  std::string Describe(uintptr_t address, const char* what) const;
  /// The same into `out` (no allocation: the fault reporter's form).
  void Describe(uintptr_t address, const char* what, char* out, size_t size) const;

 private:
  void Release();
  void PoisonSlack(bool poison) const;

  unsigned char* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  unsigned char* rw_begin_ = nullptr;  ///< After the front guard page.
  unsigned char* rw_end_ = nullptr;    ///< The rear guard page.
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
};

/// The registry of live device allocations.
class DeviceHeap {
 public:
  static DeviceHeap& Get();

  void* Allocate(size_t bytes);
  /// False when `pointer` is not the start of a live allocation.
  bool Free(void* pointer);
  /// The allocation holding [pointer, pointer + bytes), or null.
  const GuardedBlock* Find(const void* pointer, size_t bytes) const;
  /// The allocation whose mapping (guards included) holds `address`, or null.
  const GuardedBlock* Near(uintptr_t address) const;
  /// Near without taking the heap's lock: for the fault reporter, which may interrupt a holder.
  const GuardedBlock* NearUnlocked(uintptr_t address) const;
  /// Opens (true) or closes (false) every allocation to host code; nests.
  void SetAccessible(bool accessible);
  /// A description of the first damaged canary of any allocation, "" when none.
  std::string CheckSlack() const;
};

/// Opens device memory for the scope (kernels, copies, memset).
class DeviceAccess {
 public:
  DeviceAccess() { DeviceHeap::Get().SetAccessible(true); }
  ~DeviceAccess() { DeviceHeap::Get().SetAccessible(false); }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

/// Installs the SIGSEGV/SIGBUS reporter (once) and an alternate signal stack for this thread.
void InstallFaultReporter();

/// What the fault reporter says about the running kernel (set by the scheduler).
void SetFaultContext(const std::string& context, const GuardedBlock* shared);

}  // namespace cuda_emu::detail

#endif  // DYNATTN_TESTING_CUDA_EMULATOR_MEMORY_H_
