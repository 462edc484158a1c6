// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Getters for the CPU kernel tables, one per cache element type. Each returns the entries of the
// Highway target chosen for this machine (or forced by a test) at the time of the call.

#ifndef DYNATTN_SIMD_KERNELS_H_
#define DYNATTN_SIMD_KERNELS_H_

#include "simd/kernel_abi.h"

namespace dynattn::internal {

CpuKernels CpuKernelsF32();
CpuKernels CpuKernelsF16();
CpuKernels CpuKernelsInt8();
CpuKernels CpuKernelsInt4();
CpuKernels CpuKernelsBF16();
CpuKernels CpuKernelsF8E4M3();
CpuKernels CpuKernelsF8E5M2();

}  // namespace dynattn::internal

#endif  // DYNATTN_SIMD_KERNELS_H_
