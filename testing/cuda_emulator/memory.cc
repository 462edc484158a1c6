// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Guarded device and shared memory, the device heap, and the fault reporter (see memory.h).

#include "testing/cuda_emulator/memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_EMU_ASAN 1
#endif
#endif
#ifdef CUDA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace cuda_emu::detail {
namespace {

constexpr unsigned char kCanary = 0xA5;
constexpr unsigned char kNanByte = 0xFF;

size_t PageSize() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// GuardedBlock

GuardedBlock::GuardedBlock(size_t bytes, size_t alignment) {
  const size_t page = PageSize();
  const size_t padded = RoundUp(bytes == 0 ? 1 : bytes, alignment);
  const size_t rw_bytes = RoundUp(padded, page);
  mapping_bytes_ = rw_bytes + 2 * page;
  void* mapping =
      mmap(nullptr, mapping_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    mapping_bytes_ = 0;
    return;
  }
  mapping_ = static_cast<unsigned char*>(mapping);
  rw_begin_ = mapping_ + page;
  rw_end_ = rw_begin_ + rw_bytes;
  data_ = rw_end_ - padded;
  bytes_ = bytes;
  SetAccessible(true);
  Poison();
}

GuardedBlock& GuardedBlock::operator=(GuardedBlock&& other) noexcept {
  if (this != &other) {
    Release();
    mapping_ = other.mapping_;
    mapping_bytes_ = other.mapping_bytes_;
    rw_begin_ = other.rw_begin_;
    rw_end_ = other.rw_end_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.mapping_ = other.rw_begin_ = other.rw_end_ = other.data_ = nullptr;
    other.mapping_bytes_ = other.bytes_ = 0;
  }
  return *this;
}

GuardedBlock::~GuardedBlock() { Release(); }

void GuardedBlock::Release() {
  if (mapping_ == nullptr) return;
  PoisonSlack(false);
  munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
}

bool GuardedBlock::Contains(uintptr_t address) const {
  const auto begin = reinterpret_cast<uintptr_t>(mapping_);
  return mapping_ != nullptr && address >= begin && address < begin + mapping_bytes_;
}

void GuardedBlock::PoisonSlack(bool poison) const {
#ifdef CUDA_EMU_ASAN
  unsigned char* data_end = data_ + bytes_;
  if (poison) {
    ASAN_POISON_MEMORY_REGION(rw_begin_, data_ - rw_begin_);
    ASAN_POISON_MEMORY_REGION(data_end, rw_end_ - data_end);
  } else {
    ASAN_UNPOISON_MEMORY_REGION(rw_begin_, rw_end_ - rw_begin_);
  }
#else
  (void)poison;
#endif
}

void GuardedBlock::Poison() {
  PoisonSlack(false);
  std::memset(rw_begin_, kCanary, data_ - rw_begin_);
  std::memset(data_, kNanByte, bytes_);
  std::memset(data_ + bytes_, kCanary, rw_end_ - (data_ + bytes_));
  PoisonSlack(true);
}

bool GuardedBlock::DamagedSlack(int64_t* offset) const {
  PoisonSlack(false);
  bool damaged = false;
  for (const unsigned char* p = data_ + bytes_; p < rw_end_ && !damaged; ++p) {
    if (*p != kCanary) {
      damaged = true;
      *offset = p - data_;
    }
  }
  for (const unsigned char* p = data_ - 1; p >= rw_begin_ && !damaged; --p) {
    if (*p != kCanary) {
      damaged = true;
      *offset = p - data_;
    }
  }
  PoisonSlack(true);
  return damaged;
}

void GuardedBlock::SetAccessible(bool accessible) const {
  if (mapping_ == nullptr) return;
  mprotect(rw_begin_, rw_end_ - rw_begin_, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

std::string GuardedBlock::Describe(uintptr_t address, const char* what) const {
  char text[256];
  Describe(address, what, text, sizeof(text));
  return text;
}

void GuardedBlock::Describe(uintptr_t address, const char* what, char* out, size_t size) const {
  const auto begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t end = begin + bytes_;
  if (address >= end) {
    std::snprintf(out, size, "%zu bytes past the end of %s (%zu bytes at %p)",
                  static_cast<size_t>(address - end), what, bytes_, static_cast<void*>(data_));
  } else if (address < begin) {
    std::snprintf(out, size, "%zu bytes before %s (%zu bytes at %p)",
                  static_cast<size_t>(begin - address), what, bytes_, static_cast<void*>(data_));
  } else {
    std::snprintf(out, size, "byte %zu of %s (%zu bytes at %p)",
                  static_cast<size_t>(address - begin), what, bytes_, static_cast<void*>(data_));
  }
}

// ---------------------------------------------------------------------------------------------
// DeviceHeap

namespace {

struct HeapState {
  std::mutex mutex;
  std::map<uintptr_t, GuardedBlock> blocks;  // by data address
  int open_scopes = 0;
};

HeapState& State() {
  static HeapState* state = new HeapState;  // lives until exit: freed allocations may be late
  return *state;
}

constexpr size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee

}  // namespace

DeviceHeap& DeviceHeap::Get() {
  static DeviceHeap heap;
  return heap;
}

void* DeviceHeap::Allocate(size_t bytes) {
  GuardedBlock block(bytes, kDeviceAlignment);
  if (!block.ok()) return nullptr;
  HeapState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  block.SetAccessible(s.open_scopes > 0);
  void* data = block.data();
  s.blocks.emplace(reinterpret_cast<uintptr_t>(data), std::move(block));
  return data;
}

bool DeviceHeap::Free(void* pointer) {
  HeapState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.blocks.erase(reinterpret_cast<uintptr_t>(pointer)) == 1;
}

const GuardedBlock* DeviceHeap::Find(const void* pointer, size_t bytes) const {
  const GuardedBlock* block = Near(reinterpret_cast<uintptr_t>(pointer));
  if (block == nullptr) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(block->data());
  const auto first = reinterpret_cast<uintptr_t>(pointer);
  if (first < begin || first - begin > block->bytes() || bytes > block->bytes() - (first - begin)) {
    return nullptr;
  }
  return block;
}

const GuardedBlock* DeviceHeap::Near(uintptr_t address) const {
  std::lock_guard<std::mutex> lock(State().mutex);
  return NearUnlocked(address);
}

const GuardedBlock* DeviceHeap::NearUnlocked(uintptr_t address) const {
  HeapState& s = State();
  auto it = s.blocks.upper_bound(address);
  if (it != s.blocks.end() && it->second.Contains(address)) return &it->second;
  if (it != s.blocks.begin() && std::prev(it)->second.Contains(address)) {
    return &std::prev(it)->second;
  }
  return nullptr;
}

void DeviceHeap::SetAccessible(bool accessible) {
  HeapState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int before = s.open_scopes;
  s.open_scopes += accessible ? 1 : -1;
  if ((before == 0) != (s.open_scopes == 0)) {
    for (const auto& entry : s.blocks) entry.second.SetAccessible(s.open_scopes > 0);
  }
}

std::string DeviceHeap::CheckSlack() const {
  HeapState& s = State();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& entry : s.blocks) {
    int64_t offset = 0;
    if (entry.second.DamagedSlack(&offset)) {
      const uintptr_t address = entry.first + static_cast<uintptr_t>(offset);
      return "wrote " + entry.second.Describe(address, "a device allocation") + " (its red zone)";
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Fault reporter

namespace {

struct FaultContext {
  char kernel[512] = "";
  const GuardedBlock* shared = nullptr;
};
FaultContext g_fault;

void Say(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Runs on the alternate signal stack; allocates nothing.
void OnFault(int signal_number, siginfo_t* info, void*) {
  static char where[320];
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  const GuardedBlock* device = DeviceHeap::Get().NearUnlocked(address);
  if (g_fault.shared != nullptr && g_fault.shared->Contains(address)) {
    g_fault.shared->Describe(address, "the block's dynamic shared memory", where, sizeof(where));
  } else if (device != nullptr) {
    device->Describe(address, "a device allocation", where, sizeof(where));
  } else {
    std::snprintf(where, sizeof(where), "address %p, in no device allocation", info->si_addr);
  }
  Say("cuda-emulator: memory fault: ");
  Say(where);
  const bool inside = device != nullptr && address >= reinterpret_cast<uintptr_t>(device->data()) &&
                      address < reinterpret_cast<uintptr_t>(device->data()) + device->bytes();
  if (g_fault.kernel[0] != '\0') {
    Say(", in ");
    Say(g_fault.kernel);
  } else if (inside) {
    Say(": host code read device memory outside cudaMemcpy");
  }
  Say("\n");
  signal(signal_number, SIG_DFL);  // returning re-raises the fault with the default action
}

}  // namespace

void InstallFaultReporter() {
  // Every time: a test framework may have put its own crash handler back.
  struct sigaction action {};
  action.sa_sigaction = &OnFault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
  thread_local bool has_stack = false;
  if (!has_stack) {
    stack_t stack{};
    stack.ss_size = 1 << 16;  // mapped for the thread's lifetime (not a leak to report)
    stack.ss_sp =
        mmap(nullptr, stack.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sigaltstack(&stack, nullptr);
    has_stack = true;
  }
}

void SetFaultContext(const std::string& context, const GuardedBlock* shared) {
  std::snprintf(g_fault.kernel, sizeof(g_fault.kernel), "%s", context.c_str());
  g_fault.shared = shared;
}

}  // namespace cuda_emu::detail
