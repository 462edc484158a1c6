// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Getters for the CPU kernel tables, one per cache element type. Each returns the entries of the
// Highway target chosen for this machine (or forced by a test) at the time of the call.

#ifndef DYNATTN_CPU_KERNELS_H_
#define DYNATTN_CPU_KERNELS_H_

#include "cpu/kernel_table.h"
#include "dynattn/cache_formats.h"

namespace dynattn::internal {

// CpuKernelsF32(), CpuKernelsF16(), ...: one per row of DYNATTN_CACHE_FORMATS, each defined by
// its cpu/kernels_<tag>.cc (a format without one fails to link).
#define DYNATTN_CPU_KERNELS_GETTER(elem, tag, name, row, c_suffix) CpuKernels CpuKernels##tag();
DYNATTN_CACHE_FORMATS(DYNATTN_CPU_KERNELS_GETTER)
#undef DYNATTN_CPU_KERNELS_GETTER

// The fast tier's attention entries (cpu/fast_kernels_<tag>.cc), for the formats that have one.
FastKernels CpuFastKernelsInt8();
FastKernels CpuFastKernelsInt4();
FastKernels CpuFastKernelsF16();
FastKernels CpuFastKernelsBf16();

}  // namespace dynattn::internal

#endif  // DYNATTN_CPU_KERNELS_H_
