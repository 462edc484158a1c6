// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/dispatch.h"

#include <array>
#include <string>

#include "dynattn/dynattn.h"
#include "simd/kernels.h"

namespace dynattn::internal {
namespace {

constexpr CacheElem kElems[] = {CacheElem::kF32,   CacheElem::kF16,  CacheElem::kInt8,
                                CacheElem::kInt4,  CacheElem::kBF16, CacheElem::kF8E4M3,
                                CacheElem::kF8E5M2};

/// Each getter resolves the best compiled Highway target of this machine (or the one a test
/// forced) and returns that target's kernels.
CpuKernels ResolveCpuKernels(CacheElem elem) {
  switch (elem) {
    case CacheElem::kF32:
      return CpuKernelsF32();
    case CacheElem::kF16:
      return CpuKernelsF16();
    case CacheElem::kInt8:
      return CpuKernelsInt8();
    case CacheElem::kInt4:
      return CpuKernelsInt4();
    case CacheElem::kBF16:
      return CpuKernelsBF16();
    case CacheElem::kF8E4M3:
      return CpuKernelsF8E4M3();
    case CacheElem::kF8E5M2:
      return CpuKernelsF8E5M2();
  }
  return CpuKernelsF32();
}

using CpuRows = std::array<BackendKernels, std::size(kElems)>;

void FillCpuRows(CpuRows* rows) {
  for (size_t i = 0; i < std::size(kElems); ++i) {
    (*rows)[i] = CpuRow(kElems[i], ResolveCpuKernels(kElems[i]));
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

void RefillCpuRows() { FillCpuRows(&CpuTable()); }

Status NoBackend(const char* input, Device device) {
  return Status::Unsupported(input, std::string("is in ") + DeviceName(device) +
                                        " memory, and this libdynattn was built without that "
                                        "backend (meson -Dcuda=enabled with nvcc installed)");
}

}  // namespace dynattn::internal
