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

using CpuRows = std::array<BackendKernels, kNumCacheElems>;

void FillCpuRows(CpuRows* rows) {
  for (size_t i = 0; i < std::size(kCpuFormats); ++i) {
    (*rows)[i] = CpuRow(kCpuFormats[i].elem, kCpuFormats[i].kernels());
    (*rows)[i].target = CpuTargetName();
  }
}

CpuRows& CpuTable() {
  static CpuRows rows = [] {
    CpuRows filled;
    FillCpuRows(&filled);
    return filled;
  }();
  return rows;
}

}  // namespace

const BackendKernels* KernelsFor(Device device, CacheElem elem) {
  if (device == Device::kCuda) return CudaKernelsFor(elem);
  for (const BackendKernels& row : CpuTable()) {
    if (row.elem == elem) return &row;
  }
  return nullptr;
}

const BackendKernels* KernelsFor(Device device, CacheElem elem, Precision precision) {
  const BackendKernels* row = KernelsFor(device, elem);
  if (row != nullptr && precision == Precision::kFast && row->fast != nullptr) return row->fast;
  return row;
}

void RefillCpuRows() { FillCpuRows(&CpuTable()); }

Status NoBackend(const char* input, Device device) {
  return Status::Unsupported(input, std::string("is in ") + DeviceName(device) +
                                        " memory, and this libdynattn was built without that "
                                        "backend (meson -Dcuda=enabled with nvcc installed)");
}

}  // namespace dynattn::internal
