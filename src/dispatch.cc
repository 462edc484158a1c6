// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/dispatch.h"

#include <array>
#include <string>

#include "cpu/kernels.h"
#include "dynattn/dynattn.h"

namespace dynattn::internal {
namespace {

/// Each format's kernel getter, which resolves the best compiled Highway target of this machine
/// (or the one a test forced) and returns that target's kernels.
struct CpuFormat {
  CacheElem elem;
  CpuKernels (*kernels)();
};
constexpr CpuFormat kCpuFormats[] = {
#define DYNATTN_CPU_FORMAT(elem, tag, name, row, c_suffix) {CacheElem::elem, &CpuKernels##tag},
    DYNATTN_CACHE_FORMATS(DYNATTN_CPU_FORMAT)
#undef DYNATTN_CPU_FORMAT
};

/// The formats with fast-tier kernels, and their getter (resolved like the exact ones).
struct FastFormat {
  CacheElem elem;
  FastKernels (*kernels)();
};
constexpr FastFormat kFastFormats[] = {
    {CacheElem::kInt8, &CpuFastKernelsInt8},
    {CacheElem::kInt4, &CpuFastKernelsInt4},
    {CacheElem::kF16, &CpuFastKernelsF16},
    {CacheElem::kBF16, &CpuFastKernelsBf16},
};

/// The exact rows, one per format, and the fast rows of the formats in kFastFormats whose getter
/// gives a kernel on this machine: each a copy of its exact row whose work items go to the fast
/// kernel first (it runs the items it covers, the exact kernels the rest).
struct CpuRows {
  std::array<BackendKernels, kNumCacheElems> exact;
  std::array<BackendKernels, std::size(kFastFormats)> fast;
};

void FillCpuRows(CpuRows* rows) {
  for (size_t i = 0; i < std::size(kCpuFormats); ++i) {
    rows->exact[i] = CpuRow(kCpuFormats[i].elem, kCpuFormats[i].kernels());
    rows->exact[i].target = CpuTargetName();
  }
  for (size_t f = 0; f < std::size(kFastFormats); ++f) {
    const FastKernels kernels = kFastFormats[f].kernels();
    for (BackendKernels& row : rows->exact) {
      if (row.elem != kFastFormats[f].elem) continue;
      row.fast = nullptr;
      if (kernels.attend == nullptr) continue;  // e.g. bf16 dot products on a CPU without them
      BackendKernels& fast = rows->fast[f];
      fast = row;
      fast.precision = Precision::kFast;
      fast.cpu.attend_fast = kernels.attend;
      fast.cpu.attend_shared_fast = kernels.attend_shared;
      row.fast = &fast;
    }
  }
}

CpuRows& CpuTable() {
  static CpuRows rows;  // filled in place: exact rows point at their fast twins
  static const bool filled = (FillCpuRows(&rows), true);
  (void)filled;
  return rows;
}

}  // namespace

const BackendKernels* KernelsFor(Device device, CacheElem elem) {
  if (device == Device::kCuda) return CudaKernelsFor(elem);
  for (const BackendKernels& row : CpuTable().exact) {
    if (row.elem == elem) return &row;
  }
  return nullptr;
}

const BackendKernels* KernelsFor(Device device, const CacheDesc& cache, Precision precision) {
  const BackendKernels* row = KernelsFor(device, cache.elem);
  const bool fast = precision == Precision::kFast && FastCovers(cache);
  if (row != nullptr && fast && row->fast != nullptr) return row->fast;
  return row;
}

void RefillCpuRows() { FillCpuRows(&CpuTable()); }

Status NoBackend(const char* input, Device device) {
  return Status::Unsupported(input, std::string("is in ") + DeviceName(device) +
                                        " memory, and this libdynattn was built without that "
                                        "backend (meson -Dcuda=enabled with nvcc installed)");
}

}  // namespace dynattn::internal
