// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fast tier's kernel for caches of F16 elements (bf16 dot products in the fused decode), built
// for the AVX-512 targets and taken on CPUs with AVX512_BF16 (elsewhere the table has none).

#define DYNATTN_FAST_ELEM kF16
#define DYNATTN_FAST_TABLE FastTableF16
#define DYNATTN_FAST_GETTER CpuFastKernelsF16

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fast_kernels_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// After foreach_target.h, which includes this file again for every target: each target's entries.
#include "cpu/fast_kernel_table-inl.h"
