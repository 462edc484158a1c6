// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU kernels for caches of F32 elements, compiled for every Highway target.

#define DYNATTN_KERNEL_ELEM kF32
#define DYNATTN_KERNEL_TABLE KernelTableF32
#define DYNATTN_KERNEL_GETTER CpuKernelsF32

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target: each target's table.
#include "cpu/kernel_table-inl.h"
