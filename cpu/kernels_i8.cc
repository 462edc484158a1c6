// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU kernels for caches of Int8 elements, compiled for every Highway target.

#define DYNATTN_KERNEL_ELEM kInt8
#define DYNATTN_KERNEL_TABLE KernelTableInt8
#define DYNATTN_KERNEL_GETTER CpuKernelsInt8

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target: each target's table.
#include "cpu/kernel_table-inl.h"
