// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Instantiates the kernel table of one cache element type for every compiled Highway target.
// Included (once per target, through hwy/foreach_target.h) by the thin cpu/kernels_*.cc files,
// which define DYNATTN_KERNEL_ELEM (a CacheElem enumerator), DYNATTN_KERNEL_TABLE (the per-target
// function name) and DYNATTN_KERNEL_GETTER (the dispatching getter in dynattn::internal).
// No include guard on purpose.

#include "cpu/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

internal::CpuKernels DYNATTN_KERNEL_TABLE() {
  return MakeCpuKernels<CacheElem::DYNATTN_KERNEL_ELEM>();
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(DYNATTN_KERNEL_TABLE);
namespace internal {
CpuKernels DYNATTN_KERNEL_GETTER() { return HWY_DYNAMIC_DISPATCH(DYNATTN_KERNEL_TABLE)(); }
}  // namespace internal
}  // namespace dynattn
#endif
