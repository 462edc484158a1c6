// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fast tier's kernel for caches of Int8 elements (integer key scores in the fused decode),
// compiled for every Highway target.

#define DYNATTN_FAST_ELEM kInt8
#define DYNATTN_FAST_TABLE FastTableInt8
#define DYNATTN_FAST_GETTER CpuFastKernelsInt8

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fast_kernels_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target: each target's entries.
#include "cpu/fast_kernel_table-inl.h"
